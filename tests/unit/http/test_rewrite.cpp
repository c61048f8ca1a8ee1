// Head rewriting in both directions, and the one writer of local replies.
#include <catch2/catch_test_macros.hpp>

#include <boost/beast/http/error.hpp>
#include <string>

#include "http/local_reply.hpp"
#include "http/parser.hpp"
#include "http/rewrite.hpp"

using namespace levee;
using namespace std::chrono_literals;

namespace {

struct Request {
  http::Head head{100};
  http::RequestInfo info;
  http::BodySink body{1024};
  explicit Request(const std::string& raw) {
    http::RequestParser p(head, info, body, "x-request-id");
    boost::beast::error_code ec;
    p.put(boost::asio::buffer(raw), ec);
    REQUIRE(p.is_header_done());
  }
};

bool has_line(const std::string& head, const std::string& line) {
  return head.find("\r\n" + line + "\r\n") != std::string::npos;
}

}  // namespace

TEST_CASE("the upstream head keeps end-to-end fields and rewrites the rest", "[rewrite]") {
  Request r(
      "POST /p?q HTTP/1.1\r\nHost: example.com\r\nX-Forwarded-For: 10.1.1.1\r\nVia: 1.1 edge\r\n"
      "Connection: x-secret, keep-alive\r\nX-Secret: hop\r\nKeep-Alive: timeout=5\r\nTE: trailers\r\n"
      "Expect: 100-continue\r\nX-Request-Timeout-Ms: 5000\r\nX-Attempt-Count: 7\r\ngrpc-timeout: 9S\r\n"
      "Transfer-Encoding: chunked\r\nX-Keep: yes\r\n\r\n");
  http::RewriteNames names;
  http::UpstreamHead u{r.head, r.info, names, "127.0.0.2", "http", "backend:80", "abc", 1500ms, true, 2,
                       {}, http::BodyFraming::Length, 42};
  std::string out;
  http::write_upstream_head(out, u);
  CHECK(out.rfind("POST /p?q HTTP/1.1\r\n", 0) == 0);
  CHECK(out.size() > 4);
  CHECK(out.substr(out.size() - 4) == "\r\n\r\n");
  CHECK(has_line(out, "Host: example.com"));
  CHECK(has_line(out, "X-Keep: yes"));
  CHECK(has_line(out, "via: 1.1 edge, 1.1 levee"));
  CHECK(has_line(out, "x-forwarded-for: 10.1.1.1, 127.0.0.2"));
  CHECK(has_line(out, "x-forwarded-proto: http"));
  CHECK(has_line(out, "x-request-id: abc"));
  CHECK(has_line(out, "x-request-timeout-ms: 1500"));  // the remaining budget, not the client's
  CHECK(has_line(out, "grpc-timeout: 1500000u"));
  CHECK(has_line(out, "x-attempt-count: 2"));
  CHECK(has_line(out, "content-length: 42"));
  for (const char* gone : {"X-Secret", "Keep-Alive", "TE:", "Expect", "Connection", "Transfer-Encoding", ": 5000",
                           ": 7\r", "9S"})
    CHECK(out.find(gone) == std::string::npos);
}

TEST_CASE("a cluster that asks for load reports replaces the client's format header", "[rewrite][orca]") {
  Request r("GET / HTTP/1.1\r\nHost: a\r\nEndpoint-Load-Metrics-Format: json\r\n\r\n");
  http::RewriteNames names;
  http::UpstreamHead u{r.head, r.info, names, "127.0.0.1"};
  std::string out;
  http::write_upstream_head(out, u);
  CHECK(has_line(out, "Endpoint-Load-Metrics-Format: json"));  // not configured: the client's passes
  u.load_format = "text";
  out.clear();
  http::write_upstream_head(out, u);
  CHECK(has_line(out, "endpoint-load-metrics-format: text"));
  CHECK(out.find("json") == std::string::npos);
}

TEST_CASE("an HTTP/1.0 request without Host gets the endpoint's, and no deadline goes up when none is set",
          "[rewrite]") {
  Request r("GET / HTTP/1.0\r\n\r\n");
  http::RewriteNames names;
  http::UpstreamHead u{r.head, r.info, names, "::1", "http", "10.0.0.9:8080", {}, std::nullopt, false, 1,
                       {}, http::BodyFraming::None, 0};
  std::string out;
  http::write_upstream_head(out, u);
  CHECK(out.rfind("GET / HTTP/1.1\r\n", 0) == 0);
  CHECK(has_line(out, "host: 10.0.0.9:8080"));
  CHECK(has_line(out, "via: 1.0 levee"));
  CHECK(out.find("x-request-timeout-ms") == std::string::npos);
  CHECK(out.find("content-length") == std::string::npos);
}

TEST_CASE("the downstream head is re-framed for the client", "[rewrite]") {
  http::Head head(50);
  http::ResponseInfo info;
  http::BodySink sink(64);
  http::ResponseSignals sig;
  http::ResponseParser p(head, info, sink, sig);
  boost::beast::error_code ec;
  const std::string raw =
      "HTTP/1.1 200 OK\r\nConnection: x-h\r\nX-H: 1\r\nTransfer-Encoding: chunked\r\nX-App: a\r\n\r\n";
  p.put(boost::asio::buffer(raw), ec);
  REQUIRE(p.is_header_done());
  http::RewriteNames names;
  http::DownstreamHead d{head, info, names, false, http::BodyFraming::Chunked, 0, true, false, true};
  std::string out;
  http::write_downstream_head(out, d);
  CHECK(out.rfind("HTTP/1.1 200 OK\r\n", 0) == 0);
  CHECK(has_line(out, "X-App: a"));
  CHECK(has_line(out, "transfer-encoding: chunked"));
  CHECK(has_line(out, "x-levee-no-retry: 1"));
  CHECK(has_line(out, "connection: close"));
  CHECK(out.find("X-H") == std::string::npos);
  CHECK(out.find("Transfer-Encoding") == std::string::npos);
}

TEST_CASE("a rejection carries its status, Retry-After, reason and don't-retry", "[local_reply]") {
  auto d = core::Decision::reject(core::Reason::TenantQuota, 3s, true);
  auto r = http::rejection(d, 4);
  r.close = true;
  std::string out;
  http::write_http1(out, r);
  const std::string body = "overloaded: tenant_quota\n";
  CHECK(out.rfind("HTTP/1.1 429 Too Many Requests\r\n", 0) == 0);
  CHECK(has_line(out, "retry-after: 4"));
  CHECK(has_line(out, "x-levee-reject: tenant_quota"));
  CHECK(has_line(out, "x-levee-no-retry: 1"));
  CHECK(has_line(out, "connection: close"));
  CHECK(has_line(out, "content-length: " + std::to_string(body.size())));
  CHECK(out.substr(out.size() - body.size()) == body);
}

TEST_CASE("an error reply names its reason, with the detail in the body", "[local_reply]") {
  auto r = http::failure(core::Reason::BadRequest, "missing Host");
  std::string out;
  http::write_http1(out, r);
  const std::string body = "bad_request: missing Host\n";
  CHECK(out.rfind("HTTP/1.1 400 Bad Request\r\n", 0) == 0);
  CHECK(has_line(out, "x-levee-error: bad_request"));
  CHECK(out.find("retry-after") == std::string::npos);
  CHECK(has_line(out, "content-length: " + std::to_string(body.size())));
  CHECK(out.substr(out.size() - body.size()) == body);
  // A HEAD request gets the head only, with the length of what GET would get.
  r.head = true;
  out.clear();
  http::write_http1(out, r);
  CHECK(out.substr(out.size() - 4) == "\r\n\r\n");
  CHECK(has_line(out, "content-length: " + std::to_string(body.size())));
}

TEST_CASE("an ordinary local answer has its body and no reason header", "[local_reply]") {
  http::LocalReply r;
  r.status = 405;
  r.extra = "allow: GET, HEAD\r\n";
  r.body = "no\n";
  std::string out;
  http::write_http1(out, r);
  CHECK(out.rfind("HTTP/1.1 405 Method Not Allowed\r\n", 0) == 0);
  CHECK(has_line(out, "allow: GET, HEAD"));
  CHECK(out.find("x-levee") == std::string::npos);
  CHECK(out.substr(out.size() - 3) == "no\n");
}

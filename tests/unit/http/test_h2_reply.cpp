// The pure parts of HTTP/2: the client preface, and local replies spelled
// for HTTP/2 and for gRPC (Trailers-Only, with a status a gRPC client's
// retry policy understands).
#include <catch2/catch_test_macros.hpp>

#include <string_view>

#include <string>

#include "http/h2_reply.hpp"

using namespace levee;
using namespace std::chrono_literals;

namespace {

std::string field(const http::H2Fields& f, std::string_view name) {
  for (std::size_t i = 0; i < f.size(); ++i)
    if (f.name(i) == name) return std::string(f.value(i));
  return "<absent>";
}

std::string encode(std::string_view s) {
  std::string out;
  http::grpc_percent_encode(s, out);
  return out;
}

}  // namespace

TEST_CASE("the client preface is told from an HTTP/1.1 request, also in pieces") {
  using http::Preface;
  CHECK(http::detect_preface("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n") == Preface::Yes);
  CHECK(http::detect_preface(std::string("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n") + "\x00\x00\x12\x04") == Preface::Yes);
  CHECK(http::detect_preface("PRI * HTTP/2") == Preface::NeedMore);
  CHECK(http::detect_preface("P") == Preface::NeedMore);
  CHECK(http::detect_preface("GET / HTTP/1.1\r\n") == Preface::No);
  CHECK(http::detect_preface("PRI * HTTP/1.1\r\n") == Preface::No);
  CHECK(http::detect_preface("POST /") == Preface::No);
}

TEST_CASE("gRPC content types") {
  CHECK(http::is_grpc("application/grpc"));
  CHECK(http::is_grpc("application/grpc+proto"));
  CHECK(http::is_grpc("Application/GRPC;charset=x"));
  CHECK_FALSE(http::is_grpc("application/grpcx"));
  CHECK_FALSE(http::is_grpc("application/json"));
  CHECK_FALSE(http::is_grpc(""));
}

TEST_CASE("a gRPC body's first message is whole once its prefix and bytes are in") {
  using namespace std::string_view_literals;
  CHECK_FALSE(http::grpc_message_whole(""sv));
  CHECK_FALSE(http::grpc_message_whole("\0\0\0\0"sv));            // half a prefix
  CHECK(http::grpc_message_whole("\0\0\0\0\0"sv));                // an empty message
  CHECK_FALSE(http::grpc_message_whole("\0\0\0\0\3ab"sv));        // 2 of 3 bytes
  CHECK(http::grpc_message_whole("\0\0\0\0\3abc"sv));
  CHECK(http::grpc_message_whole("\0\0\0\0\3abc\0\0"sv));       // and the next begins
  CHECK_FALSE(http::grpc_message_whole("\1\xff\xff\xff\xff" "ab"sv));  // 4 GiB announced
  CHECK_FALSE(http::grpc_message_whole("\0\0\0\1\0ab"sv));        // 256 bytes announced
}

TEST_CASE("gRPC status of each kind of local answer") {
  using core::Reason;
  using G = http::GrpcStatus;
  auto of = [](Reason r) { return http::grpc_status(http::failure(r)); };
  CHECK(of(Reason::TenantQuota) == G::ResourceExhausted);
  CHECK(of(Reason::QueueFull) == G::Unavailable);
  CHECK(of(Reason::QueueTimeout) == G::Unavailable);
  CHECK(of(Reason::ExecutorOverload) == G::Unavailable);
  CHECK(of(Reason::Throttle) == G::Unavailable);
  CHECK(of(Reason::Deadline) == G::DeadlineExceeded);
  CHECK(of(Reason::BadRequest) == G::InvalidArgument);
  CHECK(of(Reason::NoRoute) == G::Unimplemented);
  CHECK(of(Reason::UpstreamConnect) == G::Unavailable);
  CHECK(of(Reason::UpstreamTimeout) == G::Unavailable);
  CHECK(http::grpc_status_of_http(503) == G::Unavailable);
  CHECK(http::grpc_status_of_http(404) == G::Unimplemented);
  CHECK(http::grpc_status_of_http(418) == G::Unknown);
}

TEST_CASE("a shed gRPC call is answered Trailers-Only with pushback") {
  auto r = http::rejection(core::Decision::reject(core::Reason::QueueFull, 1s), 3);
  http::H2Fields f;
  std::string body;
  http::h2_local_reply(r, true, "x-request-id", "abc", f, body);
  REQUIRE(!f.empty());
  CHECK(f.name(0) == ":status");
  CHECK(f.value(0) == "200");
  CHECK(field(f, "content-type") == "application/grpc");
  CHECK(field(f, "grpc-status") == "14");
  CHECK(field(f, "grpc-message") == "overloaded: queue_full");
  CHECK(field(f, "grpc-retry-pushback-ms") == "3000");
  CHECK(field(f, "x-levee-reject") == "queue_full");
  CHECK(field(f, "x-request-id") == "abc");
  CHECK(field(f, "content-length") == "<absent>");
  CHECK(body.empty());
}

TEST_CASE("don't retry is a negative pushback; quota is RESOURCE_EXHAUSTED") {
  auto r = http::rejection(core::Decision::reject(core::Reason::TenantQuota, 1s, true), 2);
  http::H2Fields f;
  std::string body;
  http::h2_local_reply(r, true, "x-request-id", "", f, body);
  CHECK(field(f, "grpc-status") == "8");
  CHECK(field(f, "grpc-retry-pushback-ms") == "-1");
  CHECK(field(f, "x-levee-no-retry") == "1");
  CHECK(field(f, "x-request-id") == "<absent>");
}

TEST_CASE("an HTTP/2 local reply carries the HTTP/1.1 reply's fields, none connection-specific") {
  auto r = http::failure(core::Reason::NoRoute, "no route for /x");
  r.close = true;
  r.extra = "Allow: GET\r\nConnection: close\r\n";
  http::H2Fields f;
  std::string body;
  http::h2_local_reply(r, false, "x-request-id", "", f, body);
  CHECK(f.value(0) == "404");
  CHECK(field(f, "x-levee-error") == "no_route");
  CHECK(field(f, "allow") == "GET");
  CHECK(field(f, "connection") == "<absent>");
  CHECK(body == "no_route: no route for /x\n");
  CHECK(field(f, "content-length") == std::to_string(body.size()));
  auto shed = http::rejection(core::Decision::reject(core::Reason::QueueFull, 1s), 5);
  http::h2_local_reply(shed, false, "x-request-id", "", f, body);
  CHECK(f.value(0) == "503");
  CHECK(field(f, "retry-after") == "5");
  CHECK(body == "overloaded: queue_full\n");
}

TEST_CASE("grpc-message is percent-encoded") {
  CHECK(encode("a b") == "a b");
  CHECK(encode("100%") == "100%25");
  CHECK(encode("\xc3\xa9\n") == "%C3%A9%0A");
}

TEST_CASE("a header block lower-cases names, keeps values as given, and is reused whole") {
  http::H2Fields f;
  f.add(":status", std::uint64_t{204});
  f.add("Content-Type", "Text/Plain");
  f.add("X-Count", std::uint64_t{18446744073709551615u});
  f.add_with("x-built", [](std::string& out) { out.append("a").append("b"); });
  f.add("x-empty", "");
  REQUIRE(f.size() == 5);
  CHECK(f.name(0) == ":status");
  CHECK(f.value(0) == "204");
  CHECK(f.name(1) == "content-type");
  CHECK(f.value(1) == "Text/Plain");
  CHECK(f.value(2) == "18446744073709551615");
  CHECK(f.value(3) == "ab");
  CHECK(f.name(4) == "x-empty");
  CHECK(f.value(4).empty());
  CHECK(f.find("x-built") == "ab");
  CHECK(f.find("X-Built").empty());  // names are stored lower case; find takes them so
  // The next block reuses the store: built in the same memory, not a new
  // allocation (what keeps a warm worker's HTTP/2 answers off the heap).
  const char* store = f.name(0).data();
  f.clear();
  CHECK(f.empty());
  for (int i = 0; i < 5; ++i) f.add(i == 0 ? std::string_view("Server") : std::string_view("x-n"), "value");
  CHECK(f.size() == 5);
  CHECK(f.name(0) == "server");
  CHECK(f.name(0).data() == store);
  CHECK(f.value(4) == "value");
}

TEST_CASE("a header block grown by a large answer gives its memory back when trimmed") {
  http::H2Fields f;
  f.add("x-small", "v");
  const char* small = f.name(0).data();
  f.clear_and_trim(1024);
  f.add("x-small", "v");
  CHECK(f.name(0).data() == small);  // under the bound: kept
  f.add("x-big", std::string(8000, 'a'));
  CHECK(f.bytes_held() > 8000);
  f.clear_and_trim(1024);
  CHECK(f.empty());
  CHECK(f.bytes_held() <= 1024);
  f.add("x-after", "v");
  CHECK(f.find("x-after") == "v");
  CHECK(f.find("x-big").empty());
}

// The HTTP/2 frame layer as a client reaches it: bytes after the client
// preface, parsed by nghttp2's server session with the options levee's
// connections use (proxy/http2_connection.cpp), each request's header block
// decoded by levee's H2RequestDecoder (http/h2_request.cpp), the one
// proxy/http2_stream.cpp uses.
//
// Parameter bytes (missing bytes read as 0):
//   0: the header list's limit = 256 + 64*v bytes;  1: max fields = 4 + v
//   2, 3: read sizes 1 + 16*v, alternating
//
// Checked for every request head that levee would serve (not refused as
// too large, too many fields or bad; a method, a path, an authority):
//   - it is within its limits: at most max fields, and the decoded size as
//     SETTINGS_MAX_HEADER_LIST_SIZE counts it within the limit;
//   - every field name is a lower-case token and no name or value holds a
//     CR, LF or NUL; the method is a token; the path has no space or
//     control byte;
//   - spelled as HTTP/1.1 for a backend (http::write_upstream_head, the
//     writer levee uses), it parses back with levee's HTTP/1.1 parser as
//     exactly one request head, with the same method and target and no
//     body: nothing a client sends over HTTP/2 can smuggle a second
//     request, or a body, into an HTTP/1.1 connection to a backend.
// And for every input: the session never asks for its own callbacks to
// fail except through the decoder's reset, and nothing leaks (ASan).
#include <nghttp2/nghttp2.h>

#include <boost/beast/http/error.hpp>

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>

#include "fuzz_check.hpp"
#include "http/h2_request.hpp"
#include "http/rewrite.hpp"
#include "http_layer.hpp"

using namespace levee;

namespace {

struct Request {
  Request(std::size_t max_fields, std::size_t max_bytes)
      : head(max_fields), decoder(head, info, max_bytes, "x-request-id") {}
  http::Head head;
  http::RequestInfo info;
  http::H2RequestDecoder decoder;
  std::size_t bytes = 0;
};

struct Session {
  std::size_t max_fields = 4;
  std::size_t max_bytes = 256;
  std::map<std::int32_t, std::unique_ptr<Request>> streams;
};

bool token_char(char c) {
  const auto u = static_cast<unsigned char>(c);
  if (u <= 32 || u >= 127) return false;
  return std::string_view("\"(),/:;<=>?@[\\]{}").find(c) == std::string_view::npos;
}

bool token(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s)
    if (!token_char(c)) return false;
  return true;
}

void check_served(Request& r, const Session& s) {
  const auto& info = r.info;
  const auto& fields = r.head.fields();
  FUZZ_CHECK(fields.size() <= s.max_fields, "%zu fields, limit %zu", fields.size(), s.max_fields);
  FUZZ_CHECK(r.bytes <= s.max_bytes, "%zu header bytes, limit %zu", r.bytes, s.max_bytes);
  for (const auto& f : fields) {
    FUZZ_CHECK(token(f.name), "field name '%.*s' is not a token", int(f.name.size()), f.name.data());
    for (char c : f.name) FUZZ_CHECK(!(c >= 'A' && c <= 'Z'), "upper case in '%.*s'", int(f.name.size()), f.name.data());
    for (char c : f.value)
      FUZZ_CHECK(c != '\r' && c != '\n' && c != '\0', "CR, LF or NUL in the value of %.*s", int(f.name.size()),
                 f.name.data());
  }
  FUZZ_CHECK(token(info.method_str), "method '%.*s'", int(info.method_str.size()), info.method_str.data());
  for (char c : info.target) {
    const auto u = static_cast<unsigned char>(c);
    FUZZ_CHECK(u > 32 && u != 127, "space or control byte 0x%02x in the path", u);
  }

  // The head an HTTP/1.1 backend would get, parsed back.
  http::RewriteNames names;
  http::UpstreamHead u{r.head, info, names};
  u.client_ip = "192.0.2.1";
  u.default_host = "backend";
  u.generated_id = "0123456789abcdef";
  std::string text;
  http::write_upstream_head(text, u);
  fuzz::h1::Head head2(s.max_fields + 16);
  fuzz::h1::RequestInfo info2;
  fuzz::h1::BodySink sink(64);
  fuzz::h1::RequestParser p(head2, info2, sink, names.request_id);
  p.header_limit(static_cast<std::uint32_t>(text.size() + 1));
  boost::beast::error_code ec;
  const std::size_t n = p.put(boost::asio::buffer(text), ec);
  FUZZ_CHECK(!ec && p.is_header_done(), "the upstream head does not parse (%s): %s", ec.message().c_str(),
             text.c_str());
  FUZZ_CHECK(n == text.size(), "the upstream head parses as %zu of its %zu bytes: %s", n, text.size(), text.c_str());
  FUZZ_CHECK(p.is_done(), "the upstream head announces a body: %s", text.c_str());
  FUZZ_CHECK(info2.method_str == info.method_str, "method '%.*s' went up as '%.*s'", int(info.method_str.size()),
             info.method_str.data(), int(info2.method_str.size()), info2.method_str.data());
  FUZZ_CHECK(info2.target == info.target, "target changed on the way up: %s", text.c_str());
}

int on_begin_headers(nghttp2_session*, const nghttp2_frame* f, void* u) {
  auto& s = *static_cast<Session*>(u);
  if (f->hd.type == NGHTTP2_HEADERS && f->headers.cat == NGHTTP2_HCAT_REQUEST)
    s.streams[f->hd.stream_id] = std::make_unique<Request>(s.max_fields, s.max_bytes);
  return 0;
}

int on_header(nghttp2_session*, const nghttp2_frame* f, const std::uint8_t* name, std::size_t namelen,
              const std::uint8_t* value, std::size_t valuelen, std::uint8_t, void* u) {
  auto& s = *static_cast<Session*>(u);
  if (f->hd.type != NGHTTP2_HEADERS || f->headers.cat != NGHTTP2_HCAT_REQUEST) return 0;
  auto it = s.streams.find(f->hd.stream_id);
  if (it == s.streams.end()) return 0;
  it->second->bytes += namelen + valuelen + 32;
  const bool ok = it->second->decoder.field({reinterpret_cast<const char*>(name), namelen},
                                            {reinterpret_cast<const char*>(value), valuelen});
  return ok ? 0 : NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
}

int on_frame_recv(nghttp2_session*, const nghttp2_frame* f, void* u) {
  auto& s = *static_cast<Session*>(u);
  if (f->hd.type != NGHTTP2_HEADERS || f->headers.cat != NGHTTP2_HCAT_REQUEST) return 0;
  auto it = s.streams.find(f->hd.stream_id);
  if (it == s.streams.end()) return 0;
  Request& r = *it->second;
  r.decoder.done((f->hd.flags & NGHTTP2_FLAG_END_STREAM) != 0);
  const auto& info = r.info;
  const bool served = !r.decoder.too_large() && !r.decoder.too_many() && !r.decoder.bad() && !info.method_str.empty() &&
                      !info.target.empty() && (!info.authority.empty() || info.host >= 0) &&
                      info.method != http::Verb::connect;
  if (served) check_served(r, s);
  return 0;
}

int on_data_chunk(nghttp2_session* ss, std::uint8_t, std::int32_t id, const std::uint8_t*, std::size_t n, void*) {
  nghttp2_session_consume(ss, id, n);  // what an exchange taking the body does
  return 0;
}

int on_stream_close(nghttp2_session*, std::int32_t id, std::uint32_t, void* u) {
  static_cast<Session*>(u)->streams.erase(id);
  return 0;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const fuzz::Params prm(data, size, 4);
  const std::string_view in = prm.rest(size);
  Session s;
  s.max_bytes = 256 + 64 * std::size_t{prm.byte(0)};
  s.max_fields = 4 + std::size_t{prm.byte(1)};
  const std::size_t reads[2] = {1 + 16 * std::size_t{prm.byte(2)}, 1 + 16 * std::size_t{prm.byte(3)}};

  nghttp2_session_callbacks* cb = nullptr;
  nghttp2_session_callbacks_new(&cb);
  nghttp2_session_callbacks_set_on_begin_headers_callback(cb, on_begin_headers);
  nghttp2_session_callbacks_set_on_header_callback(cb, on_header);
  nghttp2_session_callbacks_set_on_frame_recv_callback(cb, on_frame_recv);
  nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb, on_data_chunk);
  nghttp2_session_callbacks_set_on_stream_close_callback(cb, on_stream_close);
  nghttp2_option* opt = nullptr;
  nghttp2_option_new(&opt);
  nghttp2_option_set_no_recv_client_magic(opt, 1);  // the input starts after the preface
  nghttp2_option_set_no_auto_window_update(opt, 1);
  nghttp2_option_set_max_settings(opt, 32);
  nghttp2_option_set_max_outbound_ack(opt, 1000);
  nghttp2_option_set_max_deflate_dynamic_table_size(opt, 4096);
  nghttp2_option_set_max_continuations(opt, 8);
  nghttp2_session* ss = nullptr;
  nghttp2_session_server_new2(&ss, cb, &s, opt);
  nghttp2_option_del(opt);
  nghttp2_session_callbacks_del(cb);
  const nghttp2_settings_entry iv[] = {
      {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, 100},
      {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, 65535},
      {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, static_cast<std::uint32_t>(s.max_bytes)},
      {NGHTTP2_SETTINGS_ENABLE_PUSH, 0},
  };
  nghttp2_submit_settings(ss, NGHTTP2_FLAG_NONE, iv, std::size(iv));

  std::size_t off = 0;
  for (int i = 0; off < in.size(); ++i) {
    const std::size_t n = std::min(reads[i % 2], in.size() - off);
    const auto rv = nghttp2_session_mem_recv(ss, reinterpret_cast<const std::uint8_t*>(in.data() + off), n);
    if (rv < 0) {
      FUZZ_CHECK(rv != NGHTTP2_ERR_CALLBACK_FAILURE, "a callback failed the session");
      break;  // a connection error: levee sends GOAWAY and closes
    }
    FUZZ_CHECK(static_cast<std::size_t>(rv) == n, "mem_recv took %zd of %zu bytes", rv, n);
    off += n;
    for (;;) {  // what the writer sends, discarded
      const std::uint8_t* out = nullptr;
      if (nghttp2_session_mem_send(ss, &out) <= 0) break;
    }
  }
  nghttp2_session_del(ss);
  return 0;
}

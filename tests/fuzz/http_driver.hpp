// Drives levee's HTTP/1.1 parsers the way a connection does: bytes arrive
// in pieces of fuzzer-chosen sizes into a bounded read buffer (IoBuffer),
// the parser consumes what it can, the body sink is flushed when it fills,
// and a kept-alive connection parses the next message from what is left.
//
// Invariants checked on every input:
//   - progress: every step consumes bytes, flushes the sink, reads more or
//     ends; put() never returns "consumed nothing, no error" forever;
//   - a parser that asks for more input while the read buffer is at its
//     maximum ends the message with an error, as the connection does (it
//     would otherwise spin: chunk extensions or trailers longer than the
//     buffer);
//   - put() consumes at most what it was given; body bytes out <= bytes in;
//     a Content-Length body is exactly that long; no body after HEAD, 1xx,
//     204, 304;
//   - stored field names are tokens and values hold no CR, LF or NUL, the
//     method is a token and the target has no space or control: levee
//     copies all of them into the head it sends on;
//   - splitting does not matter: the same bytes parsed in one piece with an
//     unbounded sink give the same messages, fields and body bytes (but see
//     drive(): a bad head may still be incomplete, not yet refused, in pieces);
//   - per-parser checks of what was noted while parsing (Traits::check).
//
// Parameter bytes before the payload (missing bytes read as 0):
//   0: bit 0: the response answers a HEAD; bits 4-7: max fields = 8 + 8*v
//   1: header limit = 64 + 32*v        2: read buffer max = limit + 1 + 8*v
//   3: read buffer start = 1 + 4*v     4: body sink = 1 + 4*v
//   5, 6, 7: read sizes 1 + v, cycled
#pragma once

#include <boost/beast/http/error.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "fuzz_check.hpp"
#include "http_layer.hpp"

namespace levee::fuzz {

namespace bhttp = boost::beast::http;
using boost::beast::error_code;

inline constexpr std::size_t kParamBytes = 8;
inline constexpr std::size_t kMaxMessages = 8;

struct DriveParams {
  bool head_response = false;
  std::size_t max_fields = 8;
  std::size_t header_limit = 64;
  std::size_t buffer_max = 65;
  std::size_t buffer_initial = 1;
  std::size_t sink = 1;
  std::uint8_t reads[3] = {0, 0, 0};

  explicit DriveParams(const Params& p) {
    head_response = p.byte(0) & 1;
    max_fields = 8 + 8 * std::size_t(p.byte(0) >> 4);
    header_limit = 64 + 32 * std::size_t(p.byte(1));
    buffer_max = header_limit + 1 + 8 * std::size_t(p.byte(2));
    buffer_initial = std::min(buffer_max, 1 + 4 * std::size_t(p.byte(3)));
    sink = 1 + 4 * std::size_t(p.byte(4));
    for (int i = 0; i < 3; ++i) reads[i] = p.byte(5 + static_cast<std::size_t>(i));
  }
};

/// What one message amounted to, comparable between two ways of parsing.
struct Message {
  bool header_done = false;
  bool done = false;
  bool error = false;
  std::vector<std::pair<std::string, std::string>> fields;
  std::string body;
  std::string noted;  ///< Traits::describe: what the parser noted, as text
  bool operator==(const Message&) const = default;
};

inline bool tchar(unsigned char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
         std::string_view("!#$%&'*+-.^_`|~").find(static_cast<char>(c)) != std::string_view::npos;
}
inline bool is_token(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return tchar(static_cast<unsigned char>(c)); });
}
inline bool safe_value(std::string_view s) {
  return s.find_first_of(std::string_view("\r\n\0", 3)) == std::string_view::npos;
}
inline bool safe_target(std::string_view s) {
  return !s.empty() && std::none_of(s.begin(), s.end(), [](char c) {
    auto u = static_cast<unsigned char>(c);
    return u <= 0x20 || u == 0x7f;
  });
}

/// Checks common to requests and responses once a head is complete.
inline void check_fields(const h1::Head& head, std::size_t max_fields) {
  FUZZ_CHECK(head.fields().size() <= max_fields, "%zu fields stored, limit %zu", head.fields().size(), max_fields);
  for (const auto& f : head.fields()) {
    FUZZ_CHECK(is_token(f.name), "field name '%.*s' is not a token", int(f.name.size()), f.name.data());
    FUZZ_CHECK(safe_value(f.value), "value of '%.*s' holds CR, LF or NUL", int(f.name.size()), f.name.data());
  }
}

/// Parses `input` as a connection would. Traits supplies the parser:
///   using Info; using Parser; static constexpr bool kResponse;
///   static Parser make(Head&, Info&, BodySink&);
///   static void check(const Parser&, const Head&, const Info&);
///   static std::string describe(const Info&);
///   static bool bodyless(const Parser&, const Info&, const DriveParams&);
template <class Traits>
class Connection {
 public:
  /// whole: one read of everything, an unbounded buffer and sink (the
  /// reference the split run is compared with).
  Connection(const DriveParams& prm, std::string_view input, bool whole)
      : prm_(prm),
        input_(input),
        whole_(whole),
        buf_(whole ? std::max<std::size_t>(1, input.size()) : prm.buffer_initial,
             whole ? std::max<std::size_t>(1, input.size()) : prm.buffer_max),
        head_(prm.max_fields),
        sink_(whole ? input.size() + 1 : prm.sink) {}

  /// The messages parsed; `stalled` when a stall ended the connection.
  std::vector<Message> run() {
    std::vector<Message> out;
    for (std::size_t i = 0; i < kMaxMessages; ++i) {
      if (buf_.empty() && pos_ == input_.size()) break;  // closed between messages
      head_.reset();
      sink_.clear();
      typename Traits::Info info{};
      auto p = Traits::make(head_, info, sink_);
      p.header_limit(static_cast<std::uint32_t>(prm_.header_limit));
      if (Traits::kResponse && prm_.head_response) p.skip(true);  // the answer to a HEAD
      Message m = one(p, info);
      out.push_back(std::move(m));
      const Message& last = out.back();
      if (stalled_ || !last.done || last.error || !p.keep_alive() || p.upgrade()) break;
    }
    return out;
  }
  bool stalled() const noexcept { return stalled_; }
  /// Where message i began in the input.

 private:
  /// Bytes into the read buffer: >0 read, 0 no room, -1 end of input.
  long read_more() {
    if (pos_ == input_.size()) return -1;
    auto mb = buf_.prepare();
    if (mb.size() == 0) return 0;
    std::size_t want = whole_ ? input_.size() : 1 + std::size_t(prm_.reads[reads_++ % 3]);
    std::size_t n = std::min({mb.size(), want, input_.size() - pos_});
    std::memcpy(mb.data(), input_.data() + pos_, n);
    buf_.commit(n);
    pos_ += n;
    return static_cast<long>(n);
  }

  template <class Parser>
  Message one(Parser& p, typename Traits::Info& info) {
    Message m;
    std::size_t fed = 0;  // bytes the parser consumed for this message
    const std::size_t bound = 16 * (input_.size() + 16);
    for (std::size_t steps = 0;; ++steps) {
      FUZZ_CHECK(steps < bound, "no progress: the parser neither consumes, finishes nor fails (%zu steps)", steps);
      bool starved = buf_.empty();
      if (!buf_.empty() && !p.is_done() && !sink_.full()) {
        error_code ec;
        const std::size_t had = buf_.size();
        const std::size_t n = p.put(buf_.cbuf(), ec);
        FUZZ_CHECK(n <= had, "put() consumed %zu of %zu bytes", n, had);
        buf_.consume(n);
        fed += n;
        if (ec == bhttp::error::need_more) {
          starved = true;
        } else if (ec == bhttp::error::need_buffer) {
          FUZZ_CHECK(sink_.full(), "need_buffer while the body sink has room");
        } else if (ec) {
          m.error = true;
          m.body.append(sink_.data());  // what was parsed before the error
          sink_.clear();
          break;
        }
      }
      if (sink_.size() > 0 && (sink_.full() || p.is_done() || buf_.empty() || starved)) {
        m.body.append(sink_.data());
        sink_.clear();
        continue;
      }
      if (p.is_done()) break;
      if (!starved) continue;
      const long r = read_more();
      if (r < 0) {  // the peer closed: a body delimited by the close ends here
        if (p.is_header_done() && p.need_eof()) {
          error_code ec;
          p.put_eof(ec);
          if (ec) m.error = true;
          m.body.append(sink_.data());
          sink_.clear();
        }
        break;
      }
      if (r == 0) {
        // The parser needs more than the whole read buffer holds: a chunk
        // header or a trailer section longer than the buffer. The
        // connection refuses the message there (http1_connection.cpp
        // read_body, exchange.cpp for responses; tests/integration/
        // test_hostile.py), so this is an error, and the one-piece parse
        // (an unbounded buffer) is not comparable.
        m.error = true;
        stalled_ = true;
        break;
      }
    }
    consumed_ += fed;
    m.header_done = p.is_header_done();
    m.done = p.is_done();
    FUZZ_CHECK(m.body.size() <= fed, "%zu body bytes out of %zu bytes in", m.body.size(), fed);
    if (m.header_done && !m.error) {
      check_fields(head_, prm_.max_fields);
      Traits::check(p, head_, info);
      if (Traits::bodyless(p, info, prm_)) FUZZ_CHECK(m.body.empty(), "a body where there can be none");
      if (m.done && !p.chunked() && p.content_length())
        FUZZ_CHECK(Traits::bodyless(p, info, prm_) || m.body.size() == *p.content_length(),
                   "body of %zu bytes, Content-Length %llu", m.body.size(),
                   static_cast<unsigned long long>(*p.content_length()));
      for (const auto& f : head_.fields()) m.fields.emplace_back(f.name, f.value);
      m.noted = Traits::describe(info);
    }
    return m;
  }

  const DriveParams& prm_;
  std::string_view input_;
  bool whole_;
  std::size_t pos_ = 0;
  std::size_t reads_ = 0;
  bool stalled_ = false;
  std::size_t consumed_ = 0;  ///< bytes the parser took, all messages
  h1::IoBuffer buf_;
  h1::Head head_;
  h1::BodySink sink_;
};

/// The whole check for one input: split run, then the one-piece reference.
template <class Traits>
int drive(const std::uint8_t* data, std::size_t size) {
  Params params(data, size, kParamBytes);
  DriveParams prm(params);
  const std::string_view input = params.rest(size);
  Connection<Traits> split(prm, input, false);
  const auto got = split.run();
  if (split.stalled()) return 0;  // refused for the buffer's size: see Connection::one
  Connection<Traits> whole(prm, input, true);
  const auto want = whole.run();
  for (std::size_t i = 0; i < std::min(got.size(), want.size()); ++i) {
    const Message& a = got[i];
    const Message& b = want[i];
    // The one allowed difference: Beast tries a head at once on its first
    // bytes, then waits for CRLF CRLF before looking again. So a head the
    // one-piece parse rejects may, in pieces, still be waiting for its end
    // when the input ends. Nothing is accepted either way.
    if (b.error && !a.error && !a.done && !a.header_done && i + 1 == got.size()) continue;
    // And its mirror: a head that has used its whole byte budget without
    // ending can only be too long. In pieces the parser may say so at once;
    // in one piece it may still be waiting, when the input ends, for the
    // byte that proves it (found by a CPU-hour run). Nothing is accepted
    // either way.
    if (a.error && !b.error && !b.done && !b.header_done && i + 1 == want.size()) continue;
    FUZZ_CHECK(a.header_done == b.header_done && a.done == b.done && a.error == b.error,
               "message %zu: header_done/done/error %d%d%d in pieces, %d%d%d in one piece", i, a.header_done, a.done,
               a.error, b.header_done, b.done, b.error);
    FUZZ_CHECK(a.fields == b.fields, "message %zu: fields differ between pieces and one piece", i);
    FUZZ_CHECK(a.noted == b.noted, "message %zu: noted '%s' in pieces, '%s' in one piece", i, a.noted.c_str(),
               b.noted.c_str());
    FUZZ_CHECK(a.body == b.body, "message %zu: %zu body bytes in pieces, %zu in one piece", i, a.body.size(),
               b.body.size());
  }
  FUZZ_CHECK(got.size() == want.size(), "%zu messages in pieces, %zu in one piece", got.size(), want.size());
  return 0;
}

}  // namespace levee::fuzz

// The HTTP/1.1 request parser, as a client's bytes reach it (see
// http_driver.hpp for the connection model and the invariants). Here, in
// addition: what the parser notes while parsing (where the Host, request id
// and forwarding fields are, Connection tokens, Expect) agrees with a
// reference computed afterwards from the stored fields. (Classification
// reads its signal fields from the stored head: core/classify.)
#include <string>

#include "core/text.hpp"
#include "http_driver.hpp"

namespace {

using namespace levee::fuzz;
using levee::core::iequals;

constexpr std::string_view kRequestId = "x-request-id";

struct RequestTraits {
  using Info = h1::RequestInfo;
  static constexpr bool kResponse = false;
  using Parser = h1::RequestParser;

  static Parser make(h1::Head& head, Info& info, h1::BodySink& sink) { return Parser(head, info, sink, kRequestId); }

  static bool bodyless(const Parser& p, const Info&, const DriveParams&) {
    return !p.chunked() && !p.content_length();
  }

  static void check(const Parser&, const h1::Head& head, const Info& info) {
    FUZZ_CHECK(is_token(info.method_str), "method '%.*s' is not a token", int(info.method_str.size()),
               info.method_str.data());
    FUZZ_CHECK(safe_target(info.target), "target '%.*s' has a space or a control", int(info.target.size()),
               info.target.data());
    FUZZ_CHECK(info.version == 10 || info.version == 11, "HTTP version %d", info.version);
    const auto& fs = head.fields();
    // The reference: the last field of each watched name (the first Host;
    // a second Host is an error), Connection tokens counted over all fields.
    int host = -1, rid = -1, xff = -1, via = -1;
    bool close = false, cont = false, bad_expect = false;
    std::uint32_t tokens = 0;
    for (std::size_t i = 0; i < fs.size(); ++i) {
      const auto& f = fs[i];
      const int at = static_cast<int>(i);
      if (f.id == bhttp::field::host) {
        FUZZ_CHECK(host < 0, "two Host fields accepted");
        host = at;
      } else if (f.id == bhttp::field::expect) {
        (iequals(levee::core::trim(f.value), "100-continue") ? cont : bad_expect) = true;
      } else if (f.id == bhttp::field::connection) {
        levee::core::for_each_token(f.value, [&](std::string_view t) {
          if (iequals(t, "close")) close = true;
          else if (!iequals(t, "keep-alive")) ++tokens;
        });
      } else if (iequals(f.name, "x-forwarded-for")) xff = at;
      else if (iequals(f.name, "via")) via = at;
      else if (iequals(f.name, kRequestId)) rid = at;
      // A field's id must agree with its name: the connection skips
      // hop-by-hop fields by id, so a name Beast did not recognise must not
      // slip past.
      if (f.id != bhttp::field::unknown)
        FUZZ_CHECK(iequals(f.name, bhttp::to_string(f.id)), "field '%.*s' has the id of '%s'", int(f.name.size()),
                   f.name.data(), std::string(bhttp::to_string(f.id)).c_str());
    }
    FUZZ_CHECK(info.host == host && info.request_id == rid && info.xff == xff && info.via == via,
               "noted field indexes differ from the fields stored");
    FUZZ_CHECK(info.connection_close == close && info.connection_tokens == tokens, "Connection tokens");
    FUZZ_CHECK(info.expect_continue == cont && info.bad_expect == bad_expect, "Expect");
    FUZZ_CHECK(!info.too_many_fields, "too many fields, yet no error");
  }

  static std::string describe(const Info& i) {
    std::string s(i.method_str);
    s += ' ';
    s += i.target;
    s += ' ';
    s += i.authority;
    for (int v : {i.version, i.host, i.request_id, i.xff, i.via, int(i.expect_continue), int(i.bad_expect),
                  int(i.unsupported_coding), int(i.connection_close), int(i.connection_tokens)}) {
      s += ' ';
      s += std::to_string(v);
    }
    return s;
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return drive<RequestTraits>(data, size);
}

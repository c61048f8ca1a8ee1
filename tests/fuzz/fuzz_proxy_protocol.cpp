// PROXY protocol headers (v1 and v2) as an L4 balancer, or anyone allowed
// to pretend to be one, sends them. The first input byte is the v2 size
// limit (16 + 8 * byte); the rest is what arrives on the connection.
//
// Checked, for the whole input and for the incremental read the shell does:
//   - Done: the length is within the input, at least 15 bytes, at most 107
//     for v1 and the limit for v2, and ends in CRLF for v1;
//   - More: it asks for at least one byte;
//   - every prefix of a header that parses (Done) is More, never Invalid,
//     and parses to the same length when the rest arrives: reading it a
//     byte at a time or all at once gives the same answer;
//   - consuming what More says is safe never passes the end of the header.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "core/proxy_protocol.hpp"
#include "fuzz_check.hpp"

using namespace levee::core;
using S = ProxyHeader::Status;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  const std::size_t max_v2 = 16 + 8 * std::size_t{data[0]};
  const std::string_view in(reinterpret_cast<const char*>(data + 1), size - 1);
  const ProxyHeader whole = parse_proxy_header(in, max_v2);
  if (whole.status == S::Done) {
    FUZZ_CHECK(whole.length >= 15 && whole.length <= in.size(), "length %zu of %zu bytes", whole.length, in.size());
    if (whole.version == 1) {
      FUZZ_CHECK(whole.length <= kProxyV1Max, "v1 header of %zu bytes", whole.length);
      FUZZ_CHECK(in[whole.length - 2] == '\r' && in[whole.length - 1] == '\n', "v1 header not ending in CRLF");
    } else {
      FUZZ_CHECK(whole.version == 2 && whole.length <= max_v2, "v2 header of %zu bytes, limit %zu", whole.length,
                 max_v2);
    }
  }
  if (whole.status == S::More) FUZZ_CHECK(whole.more > 0, "More asks for nothing");
  // The shell's way: read what the parser says is header, then judge again.
  std::size_t have = 0;
  for (;;) {
    const ProxyHeader h = parse_proxy_header(in.substr(0, have), max_v2);
    if (h.status == S::More) {
      FUZZ_CHECK(h.more > 0, "More asks for nothing after %zu bytes", have);
      if (have + h.more > in.size()) break;  // the input ends inside the header
      if (whole.status == S::Done)
        FUZZ_CHECK(have + h.more <= whole.length, "asked past the header's end (%zu + %zu > %zu)", have, h.more,
                   whole.length);
      have += h.more;
      continue;
    }
    if (whole.status == S::Done) {
      FUZZ_CHECK(h.status == S::Done && h.length == whole.length,
                 "a prefix of a good header was judged %d (length %zu, whole %zu)", int(h.status), h.length,
                 whole.length);
    }
    break;
  }
  return 0;
}

#include <catch2/catch_test_macros.hpp>

#include <string>

#include "core/proxy_protocol.hpp"

using namespace levee::core;
using S = ProxyHeader::Status;

namespace {

std::string v2(std::uint8_t ver_cmd, std::uint8_t fam, const std::string& body) {
  std::string h = std::string("\r\n\r\n\0\r\nQUIT\n", 12);
  h += static_cast<char>(ver_cmd);
  h += static_cast<char>(fam);
  h += static_cast<char>(body.size() >> 8);
  h += static_cast<char>(body.size() & 0xff);
  return h + body;
}

std::string v2_inet(std::array<std::uint8_t, 4> src, std::uint16_t sport, const std::string& tlvs = "") {
  std::string b;
  for (auto x : src) b += static_cast<char>(x);
  b += std::string("\x0a\x00\x00\x01", 4);  // dst 10.0.0.1
  b += static_cast<char>(sport >> 8);
  b += static_cast<char>(sport & 0xff);
  b += std::string("\x00\x50", 2);  // dport 80
  return v2(0x21, 0x11, b + tlvs);
}

/// Feeds the header in pieces of `step` bytes, as the shell does: it may
/// read only what the parser says is header.
ProxyHeader incremental(const std::string& stream, std::size_t& consumed) {
  consumed = 0;
  for (;;) {
    auto h = parse_proxy_header(std::string_view(stream).substr(0, consumed));
    if (h.status != S::More) return h;
    REQUIRE(h.more > 0);
    REQUIRE(consumed + h.more <= stream.size());
    consumed += h.more;
  }
}

}  // namespace

TEST_CASE("proxy protocol v1: TCP4 and TCP6 give the client's address and the header's length") {
  const std::string tail = "GET / HTTP/1.1\r\n";
  auto h = parse_proxy_header("PROXY TCP4 192.0.2.7 10.0.0.1 51234 80\r\n" + tail);
  REQUIRE(h.status == S::Done);
  CHECK(h.version == 1);
  CHECK(h.length == 40);
  CHECK(h.has_source);
  CHECK(h.source == ipv4_mapped({192, 0, 2, 7}));
  CHECK(h.source_port == 51234);

  h = parse_proxy_header("PROXY TCP6 2001:db8::5 2001:db8::1 443 8443\r\n");
  REQUIRE(h.status == S::Done);
  CHECK(h.source == *parse_address("2001:db8::5"));
  CHECK(h.source_port == 443);

  h = parse_proxy_header("PROXY UNKNOWN\r\n" + tail);
  REQUIRE(h.status == S::Done);
  CHECK(h.length == 15);
  CHECK_FALSE(h.has_source);
}

TEST_CASE("proxy protocol v1: malformed headers are refused") {
  for (const char* bad : {"PROXY TCP4 192.0.2.7 10.0.0.1 51234\r\n", "PROXY TCP4 2001:db8::5 10.0.0.1 1 2\r\n",
                          "PROXY TCP6 192.0.2.7 10.0.0.1 1 2\r\n", "PROXY TCP4 192.0.2.7 10.0.0.1 1 70000\r\n",
                          "PROXY TCP4 192.0.2.7  10.0.0.1 1 2\r\n", "PROXY UDP4 192.0.2.7 10.0.0.1 1 2\r\n",
                          "PROXY TCP4 192.0.2.7 10.0.0.1 1 2 3\r\n", "PROXY TCP4 192.0.2.7 10.0.0.1 1 2\n",
                          "PROXY TCP4 192.0.2.7 10.0.0.1 +1 2\r\n", "GET / HTTP/1.1\r\n", "\x16\x03\x01"}) {
    INFO(bad);
    CHECK(parse_proxy_header(bad).status == S::Invalid);
  }
  // A CR not followed by LF: refused, not taken as the end (which would
  // consume the byte after it, e.g. a TLS record's first).
  CHECK(parse_proxy_header("PROXY UNKNOWN\rX").status == S::Invalid);
  CHECK(parse_proxy_header("PROXY TCP4 192.0.2.7 10.0.0.1 1 2\r\x16").status == S::Invalid);
  // Longer than the spec's 107 bytes without a CRLF.
  CHECK(parse_proxy_header("PROXY TCP4 " + std::string(120, '1')).status == S::Invalid);
}

TEST_CASE("proxy protocol v2: PROXY over IPv4 and IPv6, LOCAL, TLVs skipped") {
  const std::string tail = "\x16\x03\x01";  // a TLS ClientHello follows
  auto h = parse_proxy_header(v2_inet({198, 51, 100, 9}, 40000) + tail);
  REQUIRE(h.status == S::Done);
  CHECK(h.version == 2);
  CHECK(h.length == 28);
  CHECK(h.source == ipv4_mapped({198, 51, 100, 9}));
  CHECK(h.source_port == 40000);

  // A TLV (PP2_TYPE_AUTHORITY "a.example") after the addresses: skipped.
  const std::string tlv = std::string("\x02\x00\x09", 3) + "a.example";
  h = parse_proxy_header(v2_inet({198, 51, 100, 9}, 1, tlv) + tail);
  REQUIRE(h.status == S::Done);
  CHECK(h.length == 28 + tlv.size());

  std::string six(36, '\0');
  six[0] = '\x20';
  six[1] = '\x01';
  six[15] = '\x05';
  six[32] = '\x01';
  six[33] = '\xbb';
  h = parse_proxy_header(v2(0x21, 0x21, six));
  REQUIRE(h.status == S::Done);
  CHECK(h.source == *parse_address("2001::5"));
  CHECK(h.source_port == 443);

  h = parse_proxy_header(v2(0x20, 0x00, "") + tail);  // LOCAL: a health check from the balancer
  REQUIRE(h.status == S::Done);
  CHECK(h.length == 16);
  CHECK_FALSE(h.has_source);
}

TEST_CASE("proxy protocol v2: bad version, command, family, short addresses and oversize are refused") {
  CHECK(parse_proxy_header(v2(0x11, 0x11, std::string(12, '\0'))).status == S::Invalid);
  CHECK(parse_proxy_header(v2(0x22, 0x11, std::string(12, '\0'))).status == S::Invalid);
  CHECK(parse_proxy_header(v2(0x21, 0x41, std::string(12, '\0'))).status == S::Invalid);
  CHECK(parse_proxy_header(v2(0x21, 0x11, std::string(11, '\0'))).status == S::Invalid);
  CHECK(parse_proxy_header(v2(0x21, 0x21, std::string(35, '\0'))).status == S::Invalid);
  CHECK(parse_proxy_header(v2(0x21, 0x11, std::string(600, '\0'))).status == S::Invalid);
  CHECK(parse_proxy_header(v2(0x21, 0x11, std::string(600, '\0')), 1024).status == S::Done);
}

TEST_CASE("proxy protocol: read incrementally, the parser never asks for a byte past the header") {
  const std::string tail = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
  for (const std::string& header :
       {std::string("PROXY TCP4 192.0.2.7 10.0.0.1 51234 80\r\n"), std::string("PROXY UNKNOWN\r\n"),
        std::string("PROXY TCP6 ::1 ::1 1 2\r\n"), v2_inet({1, 2, 3, 4}, 5), v2(0x20, 0x00, ""),
        v2_inet({1, 2, 3, 4}, 5, std::string(100, 'x'))}) {
    std::size_t consumed = 0;
    const auto h = incremental(header + tail, consumed);
    INFO(header);
    REQUIRE(h.status == S::Done);
    CHECK(h.length == header.size());
    CHECK(consumed == header.size());
  }
  // And every prefix of a header is "more", never "invalid".
  const std::string header = "PROXY TCP4 192.0.2.7 10.0.0.1 51234 80\r\n";
  for (std::size_t n = 0; n < header.size(); ++n) CHECK(parse_proxy_header(header.substr(0, n)).status == S::More);
  const std::string h2 = v2_inet({1, 2, 3, 4}, 5);
  for (std::size_t n = 0; n < h2.size(); ++n) CHECK(parse_proxy_header(h2.substr(0, n)).status == S::More);
}

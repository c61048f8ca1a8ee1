#include "core/proxy_protocol.hpp"

#include <algorithm>
#include <array>
#include <cstring>

namespace levee::core {

namespace {

constexpr std::string_view kV1Prefix = "PROXY ";
constexpr std::array<std::uint8_t, 12> kV2Sig = {0x0D, 0x0A, 0x0D, 0x0A, 0x00, 0x0D,
                                                 0x0A, 0x51, 0x55, 0x49, 0x54, 0x0A};
/// Every header is at least this long ("PROXY UNKNOWN\r\n"; v2 is 16).
constexpr std::size_t kMinHeader = 15;

ProxyHeader invalid(std::string_view why, std::uint8_t version = 0) {
  ProxyHeader h;
  h.status = ProxyHeader::Status::Invalid;
  h.error = why;
  h.version = version;
  return h;
}

ProxyHeader more(std::size_t n, std::uint8_t version) {
  ProxyHeader h;
  h.status = ProxyHeader::Status::More;
  h.more = n;
  h.version = version;
  return h;
}

bool prefix_of(std::string_view bytes, const std::uint8_t* sig, std::size_t sig_len) {
  const std::size_t n = std::min(bytes.size(), sig_len);
  return std::memcmp(bytes.data(), sig, n) == 0;
}

/// The next space-separated field of a v1 line.
std::string_view field(std::string_view& s) {
  const auto sp = s.find(' ');
  std::string_view f = s.substr(0, sp);
  s = sp == std::string_view::npos ? std::string_view{} : s.substr(sp + 1);
  return f;
}

bool parse_port(std::string_view s, std::uint16_t& out) {
  if (s.empty() || s.size() > 5) return false;
  std::uint32_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + static_cast<std::uint32_t>(c - '0');
  }
  if (v > 65535) return false;
  out = static_cast<std::uint16_t>(v);
  return true;
}

ProxyHeader parse_v1(std::string_view bytes) {
  const auto cr = bytes.find('\r');
  const auto lf = bytes.find('\n');
  if (lf != std::string_view::npos && (cr == std::string_view::npos || lf != cr + 1))
    return invalid("v1 header: a line feed without a carriage return before it", 1);
  if (cr == std::string_view::npos || cr + 1 >= bytes.size()) {
    // No end yet: every byte read is header. It ends with CRLF, so at least
    // that much (one byte after a trailing CR) is still to come.
    const std::size_t n = bytes.size();
    if (n >= kProxyV1Max) return invalid("v1 header longer than 107 bytes", 1);
    std::size_t m = cr == std::string_view::npos ? 2 : 1;
    if (n < kMinHeader) m = std::max(m, kMinHeader - n);
    return more(std::min(m, kProxyV1Max - n), 1);
  }
  if (bytes[cr + 1] != '\n') return invalid("v1 header: a carriage return without a line feed after it", 1);
  if (cr + 2 > kProxyV1Max) return invalid("v1 header longer than 107 bytes", 1);
  std::string_view line = bytes.substr(kV1Prefix.size(), cr - kV1Prefix.size());
  ProxyHeader h;
  h.status = ProxyHeader::Status::Done;
  h.version = 1;
  h.length = cr + 2;
  const auto proto = field(line);
  if (proto == "UNKNOWN") return h;  // whatever follows is ignored (the spec says so)
  if (proto != "TCP4" && proto != "TCP6") return invalid("v1 header: protocol is not TCP4, TCP6 or UNKNOWN", 1);
  const auto src = field(line);
  const auto dst = field(line);
  const auto sport = field(line);
  const auto dport = line;  // the last field: no further space allowed
  std::uint16_t sp = 0, dp = 0;
  if (dport.find(' ') != std::string_view::npos || !parse_port(sport, sp) || !parse_port(dport, dp))
    return invalid("v1 header: bad ports", 1);
  const bool v6 = proto == "TCP6";
  for (auto a : {src, dst}) {
    if ((a.find(':') != std::string_view::npos) != v6 || !parse_address(a))
      return invalid("v1 header: an address is not of the protocol's family", 1);
  }
  h.has_source = true;
  h.source = *parse_address(src);
  h.source_port = sp;
  return h;
}

ProxyHeader parse_v2(std::string_view bytes, std::size_t max_bytes) {
  const std::size_t n = bytes.size();
  if (n < kProxyV2Fixed) return more(kProxyV2Fixed - n, 2);
  const auto b = [&](std::size_t i) { return static_cast<std::uint8_t>(bytes[i]); };
  if ((b(12) >> 4) != 2) return invalid("v2 header: version is not 2", 2);
  const std::uint8_t cmd = b(12) & 0x0F;
  if (cmd > 1) return invalid("v2 header: command is neither LOCAL nor PROXY", 2);
  const std::uint8_t family = b(13) >> 4, transport = b(13) & 0x0F;
  if (family > 3 || transport > 2) return invalid("v2 header: unknown address family or transport", 2);
  const std::size_t total = kProxyV2Fixed + (std::size_t{b(14)} << 8 | b(15));
  if (total > max_bytes) return invalid("v2 header longer than the listener allows", 2);
  if (n < total) return more(total - n, 2);
  ProxyHeader h;
  h.status = ProxyHeader::Status::Done;
  h.version = 2;
  h.length = total;
  if (cmd == 0) return h;  // LOCAL: the balancer's own connection
  const std::size_t len = total - kProxyV2Fixed;
  const std::size_t at = kProxyV2Fixed;
  if (family == 1) {  // INET: src 4, dst 4, sport 2, dport 2
    if (len < 12) return invalid("v2 header: too short for IPv4 addresses", 2);
    h.source = ipv4_mapped({b(at), b(at + 1), b(at + 2), b(at + 3)});
    h.source_port = static_cast<std::uint16_t>(b(at + 8) << 8 | b(at + 9));
    h.has_source = true;
  } else if (family == 2) {  // INET6: src 16, dst 16, sport 2, dport 2
    if (len < 36) return invalid("v2 header: too short for IPv6 addresses", 2);
    for (std::size_t i = 0; i < 16; ++i) h.source[i] = b(at + i);
    h.source_port = static_cast<std::uint16_t>(b(at + 32) << 8 | b(at + 33));
    h.has_source = true;
  }
  // UNSPEC and UNIX carry no address levee can use: the peer stays the socket's.
  return h;
}

}  // namespace

ProxyHeader parse_proxy_header(std::string_view bytes, std::size_t max_v2_bytes) noexcept {
  const bool v1 = prefix_of(bytes, reinterpret_cast<const std::uint8_t*>(kV1Prefix.data()), kV1Prefix.size());
  const bool v2 = prefix_of(bytes, kV2Sig.data(), kV2Sig.size());
  if (!v1 && !v2) return invalid("not a PROXY protocol header");
  if (bytes.size() < kV1Prefix.size() && v1) return more(kMinHeader - bytes.size(), 0);
  if (v1) return parse_v1(bytes);
  if (bytes.size() < kV2Sig.size()) return more(kProxyV2Fixed - bytes.size(), 2);
  return parse_v2(bytes, std::max(max_v2_bytes, kProxyV2Fixed));
}

}  // namespace levee::core

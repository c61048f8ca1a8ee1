#include "core/net.hpp"

#include "core/text.hpp"

namespace levee::core {

namespace {

bool parse_ipv4(std::string_view s, std::array<std::uint8_t, 4>& out) noexcept {
  int part = 0;
  while (part < 4) {
    std::size_t dot = s.find('.');
    std::string_view tok = s.substr(0, dot);
    auto v = parse_u64(tok);
    if (!v || *v > 255 || tok.size() > 3) return false;
    out[static_cast<std::size_t>(part++)] = static_cast<std::uint8_t>(*v);
    if (dot == std::string_view::npos) break;
    s.remove_prefix(dot + 1);
  }
  return part == 4 && s.find('.') == std::string_view::npos;
}

int hex_digit(char c) noexcept {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

bool parse_ipv6(std::string_view s, Address& out) noexcept {
  std::array<std::uint16_t, 8> groups{};
  int n = 0, gap = -1;
  if (s.substr(0, 2) == "::") {
    gap = 0;
    s.remove_prefix(2);
  }
  while (!s.empty()) {
    if (n >= 8) return false;
    std::size_t colon = s.find(':');
    std::string_view tok = s.substr(0, colon);
    if (tok.find('.') != std::string_view::npos) {  // embedded IPv4 tail
      std::array<std::uint8_t, 4> v4{};
      if (colon != std::string_view::npos || n > 6 || !parse_ipv4(tok, v4)) return false;
      groups[static_cast<std::size_t>(n++)] = static_cast<std::uint16_t>(v4[0] << 8 | v4[1]);
      groups[static_cast<std::size_t>(n++)] = static_cast<std::uint16_t>(v4[2] << 8 | v4[3]);
      s = {};
      break;
    }
    if (tok.empty() || tok.size() > 4) return false;
    unsigned v = 0;
    for (char c : tok) {
      const int d = hex_digit(c);
      if (d < 0) return false;
      v = (v << 4) | static_cast<unsigned>(d);
    }
    groups[static_cast<std::size_t>(n++)] = static_cast<std::uint16_t>(v);
    if (colon == std::string_view::npos) {
      s = {};
      break;
    }
    s.remove_prefix(colon + 1);
    if (!s.empty() && s.front() == ':') {
      if (gap >= 0) return false;
      gap = n;
      s.remove_prefix(1);
    } else if (s.empty()) {
      return false;  // a trailing single colon
    }
  }
  if (gap < 0 && n != 8) return false;
  if (gap >= 0 && n > 7) return false;
  std::array<std::uint16_t, 8> full{};
  if (gap < 0) {
    full = groups;
  } else {
    const int tail = n - gap;
    for (int i = 0; i < gap; ++i) full[static_cast<std::size_t>(i)] = groups[static_cast<std::size_t>(i)];
    for (int i = 0; i < tail; ++i)
      full[static_cast<std::size_t>(8 - tail + i)] = groups[static_cast<std::size_t>(gap + i)];
  }
  for (std::size_t i = 0; i < 8; ++i) {
    out[2 * i] = static_cast<std::uint8_t>(full[i] >> 8);
    out[2 * i + 1] = static_cast<std::uint8_t>(full[i] & 0xff);
  }
  return true;
}

}  // namespace

bool Network::contains(const Address& a) const noexcept {
  int bits = prefix;
  for (std::size_t i = 0; i < 16 && bits > 0; ++i, bits -= 8) {
    const auto mask = bits >= 8 ? std::uint8_t{0xff} : static_cast<std::uint8_t>(0xff << (8 - bits));
    if ((a[i] & mask) != (addr[i] & mask)) return false;
  }
  return true;
}

std::optional<Address> parse_address(std::string_view s) noexcept {
  std::array<std::uint8_t, 4> v4{};
  if (parse_ipv4(s, v4)) return ipv4_mapped(v4);
  Address a{};
  if (parse_ipv6(s, a)) return a;
  return std::nullopt;
}

std::optional<Network> parse_network(std::string_view s) noexcept {
  s = trim(s);
  std::string_view host = s;
  std::optional<std::uint64_t> plen;
  if (auto slash = s.find('/'); slash != std::string_view::npos) {
    host = s.substr(0, slash);
    plen = parse_u64(s.substr(slash + 1));
    if (!plen) return std::nullopt;
  }
  Network n;
  std::array<std::uint8_t, 4> v4{};
  if (parse_ipv4(host, v4)) {
    if (plen && *plen > 32) return std::nullopt;
    n.addr = ipv4_mapped(v4);
    n.prefix = 96 + static_cast<int>(plen.value_or(32));
    return n;
  }
  if (parse_ipv6(host, n.addr)) {
    if (plen && *plen > 128) return std::nullopt;
    n.prefix = static_cast<int>(plen.value_or(128));
    return n;
  }
  return std::nullopt;
}

bool identity_matches(std::string_view pattern, std::string_view id) noexcept {
  if (!pattern.empty() && pattern.back() == '*') {
    const auto prefix = pattern.substr(0, pattern.size() - 1);
    return id.size() >= prefix.size() && id.compare(0, prefix.size(), prefix) == 0;
  }
  return pattern == id;
}

bool is_loopback(const Address& a) noexcept {
  static constexpr Network v4{ipv4_mapped({127, 0, 0, 0}), 104};
  Address one{};
  one[15] = 1;
  return v4.contains(a) || a == one;
}

std::size_t SourceCounts::Hash::operator()(const Address& a) const noexcept {
  std::uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (const auto b : a) h = (h ^ b) * 1099511628211ull;
  return static_cast<std::size_t>(h);
}

bool SourceCounts::enter(const Address& a, std::uint32_t cap) {
  if (cap == 0) return true;
  auto& n = counts_[a];
  if (n >= cap) return false;
  ++n;
  return true;
}

void SourceCounts::leave(const Address& a) {
  // Also when the cap is now 0: a reload may have lifted it since.
  const auto it = counts_.find(a);
  if (it == counts_.end()) return;
  if (--it->second == 0) counts_.erase(it);
}

}  // namespace levee::core

// Network addresses as admission and trust rules see them: 16 bytes, IPv4
// as IPv4-mapped IPv6 (::ffff:a.b.c.d), so one comparison serves both.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

namespace levee::core {

using Address = std::array<std::uint8_t, 16>;

/// ::ffff:a.b.c.d for an IPv4 address.
constexpr Address ipv4_mapped(const std::array<std::uint8_t, 4>& v4) noexcept {
  Address a{};
  a[10] = a[11] = 0xff;
  for (std::size_t i = 0; i < 4; ++i) a[12 + i] = v4[i];
  return a;
}

/// An IPv4 or IPv6 network; IPv4 networks are stored IPv4-mapped (a /8 is a /104).
struct Network {
  Address addr{};
  int prefix = 128;
  bool contains(const Address& a) const noexcept;
};

/// "10.0.0.0/8", "::1/128", "127.0.0.1" (a host). nullopt for anything else.
std::optional<Network> parse_network(std::string_view s) noexcept;
/// A literal IPv4 or IPv6 address (no prefix).
std::optional<Address> parse_address(std::string_view s) noexcept;

/// Where levee believes what a request says about itself.
struct TrustedSources {
  std::vector<Network> networks;
  bool any = false;  ///< `any`: every source
  bool contains(const Address& a) const noexcept {
    if (any) return true;
    for (const auto& n : networks)
      if (n.contains(a)) return true;
    return false;
  }
};

}  // namespace levee::core

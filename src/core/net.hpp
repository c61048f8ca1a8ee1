// Network addresses as admission and trust rules see them: 16 bytes, IPv4
// as IPv4-mapped IPv6 (::ffff:a.b.c.d), so one comparison serves both.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
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

/// Connections at once per client address, against a cap: what a
/// listener's (and the admin listener's) per-source limit counts. Not
/// locked: its owner serialises enter and leave.
class SourceCounts {
 public:
  /// Counts one more connection from `a`, unless `a` already holds `cap`
  /// (0: no cap, nothing is counted).
  bool enter(const Address& a, std::uint32_t cap);
  /// The end of one counted connection (none counted: nothing happens).
  void leave(const Address& a);
  /// Addresses with at least one connection counted.
  std::size_t sources() const noexcept { return counts_.size(); }

 private:
  struct Hash {
    std::size_t operator()(const Address& a) const noexcept;
  };
  std::unordered_map<Address, std::uint32_t, Hash> counts_;
};

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

/// What a client's verified TLS certificate says it is: its SAN URIs
/// (SPIFFE IDs), SAN DNS names and subject common name. Empty without a
/// certificate. The I/O shell extracts the strings; core only compares them.
struct PeerIdentity {
  std::vector<std::string> uris;
  std::vector<std::string> dns;
  std::string cn;
  bool empty() const noexcept { return uris.empty() && dns.empty() && cn.empty(); }
};

/// "spiffe://example.org/ns/web/sa/frontend" matches itself; a pattern
/// ending in '*' matches every string it is a prefix of (without the '*').
bool identity_matches(std::string_view pattern, std::string_view id) noexcept;

/// Where levee believes what a request says about itself: source networks
/// and verified certificate identities.
struct TrustedSources {
  std::vector<Network> networks;
  bool any = false;                     ///< `any`: every source
  std::vector<std::string> identities;  ///< patterns, see identity_matches
  bool contains(const Address& a) const noexcept {
    if (any) return true;
    for (const auto& n : networks)
      if (n.contains(a)) return true;
    return false;
  }
  /// Trusted by its address, or by any name its certificate carries.
  bool contains(const Address& a, const PeerIdentity* id) const noexcept {
    if (contains(a)) return true;
    if (id == nullptr || identities.empty()) return false;
    for (const auto& p : identities) {
      for (const auto& u : id->uris)
        if (identity_matches(p, u)) return true;
      for (const auto& d : id->dns)
        if (identity_matches(p, d)) return true;
      if (!id->cn.empty() && identity_matches(p, id->cn)) return true;
    }
    return false;
  }
  bool empty() const noexcept { return !any && networks.empty() && identities.empty(); }
};

/// 127.0.0.0/8 or ::1.
bool is_loopback(const Address& a) noexcept;

}  // namespace levee::core

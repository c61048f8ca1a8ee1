// The DNS wire format, as much of it as levee's resolver needs: a query for
// a name's A or AAAA records (RFC 1035, with an EDNS0 OPT record asking for
// answers up to 4 KiB, RFC 6891), and the addresses and the shortest TTL
// in the answer. Pure functions of bytes; the resolver does the I/O.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace levee::control::dns {

constexpr std::uint16_t kA = 1;
constexpr std::uint16_t kAAAA = 28;

/// A recursive query for `name`'s records of `type`. Empty when the name
/// is not a valid DNS name (a label over 63 bytes, the whole over 253).
std::vector<std::uint8_t> build_query(std::uint16_t id, std::string_view name, std::uint16_t type);

struct Answer {
  int rcode = 0;                       ///< 0 NOERROR, 2 SERVFAIL, 3 NXDOMAIN, ...
  bool truncated = false;              ///< TC: the answer did not fit
  std::vector<std::string> addresses;  ///< textual, as ip::make_address reads them
  std::uint32_t ttl = 0;               ///< the shortest of the address records'
};

/// The answer to query `id` of `type`; nullopt when the bytes are not one
/// (another id, not a response, malformed).
std::optional<Answer> parse_response(std::span<const std::uint8_t> msg, std::uint16_t id, std::uint16_t type);

}  // namespace levee::control::dns

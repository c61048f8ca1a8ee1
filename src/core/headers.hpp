// Parsers for the request and response headers that carry admission
// signals. Pure functions of a string: never throw, never allocate; a value
// that does not parse is reported as such (the shell counts it and moves on).
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "core/time.hpp"

namespace levee::core {

/// The longest deadline a request header can set: a year. Longer values
/// mean "no deadline of the client's own" (the route's timeout applies).
inline constexpr Duration kMaxHeaderTimeout = std::chrono::hours(24 * 365);

/// grpc-timeout: 1-8 ASCII digits then a unit (H M S m u n). Values longer
/// than kMaxHeaderTimeout (up to 99999999H is valid) read as kMaxHeaderTimeout.
std::optional<Duration> parse_grpc_timeout(std::string_view v) noexcept;

/// Formats d as a grpc-timeout value into out (at least 10 bytes); returns length.
std::size_t format_grpc_timeout(Duration d, char* out) noexcept;

/// x-request-timeout-ms: a non-negative integer number of milliseconds, at
/// most kMaxHeaderTimeout (more is refused).
std::optional<Duration> parse_timeout_ms(std::string_view v) noexcept;

/// x-attempt-count / x-envoy-attempt-count (1 = first try) and
/// grpc-previous-rpc-attempts (earlier attempts: add 1): a non-negative
/// integer up to 1,000,000; more is not a believable count and is refused.
std::optional<std::uint32_t> parse_attempt(std::string_view v) noexcept;

/// grpc-retry-pushback-ms (gRFC A6): a signed 32-bit decimal; a negative *or
/// unparseable* value means the server asks not to be retried at all.
bool pushback_says_no_retry(std::string_view v) noexcept;

}  // namespace levee::core

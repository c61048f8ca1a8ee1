// Parsers for the request and response headers that carry admission
// signals. Pure functions of a string: never throw, never allocate; a value
// that does not parse is reported as such (the shell counts it and moves on).
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "core/time.hpp"

namespace levee::core {

/// grpc-timeout: 1-8 ASCII digits then a unit (H M S m u n).
std::optional<Duration> parse_grpc_timeout(std::string_view v) noexcept;

/// Formats d as a grpc-timeout value into out (at least 10 bytes); returns length.
std::size_t format_grpc_timeout(Duration d, char* out) noexcept;

/// x-request-timeout-ms: a non-negative integer number of milliseconds.
std::optional<Duration> parse_timeout_ms(std::string_view v) noexcept;

/// x-attempt-count / x-envoy-attempt-count: a positive integer (1 = first try).
/// grpc-previous-rpc-attempts counts earlier attempts, so add 1 to it.
std::optional<std::uint32_t> parse_attempt(std::string_view v) noexcept;

/// grpc-retry-pushback-ms: a negative value means "do not retry".
bool pushback_says_no_retry(std::string_view v) noexcept;

}  // namespace levee::core

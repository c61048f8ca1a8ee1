#include "core/headers.hpp"

#include <charconv>
#include <cmath>

#include "core/text.hpp"

namespace levee::core {

std::optional<Duration> parse_grpc_timeout(std::string_view v) noexcept {
  v = trim(v);
  if (v.size() < 2 || v.size() > 9) return std::nullopt;
  auto digits = parse_u64(v.substr(0, v.size() - 1));
  if (!digits) return std::nullopt;
  std::int64_t unit_ns;
  switch (v.back()) {
    case 'H': unit_ns = 3600000000000; break;
    case 'M': unit_ns = 60000000000; break;
    case 'S': unit_ns = 1000000000; break;
    case 'm': unit_ns = 1000000; break;
    case 'u': unit_ns = 1000; break;
    case 'n': unit_ns = 1; break;
    default: return std::nullopt;
  }
  // Eight digits of hours (or minutes) do not fit a nanosecond count: test
  // against the cap before multiplying, never after.
  const auto n = static_cast<std::int64_t>(*digits);  // at most 99999999
  if (n > kMaxHeaderTimeout.count() / unit_ns) return kMaxHeaderTimeout;
  return Duration(n * unit_ns);
}

std::size_t format_grpc_timeout(Duration d, char* out) noexcept {
  // The largest unit that keeps the value within 8 digits, rounding down
  // (never promise more time than there is).
  std::int64_t ns = std::max<std::int64_t>(0, d.count());
  struct Unit { std::int64_t ns; char c; };
  constexpr Unit units[] = {{1, 'n'}, {1000, 'u'}, {1000000, 'm'}, {1000000000, 'S'},
                            {60000000000, 'M'}, {3600000000000, 'H'}};
  for (const auto& u : units) {
    std::int64_t v = ns / u.ns;
    if (v <= 99999999) {
      auto [p, ec] = std::to_chars(out, out + 9, v);
      (void)ec;
      *p++ = u.c;
      return static_cast<std::size_t>(p - out);
    }
  }
  out[0] = '0';
  out[1] = 'n';
  return 2;
}

std::optional<Duration> parse_timeout_ms(std::string_view v) noexcept {
  auto n = parse_u64(trim(v));
  if (!n || *n > static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(kMaxHeaderTimeout).count()))
    return std::nullopt;
  return std::chrono::milliseconds(static_cast<std::int64_t>(*n));
}

std::optional<std::uint32_t> parse_attempt(std::string_view v) noexcept {
  auto n = parse_u64(trim(v));
  if (!n || *n > 1000000) return std::nullopt;
  return static_cast<std::uint32_t>(*n);
}

bool pushback_says_no_retry(std::string_view v) noexcept {
  v = trim(v);
  std::int32_t ms = 0;
  auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), ms);
  return ec != std::errc{} || p != v.data() + v.size() || ms < 0;
}

}  // namespace levee::core

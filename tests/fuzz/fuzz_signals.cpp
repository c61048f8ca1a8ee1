// The request and response signals levee acts on, as header values from
// strangers: grpc-timeout, x-request-timeout-ms, the attempt counts,
// grpc-retry-pushback-ms and the criticality. Each parser is checked
// against a reference written from its specification (not from its code),
// and grpc-timeout formatting against parsing: levee forwards the remaining
// deadline, so what it writes must parse back to no more than it had.
#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>

#include "core/criticality.hpp"
#include "core/headers.hpp"
#include "core/text.hpp"
#include "fuzz_check.hpp"

using namespace levee::core;
using levee::fuzz::as_view;

namespace {

using i128 = __int128;

bool all_digits(std::string_view s) noexcept {
  if (s.empty()) return false;
  for (char c : s)
    if (c < '0' || c > '9') return false;
  return true;
}

/// A decimal of any length, saturated just above `cap` (enough to compare).
i128 decimal(std::string_view s, i128 cap) noexcept {
  i128 v = 0;
  for (char c : s) {
    v = v * 10 + (c - '0');
    if (v > cap) return cap + 1;
  }
  return v;
}

constexpr i128 kCapNs = i128(kMaxHeaderTimeout.count());

// grpc-timeout (gRPC over HTTP/2, "Requests"): TimeoutValue TimeoutUnit,
// the value being at most 8 ASCII digits, the unit one of H M S m u n.
std::optional<i128> ref_grpc_timeout_ns(std::string_view v) noexcept {
  v = trim(v);
  if (v.size() < 2 || v.size() > 9) return std::nullopt;
  auto digits = v.substr(0, v.size() - 1);
  if (!all_digits(digits)) return std::nullopt;
  i128 unit;
  switch (v.back()) {
    case 'H': unit = i128(3600) * 1000000000; break;
    case 'M': unit = i128(60) * 1000000000; break;
    case 'S': unit = 1000000000; break;
    case 'm': unit = 1000000; break;
    case 'u': unit = 1000; break;
    case 'n': unit = 1; break;
    default: return std::nullopt;
  }
  i128 ns = decimal(digits, 99999999) * unit;
  return ns < kCapNs ? ns : kCapNs;  // longer than levee's cap means "the cap"
}

void check_grpc_timeout(std::string_view v) {
  auto got = parse_grpc_timeout(v);
  auto want = ref_grpc_timeout_ns(v);
  FUZZ_CHECK(got.has_value() == want.has_value(), "grpc-timeout '%.*s': accepted=%d, spec says %d",
             int(v.size()), v.data(), int(got.has_value()), int(want.has_value()));
  if (!got) return;
  FUZZ_CHECK(i128(got->count()) == *want, "grpc-timeout '%.*s' parsed to %lld ns", int(v.size()), v.data(),
             static_cast<long long>(got->count()));
  // What levee would forward for this deadline means the same deadline.
  char buf[16];
  auto n = format_grpc_timeout(*got, buf);
  auto back = parse_grpc_timeout(std::string_view(buf, n));
  FUZZ_CHECK(back && *back == *got, "grpc-timeout '%.*s' formatted as '%.*s'", int(v.size()), v.data(),
             int(n), buf);
}

constexpr std::int64_t kUnitNs[] = {1, 1000, 1000000, 1000000000, 60000000000, 3600000000000};
constexpr char kUnitChar[] = {'n', 'u', 'm', 'S', 'M', 'H'};

void check_format(Duration d) {
  char buf[16];
  std::memset(buf, '#', sizeof buf);
  auto n = format_grpc_timeout(d, buf);
  FUZZ_CHECK(n >= 2 && n <= 9, "format(%lld ns) wrote %zu bytes", static_cast<long long>(d.count()), n);
  FUZZ_CHECK(buf[n] == '#', "format(%lld ns) wrote past its length", static_cast<long long>(d.count()));
  std::string_view s(buf, n);
  FUZZ_CHECK(all_digits(s.substr(0, n - 1)), "format(%lld ns) = '%.*s'", static_cast<long long>(d.count()), int(n), buf);
  int u = 0;
  while (u < 6 && kUnitChar[u] != s.back()) ++u;
  FUZZ_CHECK(u < 6, "format(%lld ns) = '%.*s': no unit", static_cast<long long>(d.count()), int(n), buf);
  const std::int64_t ns = d.count() < 0 ? 0 : d.count();
  // The smallest unit that fits 8 digits: the finest deadline the header can say.
  if (u > 0) FUZZ_CHECK(ns / kUnitNs[u - 1] > 99999999, "format(%lld ns) = '%.*s': a finer unit fits",
                        static_cast<long long>(ns), int(n), buf);
  auto back = parse_grpc_timeout(s);
  FUZZ_CHECK(back.has_value(), "format(%lld ns) = '%.*s' does not parse", static_cast<long long>(ns), int(n), buf);
  // Never promise more time than there is; lose less than one unit (or clamp to the cap).
  FUZZ_CHECK(back->count() <= ns, "format(%lld ns) = '%.*s' promises more", static_cast<long long>(ns), int(n), buf);
  if (ns < kMaxHeaderTimeout.count())
    FUZZ_CHECK(ns - back->count() < kUnitNs[u], "format(%lld ns) = '%.*s' loses a unit or more",
               static_cast<long long>(ns), int(n), buf);
  else
    FUZZ_CHECK(*back == kMaxHeaderTimeout, "format(%lld ns) = '%.*s'", static_cast<long long>(ns), int(n), buf);
}

void check_timeout_ms(std::string_view v) {
  auto got = parse_timeout_ms(v);
  auto t = trim(v);
  const i128 cap_ms = kCapNs / 1000000;
  bool ok = all_digits(t) && decimal(t, cap_ms) <= cap_ms;
  FUZZ_CHECK(got.has_value() == ok, "x-request-timeout-ms '%.*s': accepted=%d", int(v.size()), v.data(),
             int(got.has_value()));
  if (got) FUZZ_CHECK(i128(got->count()) == decimal(t, cap_ms) * 1000000, "x-request-timeout-ms '%.*s'",
                      int(v.size()), v.data());
}

void check_attempt(std::string_view v) {
  auto got = parse_attempt(v);
  auto t = trim(v);
  bool ok = all_digits(t) && decimal(t, 1000000) <= 1000000;
  FUZZ_CHECK(got.has_value() == ok, "attempt '%.*s': accepted=%d", int(v.size()), v.data(), int(got.has_value()));
  if (got) FUZZ_CHECK(i128(*got) == decimal(t, 1000000), "attempt '%.*s' = %u", int(v.size()), v.data(), *got);
}

// gRFC A6 "Pushback": a signed 32-bit decimal; negative *or unparseable*
// means the server asks the client not to retry at all.
void check_pushback(std::string_view v) {
  auto t = trim(v);
  bool negative = !t.empty() && t.front() == '-';
  auto digits = negative ? t.substr(1) : t;
  const i128 limit = negative ? (i128(1) << 31) : (i128(1) << 31) - 1;
  bool parses = all_digits(digits) && decimal(digits, limit) <= limit;
  bool want_no_retry = !parses || (negative && decimal(digits, limit) > 0);
  FUZZ_CHECK(pushback_says_no_retry(v) == want_no_retry, "grpc-retry-pushback-ms '%.*s': no_retry=%d",
             int(v.size()), v.data(), int(!want_no_retry));
}

void check_criticality(std::string_view v) {
  auto got = parse_criticality(v);
  std::optional<Criticality> want;
  for (Criticality c : kAllCriticalities)
    if (iequals(trim(v), to_string(c))) want = c;
  FUZZ_CHECK(got == want, "criticality '%.*s'", int(v.size()), v.data());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view v = as_view(data, size);
  check_grpc_timeout(v);
  check_timeout_ms(v);
  check_attempt(v);
  check_pushback(v);
  check_criticality(v);
  if (size >= 8) {
    std::int64_t ns;
    std::memcpy(&ns, data, sizeof ns);
    check_format(Duration(ns));
  }
  return 0;
}

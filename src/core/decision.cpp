#include "core/decision.hpp"

#include <algorithm>
#include <cmath>

namespace levee::core {

namespace {
constexpr std::array<ReasonInfo, kReasonCount> kInfo = {{
    {"none", 200, ReasonKind::None},
    {"executor_overload", 503, ReasonKind::Shed},
    {"host_cpu", 503, ReasonKind::Shed},
    {"throttle", 503, ReasonKind::Shed},
    {"tenant_quota", 429, ReasonKind::Shed},
    {"queue_full", 503, ReasonKind::Shed},
    {"queue_wait", 503, ReasonKind::Shed},
    {"queue_timeout", 503, ReasonKind::Shed},
    {"deadline", 504, ReasonKind::Shed},
    {"retry_storm", 503, ReasonKind::Shed},
    {"fuse", 503, ReasonKind::Shed},
    {"conn_limit", 503, ReasonKind::Shed},
    {"bad_request", 400, ReasonKind::Error},
    {"bad_criticality", 400, ReasonKind::Error},
    {"header_too_large", 431, ReasonKind::Error},
    {"uri_too_long", 414, ReasonKind::Error},
    {"request_timeout", 408, ReasonKind::Error},
    {"not_implemented", 501, ReasonKind::Error},
    {"no_route", 404, ReasonKind::Error},
    {"no_endpoint", 503, ReasonKind::Error},
    {"upstream_connect", 502, ReasonKind::Error},
    {"upstream_reset", 502, ReasonKind::Error},
    {"upstream_timeout", 504, ReasonKind::Error},
    {"client_gone", 499, ReasonKind::Error},
}};
}  // namespace

const ReasonInfo& info(Reason r) noexcept {
  auto i = static_cast<std::size_t>(r);
  return kInfo[i < kReasonCount ? i : 0];
}

std::uint32_t retry_after_seconds(Duration estimate, double u) noexcept {
  double est = std::max(0.0, to_seconds(estimate));
  double base = std::max(1.0, std::ceil(est));
  double spread = std::max(2.0, est / 2.0);
  u = std::clamp(u, 0.0, 0.999999);
  double v = base + std::floor(u * (spread + 1.0));
  return static_cast<std::uint32_t>(std::min(v, 86400.0));
}

}  // namespace levee::core

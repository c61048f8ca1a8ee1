// What every gate answers: admit, or reject with a reason, a status and a
// Retry-After. Reasons are a closed set; each has exactly one string, used as
// the metric label, the access-log value and the x-levee-reject / x-levee-error
// header value, so an operator can always tell shedding from breakage.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "core/time.hpp"

namespace levee::core {

enum class Reason : std::uint8_t {
  None = 0,
  // Shedding: levee chose not to serve (header x-levee-reject).
  ExecutorOverload,
  HostCpu,
  Throttle,
  TenantQuota,
  QueueFull,
  QueueWait,
  QueueTimeout,
  Deadline,
  RetryStorm,
  Fuse,
  ConnectionLimit,
  // Failures and protocol answers (header x-levee-error).
  BadRequest,
  BadCriticality,
  HeaderTooLarge,
  UriTooLong,
  RequestTimeout,
  NotImplemented,
  NoRoute,
  NoEndpoint,
  UpstreamConnect,
  UpstreamReset,
  UpstreamTimeout,
  ClientGone,
  Count_
};
inline constexpr std::size_t kReasonCount = static_cast<std::size_t>(Reason::Count_);

enum class ReasonKind : std::uint8_t { None, Shed, Error };

struct ReasonInfo {
  std::string_view name;  ///< stable string: label, log field, header value
  std::uint16_t status;   ///< HTTP status of the local reply (499: no reply is sent)
  ReasonKind kind;
};

const ReasonInfo& info(Reason r) noexcept;
inline std::string_view to_string(Reason r) noexcept { return info(r).name; }
inline bool is_shed(Reason r) noexcept { return info(r).kind == ReasonKind::Shed; }

/// A gate's answer. Cheap to copy, never allocates.
struct Decision {
  Reason reason = Reason::None;
  std::uint16_t status = 0;
  bool no_retry = false;   ///< tell the caller not to retry (x-levee-no-retry: 1)
  Duration retry_after{};  ///< estimated time until retrying could succeed (before jitter)

  constexpr bool admitted() const noexcept { return reason == Reason::None; }
  static constexpr Decision admit() noexcept { return {}; }
  static Decision reject(Reason r, Duration retry_after, bool no_retry = false) noexcept {
    return Decision{r, info(r).status, no_retry, retry_after};
  }
};

/// Retry-After seconds from an estimated drain time and a uniform draw u in [0,1).
/// Never a constant: the value is spread over [ceil(est), ceil(est) + max(2, est/2)]
/// so that clients rejected together do not come back together.
std::uint32_t retry_after_seconds(Duration estimate, double u) noexcept;

}  // namespace levee::core

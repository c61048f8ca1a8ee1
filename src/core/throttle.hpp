// Gate 2, adaptive throttling (SRE book, "Handling Overload"): levee as a
// client of each cluster keeps, per criticality and over a trailing window
// (default 2 minutes),
//   requests: attempts made by the layer above the throttle (including the
//             ones this throttle rejects locally), and
//   accepts:  attempts the backend accepted (did not reject for overload).
// A new request is rejected locally with probability
//   p = max(0, (requests - K * accepts) / (requests + 1)).
//
// A request counts when it is either rejected by this throttle or actually
// attempted at the backend (on_response). Requests that a later local gate
// sheds (quota, queue) were never offered to the backend: counting them
// would read levee's own shedding as the backend refusing work.
// With K = 2 the backend keeps seeing up to twice the traffic it accepts,
// enough to notice recovery quickly, while the rest fails locally for free.
//
// With few requests the formula is all noise: one failed request alone
// gives p = 1/2. So nothing is rejected until the window has seen
// `min_requests` requests of that criticality (as Envoy's admission control
// waits for an RPS threshold).
//
// Recovery. Over a long window the formula keeps a recovered backend down:
// with local rejections counted as requests, the share let through can
// grow only by a factor K per window (a 20 s outage became minutes of
// refusals at 2 minutes). So:
//  - the probability is capped (max_probability, 0.9): at least 10% of
//    requests always reach the backend as probes, whatever the history;
//  - a run of accepted attempts in a row clears the criticality's window,
//    so what the probes see ends the refusal at once. In the throttle's own
//    steady state a backend accepts about 1/K of what reaches it, so the
//    run must be one that steady state seldom produces: `recovery_run`
//    (10) is its length for K = 2, and for another K it is the length with
//    the same chance, (1/K)^n = 2^-10 (K = 1.1: 73). It must also span
//    `recovery_span` (250 ms): at a high rate a run of 250 ms is hundreds
//    in a row. A false clear costs about min_requests extra attempts, and
//    the fresh window then throttles on what follows alone.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>

#include "core/criticality.hpp"
#include "core/decision.hpp"
#include "core/window.hpp"

namespace levee::core {

struct ThrottleConfig {
  double k = 2.0;
  Duration window = std::chrono::minutes(2);
  std::size_t buckets = 60;
  double min_requests = 20;
  double max_probability = 0.9;       ///< the rest always reaches the backend
  std::uint32_t recovery_run = 10;    ///< accepted in a row that clear the history (0: never) ...
  Duration recovery_span = std::chrono::milliseconds(250);  ///< ... over at least this long
  Duration retry_after = std::chrono::seconds(1);
  bool operator==(const ThrottleConfig&) const = default;
};

class AdaptiveThrottle {
 public:
  explicit AdaptiveThrottle(ThrottleConfig cfg = {})
      : cfg_(cfg), window_(cfg.window, cfg.buckets), run_length_(run_length(cfg)) {}

  /// Accepted attempts in a row that clear a criticality's window: as
  /// unlikely at the steady state's accept ratio 1/K as recovery_run is at
  /// 1/2 (0: never).
  static std::uint32_t run_length(const ThrottleConfig& cfg) noexcept {
    if (cfg.recovery_run == 0) return 0;
    if (cfg.k <= 1.0 + 1e-9) return 0;  // K = 1 never rejects what the backend accepts: nothing to clear
    const double n = std::ceil(cfg.recovery_run * std::log(2.0) / std::log(cfg.k));
    return static_cast<std::uint32_t>(std::clamp(n, 1.0, 1e6));
  }

  /// The current local rejection probability for criticality c.
  double probability(Criticality c, TimePoint now) noexcept {
    double req = window_.sum(now, requests_lane(c));
    if (req < cfg_.min_requests) return 0.0;
    double acc = window_.sum(now, accepts_lane(c));
    return std::clamp((req - cfg_.k * acc) / (req + 1.0), 0.0, cfg_.max_probability);
  }

  /// Decides with the injected uniform draw u in [0,1); a rejection counts
  /// as a request (an admitted one counts when it is attempted).
  Decision admit(Criticality c, TimePoint now, double u) noexcept {
    double p = probability(c, now);
    if (u < p) {
      window_.add(now, requests_lane(c), 1.0);
      return Decision::reject(Reason::Throttle, cfg_.retry_after, /*no_retry=*/true);
    }
    return Decision::admit();
  }

  /// Called for every attempt at the backend: accepted unless the backend
  /// rejected it for overload (429/503 or an overload marker), failed to
  /// answer (connect failure, timeout).
  void on_response(Criticality c, TimePoint now, bool accepted) noexcept {
    auto& run = runs_[index(c)];
    if (!accepted) {
      run.count = 0;
      window_.add(now, requests_lane(c), 1.0);
      return;
    }
    if (run.count++ == 0) run.start = now;
    if (run_length_ > 0 && run.count >= run_length_ && now - run.start >= cfg_.recovery_span &&
        probability(c, now) > 0) {
      // The backend takes work again: what it refused before is history.
      // (Forgiving only the refusals beyond K x the accepts, keeping the
      // accepts, was tried: after a false forgiveness the kept accepts
      // dilute new refusals, and at K = 1.1 the backend got 1.7x what it
      // accepted instead of 1.3x.)
      window_.clear_lane(requests_lane(c));
      window_.clear_lane(accepts_lane(c));
      run.count = 0;
    }
    window_.add(now, requests_lane(c), 1.0);
    window_.add(now, accepts_lane(c), 1.0);
  }

  double requests(Criticality c, TimePoint now) noexcept { return window_.sum(now, requests_lane(c)); }
  double accepts(Criticality c, TimePoint now) noexcept { return window_.sum(now, accepts_lane(c)); }
  const ThrottleConfig& config() const noexcept { return cfg_; }

 private:
  ThrottleConfig cfg_;
  static std::size_t requests_lane(Criticality c) noexcept { return index(c); }
  static std::size_t accepts_lane(Criticality c) noexcept { return kCriticalityCount + index(c); }
  SlidingWindow<2 * kCriticalityCount> window_;  ///< requests and accepts, by criticality
  struct Run {
    std::uint32_t count = 0;  ///< accepted in a row
    TimePoint start{};        ///< when the first of them was answered
  };
  std::array<Run, kCriticalityCount> runs_{};  ///< by criticality
  std::uint32_t run_length_;
};

}  // namespace levee::core

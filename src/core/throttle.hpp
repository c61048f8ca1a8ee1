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
//  - a run of `recovery_run` accepted attempts in a row (10: at 10% of
//    even 100 req/s, a tenth of a second) clears the criticality's window,
//    so what the probes see ends the refusal at once. A backend that still
//    fails seldom answers ten in a row (at a 30% accept rate, 1 in 170,000),
//    and one that does is back under the formula after min_requests more.
#pragma once

#include <algorithm>
#include <array>
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
  std::uint32_t recovery_run = 10;    ///< accepted in a row that clear the history (0: never)
  Duration retry_after = std::chrono::seconds(1);
};

class AdaptiveThrottle {
 public:
  explicit AdaptiveThrottle(ThrottleConfig cfg = {})
      : cfg_(cfg), requests_(cfg.window, cfg.buckets), accepts_(cfg.window, cfg.buckets) {}

  /// The current local rejection probability for criticality c.
  double probability(Criticality c, TimePoint now) noexcept {
    double req = requests_.sum(now, index(c));
    if (req < cfg_.min_requests) return 0.0;
    double acc = accepts_.sum(now, index(c));
    return std::clamp((req - cfg_.k * acc) / (req + 1.0), 0.0, cfg_.max_probability);
  }

  /// Decides with the injected uniform draw u in [0,1); a rejection counts
  /// as a request (an admitted one counts when it is attempted).
  Decision admit(Criticality c, TimePoint now, double u) noexcept {
    double p = probability(c, now);
    if (u < p) {
      requests_.add(now, index(c), 1.0);
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
      run = 0;
      requests_.add(now, index(c), 1.0);
      return;
    }
    if (cfg_.recovery_run > 0 && ++run >= cfg_.recovery_run && probability(c, now) > 0) {
      // The backend takes work again: what it refused before is history.
      requests_.clear_lane(index(c));
      accepts_.clear_lane(index(c));
      run = 0;
    }
    requests_.add(now, index(c), 1.0);
    accepts_.add(now, index(c), 1.0);
  }

  double requests(Criticality c, TimePoint now) noexcept { return requests_.sum(now, index(c)); }
  double accepts(Criticality c, TimePoint now) noexcept { return accepts_.sum(now, index(c)); }
  const ThrottleConfig& config() const noexcept { return cfg_; }

 private:
  ThrottleConfig cfg_;
  SlidingWindow<kCriticalityCount> requests_;
  SlidingWindow<kCriticalityCount> accepts_;
  std::array<std::uint32_t, kCriticalityCount> runs_{};  ///< accepted in a row, by criticality
};

}  // namespace levee::core

// Gate 1, self-protection: levee's own executor load average.
//
// The shell samples, for each worker, whether it is running or has ready
// work waiting (OS run + run-queue time, plus the event-loop backlog), and
// feeds the sum here with the worker count. The ratio busy/threads is
// smoothed with a time constant (default 1 s), so a fan-out burst shorter
// than that barely moves it while sustained saturation crosses the
// thresholds. More critical traffic has a higher threshold: with the
// defaults SHEDDABLE is shed from 0.8 of capacity and CRITICAL_PLUS only
// beyond 1.2, i.e. when ready work is already queueing behind busy workers.
// The same class, fed host or cgroup CPU utilization, is the sidecar's
// second signal.
#pragma once

#include <array>

#include "core/criticality.hpp"
#include "core/ewma.hpp"
#include "core/time.hpp"

namespace levee::core {

struct ExecutorLoadConfig {
  Duration time_constant = std::chrono::seconds(1);
  /// Reject criticality c when the smoothed load exceeds thresholds[index(c)].
  std::array<double, kCriticalityCount> thresholds = {0.8, 0.9, 1.0, 1.2};
};

class ExecutorLoad {
 public:
  explicit ExecutorLoad(ExecutorLoadConfig cfg = {}) noexcept
      : cfg_(cfg), avg_(cfg.time_constant) {}

  /// busy: workers running or with ready work (may exceed `threads` when work
  /// queues behind busy workers); threads: the number of workers.
  void sample(TimePoint now, double busy, double threads) noexcept {
    double ratio = threads > 0 ? busy / threads : 0.0;
    avg_.update(now, ratio < 0 ? 0 : ratio);
  }

  double load() const noexcept { return avg_.value(); }

  /// Whether criticality c is over its threshold right now.
  bool over(Criticality c) const noexcept { return avg_.value() > cfg_.thresholds[index(c)]; }

  const ExecutorLoadConfig& config() const noexcept { return cfg_; }

 private:
  ExecutorLoadConfig cfg_;
  Ewma avg_;
};

}  // namespace levee::core

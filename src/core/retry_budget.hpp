// Retries (SRE book, "Handling Overload" and "Addressing Cascading Failures"):
//  * RetryBudget: per cluster, retries are allowed while they stay under a
//    ratio (default 10%) of requests over a window, plus a small floor per
//    second so that low traffic can still retry at all.
//  * AttemptHistogram: watches the attempt counts of arriving requests
//    (x-attempt-count and friends). When the share of arrivals that are
//    retries passes a threshold, the layers below are overloaded and
//    retrying: levee answers "overloaded; don't retry" so that only the
//    layer directly above the failure retries, not every layer (which
//    would multiply load 3^depth).
#pragma once

#include <algorithm>

#include <array>
#include <cstdint>

#include "core/decision.hpp"
#include "core/window.hpp"

namespace levee::core {

struct RetryBudgetConfig {
  double ratio = 0.1;
  double min_per_second = 3.0;
  std::uint32_t max_attempts = 3;  ///< attempts in all, including the first
  Duration window = std::chrono::seconds(10);
  bool operator==(const RetryBudgetConfig&) const = default;
};

class RetryBudget {
 public:
  explicit RetryBudget(RetryBudgetConfig cfg = {})
      : cfg_(cfg), counts_(cfg.window, 20) {}

  void on_request(TimePoint now) noexcept { counts_.add(now, 0, 1.0); }

  /// attempt: the attempt about to be made (2 for the first retry). Consumes
  /// budget when it answers true.
  bool try_retry(TimePoint now, std::uint32_t attempt) noexcept {
    if (attempt > cfg_.max_attempts) return false;
    double requests = counts_.sum(now, 0);
    double retries = counts_.sum(now, 1);
    double allowed = cfg_.ratio * requests + cfg_.min_per_second * to_seconds(counts_.window());
    if (retries + 1.0 > allowed) return false;
    counts_.add(now, 1, 1.0);
    return true;
  }

  const RetryBudgetConfig& config() const noexcept { return cfg_; }
  /// Retries the budget would allow now (observability).
  double available(TimePoint now) noexcept {
    const double allowed = cfg_.ratio * counts_.sum(now, 0) + cfg_.min_per_second * to_seconds(counts_.window());
    return std::max(0.0, allowed - counts_.sum(now, 1));
  }

 private:
  RetryBudgetConfig cfg_;
  SlidingWindow<2> counts_;  // lane 0: requests, lane 1: retries
};

struct AttemptHistogramConfig {
  Duration window = std::chrono::seconds(10);
  /// Answer "don't retry" when more than this share of arrivals are retries.
  double retry_share_threshold = 0.2;
  /// ... and at least this many arrivals were seen (no verdict on a trickle).
  double min_arrivals = 20;
  Duration retry_after = std::chrono::seconds(2);
  bool operator==(const AttemptHistogramConfig&) const = default;
};

class AttemptHistogram {
 public:
  static constexpr std::size_t kBuckets = 4;  // attempt 1, 2, 3, 4+

  explicit AttemptHistogram(AttemptHistogramConfig cfg = {})
      : cfg_(cfg), counts_(cfg.window, 20) {}

  void record(TimePoint now, std::uint32_t attempt) noexcept {
    std::size_t b = attempt <= 1 ? 0 : (attempt >= kBuckets ? kBuckets - 1 : attempt - 1);
    counts_.add(now, b, 1.0);
  }

  double count(TimePoint now, std::size_t bucket) noexcept { return counts_.sum(now, bucket); }

  double retry_share(TimePoint now) noexcept {
    double all = counts_.sum(now, 0, kBuckets - 1);
    if (all <= 0) return 0.0;
    return counts_.sum(now, 1, kBuckets - 1) / all;
  }

  /// Whether a retry arriving now should be told "overloaded; don't retry".
  Decision admit(TimePoint now, std::uint32_t attempt) noexcept {
    if (attempt <= 1) return Decision::admit();
    double all = counts_.sum(now, 0, kBuckets - 1);
    if (all < cfg_.min_arrivals) return Decision::admit();
    if (retry_share(now) <= cfg_.retry_share_threshold) return Decision::admit();
    return Decision::reject(Reason::RetryStorm, cfg_.retry_after, /*no_retry=*/true);
  }

 private:
  AttemptHistogramConfig cfg_;
  SlidingWindow<kBuckets> counts_;
};

}  // namespace levee::core

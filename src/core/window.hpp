// A sliding window of time buckets holding `Lanes` sums each (for example a
// count per criticality, or CPU-seconds per criticality).
//
// The window is `buckets` buckets of width window/buckets; the newest bucket
// is the one `now` falls into. Adding is O(1); moving the window forward
// clears at most `buckets` expired buckets, so every operation is bounded by
// a constant, and a jump of hours clears the window in one step. Running
// totals make sums O(Lanes); they are recomputed from the buckets once per
// rotation so floating-point drift cannot accumulate.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/time.hpp"

namespace levee::core {

template <std::size_t Lanes>
class SlidingWindow {
 public:
  using Values = std::array<double, Lanes>;

  SlidingWindow(Duration window, std::size_t buckets)
      : width_(std::max<Duration>(Duration{1}, window / static_cast<std::int64_t>(std::max<std::size_t>(1, buckets)))),
        buckets_(std::max<std::size_t>(1, buckets), Values{}) {
    totals_.fill(0.0);
  }

  void add(TimePoint now, std::size_t lane, double v) noexcept {
    advance(now);
    buckets_[index_of(head_)][lane] += v;
    totals_[lane] += v;
    if (!started_) {
      started_ = true;
      start_ = now;
    }
  }

  /// Sum of one lane over the window ending at now.
  double sum(TimePoint now, std::size_t lane) noexcept {
    advance(now);
    return std::max(0.0, totals_[lane]);
  }

  /// Sum of lanes [first, last] inclusive.
  double sum(TimePoint now, std::size_t first, std::size_t last) noexcept {
    advance(now);
    double s = 0;
    for (std::size_t l = first; l <= last; ++l) s += totals_[l];
    return std::max(0.0, s);
  }

  /// The time the window actually covers at now: the full window once it has
  /// been running that long, less before (so early rates are not diluted).
  /// Never shorter than one bucket by default: a rate over a sliver of time
  /// is noise. A caller that guards against noise itself (a minimum count)
  /// may pass a shorter floor: see QueueGate::drain_rate.
  /// The time a sum covers: the full buckets behind the current one plus
  /// the part of the current one that has passed (a rate over the nominal
  /// window would read low by up to a bucket).
  Duration span(TimePoint now) const noexcept { return span(now, width_); }
  Duration span(TimePoint now, Duration floor) const noexcept {
    const Duration full = width_ * static_cast<std::int64_t>(buckets_.size());
    const Duration in_bucket = now.time_since_epoch() - width_ * (now.time_since_epoch() / width_);
    const Duration covered = full - width_ + in_bucket;
    if (!started_) return full;
    const Duration since = now - start_;
    return std::clamp(since, std::min(floor, covered), covered);
  }

  Duration window() const noexcept { return width_ * static_cast<std::int64_t>(buckets_.size()); }
  Duration bucket_width() const noexcept { return width_; }

  /// How long until the sum of lanes [first, last] falls below `threshold`
  /// if nothing more is added: buckets expire oldest first.
  Duration time_until_below(TimePoint now, std::size_t first, std::size_t last,
                            double threshold) noexcept {
    advance(now);
    double s = sum(now, first, last);
    if (s < threshold) return Duration::zero();
    const std::int64_t n = static_cast<std::int64_t>(buckets_.size());
    for (std::int64_t e = head_ - n + 1; e <= head_; ++e) {
      const Values& b = buckets_[index_of(e)];
      for (std::size_t l = first; l <= last; ++l) s -= b[l];
      if (s < threshold) {
        TimePoint expires = TimePoint{width_ * (e + n)};
        return std::max(Duration::zero(), expires - now);
      }
    }
    return TimePoint{width_ * (head_ + n)} - now;
  }

  /// Empties one lane (the others keep their history).
  void clear_lane(std::size_t lane) noexcept {
    for (auto& b : buckets_) b[lane] = 0.0;
    totals_[lane] = 0.0;
  }

  void clear() noexcept {
    for (auto& b : buckets_) b.fill(0.0);
    totals_.fill(0.0);
    started_ = false;
  }

 private:
  std::size_t index_of(std::int64_t epoch) const noexcept {
    auto n = static_cast<std::int64_t>(buckets_.size());
    return static_cast<std::size_t>(((epoch % n) + n) % n);
  }

  void advance(TimePoint now) noexcept {
    std::int64_t epoch = now.time_since_epoch() / width_;
    if (epoch <= head_) return;  // same bucket, or time went backwards: stay
    const auto n = static_cast<std::int64_t>(buckets_.size());
    if (epoch - head_ >= n) {
      for (auto& b : buckets_) b.fill(0.0);
      totals_.fill(0.0);
    } else {
      bool wrapped = false;
      for (std::int64_t e = head_ + 1; e <= epoch; ++e) {
        auto i = index_of(e);
        for (std::size_t l = 0; l < Lanes; ++l) totals_[l] -= buckets_[i][l];
        buckets_[i].fill(0.0);
        if (i == 0) wrapped = true;
      }
      if (wrapped) recompute();
    }
    head_ = epoch;
  }

  void recompute() noexcept {
    totals_.fill(0.0);
    for (const auto& b : buckets_)
      for (std::size_t l = 0; l < Lanes; ++l) totals_[l] += b[l];
  }

  Duration width_;
  std::vector<Values> buckets_;
  Values totals_{};
  std::int64_t head_ = 0;
  TimePoint start_{};
  bool started_ = false;
};

}  // namespace levee::core

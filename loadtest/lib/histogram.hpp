// A log-linear latency histogram (the HdrHistogram idea): exact below 1024
// units, then 512 sub-buckets per power of two, so any recorded value is
// reproduced within 0.2%. Fixed size, no allocation when recording.
#pragma once

#include <algorithm>
#include <bit>
#include <cstdint>
#include <vector>

namespace levee::loadtest {

class Histogram {
 public:
  static constexpr int kSubBits = 9;                  // 512 sub-buckets per octave
  static constexpr std::uint64_t kLinear = 1u << (kSubBits + 1);  // exact below 1024
  static constexpr int kOctaves = 40;                 // up to ~2^50 units

  Histogram() : counts_(kLinear + static_cast<std::size_t>(kOctaves) * (1u << kSubBits), 0) {}

  static std::size_t index_of(std::uint64_t v) noexcept {
    if (v < kLinear) return static_cast<std::size_t>(v);
    int msb = 63 - std::countl_zero(v);
    int shift = msb - kSubBits;
    std::uint64_t sub = (v >> shift) - (1u << kSubBits);
    return static_cast<std::size_t>(kLinear + static_cast<std::uint64_t>(shift - 1) * (1u << kSubBits) + sub);
  }
  /// The largest value that maps to bucket i.
  static std::uint64_t upper_of(std::size_t i) noexcept {
    if (i < kLinear) return i;
    std::size_t k = i - kLinear;
    int shift = static_cast<int>(k >> kSubBits) + 1;
    std::uint64_t sub = (k & ((1u << kSubBits) - 1)) + (1u << kSubBits);
    return ((sub + 1) << shift) - 1;
  }

  void record(std::uint64_t v) noexcept {
    std::size_t i = std::min(index_of(v), counts_.size() - 1);
    ++counts_[i];
    ++total_;
    max_ = std::max(max_, v);
    sum_ += static_cast<double>(v);
  }
  void merge(const Histogram& o) {
    for (std::size_t i = 0; i < counts_.size(); ++i) counts_[i] += o.counts_[i];
    total_ += o.total_;
    max_ = std::max(max_, o.max_);
    sum_ += o.sum_;
  }
  std::uint64_t count() const noexcept { return total_; }
  std::uint64_t max() const noexcept { return max_; }
  double mean() const noexcept { return total_ ? sum_ / static_cast<double>(total_) : 0.0; }

  /// The value at quantile q in [0,1] (upper edge of its bucket, capped at max).
  std::uint64_t quantile(double q) const noexcept {
    if (total_ == 0) return 0;
    auto rank = static_cast<std::uint64_t>(std::max(1.0, q * static_cast<double>(total_) + 0.5));
    rank = std::min(rank, total_);
    std::uint64_t seen = 0;
    for (std::size_t i = 0; i < counts_.size(); ++i) {
      seen += counts_[i];
      if (seen >= rank) return std::min(upper_of(i), max_);
    }
    return max_;
  }

 private:
  std::vector<std::uint64_t> counts_;
  std::uint64_t total_ = 0;
  std::uint64_t max_ = 0;
  double sum_ = 0;
};

}  // namespace levee::loadtest

// What a run reports, in the load generator's formats (loadtest/loadgen):
// per class the counts, goodput, success rate, rejection reasons and
// latency histograms; per second the counts by arrival second. The JSON
// summary and the CSV have the same fields as levee-loadgen's, so
// loadtest/report.py and loadtest/validate.py read simulated and real runs
// alike. Extra fields (per-node counters, the run's speed) sit beside them.
#pragma once

#include <algorithm>
#include <bit>
#include <cstdint>
#include <map>
#include <ostream>
#include <string>
#include <vector>

#include "sim/engine.hpp"

namespace levee::sim {

/// Log-linear histogram (exact below 1024 units, then 512 sub-buckets per
/// power of two: within 0.2%), as levee-loadgen's, in microseconds.
class Histogram {
 public:
  static constexpr int kSubBits = 9;
  static constexpr std::uint64_t kLinear = 1u << (kSubBits + 1);
  static constexpr int kOctaves = 40;

  void record(std::uint64_t v) {
    if (counts_.empty()) counts_.assign(kLinear + static_cast<std::size_t>(kOctaves) * (1u << kSubBits), 0);
    std::size_t i = std::min(index_of(v), counts_.size() - 1);
    ++counts_[i];
    ++total_;
    if (v > max_) max_ = v;
    sum_ += static_cast<double>(v);
  }
  void merge(const Histogram& o);
  std::uint64_t count() const noexcept { return total_; }
  std::uint64_t max() const noexcept { return max_; }
  double mean() const noexcept { return total_ ? sum_ / static_cast<double>(total_) : 0.0; }
  std::uint64_t quantile(double q) const noexcept;

 private:
  static std::size_t index_of(std::uint64_t v) noexcept {
    if (v < kLinear) return static_cast<std::size_t>(v);
    const int msb = 63 - std::countl_zero(v);
    const int shift = msb - kSubBits;
    const std::uint64_t sub = (v >> shift) - (1u << kSubBits);
    return static_cast<std::size_t>(kLinear + static_cast<std::uint64_t>(shift - 1) * (1u << kSubBits) + sub);
  }
  static std::uint64_t upper_of(std::size_t i) noexcept {
    if (i < kLinear) return i;
    const std::size_t k = i - kLinear;
    const int shift = static_cast<int>(k >> kSubBits) + 1;
    const std::uint64_t sub = (k & ((1u << kSubBits) - 1)) + (1u << kSubBits);
    return ((sub + 1) << shift) - 1;
  }
  std::vector<std::uint64_t> counts_;
  std::uint64_t total_ = 0, max_ = 0;
  double sum_ = 0;
};

struct ClassStats {
  std::string name;
  std::uint64_t offered = 0, sent = 0, ok = 0, rejected = 0, failed = 0, timeouts = 0, errors = 0, dropped = 0,
                attempts = 0;
  std::map<std::string, std::uint64_t> reasons;
  Histogram ok_latency;   ///< microseconds from the scheduled arrival
  Histogram rej_latency;  ///< microseconds to the first non-2xx answer
  void merge(const ClassStats& o);
};

struct Second {
  std::uint64_t offered = 0, sent = 0, ok = 0, rejected = 0, failed = 0, timeouts = 0, errors = 0, retries = 0;
  std::vector<std::uint64_t> ok_by_class;
};

/// Per-second counters of one node group (backends or levee instances):
/// what arrived at it, for amplification and load-over-time plots.
struct NodeSeries {
  std::string name;
  std::string kind;  ///< "backend" or "levee"
  std::vector<std::uint64_t> received;  ///< calls that arrived, by second
  std::vector<std::uint64_t> served;    ///< 2xx answered, by second
  std::map<std::string, double> totals; ///< named counters over the whole run
};

/// A finer series than the per-second CSV, by completion time: answers
/// that were 2xx within the deadline, and their latency.
struct Timeline {
  Duration interval{};  ///< zero: not kept
  std::vector<std::uint64_t> offered, ok;
  std::vector<double> latency_sum_ms, latency_max_ms;
  void add_offered(TimePoint t);
  void add_ok(TimePoint t, double latency_ms);
};

struct RunInfo {
  std::string scenario;
  std::string front;
  double step = 0;
  double capacity = 0;
  std::uint64_t seed = 0;
  double measured_seconds = 0;
  double warmup_seconds = 0;
  double simulated_seconds = 0;
  double wall_seconds = 0;
  std::uint64_t events = 0;
  std::uint64_t requests = 0;  ///< client requests offered (all of them, warm-up included)
  std::string commit;          ///< when the caller knows it
};

/// The JSON summary (levee-loadgen's fields, then the simulator's own).
/// wall: include the run's wall time and speed (left out for byte-for-byte
/// comparisons of two runs).
void write_json(std::ostream& o, const RunInfo& info, const std::vector<ClassStats>& classes,
                const std::vector<NodeSeries>& nodes, const Timeline& timeline, bool wall);
/// The per-second CSV, levee-loadgen's columns.
void write_csv(std::ostream& o, const std::vector<ClassStats>& classes, const std::vector<Second>& seconds);

}  // namespace levee::sim

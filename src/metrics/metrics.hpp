// Metrics without contention on the request path.
//
// prometheus-cpp's Counter is a CAS loop on one shared atomic and its
// Histogram::Observe takes a mutex: on every request from every worker
// that is cache-line ping-pong or a lock. So levee's hot path writes to
// per-worker shards (one writer each, relaxed atomics, shards on separate
// cache lines) and the admin thread folds the shards into prometheus-cpp's
// data model at scrape time and serializes with its TextSerializer.
//
// A table has a fixed label space, declared once at start-up (every label
// value is known: listeners, routes, clusters, configured tenants, the
// closed set of reasons), so cardinality is bounded by construction and a
// cell is found by arithmetic, not hashing.
#pragma once

#include <prometheus/metric_family.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace levee::metrics {

/// One axis of a table's label space. Usually one label and its values;
/// an axis may carry several labels whose values vary together (cluster and
/// endpoint address, say), given as tuples.
struct Dimension {
  Dimension(std::string name, std::vector<std::string> vals) : names{std::move(name)} {
    for (auto& v : vals) values.push_back({std::move(v)});
  }
  Dimension(std::vector<std::string> label_names, std::vector<std::vector<std::string>> tuples)
      : names(std::move(label_names)), values(std::move(tuples)) {}
  std::vector<std::string> names;
  std::vector<std::vector<std::string>> values;
};

/// Relaxed single-writer counter cell, padded so shards never share a line.
class alignas(64) Shard {
 public:
  explicit Shard(std::size_t cells) : cells_(std::make_unique<std::atomic<std::uint64_t>[]>(cells)), n_(cells) {}
  void add(std::size_t i, std::uint64_t v) noexcept {
    // One writer per shard: a plain load+store is enough (no lock prefix).
    auto& c = cells_[i];
    c.store(c.load(std::memory_order_relaxed) + v, std::memory_order_relaxed);
  }
  std::uint64_t get(std::size_t i) const noexcept { return cells_[i].load(std::memory_order_relaxed); }
  std::size_t size() const noexcept { return n_; }

 private:
  std::unique_ptr<std::atomic<std::uint64_t>[]> cells_;
  std::size_t n_;
};

class CounterTable {
 public:
  CounterTable(std::string name, std::string help, std::vector<Dimension> dims, std::size_t shards);

  /// Mixed-radix index of one label combination (one index per dimension).
  std::size_t index(std::initializer_list<std::size_t> idx) const noexcept;
  void inc(std::size_t shard, std::size_t cell, std::uint64_t n = 1) noexcept {
    shards_[shard]->add(cell, n);
  }
  std::uint64_t value(std::size_t cell) const noexcept;
  prometheus::MetricFamily collect() const;
  std::size_t cells() const noexcept { return cells_; }
  const std::string& name() const noexcept { return name_; }
  /// The label values of a cell, one per label.
  std::vector<std::string> labels(std::size_t cell) const;
  /// Adds what `old` counted (a table of a replaced configuration, no
  /// longer written) to the cells with the same labels here, so counters
  /// carry on across a reload. Cells it has and this table lacks are
  /// dropped. Only one thread may absorb, and none may read `old` meanwhile.
  void absorb(const CounterTable& old);

 private:
  std::string name_, help_;
  std::vector<Dimension> dims_;
  std::size_t cells_;
  std::vector<std::unique_ptr<Shard>> shards_;  ///< one per writer, then one for what was absorbed
};

class HistogramTable {
 public:
  HistogramTable(std::string name, std::string help, std::vector<Dimension> dims,
                 std::vector<double> bounds, std::size_t shards);

  std::size_t index(std::initializer_list<std::size_t> idx) const noexcept;
  /// Records one observation; sums are kept in micro-units as integers so a
  /// shard stays single-writer lock-free.
  void observe(std::size_t shard, std::size_t series, double v) noexcept;
  prometheus::MetricFamily collect() const;
  std::uint64_t count(std::size_t series) const noexcept;
  const std::string& name() const noexcept { return name_; }
  /// As CounterTable::absorb (the bounds must be the same).
  void absorb(const HistogramTable& old);

 private:
  std::string name_, help_;
  std::vector<Dimension> dims_;
  std::vector<double> bounds_;
  std::size_t series_;
  std::size_t stride_;  // bounds + 1 (+Inf) + count + sum
  std::vector<std::unique_ptr<Shard>> shards_;
};

/// A gauge evaluated at scrape time: fn fills (labels, value) pairs.
struct GaugeSet {
  std::string name, help;
  std::function<void(std::vector<prometheus::ClientMetric>&)> fn;
  prometheus::MetricType type = prometheus::MetricType::Gauge;
};

/// Builds a ClientMetric with the given labels and gauge/counter value.
prometheus::ClientMetric sample(std::vector<std::pair<std::string, std::string>> labels, double v,
                                bool counter = false);

/// Exposition: counter tables, histogram tables and scrape-time gauges.
class Registry {
 public:
  void add(const CounterTable* t) { counters_.push_back(t); }
  void add(const HistogramTable* t) { histograms_.push_back(t); }
  void add(GaugeSet g) { gauges_.push_back(std::move(g)); }
  std::vector<prometheus::MetricFamily> collect() const;
  /// Prometheus text format 0.0.4.
  std::string serialize() const;
  /// Serializes this registry with others' counter and histogram tables
  /// (those of replaced configurations still being written): families of
  /// one name are merged, samples with the same labels summed.
  std::string serialize_with(const std::vector<const Registry*>& others) const;

 private:
  std::vector<const CounterTable*> counters_;
  std::vector<const HistogramTable*> histograms_;
  std::vector<GaugeSet> gauges_;
};

/// Standard latency buckets, seconds: 0.5 ms .. 30 s.
std::vector<double> latency_buckets();

}  // namespace levee::metrics

#include "metrics/metrics.hpp"

#include <prometheus/client_metric.h>
#include <prometheus/text_serializer.h>

#include <algorithm>
#include <cmath>
#include <unordered_map>

namespace levee::metrics {

namespace {

std::size_t product(const std::vector<Dimension>& dims) {
  std::size_t n = 1;
  for (const auto& d : dims) n *= std::max<std::size_t>(1, d.values.size());
  return n;
}

std::size_t mixed_index(const std::vector<Dimension>& dims, std::initializer_list<std::size_t> idx) {
  std::size_t i = 0;
  auto it = idx.begin();
  for (const auto& d : dims) {
    std::size_t v = it != idx.end() ? *it++ : 0;
    i = i * std::max<std::size_t>(1, d.values.size()) + std::min(v, std::max<std::size_t>(1, d.values.size()) - 1);
  }
  return i;
}

std::vector<prometheus::ClientMetric::Label> labels_of(const std::vector<Dimension>& dims,
                                                       std::size_t cell) {
  std::vector<std::size_t> pick(dims.size());
  for (std::size_t k = dims.size(); k-- > 0;) {
    std::size_t n = std::max<std::size_t>(1, dims[k].values.size());
    pick[k] = cell % n;
    cell /= n;
  }
  std::vector<prometheus::ClientMetric::Label> out;
  for (std::size_t k = 0; k < dims.size(); ++k) {
    const auto& d = dims[k];
    for (std::size_t j = 0; j < d.names.size(); ++j) {
      prometheus::ClientMetric::Label l;
      l.name = d.names[j];
      if (!d.values.empty() && j < d.values[pick[k]].size()) l.value = d.values[pick[k]][j];
      out.push_back(std::move(l));
    }
  }
  return out;
}

std::string label_key(const std::vector<prometheus::ClientMetric::Label>& ls) {
  std::string k;
  for (const auto& l : ls) {
    k += l.name;
    k += '\x1f';
    k += l.value;
    k += '\x1e';
  }
  return k;
}

/// Where each label combination of `dims` lives, by label_key.
std::unordered_map<std::string, std::size_t> cells_by_labels(const std::vector<Dimension>& dims, std::size_t n) {
  std::unordered_map<std::string, std::size_t> m;
  for (std::size_t c = 0; c < n; ++c) m.emplace(label_key(labels_of(dims, c)), c);
  return m;
}

}  // namespace

std::vector<std::string> CounterTable::labels(std::size_t cell) const {
  std::vector<std::string> out;
  for (auto& l : labels_of(dims_, cell)) out.push_back(std::move(l.value));
  return out;
}

void CounterTable::absorb(const CounterTable& old) {
  const auto here = cells_by_labels(dims_, cells_);
  for (std::size_t c = 0; c < old.cells_; ++c) {
    const std::uint64_t v = old.value(c);
    if (v == 0) continue;
    auto it = here.find(label_key(labels_of(old.dims_, c)));
    if (it != here.end()) shards_.back()->add(it->second, v);
  }
}

void HistogramTable::absorb(const HistogramTable& old) {
  if (old.bounds_ != bounds_) return;
  const auto here = cells_by_labels(dims_, series_);
  for (std::size_t series = 0; series < old.series_; ++series) {
    if (old.count(series) == 0) continue;
    auto it = here.find(label_key(labels_of(old.dims_, series)));
    if (it == here.end()) continue;
    for (std::size_t k = 0; k < stride_; ++k) {
      std::uint64_t v = 0;
      for (const auto& sh : old.shards_) v += sh->get(series * stride_ + k);
      shards_.back()->add(it->second * stride_ + k, v);
    }
  }
}

CounterTable::CounterTable(std::string name, std::string help, std::vector<Dimension> dims,
                           std::size_t shards)
    : name_(std::move(name)), help_(std::move(help)), dims_(std::move(dims)), cells_(product(dims_)) {
  for (std::size_t s = 0; s < std::max<std::size_t>(1, shards) + 1; ++s)
    shards_.push_back(std::make_unique<Shard>(cells_));
}

std::size_t CounterTable::index(std::initializer_list<std::size_t> idx) const noexcept {
  return mixed_index(dims_, idx);
}

std::uint64_t CounterTable::value(std::size_t cell) const noexcept {
  std::uint64_t v = 0;
  for (const auto& s : shards_) v += s->get(cell);
  return v;
}

prometheus::MetricFamily CounterTable::collect() const {
  prometheus::MetricFamily f;
  f.name = name_;
  f.help = help_;
  f.type = prometheus::MetricType::Counter;
  for (std::size_t c = 0; c < cells_; ++c) {
    std::uint64_t v = value(c);
    // Tables without labels always expose their one series; labelled ones
    // expose combinations that happened (the label space is bounded anyway).
    if (v == 0 && !dims_.empty()) continue;
    prometheus::ClientMetric m;
    m.label = labels_of(dims_, c);
    m.counter.value = static_cast<double>(v);
    f.metric.push_back(std::move(m));
  }
  return f;
}

HistogramTable::HistogramTable(std::string name, std::string help, std::vector<Dimension> dims,
                               std::vector<double> bounds, std::size_t shards)
    : name_(std::move(name)),
      help_(std::move(help)),
      dims_(std::move(dims)),
      bounds_(std::move(bounds)),
      series_(product(dims_)),
      stride_(bounds_.size() + 3) {
  for (std::size_t s = 0; s < std::max<std::size_t>(1, shards) + 1; ++s)
    shards_.push_back(std::make_unique<Shard>(series_ * stride_));
}

std::size_t HistogramTable::index(std::initializer_list<std::size_t> idx) const noexcept {
  return mixed_index(dims_, idx);
}

void HistogramTable::observe(std::size_t shard, std::size_t series, double v) noexcept {
  auto b = static_cast<std::size_t>(std::lower_bound(bounds_.begin(), bounds_.end(), v) - bounds_.begin());
  auto& s = *shards_[shard];
  std::size_t base = series * stride_;
  s.add(base + b, 1);
  s.add(base + bounds_.size() + 1, 1);
  double micros = std::isfinite(v) && v > 0 ? v * 1e6 : 0.0;
  s.add(base + bounds_.size() + 2, static_cast<std::uint64_t>(std::llround(micros)));
}

std::uint64_t HistogramTable::count(std::size_t series) const noexcept {
  std::uint64_t n = 0;
  for (const auto& s : shards_) n += s->get(series * stride_ + bounds_.size() + 1);
  return n;
}

prometheus::MetricFamily HistogramTable::collect() const {
  prometheus::MetricFamily f;
  f.name = name_;
  f.help = help_;
  f.type = prometheus::MetricType::Histogram;
  for (std::size_t series = 0; series < series_; ++series) {
    std::size_t base = series * stride_;
    std::uint64_t total = 0, sum = 0;
    std::vector<std::uint64_t> buckets(bounds_.size() + 1, 0);
    for (const auto& s : shards_) {
      for (std::size_t b = 0; b <= bounds_.size(); ++b) buckets[b] += s->get(base + b);
      total += s->get(base + bounds_.size() + 1);
      sum += s->get(base + bounds_.size() + 2);
    }
    if (total == 0 && !dims_.empty()) continue;
    prometheus::ClientMetric m;
    m.label = labels_of(dims_, series);
    m.histogram.sample_count = total;
    m.histogram.sample_sum = static_cast<double>(sum) / 1e6;
    std::uint64_t cum = 0;
    for (std::size_t b = 0; b <= bounds_.size(); ++b) {
      cum += buckets[b];
      prometheus::ClientMetric::Bucket bk;
      bk.cumulative_count = cum;
      bk.upper_bound = b < bounds_.size() ? bounds_[b] : std::numeric_limits<double>::infinity();
      m.histogram.bucket.push_back(bk);
    }
    f.metric.push_back(std::move(m));
  }
  return f;
}

prometheus::ClientMetric sample(std::vector<std::pair<std::string, std::string>> labels, double v,
                                bool counter) {
  prometheus::ClientMetric m;
  for (auto& [k, val] : labels) m.label.push_back({std::move(k), std::move(val)});
  if (counter) m.counter.value = v;
  else m.gauge.value = v;
  return m;
}

std::vector<prometheus::MetricFamily> Registry::collect() const {
  std::vector<prometheus::MetricFamily> out;
  for (auto* c : counters_) out.push_back(c->collect());
  for (auto* h : histograms_) out.push_back(h->collect());
  for (const auto& g : gauges_) {
    prometheus::MetricFamily f;
    f.name = g.name;
    f.help = g.help;
    f.type = g.type;
    g.fn(f.metric);
    out.push_back(std::move(f));
  }
  return out;
}

std::string Registry::serialize_with(const std::vector<const Registry*>& others) const {
  auto out = collect();
  if (others.empty()) {
    prometheus::TextSerializer ser;
    return ser.Serialize(out);
  }
  std::unordered_map<std::string, std::size_t> family;
  for (std::size_t i = 0; i < out.size(); ++i) family.emplace(out[i].name, i);
  for (const Registry* r : others) {
    for (auto& f : r->collect()) {
      auto it = family.find(f.name);
      if (it == family.end()) {
        family.emplace(f.name, out.size());
        out.push_back(std::move(f));
        continue;
      }
      auto& into = out[it->second];
      std::unordered_map<std::string, std::size_t> by_labels;
      for (std::size_t k = 0; k < into.metric.size(); ++k) by_labels.emplace(label_key(into.metric[k].label), k);
      for (auto& m : f.metric) {
        auto mk = by_labels.find(label_key(m.label));
        if (mk == by_labels.end()) {
          into.metric.push_back(std::move(m));
          continue;
        }
        auto& t = into.metric[mk->second];
        t.counter.value += m.counter.value;
        t.histogram.sample_count += m.histogram.sample_count;
        t.histogram.sample_sum += m.histogram.sample_sum;
        for (std::size_t b = 0; b < t.histogram.bucket.size() && b < m.histogram.bucket.size(); ++b)
          t.histogram.bucket[b].cumulative_count += m.histogram.bucket[b].cumulative_count;
      }
    }
  }
  prometheus::TextSerializer ser;
  return ser.Serialize(out);
}

std::string Registry::serialize() const {
  prometheus::TextSerializer s;
  return s.Serialize(collect());
}

std::vector<double> latency_buckets() {
  return {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30};
}

}  // namespace levee::metrics

#include "sim/output.hpp"

#include <cstdio>
#include <sstream>

namespace levee::sim {

void Histogram::merge(const Histogram& o) {
  if (o.total_ == 0) return;
  if (counts_.empty()) counts_.assign(o.counts_.size(), 0);
  for (std::size_t i = 0; i < counts_.size(); ++i) counts_[i] += o.counts_[i];
  total_ += o.total_;
  max_ = std::max(max_, o.max_);
  sum_ += o.sum_;
}

std::uint64_t Histogram::quantile(double q) const noexcept {
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

void ClassStats::merge(const ClassStats& o) {
  offered += o.offered;
  sent += o.sent;
  ok += o.ok;
  rejected += o.rejected;
  failed += o.failed;
  timeouts += o.timeouts;
  errors += o.errors;
  dropped += o.dropped;
  attempts += o.attempts;
  for (const auto& [k, v] : o.reasons) reasons[k] += v;
  ok_latency.merge(o.ok_latency);
  rej_latency.merge(o.rej_latency);
}

namespace {

// Numbers printed the same way on every platform: %.17g round-trips a double.
std::string num(double v) {
  char b[40];
  std::snprintf(b, sizeof b, "%.10g", v);
  return b;
}

std::string quoted(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out.push_back('\\');
    out.push_back(c);
  }
  out.push_back('"');
  return out;
}

std::string hist(const Histogram& h) {
  std::ostringstream s;
  s << "{\"count\":" << h.count() << ",\"mean_ms\":" << num(h.mean() / 1000.0)
    << ",\"p50_ms\":" << num(static_cast<double>(h.quantile(0.5)) / 1000.0)
    << ",\"p90_ms\":" << num(static_cast<double>(h.quantile(0.9)) / 1000.0)
    << ",\"p99_ms\":" << num(static_cast<double>(h.quantile(0.99)) / 1000.0)
    << ",\"p999_ms\":" << num(static_cast<double>(h.quantile(0.999)) / 1000.0)
    << ",\"max_ms\":" << num(static_cast<double>(h.max()) / 1000.0) << "}";
  return s.str();
}

std::string one(const ClassStats& c, double measured_s) {
  std::ostringstream s;
  s << "{\"name\":" << quoted(c.name) << ",\"offered\":" << c.offered << ",\"sent\":" << c.sent << ",\"ok\":" << c.ok
    << ",\"rejected\":" << c.rejected << ",\"failed\":" << c.failed << ",\"timeouts\":" << c.timeouts
    << ",\"errors\":" << c.errors << ",\"dropped\":" << c.dropped << ",\"attempts\":" << c.attempts
    << ",\"goodput\":" << num(measured_s > 0 ? static_cast<double>(c.ok) / measured_s : 0.0)
    << ",\"success_rate\":"
    << num(c.offered ? static_cast<double>(c.ok) / static_cast<double>(c.offered) : 0.0) << ",\"reasons\":{";
  bool first = true;
  for (const auto& [k, v] : c.reasons) {
    s << (first ? "" : ",") << quoted(k) << ":" << v;
    first = false;
  }
  s << "},\"ok_latency\":" << hist(c.ok_latency) << ",\"rejection_latency\":" << hist(c.rej_latency) << "}";
  return s.str();
}

template <typename T>
std::string list(const std::vector<T>& v) {
  std::ostringstream s;
  s << "[";
  for (std::size_t i = 0; i < v.size(); ++i) s << (i ? "," : "") << v[i];
  s << "]";
  return s.str();
}

}  // namespace

void Timeline::add_offered(TimePoint t) {
  if (interval <= Duration::zero()) return;
  const auto i = static_cast<std::size_t>(t.time_since_epoch() / interval);
  if (offered.size() <= i) offered.resize(i + 1, 0);
  ++offered[i];
}

void Timeline::add_ok(TimePoint t, double latency_ms) {
  if (interval <= Duration::zero()) return;
  const auto i = static_cast<std::size_t>(t.time_since_epoch() / interval);
  if (ok.size() <= i) {
    ok.resize(i + 1, 0);
    latency_sum_ms.resize(i + 1, 0.0);
    latency_max_ms.resize(i + 1, 0.0);
  }
  ++ok[i];
  latency_sum_ms[i] += latency_ms;
  latency_max_ms[i] = std::max(latency_max_ms[i], latency_ms);
}

void write_json(std::ostream& o, const RunInfo& info, const std::vector<ClassStats>& classes,
                const std::vector<NodeSeries>& nodes, const Timeline& timeline, bool wall) {
  ClassStats all;
  all.name = "total";
  for (const auto& c : classes) all.merge(c);
  o << "{\"target\":\"sim\",\"measured_seconds\":" << num(info.measured_seconds) << ",\"total\":"
    << one(all, info.measured_seconds) << ",\"classes\":[";
  for (std::size_t i = 0; i < classes.size(); ++i) o << (i ? "," : "") << one(classes[i], info.measured_seconds);
  o << "],\"front\":" << quoted(info.front) << ",\"step\":" << num(info.step) << ",\"capacity\":" << num(info.capacity)
    << ",\"sim\":{\"scenario\":" << quoted(info.scenario) << ",\"seed\":" << info.seed
    << ",\"simulated_seconds\":" << num(info.simulated_seconds) << ",\"warmup_seconds\":" << num(info.warmup_seconds)
    << ",\"requests\":" << info.requests << ",\"events\":" << info.events;
  if (!info.commit.empty()) o << ",\"commit\":" << quoted(info.commit);
  if (wall) {
    o << ",\"wall_seconds\":" << num(info.wall_seconds) << ",\"requests_per_wall_second\":"
      << num(info.wall_seconds > 0 ? static_cast<double>(info.requests) / info.wall_seconds : 0.0);
  }
  if (timeline.interval > Duration::zero()) {
    std::vector<std::string> mean, mx;
    for (std::size_t i = 0; i < timeline.ok.size(); ++i) {
      mean.push_back(num(timeline.ok[i] ? timeline.latency_sum_ms[i] / static_cast<double>(timeline.ok[i]) : 0.0));
      mx.push_back(num(timeline.latency_max_ms[i]));
    }
    o << ",\"timeline\":{\"interval_ms\":" << num(core::to_seconds(timeline.interval) * 1000)
      << ",\"offered\":" << list(timeline.offered) << ",\"ok\":" << list(timeline.ok) << ",\"mean_ms\":" << list(mean)
      << ",\"max_ms\":" << list(mx) << "}";
  }
  o << ",\"nodes\":[";
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    const auto& n = nodes[i];
    o << (i ? "," : "") << "{\"name\":" << quoted(n.name) << ",\"kind\":" << quoted(n.kind)
      << ",\"received\":" << list(n.received) << ",\"served\":" << list(n.served) << ",\"totals\":{";
    bool first = true;
    for (const auto& [k, v] : n.totals) {
      o << (first ? "" : ",") << quoted(k) << ":" << num(v);
      first = false;
    }
    o << "}}";
  }
  o << "]}}\n";
}

void write_csv(std::ostream& o, const std::vector<ClassStats>& classes, const std::vector<Second>& seconds) {
  o << "second,offered,sent,ok,rejected,failed,timeouts,errors,retries";
  for (const auto& c : classes) o << ",ok_" << c.name;
  o << "\n";
  for (std::size_t i = 0; i < seconds.size(); ++i) {
    const auto& s = seconds[i];
    o << i << "," << s.offered << "," << s.sent << "," << s.ok << "," << s.rejected << "," << s.failed << ","
      << s.timeouts << "," << s.errors << "," << s.retries;
    for (std::size_t k = 0; k < classes.size(); ++k) o << "," << (k < s.ok_by_class.size() ? s.ok_by_class[k] : 0);
    o << "\n";
  }
}

}  // namespace levee::sim

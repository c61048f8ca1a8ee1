// Open-loop arrival times. The generator sends each request at its
// scheduled time whether or not earlier ones have been answered, so a slow
// server cannot slow the generator down (no coordinated omission).
// Phases change the rate over time: "10s@500,20s@5000" is 10 s at 500/s
// then 20 s at 5000/s. The uniform draw is injected for tests.
#pragma once

#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace levee::loadtest {

struct Phase {
  double seconds;
  double rate;  ///< requests per second
};

/// Parses "10s@500,20s@5000" (durations in s or ms). nullopt on error.
inline std::optional<std::vector<Phase>> parse_phases(std::string_view s) {
  std::vector<Phase> out;
  while (!s.empty()) {
    auto comma = s.find(',');
    auto tok = s.substr(0, comma);
    auto at = tok.find('@');
    if (at == std::string_view::npos) return std::nullopt;
    std::string d(tok.substr(0, at)), r(tok.substr(at + 1));
    double scale = 1;
    if (d.size() > 2 && d.substr(d.size() - 2) == "ms") {
      scale = 0.001;
      d.resize(d.size() - 2);
    } else if (!d.empty() && d.back() == 's') {
      d.pop_back();
    }
    try {
      std::size_t used = 0;
      double secs = std::stod(d, &used) * scale;
      if (used != d.size()) return std::nullopt;
      double rate = std::stod(r, &used);
      if (used != r.size() || secs <= 0 || rate < 0) return std::nullopt;
      out.push_back({secs, rate});
    } catch (...) {
      return std::nullopt;
    }
    if (comma == std::string_view::npos) break;
    s.remove_prefix(comma + 1);
  }
  if (out.empty()) return std::nullopt;
  return out;
}

/// Successive arrival times in seconds from the start.
class Arrivals {
 public:
  Arrivals(std::vector<Phase> phases, bool poisson) : phases_(std::move(phases)), poisson_(poisson) {}

  double total_seconds() const {
    double t = 0;
    for (auto& p : phases_) t += p.seconds;
    return t;
  }

  /// The next arrival after the previous one; nullopt when the run is over.
  /// u: a uniform draw in [0,1) (used for Poisson gaps). Constant rate puts
  /// the first arrival of a phase on its start, then one every 1/rate.
  std::optional<double> next(double u) {
    while (phase_ < phases_.size()) {
      const Phase& p = phases_[phase_];
      const double end = phase_start_ + p.seconds;
      if (p.rate > 0) {
        // Constant rate: the k-th arrival at start + k/rate, computed, not
        // accumulated, so rounding cannot add an arrival at a phase's end.
        const double t = poisson_
            ? (started_ ? t_ : phase_start_) - std::log(std::max(1e-12, 1.0 - u)) / p.rate
            : phase_start_ + static_cast<double>(k_) / p.rate;
        if (t < end - 1e-9) {
          t_ = t;
          started_ = true;
          ++k_;
          return t_;
        }
      }
      phase_start_ = end;
      ++phase_;
      started_ = false;
      k_ = 0;
    }
    return std::nullopt;
  }

 private:
  std::vector<Phase> phases_;
  bool poisson_;
  std::size_t phase_ = 0;
  double phase_start_ = 0;
  double t_ = 0;
  std::uint64_t k_ = 0;
  bool started_ = false;
};

/// A class of requests in the mix.
struct RequestClass {
  std::string name;
  double weight = 1;
  std::string criticality;  ///< empty: no header
  std::string tenant;       ///< empty: no header
  double deadline_s = 1.0;
  std::string path = "/";
  std::string host = "loadtest";
  double service_ms = -1;  ///< x-test-service-ms, when >= 0
};

/// Parses "name=cp,weight=2,criticality=CRITICAL_PLUS,tenant=gmail,deadline=1s,path=/x".
inline std::optional<RequestClass> parse_class(std::string_view s) {
  RequestClass c;
  while (!s.empty()) {
    auto comma = s.find(',');
    auto tok = s.substr(0, comma);
    auto eq = tok.find('=');
    if (eq == std::string_view::npos) return std::nullopt;
    std::string k(tok.substr(0, eq)), v(tok.substr(eq + 1));
    try {
      if (k == "name") c.name = v;
      else if (k == "weight") c.weight = std::stod(v);
      else if (k == "criticality") c.criticality = v;
      else if (k == "tenant") c.tenant = v;
      else if (k == "path") c.path = v;
      else if (k == "host") c.host = v;
      else if (k == "service_ms") c.service_ms = std::stod(v);
      else if (k == "deadline") {
        double scale = 1;
        if (v.size() > 2 && v.substr(v.size() - 2) == "ms") {
          scale = 0.001;
          v.resize(v.size() - 2);
        } else if (!v.empty() && v.back() == 's') {
          v.pop_back();
        }
        c.deadline_s = std::stod(v) * scale;
      } else {
        return std::nullopt;
      }
    } catch (...) {
      return std::nullopt;
    }
    if (comma == std::string_view::npos) break;
    s.remove_prefix(comma + 1);
  }
  if (c.name.empty() || c.weight <= 0 || c.deadline_s <= 0) return std::nullopt;
  return c;
}

/// Picks a class index by weight with a uniform draw u in [0,1).
inline std::size_t pick_class(const std::vector<RequestClass>& classes, double u) {
  double total = 0;
  for (auto& c : classes) total += c.weight;
  double x = u * total;
  for (std::size_t i = 0; i < classes.size(); ++i) {
    if (x < classes[i].weight) return i;
    x -= classes[i].weight;
  }
  return classes.size() - 1;
}

}  // namespace levee::loadtest

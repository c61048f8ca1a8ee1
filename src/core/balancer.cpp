#include "core/balancer.hpp"

#include <algorithm>

namespace levee::core {

void WeightedSet::rebuild(std::span<const EndpointLoad> eps) {
  cumulative_.resize(eps.size());
  double acc = 0;
  for (std::size_t i = 0; i < eps.size(); ++i) {
    acc += eps[i].weight > 0 ? eps[i].weight : 0.0;
    cumulative_[i] = acc;
  }
  total_ = acc;
}

std::size_t WeightedSet::sample(double u) const noexcept {
  if (total_ <= 0 || cumulative_.empty()) return kNoEndpoint;
  double x = std::clamp(u, 0.0, 0.999999999) * total_;
  auto it = std::upper_bound(cumulative_.begin(), cumulative_.end(), x);
  if (it == cumulative_.end()) --it;
  return static_cast<std::size_t>(it - cumulative_.begin());
}

std::size_t pick_p2c(const WeightedSet& set, std::span<const EndpointLoad> eps, double u1,
                     double u2) noexcept {
  if (set.empty() || eps.empty()) return kNoEndpoint;
  auto k = pick_p2c_with(
      set, [&](std::size_t i) { return i < eps.size() ? eps[i].weight : 0.0; },
      [&](std::size_t i) { return i < eps.size() ? eps[i].outstanding : 0u; }, u1, u2);
  return k < eps.size() ? k : kNoEndpoint;
}

}  // namespace levee::core

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
  std::size_t a = set.sample(u1);
  if (a == kNoEndpoint || a >= eps.size()) return kNoEndpoint;
  std::size_t b = set.sample(u2);
  if (b == kNoEndpoint || b >= eps.size() || b == a) return a;
  // Compare outstanding/weight without dividing: (oa+1)/wa < (ob+1)/wb.
  double ca = (eps[a].outstanding + 1.0) * eps[b].weight;
  double cb = (eps[b].outstanding + 1.0) * eps[a].weight;
  if (ca < cb) return a;
  if (cb < ca) return b;
  // A tie keeps the first draw, which is already weighted-random: breaking
  // it by comparing u1 and u2 would favour lower indexes.
  return a;
}

}  // namespace levee::core

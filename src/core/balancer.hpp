// Endpoint choice: power of two choices, least outstanding requests, with
// weights. Two candidates are drawn with probability proportional to their
// effective weight (configured weight x slow-start multiplier, zero when
// unavailable). If they have as many requests outstanding, the first draw
// wins: at low load the share is then exactly proportional to the weights
// (a slow-start ramp is a linear ramp of traffic). Otherwise the one with
// fewer outstanding requests per unit of weight wins, which at high load
// avoids the herd behaviour of pure least-requests across many balancers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace levee::core {

struct EndpointLoad {
  double weight;              ///< effective weight; <= 0 means unavailable
  std::uint32_t outstanding;  ///< requests in flight to it
};

/// Cumulative weights for O(log n) proportional sampling; rebuilt when
/// weights change (health, slow-start ticks), not per request.
class WeightedSet {
 public:
  void rebuild(std::span<const EndpointLoad> eps);
  double total() const noexcept { return total_; }
  /// Index whose weight interval contains u * total(); u in [0,1).
  std::size_t sample(double u) const noexcept;
  bool empty() const noexcept { return total_ <= 0; }

 private:
  std::vector<double> cumulative_;
  double total_ = 0;
};

inline constexpr std::size_t kNoEndpoint = static_cast<std::size_t>(-1);

/// Picks an endpoint reading weights and outstanding counts through
/// accessors, so only the two candidates are looked at: O(log n) per pick.
template <typename Weight, typename Outstanding>
std::size_t pick_p2c_with(const WeightedSet& set, Weight&& weight, Outstanding&& outstanding,
                          double u1, double u2) noexcept {
  std::size_t a = set.sample(u1);
  if (a == kNoEndpoint) return kNoEndpoint;
  std::size_t b = set.sample(u2);
  if (b == kNoEndpoint || b == a) return a;
  const auto oa = outstanding(a);
  const auto ob = outstanding(b);
  // Equal load: keep the first draw, already weighted-random (comparing
  // per-weight costs here would make the share quadratic in the weight).
  if (oa == ob) return a;
  // Compare outstanding/weight without dividing: (oa+1)/wa < (ob+1)/wb.
  double ca = (static_cast<double>(oa) + 1.0) * weight(b);
  double cb = (static_cast<double>(ob) + 1.0) * weight(a);
  return cb < ca ? b : a;
}

/// Picks an endpoint; u1, u2 are independent uniform draws in [0,1).
/// `set` must have been rebuilt from the same weights; outstanding counts
/// are read live from `eps`. Returns kNoEndpoint when none is available.
std::size_t pick_p2c(const WeightedSet& set, std::span<const EndpointLoad> eps, double u1,
                     double u2) noexcept;

}  // namespace levee::core

// Endpoint choice: power of two choices, least outstanding requests, with
// weights. Two candidates are drawn with probability proportional to their
// effective weight (configured weight x slow-start multiplier, zero when
// unavailable); the one with fewer outstanding requests per unit of weight
// wins. At low load the share follows the weights (so a slow-start ramp is
// visible as a ramp); at high load the least-loaded candidate wins, which
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

/// Picks an endpoint; u1, u2 are independent uniform draws in [0,1).
/// `set` must have been rebuilt from the same weights; outstanding counts
/// are read live from `eps`. Returns kNoEndpoint when none is available.
std::size_t pick_p2c(const WeightedSet& set, std::span<const EndpointLoad> eps, double u1,
                     double u2) noexcept;

}  // namespace levee::core

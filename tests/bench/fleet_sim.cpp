// levee_fleet_sim: how far a fleet overshoots a tenant's quota, against
// sync interval and fleet size, in simulated time (the sync logic of
// core/fleet_quota against a modelled Redis that answers at once). The
// figures in docs/benchmarks.md ("Fleet quotas") come from this program.
#include <cstdio>

#include "../unit/core/fleet_loop.hpp"

int main() {
  using namespace std::chrono_literals;
  using levee::test::FleetLoop;
  std::printf("tenant at 5x its quota spread evenly; window 10 s, bucket 1 s, cost reported 20 ms after admission\n");
  std::printf("each cell: admitted / quota over 2..22 s; peak window sum / (quota x window) over 10..22 s; the bound\n\n");
  std::printf("| interval | 3 instances | 10 instances | 50 instances |\n|---|---|---|---|\n");
  for (auto iv : {50ms, 100ms, 200ms, 500ms, 1000ms, 2000ms}) {
    std::printf("| %lld ms |", static_cast<long long>(iv.count()));
    for (std::size_t n : {3, 10, 50}) {
      FleetLoop p;
      p.interval = iv;
      p.instances = n;
      auto r = levee::test::run_fleet_loop(p);
      std::printf(" %.3f; peak %.3f (bound %.3f) |", r.share, r.peak, levee::test::peak_bound(p));
    }
    std::printf("\n");
  }
  std::printf("\nwithout sharing (each instance alone): 3 instances %.3f\n", [] {
    FleetLoop p;
    p.synced = false;
    return levee::test::admitted_share(p);
  }());
  std::printf("\n| demand (x quota), 3 instances, 200 ms | share | peak (bound) |\n|---|---|---|\n");
  for (double d : {1.5, 2.0, 5.0, 10.0, 20.0}) {
    FleetLoop p;
    p.demand = d;
    auto r = levee::test::run_fleet_loop(p);
    std::printf("| %.1f | %.3f | %.3f (%.3f) |\n", d, r.share, r.peak, levee::test::peak_bound(p));
  }
  return 0;
}

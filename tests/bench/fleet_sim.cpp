// levee_fleet_sim: how far a fleet overshoots a tenant's quota, against
// sync interval and fleet size, in simulated time (the sync logic of
// core/fleet_quota against a modelled Redis that answers at once). The
// figures in docs/benchmarks.md ("Fleet quotas") come from this program.
#include <cstdio>

#include "../unit/core/fleet_loop.hpp"

int main() {
  using namespace std::chrono_literals;
  using levee::test::FleetLoop;
  std::printf("fleet admitted CPU / quota, tenant at 5x its quota spread evenly, measured 2..22 s\n");
  std::printf("window 10 s, bucket 1 s, cost reported 20 ms after admission\n\n");
  std::printf("| interval | 3 instances | 10 instances | 50 instances |\n|---|---|---|---|\n");
  for (auto iv : {50ms, 100ms, 200ms, 500ms, 1000ms, 2000ms}) {
    std::printf("| %lld ms |", static_cast<long long>(iv.count()));
    for (std::size_t n : {3, 10, 50}) {
      FleetLoop p;
      p.interval = iv;
      p.instances = n;
      std::printf(" %.3f |", levee::test::admitted_share(p));
    }
    std::printf("\n");
  }
  std::printf("\nwithout sharing (each instance alone): 3 instances %.3f\n", [] {
    FleetLoop p;
    p.synced = false;
    return levee::test::admitted_share(p);
  }());
  std::printf("\n| demand (x quota), 3 instances, 200 ms | share |\n|---|---|\n");
  for (double d : {1.5, 2.0, 5.0, 10.0, 20.0}) {
    FleetLoop p;
    p.demand = d;
    std::printf("| %.1f | %.3f |\n", d, levee::test::admitted_share(p));
  }
  return 0;
}

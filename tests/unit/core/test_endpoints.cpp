#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_floating_point.hpp>
#include <vector>

#include "core/balancer.hpp"
#include "core/health.hpp"
#include "core/slow_start.hpp"
#include "sim_time.hpp"

using namespace levee::core;
using namespace levee::test;
using Catch::Matchers::WithinAbs;

TEST_CASE("slow start ramps as (t/window)^(1/aggression) from a floor", "[slowstart]") {
  SlowStartConfig c{30s, 1.0, 10.0, false, 0s};
  CHECK(slow_start_multiplier(c, 0s) == 0.1);
  CHECK(slow_start_multiplier(c, 1s) == 0.1);  // floor
  CHECK_THAT(slow_start_multiplier(c, 15s), WithinAbs(0.5, 1e-12));
  CHECK(slow_start_multiplier(c, 30s) == 1.0);
  c.aggression = 2.0;
  CHECK_THAT(slow_start_multiplier(c, 7500ms), WithinAbs(0.5, 1e-12));  // sqrt(0.25)
  // Monotone non-decreasing.
  double prev = 0;
  for (int ms = 0; ms <= 30000; ms += 100) {
    double m = slow_start_multiplier(c, std::chrono::milliseconds(ms));
    REQUIRE(m >= prev);
    prev = m;
  }
  c.window = 0s;
  CHECK(slow_start_multiplier(c, 0s) == 1.0);
}

TEST_CASE("slow start restarts on return and finishes after its window", "[slowstart]") {
  SlowStart s({10s, 1.0, 10.0, false, 0s});
  SimClock clk;
  CHECK(s.multiplier() == 1.0);
  s.restart(clk.now);
  CHECK(s.active());
  clk.advance(5s);
  s.tick(clk.now);
  CHECK_THAT(s.multiplier(), WithinAbs(0.5, 1e-9));
  clk.advance(5s);
  s.tick(clk.now);
  CHECK_FALSE(s.active());
  CHECK(s.multiplier() == 1.0);
}

TEST_CASE("readiness-driven slow start holds while struggling and can end early", "[slowstart]") {
  SlowStart s({10s, 1.0, 10.0, true, 3s});
  SimClock clk;
  s.restart(clk.now);
  clk.advance(2s);
  s.tick(clk.now, true);
  double at2 = s.multiplier();
  for (int i = 0; i < 100; ++i) {  // 100 s of struggling: the ramp does not move
    clk.advance(1s);
    s.tick(clk.now, false);
  }
  CHECK(s.active());
  CHECK(s.multiplier() == at2);
  clk.advance(1s);
  s.tick(clk.now, true);
  clk.advance(2500ms);
  s.tick(clk.now, true);
  CHECK_FALSE(s.active());  // 3.5 s healthy >= early_exit 3 s, though elapsed is only 5.5 s
}

TEST_CASE("health hysteresis: separate thresholds to leave and return", "[health]") {
  HealthState h({2, 3});
  CHECK(h.healthy());
  CHECK(h.on_check(false) == HealthState::Change::None);
  CHECK(h.on_check(false) == HealthState::Change::None);
  CHECK(h.on_check(true) == HealthState::Change::None);  // resets the failure run
  CHECK(h.on_check(false) == HealthState::Change::None);
  CHECK(h.on_check(false) == HealthState::Change::None);
  CHECK(h.on_check(false) == HealthState::Change::BecameUnhealthy);
  CHECK(h.on_check(true) == HealthState::Change::None);
  CHECK(h.on_check(false) == HealthState::Change::None);
  CHECK(h.on_check(true) == HealthState::Change::None);
  CHECK(h.on_check(true) == HealthState::Change::BecameHealthy);
}

TEST_CASE("a flapping endpoint faster than the thresholds never changes state", "[health]") {
  HealthState h({2, 3});
  for (int i = 0; i < 1000; ++i) REQUIRE(h.on_check(i % 2 == 0) == HealthState::Change::None);
  CHECK(h.healthy());
}

TEST_CASE("outlier ejection time doubles per ejection, capped, and decays", "[outlier]") {
  OutlierConfig c;
  c.consecutive_failures = 3;
  c.base_ejection = 10s;
  c.max_ejection = 35s;
  c.decay = 60s;
  OutlierState o(c);
  SimClock clk;
  auto fail3 = [&] {
    bool e = false;
    for (int i = 0; i < 3; ++i) e = o.on_result(clk.now, false, true);
    return e;
  };
  CHECK(fail3());
  CHECK(o.ejected(clk.now));
  CHECK(o.ejected_until() - clk.now == 10s);
  clk.advance(10s);
  CHECK_FALSE(o.ejected(clk.now));
  CHECK(fail3());
  CHECK(o.ejected_until() - clk.now == 20s);
  clk.advance(20s);
  CHECK(fail3());
  CHECK(o.ejected_until() - clk.now == 35s);  // 40 s capped
  clk.advance(35s);
  // Healthy for two decay periods: back to the second ejection's length.
  clk.advance(120s);
  o.on_result(clk.now, true, true);
  CHECK(o.ejections() == 1);
  CHECK(fail3());
  CHECK(o.ejected_until() - clk.now == 20s);
}

TEST_CASE("outlier detection respects the cluster's ejection budget", "[outlier]") {
  OutlierState o({3, 10s, 300s, 60s, 50});
  SimClock clk;
  for (int i = 0; i < 10; ++i) CHECK_FALSE(o.on_result(clk.now, false, /*may_eject=*/false));
  CHECK_FALSE(o.ejected(clk.now));
  o.on_result(clk.now, true, true);  // a success resets the run
  CHECK_FALSE(o.on_result(clk.now, false, true));
}

TEST_CASE("p2c share follows weights at low load", "[balancer]") {
  std::vector<EndpointLoad> eps = {{1.0, 0}, {1.0, 0}, {0.25, 0}, {0.0, 0}};
  WeightedSet set;
  set.rebuild(eps);
  Rng rng(11);
  std::vector<int> hits(eps.size());
  const int n = 200000;
  for (int i = 0; i < n; ++i) {
    auto k = pick_p2c(set, eps, rng.u(), rng.u());
    REQUIRE(k < eps.size());
    ++hits[k];
  }
  CHECK(hits[3] == 0);  // unavailable
  // With equal outstanding counts the share is proportional to weight.
  CHECK_THAT(hits[2] / double(n), WithinAbs(0.25 / 2.25, 0.004));
  CHECK_THAT(hits[0] / double(n), WithinAbs(1.0 / 2.25, 0.005));
  CHECK_THAT(hits[0] / double(n), WithinAbs(hits[1] / double(n), 0.01));
}

TEST_CASE("a slow-start ramp of weight is a linear ramp of traffic at low load", "[balancer]") {
  Rng rng(21);
  for (double w : {0.1, 0.3, 0.5, 0.8, 1.0}) {
    std::vector<EndpointLoad> eps = {{1.0, 0}, {w, 0}};
    WeightedSet set;
    set.rebuild(eps);
    int hits = 0;
    const int n = 100000;
    for (int i = 0; i < n; ++i) hits += pick_p2c(set, eps, rng.u(), rng.u()) == 1;
    CHECK_THAT(hits / double(n), WithinAbs(w / (1.0 + w), 0.006));
  }
}

TEST_CASE("p2c prefers the candidate with fewer outstanding per weight", "[balancer]") {
  std::vector<EndpointLoad> eps = {{1.0, 10}, {1.0, 0}};
  WeightedSet set;
  set.rebuild(eps);
  // u1 -> endpoint 0, u2 -> endpoint 1: the idle one wins.
  CHECK(pick_p2c(set, eps, 0.1, 0.9) == 1);
  CHECK(pick_p2c(set, eps, 0.9, 0.1) == 1);
  std::vector<EndpointLoad> none = {{0.0, 0}};
  set.rebuild(none);
  CHECK(pick_p2c(set, none, 0.5, 0.5) == kNoEndpoint);
}

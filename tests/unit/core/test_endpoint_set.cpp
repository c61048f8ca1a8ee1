// The endpoint set: effective weights from health, ejection and slow start,
// and the share of the concurrency limit that is ready.
#include <catch2/catch_test_macros.hpp>

#include <vector>

#include "core/endpoints.hpp"
#include "sim_time.hpp"

using namespace levee::core;
using namespace levee::test;

TEST_CASE("with active checks endpoints start out and join when a check passes", "[endpoints]") {
  EndpointPolicy p;
  p.health_checks = true;
  std::vector<double> w{1.0, 2.0};
  EndpointSet s(p, w, TimePoint{});
  CHECK(s.effective_weight(0) == 0.0);
  CHECK(s.available() == 0);
  CHECK(s.set_healthy(1, true, at(1s)));
  CHECK_FALSE(s.set_healthy(1, true, at(1s)));  // no change, no transition
  CHECK(s.effective_weight(1) == 2.0);
  CHECK(s.health_transitions(1) == 1);
  CHECK(s.limit_scale() == 2.0 / 3.0);
}

TEST_CASE("an ejected endpoint leaves the set and returns ramping when its ejection ends", "[endpoints]") {
  EndpointPolicy p;
  p.outlier.consecutive_failures = 2;
  p.outlier.base_ejection = 10s;
  p.slow_start.window = 10s;
  std::vector<double> w{1.0, 1.0, 1.0};
  EndpointSet s(p, w, TimePoint{});
  s.refresh(at(20s));  // past the start-up ramp
  CHECK(s.effective_weight(0) == 1.0);
  CHECK_FALSE(s.on_result(0, at(21s), false));
  CHECK(s.on_result(0, at(21s), false));
  CHECK(s.ejected(0));
  CHECK(s.effective_weight(0) == 0.0);
  CHECK(s.limit_scale() == 2.0 / 3.0);
  s.refresh(at(31s) + 1ms);
  CHECK_FALSE(s.ejected(0));
  CHECK(s.ramping(0));
  CHECK(s.effective_weight(0) < 0.2);  // back at the ramp's floor
  // While others are warm, the limit follows the ramp.
  CHECK(s.limit_scale() < 2.2 / 3.0);
}

TEST_CASE("never more than max_ejected_pct of the set is ejected", "[endpoints]") {
  EndpointPolicy p;
  p.outlier.consecutive_failures = 1;
  p.outlier.max_ejected_pct = 50;
  std::vector<double> w{1.0, 1.0};
  EndpointSet s(p, w, TimePoint{});
  CHECK(s.on_result(0, at(1s), false));
  CHECK_FALSE(s.on_result(1, at(1s), false));
  CHECK(s.available() == 1);
}

TEST_CASE("at start-up every endpoint ramps, and the limit does not follow the ramp", "[endpoints]") {
  EndpointPolicy p;
  p.slow_start.window = 30s;
  std::vector<double> w{1.0, 1.0};
  EndpointSet s(p, w, TimePoint{});
  s.refresh(at(1s));
  CHECK(s.effective_weight(0) < 0.2);
  CHECK(s.limit_scale() == 1.0);  // nothing is warm: weights are equal, capacity is not cut
}

TEST_CASE("an operator drains and disables an endpoint; enabling it ramps it back", "[endpoints][admin]") {
  EndpointPolicy p;
  p.slow_start.window = 10s;
  std::vector<double> w{1.0, 1.0};
  EndpointSet s(p, w, TimePoint{});
  s.refresh(at(20s));
  REQUIRE(s.effective_weight(0) == 1.0);
  CHECK(s.set_admin(0, AdminState::Draining, at(21s)));
  CHECK_FALSE(s.set_admin(0, AdminState::Draining, at(21s)));
  CHECK(s.effective_weight(0) == 0.0);
  CHECK(s.available() == 1);
  CHECK(s.limit_scale() == 0.5);  // one of two backends is out: half the limit
  CHECK(s.set_admin(0, AdminState::Disabled, at(22s)));
  CHECK(s.effective_weight(0) == 0.0);
  // Health checks passing do not bring a disabled endpoint back.
  s.set_healthy(0, true, at(23s));
  s.refresh(at(24s));
  CHECK(s.effective_weight(0) == 0.0);
  CHECK(s.set_admin(0, AdminState::Enabled, at(30s)));
  CHECK(s.ramping(0));
  CHECK(s.effective_weight(0) > 0.0);
  CHECK(s.effective_weight(0) < 0.2);
  s.refresh(at(41s));
  CHECK(s.effective_weight(0) == 1.0);
}

TEST_CASE("an operator's weight replaces the configured one until it is cleared", "[endpoints][admin]") {
  EndpointSet s(EndpointPolicy{}, std::vector<double>{1.0, 1.0}, TimePoint{});
  s.set_weight_override(1, 3.0);
  CHECK(s.effective_weight(1) == 3.0);
  CHECK(s.base_weight(1) == 3.0);
  CHECK(s.weight(1) == 1.0);
  s.set_weight_override(1, std::nullopt);
  CHECK(s.effective_weight(1) == 1.0);
}

TEST_CASE("a rebuilt set adopts an endpoint's health, ejection, ramp and operator state", "[endpoints][reload]") {
  EndpointPolicy p;
  p.health_checks = true;
  p.outlier.consecutive_failures = 1;
  p.outlier.base_ejection = 30s;
  p.slow_start.window = 10s;
  EndpointSet old(p, std::vector<double>{1.0, 1.0, 1.0}, TimePoint{});
  for (std::size_t i = 0; i < 3; ++i) old.set_healthy(i, true, TimePoint{});
  old.refresh(at(20s));
  REQUIRE(old.on_result(0, at(21s), false));  // 0 ejected until 51 s
  old.set_healthy(1, false, at(21s));         // 1 unhealthy
  old.set_admin(2, AdminState::Draining, at(21s));
  old.set_weight_override(2, 5.0);

  // The new set has the three plus a new one, weights from the new file.
  p.slow_start.window = 20s;
  EndpointSet s(p, std::vector<double>{2.0, 2.0, 2.0, 2.0}, at(22s));
  for (std::size_t i = 0; i < 3; ++i) s.adopt(i, old.member(i));
  s.refresh(at(23s));
  CHECK(s.ejected(0));
  CHECK(s.ejections(0) == 1);
  CHECK_FALSE(s.healthy(1));
  CHECK(s.admin(2) == AdminState::Draining);
  CHECK(s.base_weight(2) == 5.0);
  CHECK(s.weight(2) == 2.0);
  CHECK(s.effective_weight(3) == 0.0);  // new, with checks on: out until a check passes
  s.set_healthy(3, true, at(23s));
  CHECK(s.ramping(3));
  s.refresh(at(52s));
  CHECK_FALSE(s.ejected(0));  // the ejection ended when it would have
}

TEST_CASE("adopted without active checks, an endpoint that was unhealthy counts as healthy", "[endpoints][reload]") {
  EndpointPolicy checks;
  checks.health_checks = true;
  EndpointSet old(checks, std::vector<double>{1.0}, TimePoint{});
  REQUIRE_FALSE(old.healthy(0));
  EndpointSet s(EndpointPolicy{}, std::vector<double>{1.0}, at(1s));
  s.adopt(0, old.member(0));
  CHECK(s.healthy(0));
  CHECK(s.effective_weight(0) > 0.0);
}

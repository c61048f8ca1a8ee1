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

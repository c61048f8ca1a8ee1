// Every gate that learns from the past returns to normal within a bounded
// time once the trigger is gone (the throttle's own bound is in
// test_gates.cpp). Each test states the bound it proves; docs/algorithms.md
// lists them.
#include <catch2/catch_test_macros.hpp>

#include <vector>

#include "core/endpoints.hpp"
#include "core/queue_gate.hpp"
#include "core/tenant_quota.hpp"
#include "pipeline_sim.hpp"
#include "sim_time.hpp"

using namespace levee::core;
using namespace levee::test;

TEST_CASE("a tenant that stops overspending is admitted again within the quota window", "[recovery][quota]") {
  // Bound: window + one bucket (10.5 s at the defaults), whatever was spent.
  TenantQuota q({}, {0.5, 1.0});
  SimClock clk;
  clk.advance(100s);
  for (int i = 0; i < 300; ++i) {  // 30 s at 5 CPU-s/s, five times its quota
    q.record(1, Criticality::Critical, 0.5, clk.now);
    clk.advance(100ms);
  }
  REQUIRE_FALSE(q.admit(1, Criticality::Critical, clk.now, true).admitted());
  const TimePoint stopped = clk.now;
  while (!q.admit(1, Criticality::Critical, clk.now, true).admitted()) clk.advance(10ms);
  CHECK(clk.now - stopped <= 10s + 500ms);
}

TEST_CASE("after a backend stall the drain estimate recovers within its window", "[recovery][queue]") {
  // Bound: one drain window (1 s) after the first permit comes back.
  QueueConfig qc;
  ConcurrencyLimitConfig lc;
  lc.static_limit = 10;
  QueueGate g(qc, lc);
  SimClock clk;
  std::vector<QueueGate::Wake> wakes;
  auto sink = [&](const QueueGate::Wake& w) { wakes.push_back(w); };
  auto busy = [&](int ms) {  // 10 permits of 10 ms each: 1000/s
    for (int t = 0; t < ms; ++t) {
      clk.advance(1ms);
      QueueGate::Sample s{10ms, 10, false};
      g.release(clk.now, &s, sink);
      g.arrive(clk.now, Criticality::Critical, TimePoint::max(), 0, sink);
    }
  };
  for (int i = 0; i < 10; ++i) g.arrive(clk.now, Criticality::Critical, TimePoint::max(), 0, sink);
  busy(2000);
  clk.advance(5s);  // the backend stalls: no permit comes back
  CHECK(g.drain_rate(clk.now) < 10);  // the silence is read for what it is
  const TimePoint back = clk.now;
  while (g.drain_rate(clk.now) < 900) busy(1);
  CHECK(clk.now - back <= 1s);
}

TEST_CASE("the adaptive limit returns to the backend's capacity after a slowdown ends", "[recovery][limit]") {
  // 10 workers: 10 ms per request, then 50 ms for 10 s, then 10 ms again.
  // Bound measured here and documented: back within 80% of its level in 10 s.
  AdmissionConfig c;
  c.limit.adaptive = true;
  Duration service = 10ms;
  PipelineSim sim(c, 10, [&](const PipelineSim::Job&) { return service; });
  auto pick = [](Rng&) { return std::pair{Criticality::Critical, kDefaultTenant}; };
  sim.run(2000, 30s, 1s, pick);
  const auto before = sim.adm.queue().limiter().base_limit();
  service = 50ms;
  sim.run(2000, 10s, 1s, pick);
  const auto during = sim.adm.queue().limiter().base_limit();
  service = 10ms;
  const TimePoint back = sim.clk.now;
  while (sim.adm.queue().limiter().base_limit() < 0.8 * before && sim.clk.now - back < 60s)
    sim.run(2000, 100ms, 1s, pick);
  INFO("limit " << before << " before, " << during << " while slow, back in " << to_seconds(sim.clk.now - back) << " s");
  CHECK(sim.clk.now - back <= 10s);
}

TEST_CASE("an ejected endpoint is back at full weight within ejection time plus its ramp", "[recovery][endpoints]") {
  // Bound: base_ejection x 2^(n-1), capped at max_ejection, plus the slow-start window.
  EndpointPolicy p;
  p.outlier.consecutive_failures = 5;
  p.outlier.base_ejection = 10s;
  p.slow_start.window = 30s;
  std::vector<double> w{1.0, 1.0, 1.0};
  EndpointSet s(p, w, TimePoint{});
  s.refresh(at(60s));
  TimePoint t = at(60s);
  for (int i = 0; i < 5; ++i) s.on_result(0, t, false);
  REQUIRE(s.ejected(0));
  const TimePoint ejected = t;
  while (s.effective_weight(0) < 1.0) {
    t += 100ms;
    s.refresh(t);
    s.on_result(0, t, true);  // healthy from now on
  }
  CHECK(t - ejected <= 10s + 30s + 200ms);
}

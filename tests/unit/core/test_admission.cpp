// The admission pipeline as a whole, in simulated time: gate 1 on its own,
// gates 2-4 composed, dry run per policy, and the ordering properties the
// product promises, against a modelled backend.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include <catch2/catch_test_macros.hpp>

#include "core/admission.hpp"
#include "pipeline_sim.hpp"
#include "sim_time.hpp"

using namespace levee::core;
using namespace levee::test;

namespace {

AdmissionConfig static_limit(std::uint32_t n) {
  AdmissionConfig c;
  c.limit.adaptive = false;
  c.limit.static_limit = n;
  return c;
}

struct Nothing {
  void operator()(const QueueGate::Wake&) const {}
};

}  // namespace

TEST_CASE("gate 1 sheds what is over its threshold, by mode", "[admission][screen]") {
  LoadLevels levels{bit(Criticality::Sheddable) | bit(Criticality::SheddablePlus), bit(Criticality::Critical)};
  SelfProtectionPolicy p;
  auto v = screen(p, levels, Criticality::Sheddable);
  CHECK(v.rejected());
  CHECK(v.gate == Gate::SelfProtection);
  CHECK(v.decision.reason == Reason::ExecutorOverload);
  CHECK(v.decision.status == 503);
  CHECK(screen(p, levels, Criticality::Critical).decision.reason == Reason::HostCpu);
  CHECK(screen(p, levels, Criticality::CriticalPlus).granted());
  p.mode = GateMode::DryRun;
  auto d = screen(p, levels, Criticality::Sheddable);
  CHECK(d.granted());
  CHECK(d.dry_run == Reason::ExecutorOverload);
  p.mode = GateMode::Off;
  CHECK(screen(p, levels, Criticality::Sheddable).dry_run == Reason::None);
}

TEST_CASE("the pipeline grants up to the limit, queues beyond it, and a release grants the next", "[admission]") {
  Admission a(static_limit(2));
  std::vector<QueueGate::Wake> wakes;
  auto sink = [&](const QueueGate::Wake& w) { wakes.push_back(w); };
  TimePoint t{};
  Arrival r{Criticality::Critical, kDefaultTenant, 1, t, t + 1s, 0.5, 1};
  auto v1 = a.admit(r, sink);
  r.cookie = 2;
  auto v2 = a.admit(r, sink);
  CHECK(v1.granted());
  CHECK(v1.permit);
  CHECK(v2.in_flight == 2);
  r.cookie = 3;
  auto v3 = a.admit(r, sink);
  REQUIRE(v3.queued());
  CHECK(v3.gate == Gate::Queue);
  QueueGate::Sample s{10ms, 2, false};
  a.release(t + 10ms, &s, sink);
  REQUIRE(wakes.size() == 1);
  CHECK(wakes[0].cookie == 3);
  CHECK(wakes[0].granted);
}

TEST_CASE("without a limit nothing is queued and no permit is held", "[admission]") {
  AdmissionConfig c;
  c.queue_mode = GateMode::Off;
  Admission a(c);
  for (int i = 0; i < 5000; ++i) {
    auto v = a.admit({Criticality::Sheddable, kDefaultTenant, 1, at(1ms * i), at(1ms * i + 1s), 0.5, 0}, Nothing{});
    REQUIRE(v.granted());
    REQUIRE_FALSE(v.permit);
  }
}

TEST_CASE("dry run counts what each gate would refuse and refuses nothing", "[admission][dryrun]") {
  // A backend that refuses everything: the throttle would shed.
  auto make = [](GateMode throttle, GateMode queue) {
    AdmissionConfig c = static_limit(1);
    c.throttle_mode = throttle;
    c.queue_mode = queue;
    c.retry_storm = false;
    return Admission(c);
  };
  for (auto mode : {GateMode::Enforce, GateMode::DryRun}) {
    Admission a = make(mode, GateMode::Off);
    TimePoint t{};
    for (int i = 0; i < 200; ++i) {
      t += 1ms;
      a.on_attempt({t, Criticality::Critical, kDefaultTenant, Answer::Overloaded, std::nullopt, std::nullopt});
    }
    auto v = a.admit({Criticality::Critical, kDefaultTenant, 1, t, t + 1s, 0.0, 0}, Nothing{});
    if (mode == GateMode::Enforce) {
      CHECK(v.rejected());
      CHECK(v.decision.reason == Reason::Throttle);
    } else {
      CHECK(v.granted());
      CHECK(v.dry_run == Reason::Throttle);
    }
  }
  // The queue gate in dry run: everything is granted, in flight stays truthful.
  Admission q = make(GateMode::Off, GateMode::DryRun);
  TimePoint t{};
  for (int i = 0; i < 5; ++i) {
    auto v = q.admit({Criticality::Critical, kDefaultTenant, 1, t, t + 1s, 0.5, 0}, Nothing{});
    REQUIRE(v.granted());
    CHECK(v.permit);
    if (i > 0) CHECK(v.dry_run == Reason::QueueWait);
  }
  CHECK(q.queue().in_flight() == 5);
  CHECK(q.queue().depth() == 0);
}

TEST_CASE("quota dry run counts over-quota requests and demotes nothing", "[admission][dryrun][quota]") {
  // Enforced, an over-quota request goes to the queue's lowest lane; in dry
  // run it keeps its own lane and the verdict says what would have happened.
  for (auto mode : {GateMode::Enforce, GateMode::DryRun}) {
    AdmissionConfig c = static_limit(1);
    c.quota_mode = mode;
    c.quota_when = QuotaWhen::Always;
    c.quotas = {0.5, 0.01};  // tenant 1 may use 10 ms of CPU per second
    Admission a(c);
    TimePoint t = at(1s);
    a.on_attempt({t, Criticality::Critical, 1, Answer::Accepted, 1.0, std::nullopt});  // 1 CPU-second: far over
    // Hold the one permit, so an over-quota request finds no spare capacity.
    auto hold = a.admit({Criticality::Critical, 0, 1, t, t + 1s, 0.5, 0}, Nothing{});
    REQUIRE(hold.granted());
    auto v = a.admit({Criticality::Critical, 1, 1, t, t + 1s, 0.5, 0}, Nothing{});
    REQUIRE(v.queued());
    if (mode == GateMode::Enforce) {
      CHECK(a.queue().depth_over_quota() == 1);
      CHECK(v.dry_run == Reason::None);
    } else {
      CHECK(a.queue().depth_over_quota() == 0);
      CHECK(a.queue().depth(Criticality::Critical) == 1);
      CHECK(v.dry_run == Reason::TenantQuota);
    }
  }
}

TEST_CASE("once a class is refused for lack of capacity no less critical one is admitted until a permit returns",
          "[admission][property]") {
  // 10 workers x 10 ms (1000/s) offered 5000/s, one tenant, every class
  // alike in deadline. Between two permit releases the queue only grows, so
  // a refusal of class c must hold for every class below c until the next
  // release: a less critical request admitted meanwhile would be an
  // inversion (it got what a more critical one was refused).
  for (const auto& [ms, workers] : std::vector<std::pair<int, std::uint32_t>>{{10, 10}, {50, 10}, {200, 100}}) {
    PipelineSim sim(static_limit(workers), static_cast<int>(workers),
                    [ms](const PipelineSim::Job&) { return Duration(std::chrono::milliseconds(ms)); });
    const double capacity = 1000.0 * workers / ms;
    const Duration gap = from_seconds(1.0 / (5 * capacity));
    std::uint64_t stretch = ~0ull;
    int refused_floor = -1;  // the least critical class refused in this stretch
    std::uint64_t checked = 0;
    TimePoint next{};
    while (next < at(20s)) {
      sim.advance_to(next);
      if (sim.releases != stretch) {
        stretch = sim.releases;
        refused_floor = -1;
      }
      const auto c = criticality_from_index(sim.rng.below(4));
      const auto v = sim.arrive(c, kDefaultTenant, 1s, sim.rng.u());
      const int ci = static_cast<int>(index(c));
      const bool capacity_refusal = v.rejected() && (v.decision.reason == Reason::QueueWait ||
                                                     v.decision.reason == Reason::QueueFull);
      if (capacity_refusal) refused_floor = refused_floor < 0 ? ci : std::min(refused_floor, ci);
      if (!v.rejected() && refused_floor >= 0) {
        INFO(ms << " ms x " << workers << ": " << to_string(c) << " admitted after "
                << to_string(criticality_from_index(static_cast<std::size_t>(refused_floor)))
                << " was refused, with no permit back in between");
        CHECK(ci >= refused_floor);
        ++checked;
      }
      next += gap;
    }
    CHECK(checked > 100);  // the property was exercised, not vacuous
    // And the capacity went to the top: CRITICAL_PLUS (a quarter of 5x, i.e.
    // 1.25x capacity) fills the backend; the lowest class gets nothing.
    CHECK(sim.share_served(Criticality::Sheddable) < 0.01);
    CHECK(sim.by_crit[index(Criticality::CriticalPlus)].served > 0.75 * 20 * capacity);
  }
}

TEST_CASE("CRITICAL_PLUS at half the capacity is served whole at any service time", "[admission][property]") {
  // The backend model at 5 to 200 ms per request and 1 to 100 workers, 10x
  // overload, CRITICAL_PLUS alone asking for half the capacity, 1 s
  // deadlines. CRITICAL_PLUS is never refused for lack of capacity and the
  // classes are served in order.
  for (int ms : {5, 20, 50, 200}) {
    for (std::uint32_t workers : {1u, 10u, 100u}) {
      PipelineSim sim(static_limit(workers), static_cast<int>(workers),
                      [ms](const PipelineSim::Job&) { return Duration(std::chrono::milliseconds(ms)); });
      const double capacity = 1000.0 * workers / ms;
      auto pick = [](Rng& r) {
        const double u = r.u();
        const Criticality c = u < 0.05 ? Criticality::CriticalPlus
                              : u < 0.2 ? Criticality::Critical
                              : u < 0.5 ? Criticality::SheddablePlus
                                        : Criticality::Sheddable;
        return std::pair{c, kDefaultTenant};
      };
      sim.run(10 * capacity, 3s, 1s, pick);  // warm-up: the first hold times are measured
      for (auto& k : sim.by_crit) k = {};
      // How long each CRITICAL_PLUS request waited for its permit.
      std::vector<double> waits;
      sim.on_outcome = [&waits](const PipelineSim::Job& j, bool) {
        if (j.crit == Criticality::CriticalPlus && j.sent != TimePoint{}) waits.push_back(to_seconds(j.sent - j.arrived));
      };
      sim.run(10 * capacity, ms >= 200 ? 60s : 20s, 1s, pick);
      sim.advance_to(sim.clk.now + 2s);  // what is in flight completes
      auto& cp = sim.by_crit[index(Criticality::CriticalPlus)];
      INFO(ms << " ms x " << workers);
      std::sort(waits.begin(), waits.end());
      REQUIRE(!waits.empty());
      const double mean_wait = std::accumulate(waits.begin(), waits.end(), 0.0) / static_cast<double>(waits.size());
      const double p99_wait = waits[waits.size() * 99 / 100];
      UNSCOPED_INFO("CRITICAL_PLUS wait: mean " << mean_wait * 1000 << " ms, p99 " << p99_wait * 1000 << " ms, service "
                                                << ms << " ms");
      // Its wait is the wait for the next free permit: with 10 or 100
      // workers a permit comes back within one service time, and 99% of
      // CRITICAL_PLUS requests wait less than that (measured 0.88-0.92 of
      // it; the simulation is seeded, so the figure does not vary). With
      // one worker a request also waits for the CRITICAL_PLUS ones queued
      // ahead of it: half the capacity into one server is an M/D/1 queue at
      // 0.5 behind the job in service, whose mean wait is half a service
      // time for the job in service plus half for the queue (measured
      // 0.73-1.02 of it).
      const double service = ms / 1000.0;
      if (workers >= 10) CHECK(p99_wait <= service);
      else CHECK(mean_wait <= 1.25 * service);
      CHECK(cp.reasons[Reason::QueueWait] == 0);
      CHECK(cp.reasons[Reason::QueueFull] == 0);
      CHECK(cp.reasons[Reason::QueueTimeout] == 0);
      // With one worker at 200 ms a few CRITICAL_PLUS requests meet their
      // own class queued ahead past their deadline: 2.5/s into a 5/s
      // server whose jobs take 200 ms (an M/D/1 queue at 0.5, behind a
      // lower-class job in service): P(3 or more ahead) is about 3%, and
      // 1 s - 200 ms of deadline holds 3. Those are deadline refusals, not
      // capacity; elsewhere there are none.
      const double deadline_share = ms == 200 && workers == 1 ? 0.05 : 0.001;
      CHECK(static_cast<double>(cp.reasons[Reason::Deadline]) <= deadline_share * static_cast<double>(cp.offered));
      CHECK(sim.share_served(Criticality::CriticalPlus) >= 1.0 - deadline_share - 0.001);
      // CRITICAL gets what is left: its share of the capacity, not less.
      const double crit_ideal = (capacity - 0.5 * capacity) / (1.5 * capacity);  // a third
      CHECK(sim.share_served(Criticality::Critical) > crit_ideal - 0.05);
      CHECK(sim.share_served(Criticality::SheddablePlus) < 0.03);
    }
  }
}

TEST_CASE("at 5x overload the pipeline keeps goodput at capacity and CRITICAL_PLUS whole", "[admission][sim]") {
  AdmissionConfig c;  // the shipped defaults: adaptive limit, 50 ms queue target
  c.limit.adaptive = true;
  PipelineSim sim(c, 10, [](const PipelineSim::Job&) { return Duration(10ms); });
  // 10% CRITICAL_PLUS (half the capacity), the rest spread below it.
  auto pick = [](Rng& r) {
    const double u = r.u();
    const Criticality crit = u < 0.1 ? Criticality::CriticalPlus
                             : u < 0.4 ? Criticality::Critical
                             : u < 0.7 ? Criticality::SheddablePlus
                                       : Criticality::Sheddable;
    return std::pair{crit, kDefaultTenant};
  };
  sim.run(5000, 5s, 1s, pick);  // warm-up: the adaptive limit finds the backend
  for (auto& k : sim.by_crit) k = {};
  sim.run(5000, 20s, 1s, pick);
  std::uint64_t served = 0;
  for (auto& k : sim.by_crit) served += k.served;
  const double goodput = static_cast<double>(served) / 20.0;
  INFO("goodput " << goodput << "/s");
  CHECK(goodput > 950);
  CHECK(sim.share_served(Criticality::CriticalPlus) > 0.999);
  // Refusals happen at arrival or in the queue, never after the backend worked.
  for (auto& k : sim.by_crit) CHECK(k.late == 0);
}

TEST_CASE("an over-quota tenant is demoted, not refused, while capacity is spare", "[admission][quota]") {
  AdmissionConfig c = static_limit(10);
  c.quota_when = QuotaWhen::Always;
  c.quotas = {1.0, 0.001};
  PipelineSim sim(c, 10, [](const PipelineSim::Job&) { return Duration(10ms); });
  sim.adm.on_attempt({sim.clk.now, Criticality::Critical, 1, Answer::Accepted, 10.0, std::nullopt});
  // 200/s of tenant 1 alone: far over its quota, far under capacity.
  sim.run(200, 5s, 1s, [](Rng&) { return std::pair{Criticality::Critical, TenantId{1}}; });
  sim.advance_to(sim.clk.now + 1s);  // the last ones complete
  CHECK(sim.by_tenant[1].rejected == 0);
  CHECK(sim.by_tenant[1].served == sim.by_tenant[1].offered);
}

namespace {
// Issue 19's case: four tenants at the same request rate, all CRITICAL, one
// of them (4) with requests ten times as costly (100 ms against 10 ms,
// reported as their cost), 1.3x the backend's capacity in CPU. The light
// tenants use 3 of its 10 CPU-s/s, within their quotas; the heavy one asks
// for 10 on a quota of 2.5. Before, the light tenants were refused now and
// then (queue_wait at arrival, queue_timeout in the queue) while the heavy
// tenant's long requests held the permits: the overload state, on which
// quotas depend, switched off between CoDel intervals, and ten heavy
// permits taken together left a 100 ms silence that read as a stalled
// backend. Measured after 5 s, once the quota window knows who is heavy.
void light_tenants_never_refused(ConcurrencyLimitConfig limit) {
  for (int target : {20, 50, 200}) {
    AdmissionConfig c;
    c.limit = limit;
    c.queue.target = std::chrono::milliseconds(target);
    c.quotas = {0.5, 2.5, 2.5, 2.5, 2.5};
    PipelineSim sim(c, 10, [](const PipelineSim::Job& j) { return j.tenant == 4 ? Duration(100ms) : Duration(10ms); });
    sim.report_cost = true;
    auto poisson = [&sim](Duration span) {  // 100/s per tenant
      const TimePoint end = sim.clk.now + span;
      TimePoint next = sim.clk.now;
      while (next < end) {
        sim.advance_to(next);
        sim.arrive(Criticality::Critical, static_cast<TenantId>(1 + sim.rng.below(4)), 1s, sim.rng.u());
        next += from_seconds(-std::log(1 - sim.rng.u()) / 400.0);
      }
      sim.advance_to(end);
    };
    poisson(5s);
    sim.by_tenant.clear();
    poisson(20s);
    sim.advance_to(sim.clk.now + 2s);
    INFO("queue.target " << target << " ms, " << (limit.adaptive ? "adaptive" : "static") << " limit");
    for (TenantId t : {1, 2, 3}) {
      CHECK(sim.by_tenant[t].rejected == 0);
      CHECK(sim.by_tenant[t].offered > 1800);
    }
    // Work-conserving: the heavy tenant gets the rest of the backend (7 of
    // its 10 CPU-s/s, 70% of what it asks), not only its quota.
    const auto& heavy = sim.by_tenant[4];
    CHECK(static_cast<double>(heavy.served) > 0.6 * static_cast<double>(heavy.offered));
  }
}
}  // namespace

TEST_CASE("a tenant within its quota is never refused while an over-quota tenant is served", "[admission][quota][property]") {
  ConcurrencyLimitConfig limit;
  limit.static_limit = 10;  // the backend's 10 workers
  light_tenants_never_refused(limit);
  // The adaptive limit too. Its probes halve the limit, and at half the
  // limit the queue serves the tenants within quota first: a probe sees
  // mostly 10 ms requests, a normal window the heavy tenant's 100 ms ones
  // too. Measured against one no-load latency for all (12-14 ms against a
  // mix near 27 ms) the difference read as a queue in the backend, and the
  // limit settled at 7-8 for 10 workers: the heavy tenant got half of what
  // it asked and a light tenant was refused 2-3 times in 1,800 at 20 ms.
  // Each lane is now measured against its own.
  limit.adaptive = true;
  light_tenants_never_refused(limit);
}

TEST_CASE("quotas bite while a signal says overloaded, whatever the hold", "[admission][quota]") {
  for (Duration hold : {Duration::zero(), Duration(1s)}) {
    AdmissionConfig c = static_limit(1);
    c.quotas = {1.0, 0.001};
    c.overload.hold = hold;
    Admission a(c);
    SimClock clk;
    // Tenant 1 has spent far over its quota, and the backend reports itself full.
    a.on_attempt({clk.now, Criticality::Critical, 1, Answer::Accepted, 10.0, 1.0});
    REQUIRE(a.overloaded(clk.now));
    Nothing sink;
    REQUIRE(a.admit({Criticality::Critical, 0, 1, clk.now, clk.now + 1s, 0.5, 1}, sink).granted());
    // Over quota while overloaded: demoted to the lane below SHEDDABLE.
    const auto v = a.admit({Criticality::Critical, 1, 1, clk.now, clk.now + 1s, 0.5, 2}, sink);
    INFO("hold " << to_seconds(hold) << " s");
    CHECK(v.queued());
    CHECK(a.queue().depth_over_quota() == 1);
  }
}

TEST_CASE("gate modes switch on a running pipeline, which keeps what it holds", "[admission][reload]") {
  Admission a(static_limit(1));
  std::vector<QueueGate::Wake> wakes;
  auto sink = [&](const QueueGate::Wake& w) { wakes.push_back(w); };
  TimePoint t{};
  Arrival r{Criticality::Critical, kDefaultTenant, 1, t, t + 1s, 0.5, 1};
  REQUIRE(a.admit(r, sink).permit);
  // The queue gate in dry run: over the limit is counted and let through.
  a.set_modes(GateMode::Enforce, GateMode::Enforce, GateMode::DryRun);
  auto v = a.admit(r, sink);
  CHECK(v.granted());
  CHECK(v.dry_run == Reason::QueueWait);
  CHECK(a.queue().in_flight() == 2);
  // Enforced again: the two permits out still count.
  a.set_modes(GateMode::Enforce, GateMode::Enforce, GateMode::Enforce);
  CHECK(a.admit(r, sink).queued());
}

TEST_CASE("same_shape ignores gate modes and nothing else", "[admission][reload]") {
  AdmissionConfig a = static_limit(8);
  AdmissionConfig b = a;
  b.throttle_mode = GateMode::DryRun;
  b.queue_mode = GateMode::Off;
  CHECK(same_shape(a, b));
  b.limit.static_limit = 9;
  CHECK_FALSE(same_shape(a, b));
  b = a;
  b.quotas = {1.0};
  CHECK_FALSE(same_shape(a, b));
  b = a;
  b.queue.target = 10ms;
  CHECK_FALSE(same_shape(a, b));
}

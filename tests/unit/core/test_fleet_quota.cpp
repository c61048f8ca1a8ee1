// Fleet quotas (issue 16): the sync logic against a modelled Redis, in
// simulated time. What is asserted here is what the Redis shell relies on.
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_floating_point.hpp>

#include <deque>
#include <memory>

#include "core/fleet_quota.hpp"
#include "core/tenant_quota.hpp"
#include "fleet_loop.hpp"
#include "redis_model.hpp"
#include "sim_time.hpp"

using namespace levee;
using namespace levee::core;
using namespace levee::test;
using Catch::Matchers::WithinAbs;
using Catch::Matchers::WithinRel;

namespace {

constexpr std::int64_t kEpochMs = 1'700'000'000'000;  // wall clock at simulated time zero
constexpr TenantId kHeavy = 1;

std::int64_t wall(TimePoint t) {
  return kEpochMs + std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count();
}

FleetLayout layout() { return FleetLayout{{"app"}, {"default", "heavy", "light"}}; }

/// One levee instance as far as quotas go: its gate and its sync.
struct Instance {
  Instance(std::string id, TimePoint now, std::vector<double> quotas = {0.5, 2.5, 10.0},
           std::uint32_t max_instances = 0, FleetQuotaConfig cfg = {})
      : gate({}, std::move(quotas)), fleet([&] {
          cfg.instance_id = id;
          cfg.max_instances = max_instances;
          return cfg;
        }(), layout(), now) {
    publish();  // what the shell does at start-up
  }
  /// One sync: local deltas in, pipeline to the model, view back to the gate.
  bool sync(RedisModel& redis, TimePoint now) {
    take(now);
    redis.now_ms = wall(now);
    auto replies = redis.exec(fleet.prepare(wall(now)));
    bool ok = fleet.complete(replies, now);
    publish();
    return ok;
  }
  void take(TimePoint now) {
    for (auto& d : deltas) d.fill(0.0);
    gate.take_recorded(deltas);
    fleet.add_local(0, deltas, wall(now));
  }
  void fail(TimePoint now, SyncError e = SyncError::Connect) {
    take(now);
    fleet.prepare(wall(now));
    fleet.fail(e, now);
    publish();
  }
  void publish() {
    fleet.view(0, buf);
    view = buf;               // what the gate now enforces, for the checks
    gate.set_fleet_view(buf);  // swaps: buf gets the previous view back
  }
  TenantQuota gate;
  FleetQuota fleet;
  TenantQuota::FleetView view, buf;
  std::vector<TenantQuota::PerCriticality> deltas;
};

/// n instances, each using `rate` CPU-s/s of CRITICAL traffic for `tenant`,
/// syncing every 200 ms, for `seconds`.
void run(std::vector<Instance*> fleet, RedisModel& redis, SimClock& clk, double seconds, double rate,
         TenantId tenant = kHeavy) {
  const int steps = static_cast<int>(seconds * 10);
  for (int i = 0; i < steps; ++i) {
    for (auto* in : fleet) in->gate.record(tenant, Criticality::Critical, rate * 0.1, clk.now);
    clk.advance(100ms);
    if (i % 2 == 1)
      for (auto* in : fleet) in->sync(redis, clk.now);
  }
}

}  // namespace

TEST_CASE("the gate adds the rest of the fleet's usage to its own", "[fleet]") {
  RedisModel redis;
  SimClock clk;
  Instance a("a", clk.now), b("b", clk.now), c("c", clk.now);
  run({&a, &b, &c}, redis, clk, 12, 1.0);
  for (auto* in : {&a, &b, &c}) {
    CHECK(in->fleet.state() == SyncState::Synced);
    CHECK(in->fleet.fleet_size() == 3);
    // Everyone's usage, and the others' part: 3 x 1 and 2 x 1 CPU-s/s.
    CHECK_THAT(in->fleet.fleet_usage(0, kHeavy), WithinRel(3.0, 0.1));
    CHECK_THAT(in->view.remote_at_least[kHeavy][index(Criticality::Critical)], WithinRel(2.0, 0.1));
    CHECK_THAT(in->view.remote_at_least[kHeavy][index(Criticality::Sheddable)], WithinRel(2.0, 0.1));
    CHECK(in->view.remote_at_least[kHeavy][index(Criticality::CriticalPlus)] == 0.0);
    // Alone it is at 1.0, under its quota of 2.5; the fleet is at 3.0, over it.
    CHECK_THAT(in->gate.usage(kHeavy, Criticality::Critical, clk.now), WithinRel(1.0, 0.1));
    auto d = in->gate.admit(kHeavy, Criticality::Critical, clk.now, true);
    CHECK(d.reason == Reason::TenantQuota);
    CHECK(d.retry_after >= 1s);
    // More critical traffic is still within quota, and so is another tenant.
    CHECK(in->gate.admit(kHeavy, Criticality::CriticalPlus, clk.now, true).admitted());
    CHECK(in->gate.admit(2, Criticality::Critical, clk.now, true).admitted());
  }
}

TEST_CASE("usage is attributed to the bucket it was recorded in", "[fleet]") {
  RedisModel redis;
  SimClock clk;
  clk.advance(300ms);  // not on a bucket boundary
  Instance a("a", clk.now);
  a.gate.record(kHeavy, Criticality::Sheddable, 0.25, clk.now);
  REQUIRE(a.sync(redis, clk.now));
  const auto b0 = a.fleet.bucket_of(wall(clk.now));
  clk.advance(1s);
  a.gate.record(kHeavy, Criticality::Sheddable, 0.5, clk.now);
  REQUIRE(a.sync(redis, clk.now));
  CHECK(redis.hash_field(a.fleet.bucket_key(b0), "app|heavy|SHEDDABLE") == 0.25);
  CHECK(redis.hash_field(a.fleet.bucket_key(b0 + 1), "app|heavy|SHEDDABLE") == 0.5);
  // Nothing new: nothing is sent again.
  REQUIRE(a.sync(redis, clk.now));
  CHECK(redis.hash_field(a.fleet.bucket_key(b0 + 1), "app|heavy|SHEDDABLE") == 0.5);
  // Every key of a sync carries the fleet's hash tag (one Cluster slot).
  for (const auto& cmd : a.fleet.prepare(wall(clk.now))) CHECK(cmd[1].find("{default}") != std::string::npos);
  a.fleet.fail(SyncError::Timeout, clk.now);
}

TEST_CASE("a restarted instance enforces the fleet's usage, not a fresh window", "[fleet]") {
  RedisModel redis;
  SimClock clk;
  Instance a("a", clk.now), b("b", clk.now), c("c", clk.now);
  run({&a, &b, &c}, redis, clk, 12, 1.0);
  // c restarts: a new process, a new id, an empty local window.
  Instance c2("c2", clk.now);
  CHECK(c2.fleet.state() == SyncState::Starting);
  // Before its first answer it enforces the conservative local limit.
  CHECK_FALSE(c2.view.synced);
  REQUIRE(c2.sync(redis, clk.now));
  CHECK(c2.fleet.state() == SyncState::Synced);
  // The usage of its previous life is part of the fleet's.
  CHECK_THAT(c2.view.remote_at_least[kHeavy][index(Criticality::Critical)], WithinRel(3.0, 0.1));
  CHECK(c2.gate.admit(kHeavy, Criticality::Critical, clk.now, true).reason == Reason::TenantQuota);
  // Without the fleet view the same instance would admit.
  TenantQuota alone({}, {0.5, 2.5, 10.0});
  CHECK(alone.admit(kHeavy, Criticality::Critical, clk.now, true).admitted());
}

TEST_CASE("fallback: quota divided by the fleet size, counted locally, then resumed", "[fleet]") {
  RedisModel redis;
  SimClock clk;
  Instance a("a", clk.now), b("b", clk.now), c("c", clk.now);
  // Only a carries heavy's traffic: 1 CPU-s/s, under the quota of 2.5.
  for (int i = 0; i < 100; ++i) {
    a.gate.record(kHeavy, Criticality::Critical, 0.1, clk.now);
    clk.advance(100ms);
    if (i % 2)
      for (auto* in : {&a, &b, &c}) in->sync(redis, clk.now);
  }
  REQUIRE(a.fleet.fleet_size() == 3);
  CHECK(a.gate.admit(kHeavy, Criticality::Critical, clk.now, true).admitted());
  const TimePoint down = clk.now;
  a.fail(clk.now, SyncError::Timeout);
  CHECK(a.fleet.state() == SyncState::Fallback);
  CHECK(a.fleet.errors(SyncError::Timeout) == 1);
  CHECK(a.view.fallback_divisor == 3.0);
  // 1.0 locally is over 2.5 / 3: shed, though the fleet as a whole is under.
  CHECK(a.gate.admit(kHeavy, Criticality::Critical, clk.now, true).reason == Reason::TenantQuota);
  // A tenant well under its share is untouched.
  CHECK(a.gate.admit(2, Criticality::Critical, clk.now, true).admitted());
  clk.advance(3s);
  a.fail(clk.now);
  CHECK(a.fleet.time_in_fallback(clk.now) == clk.now - down);
  REQUIRE(a.sync(redis, clk.now));
  CHECK(a.fleet.state() == SyncState::Synced);
  CHECK(a.gate.admit(kHeavy, Criticality::Critical, clk.now, true).admitted());
  clk.advance(10s);
  CHECK(a.fleet.time_in_fallback(clk.now) == 3s);  // stopped counting on resume

  SECTION("max_instances, when set, is the divisor") {
    Instance d("d", clk.now, {0.5, 2.5, 10.0}, 5);
    CHECK(d.view.fallback_divisor == 5.0);
    d.fail(clk.now);
    CHECK(d.view.fallback_divisor == 5.0);
  }
  SECTION("before any answer, the divisor is max_instances or 1") {
    Instance e("e", clk.now);
    e.fail(clk.now);
    CHECK(e.view.fallback_divisor == 1.0);
  }
}

TEST_CASE("a view that stops being refreshed stops being enforced", "[fleet]") {
  RedisModel redis;
  SimClock clk;
  Instance a("a", clk.now, {0.5, 2.5, 10.0}, 4), b("b", clk.now);
  run({&a, &b}, redis, clk, 5, 1.0);
  REQUIRE(a.gate.admit(kHeavy, Criticality::Critical, clk.now, true).admitted());  // 1 + 1 < 2.5
  // The sync thread stalls (no answer, no failure either): after 2 x
  // (interval + timeout) the gate uses quota / max_instances on its own.
  clk.advance(599ms);
  CHECK(a.gate.admit(kHeavy, Criticality::Critical, clk.now, true).admitted());
  clk.advance(2ms);
  CHECK(a.gate.admit(kHeavy, Criticality::Critical, clk.now, true).reason == Reason::TenantQuota);
}

TEST_CASE("an outage is not replayed: missed usage lands in its own buckets, old usage is dropped", "[fleet]") {
  RedisModel redis;
  SimClock clk;
  Instance a("a", clk.now);
  REQUIRE(a.sync(redis, clk.now));
  const auto first = a.fleet.bucket_of(wall(clk.now));

  SECTION("an outage shorter than the window") {
    for (int i = 0; i < 30; ++i) {  // 3 s at 1 CPU-s/s, syncs failing
      a.gate.record(kHeavy, Criticality::Critical, 0.1, clk.now);
      clk.advance(100ms);
      if (i % 2) a.fail(clk.now);
    }
    REQUIRE(a.sync(redis, clk.now));
    double total = 0;
    for (auto b = first; b <= a.fleet.bucket_of(wall(clk.now)); ++b) {
      double v = redis.hash_field(a.fleet.bucket_key(b), "app|heavy|CRITICAL");
      CHECK(v <= 1.0 + 1e-9);  // never more than a bucket's worth in one bucket
      total += v;
    }
    CHECK_THAT(total, WithinAbs(3.0, 1e-9));
  }
  SECTION("an outage longer than the window") {
    for (int i = 0; i < 200; ++i) {  // 20 s
      a.gate.record(kHeavy, Criticality::Critical, 0.1, clk.now);
      clk.advance(100ms);
      if (i % 2) a.fail(clk.now);
    }
    REQUIRE(a.sync(redis, clk.now));
    // The first buckets of the outage left the window: never written.
    CHECK_FALSE(redis.exists(a.fleet.bucket_key(first + 1)));
    CHECK_FALSE(redis.exists(a.fleet.bucket_key(first + 5)));
    // The fleet's usage is the window's (1 CPU-s/s), not the outage's total.
    CHECK_THAT(a.fleet.fleet_usage(0, kHeavy), WithinRel(1.0, 0.1));
  }
}

TEST_CASE("Redis restarted empty: every instance pushes its window again", "[fleet]") {
  RedisModel redis;
  SimClock clk;
  Instance a("a", clk.now), b("b", clk.now);
  run({&a, &b}, redis, clk, 12, 1.0);
  const double before = a.fleet.fleet_usage(0, kHeavy);
  REQUIRE_THAT(before, WithinRel(2.0, 0.1));
  redis.flush();
  // The first sync finds the new epoch, the next pushes the window again;
  // the one after that reads what the others pushed again.
  run({&a, &b}, redis, clk, 0.6, 1.0);
  CHECK(a.fleet.resets() == 1);
  CHECK(b.fleet.resets() == 1);
  CHECK_THAT(a.fleet.fleet_usage(0, kHeavy), WithinRel(before, 0.1));
  CHECK_THAT(a.view.remote_at_least[kHeavy][index(Criticality::Critical)], WithinRel(1.0, 0.1));
  // And nothing was counted twice.
  run({&a, &b}, redis, clk, 2, 1.0);
  CHECK_THAT(a.fleet.fleet_usage(0, kHeavy), WithinRel(2.0, 0.1));
}

TEST_CASE("unexpected answers: fallback, and nothing is counted twice", "[fleet]") {
  RedisModel redis;
  SimClock clk;
  Instance a("a", clk.now);
  REQUIRE(a.sync(redis, clk.now));
  a.gate.record(kHeavy, Criticality::Critical, 0.5, clk.now);
  clk.advance(200ms);
  a.take(clk.now);
  redis.now_ms = wall(clk.now);

  SECTION("too few replies") {
    auto r = redis.exec(a.fleet.prepare(wall(clk.now)));
    r.pop_back();
    CHECK_FALSE(a.fleet.complete(r, clk.now));
  }
  SECTION("a reply of the wrong type") {
    auto r = redis.exec(a.fleet.prepare(wall(clk.now)));
    r[2] = RedisReply::status_of("QUEUED");
    CHECK_FALSE(a.fleet.complete(r, clk.now));
  }
  SECTION("a number that is not one") {
    auto r = redis.exec(a.fleet.prepare(wall(clk.now)));
    auto& read = r.back();
    read.elements = {RedisReply::string_of("app|heavy|CRITICAL"), RedisReply::string_of("1.5banana")};
    CHECK_FALSE(a.fleet.complete(r, clk.now));
  }
  SECTION("a usage that is not finite (a hostile or broken Redis)") {
    // "inf" parses as a double: taken, it would hold the tenant over its
    // quota for as long as the bucket lives.
    auto r = redis.exec(a.fleet.prepare(wall(clk.now)));
    auto& read = r.back();
    read.elements = {RedisReply::string_of("app|heavy|CRITICAL"), RedisReply::string_of("inf")};
    CHECK_FALSE(a.fleet.complete(r, clk.now));
  }
  SECTION("an error reply (a script error, a key of the wrong type)") {
    redis.set_string(a.fleet.bucket_key(a.fleet.bucket_of(wall(clk.now))), "not a hash");
    auto r = redis.exec(a.fleet.prepare(wall(clk.now)));
    CHECK_FALSE(a.fleet.complete(r, clk.now));
    CHECK(a.fleet.state() == SyncState::Fallback);
    CHECK(a.fleet.errors(SyncError::Reply) == 1);
    return;  // the pushes could not land: nothing more to check here
  }
  CHECK(a.fleet.state() == SyncState::Fallback);
  CHECK(a.fleet.errors(SyncError::Reply) == 1);
  a.publish();
  CHECK_FALSE(a.view.synced);
  // The increment Redis acknowledged is not sent again by the next sync.
  clk.advance(200ms);
  REQUIRE(a.sync(redis, clk.now));
  double total = 0;
  for (auto b = a.fleet.bucket_of(wall(clk.now)) - 2; b <= a.fleet.bucket_of(wall(clk.now)); ++b)
    total += redis.hash_field(a.fleet.bucket_key(b), "app|heavy|CRITICAL");
  CHECK_THAT(total, WithinAbs(0.5, 1e-9));
}

TEST_CASE("fleet size follows the instances that sync", "[fleet]") {
  RedisModel redis;
  SimClock clk;
  Instance a("a", clk.now), b("b", clk.now), c("c", clk.now);
  run({&a, &b, &c}, redis, clk, 1, 0.1);
  REQUIRE(a.fleet.fleet_size() == 3);
  // c leaves cleanly: gone at once.
  redis.exec(c.fleet.prepare_leave(wall(clk.now)));
  run({&a, &b}, redis, clk, 0.2, 0.1);
  CHECK(a.fleet.fleet_size() == 2);
  // b dies: gone after member_ttl (2 s).
  run({&a}, redis, clk, 1.8, 0.1);
  CHECK(a.fleet.fleet_size() == 2);
  run({&a}, redis, clk, 0.6, 0.1);
  CHECK(a.fleet.fleet_size() == 1);
}

TEST_CASE("the wall clock stepping back does not lose the fleet", "[fleet]") {
  RedisModel redis;
  SimClock clk;
  Instance a("a", clk.now), b("b", clk.now);
  run({&a, &b}, redis, clk, 5, 1.0);
  // a's clock steps back a whole hour; its view restarts, nothing crashes,
  // and it still counts b's usage when the clock returns.
  a.take(clk.now);
  auto cmds = a.fleet.prepare(wall(clk.now) - 3'600'000);
  CHECK_FALSE(cmds.empty());
  a.fleet.fail(SyncError::Timeout, clk.now);
  run({&a, &b}, redis, clk, 2, 1.0);
  CHECK(a.fleet.state() == SyncState::Synced);
  CHECK(a.view.remote_at_least[kHeavy][index(Criticality::Critical)] > 0.5);
}

TEST_CASE("closed loop: a tenant at 5x its quota through 3 instances gets its quota", "[fleet][sim]") {
  FleetLoop loop;  // 3 instances, 200 ms syncs, 5x demand, measured from 2 s to 22 s
  // Without sharing, each instance admits the whole quota: 3x.
  loop.synced = false;
  CHECK_THAT(admitted_share(loop), WithinRel(3.0, 0.1));
  // Shared through Redis every 200 ms: within 10% (docs/algorithms.md has
  // the bound and levee_fleet_sim the sweep).
  loop.synced = true;
  const double shared = admitted_share(loop);
  CHECK_THAT(shared, WithinRel(1.0, 0.1));
  // What the integration test runs (test_fleet.py): 40 ms requests,
  // measured from 2 s to 12 s.
  FleetLoop it = loop;
  it.latency = 45ms;
  it.cost = 0.04;
  it.to = 12s;
  CHECK_THAT(admitted_share(it), WithinRel(1.0, 0.1));
  // A slower sync lets more through: staleness is what the fleet overshoots by.
  loop.interval = 2s;
  CHECK(admitted_share(loop) > shared);
}

TEST_CASE("closed loop: the peak window sum stays under the documented bound", "[fleet][sim]") {
  // docs/algorithms.md, "How far the fleet can overshoot"; levee_fleet_sim
  // prints the whole sweep.
  for (auto interval : {50ms, 200ms, 1000ms})
    for (std::size_t n : {3, 10, 50})
      for (double demand : {1.5, 5.0, 20.0}) {
        FleetLoop p;
        p.interval = interval;
        p.instances = n;
        p.demand = demand;
        p.to = 16s;
        auto r = run_fleet_loop(p);
        INFO("interval " << interval.count() << " ms, " << n << " instances, demand " << demand);
        CHECK(r.peak <= peak_bound(p));
      }
}

TEST_CASE("Redis restarted empty: the first answers are not enforced until the windows are back", "[fleet]") {
  RedisModel redis;
  SimClock clk;
  Instance a("a", clk.now), b("b", clk.now);
  run({&a, &b}, redis, clk, 12, 1.0);
  REQUIRE(a.fleet.state() == SyncState::Synced);
  redis.flush();
  // a sees the new epoch first; b has not pushed its window again, so the
  // totals are short of b's usage: a falls back instead of enforcing them.
  clk.advance(100ms);
  REQUIRE(a.sync(redis, clk.now));
  CHECK(a.fleet.resets() == 1);
  CHECK(a.fleet.state() == SyncState::Fallback);
  CHECK_FALSE(a.view.synced);
  CHECK(a.view.remote_at_least[kHeavy][index(Criticality::Critical)] < 0.5);
  // Two syncs of everyone's later (2 x (interval + timeout)), the data is whole.
  run({&a, &b}, redis, clk, 0.6, 1.0);
  CHECK(a.fleet.state() == SyncState::Synced);
  CHECK(b.fleet.state() == SyncState::Synced);
  CHECK_THAT(a.view.remote_at_least[kHeavy][index(Criticality::Critical)], WithinRel(1.0, 0.1));
}

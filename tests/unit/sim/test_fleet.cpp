// The simulator's fleet quota sync: the modelled Redis (sim/redis.hpp)
// answers the pipeline of the real sync logic (core::FleetQuota) as Redis
// does, and sim::FleetSync drives it as quota/fleet_sync.cpp does: instances
// converge on the same fleet totals, an outage puts them in Fallback, and
// recovery (also from a Redis that lost its data) returns them to Synced.
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_floating_point.hpp>

#include <memory>

#include "core/fleet_quota.hpp"
#include "core/tenant_quota.hpp"
#include "sim/fleet.hpp"
#include "sim/redis.hpp"
#include "sim_helpers.hpp"

using namespace levee;
using namespace std::chrono_literals;
using Catch::Matchers::WithinRel;
using core::RedisReply;
using core::SyncError;
using core::SyncState;
using T = core::RedisReply::Type;

namespace {

sim::TimePoint at(sim::Duration d) { return sim::TimePoint{} + d; }

constexpr core::TenantId kHeavy = 1;
constexpr auto kCrit = core::Criticality::Critical;

/// n instances' quota gates and syncs, each recording `rate[i]` CPU-s/s of
/// the heavy tenant's CRITICAL traffic every 10 ms.
struct Fleet final : sim::Handler {
  struct Node {
    core::TenantQuota gate{{}, {1.0, 5.0}};
    std::unique_ptr<sim::FleetSync> sync;
    double rate = 0;
  };
  sim::Engine e{1};
  sim::RedisModel redis;
  std::vector<std::unique_ptr<Node>> nodes;

  explicit Fleet(std::vector<double> rates, std::uint32_t max_instances = 0) {
    for (std::size_t i = 0; i < rates.size(); ++i) {
      auto n = std::make_unique<Node>();
      n->rate = rates[i];
      sim::FleetSyncConfig fc;
      fc.core.instance_id = "i" + std::to_string(i);
      fc.core.fleet = "test";
      fc.core.max_instances = max_instances;
      fc.latency = 1ms;
      Node* p = n.get();
      n->sync = std::make_unique<sim::FleetSync>(
          e, redis, fc, core::FleetLayout{{"app"}, {"default", "heavy"}},
          sim::FleetSync::Hooks{[p](std::size_t, auto& out) { p->gate.take_recorded(out); },
                                [p](std::size_t, auto& v) { p->gate.set_fleet_view(v); }});
      nodes.push_back(std::move(n));
    }
  }
  void start() {
    for (std::size_t i = 0; i < nodes.size(); ++i)
      nodes[i]->sync->start(static_cast<double>(i) / static_cast<double>(nodes.size()));
    e.after(10ms, this, 0);
  }
  void fire(std::uint32_t, std::uint32_t, std::uint32_t) override {
    for (auto& n : nodes) n->gate.record(kHeavy, kCrit, n->rate * 0.010, e.now());
    e.after(10ms, this, 0);
  }
  void run_to(sim::Duration d) { e.run_until(at(d)); }
  const core::FleetQuota& q(std::size_t i) const { return nodes[i]->sync->quota(); }
  /// What gate i would compare with the heavy tenant's quota: its own usage plus the view's remote part.
  bool admits(std::size_t i) { return nodes[i]->gate.admit(kHeavy, kCrit, e.now(), true).admitted(); }
};

}  // namespace

TEST_CASE("sim redis: the commands the sync sends, answered as Redis answers them") {
  sim::RedisModel r;
  const auto t0 = at(0s);
  // SET NX PX: set once, then nil; gone after its expiry.
  CHECK(r.exec_one(t0, {"SET", "k", "v", "NX", "PX", "100"}).str == "OK");
  CHECK(r.exec_one(t0, {"SET", "k", "w", "NX", "PX", "100"}).type == T::Nil);
  CHECK(r.exec_one(at(99ms), {"GET", "k"}).str == "v");
  CHECK(r.exec_one(at(100ms), {"GET", "k"}).type == T::Nil);
  CHECK(r.exec_one(t0, {"PEXPIRE", "nothing", "100"}).integer == 0);
  // HINCRBYFLOAT answers the new value as a string; HSETNX sets once.
  CHECK(r.exec_one(t0, {"HINCRBYFLOAT", "h", "f", "0.25"}).str == "0.25");
  CHECK(r.exec_one(t0, {"HINCRBYFLOAT", "h", "f", "0.5"}).str == "0.75");
  CHECK(r.exec_one(t0, {"HSETNX", "h", "g", "7"}).integer == 1);
  CHECK(r.exec_one(t0, {"HSETNX", "h", "g", "8"}).integer == 0);
  auto all = r.exec_one(t0, {"HGETALL", "h"});
  REQUIRE(all.type == T::Array);
  REQUIRE(all.elements.size() == 4);
  CHECK(all.elements[0].str == "f");
  CHECK(all.elements[1].str == "0.75");
  CHECK(all.elements[3].str == "7");
  CHECK(r.exec_one(t0, {"HGETALL", "none"}).elements.empty());
  // A sorted set of members by last sync; the exclusive bound keeps the equal score.
  CHECK(r.exec_one(t0, {"ZADD", "z", "100", "a"}).integer == 1);
  CHECK(r.exec_one(t0, {"ZADD", "z", "200", "a"}).integer == 0);
  CHECK(r.exec_one(t0, {"ZADD", "z", "150", "b"}).integer == 1);
  CHECK(r.exec_one(t0, {"ZREMRANGEBYSCORE", "z", "-inf", "(150"}).integer == 0);
  CHECK(r.exec_one(t0, {"ZREMRANGEBYSCORE", "z", "-inf", "(151"}).integer == 1);
  CHECK(r.exec_one(t0, {"ZCARD", "z"}).integer == 1);
  CHECK(r.exec_one(t0, {"ZREM", "z", "a"}).integer == 1);
  CHECK(r.exec_one(t0, {"ZCARD", "z"}).integer == 0);
  // Wrong types, bad numbers and unknown commands are errors, not answers.
  CHECK(r.exec_one(t0, {"HGETALL", "z2"}).type == T::Array);
  r.exec_one(t0, {"SET", "s", "x"});
  CHECK(r.exec_one(t0, {"HINCRBYFLOAT", "s", "f", "1"}).str.rfind("WRONGTYPE", 0) == 0);
  CHECK(r.exec_one(t0, {"ZCARD", "s"}).str.rfind("WRONGTYPE", 0) == 0);
  CHECK(r.exec_one(t0, {"HINCRBYFLOAT", "h", "f", "abc"}).type == T::Error);
  CHECK(r.exec_one(t0, {"PEXPIRE", "h", "x"}).type == T::Error);
  CHECK(r.exec_one(t0, {"EVAL", "return 1", "0"}).type == T::Error);
  CHECK(r.exec_one(t0, {"zcard", "z"}).type == T::Integer);  // names are case-insensitive
  CHECK(r.exec_one(t0, {"hgetall"}).str == "ERR wrong number of arguments for 'hgetall' command");
  // An expiry in the past deletes.
  CHECK(r.exec_one(t0, {"PEXPIRE", "h", "0"}).integer == 1);
  CHECK(r.exec_one(t0, {"HGETALL", "h"}).elements.empty());
}

TEST_CASE("sim fleet: the core's whole pipeline gets the answers it expects") {
  sim::RedisModel r;
  core::FleetQuotaConfig c;
  c.instance_id = "a";
  core::FleetQuota q(c, {{"app"}, {"default", "heavy"}}, at(0s));
  std::vector<core::TenantQuota::PerCriticality> d(2);
  d[kHeavy][core::index(kCrit)] = 0.5;
  q.add_local(0, d, sim::wall_ms(at(300ms)));
  std::vector<RedisReply> replies;
  const auto& cmds = q.prepare(sim::wall_ms(at(300ms)));
  r.exec(at(301ms), cmds, replies);
  REQUIRE(replies.size() == cmds.size());
  for (const auto& rep : replies) CHECK(rep.type != T::Error);
  REQUIRE(q.complete(replies, at(302ms)));
  CHECK(q.state() == SyncState::Synced);
  CHECK(q.fleet_size() == 1);
  CHECK(q.fleet_usage(0, kHeavy) > 0.0);
  CHECK(r.keys(at(302ms)) == 4);  // epoch, one usage bucket, since, members
}

TEST_CASE("sim fleet: two instances converge on the same fleet totals") {
  Fleet f({1.0, 3.0});
  f.start();
  f.run_to(12s);
  for (std::size_t i = 0; i < 2; ++i) {
    CHECK(f.q(i).state() == SyncState::Synced);
    CHECK(f.q(i).fleet_size() == 2);
    CHECK_THAT(f.q(i).fleet_usage(0, kHeavy), WithinRel(4.0, 0.05));  // 1 + 3 CPU-s/s
  }
  CHECK_THAT(f.q(0).fleet_usage(0, kHeavy), WithinRel(f.q(1).fleet_usage(0, kHeavy), 0.05));
  // 1 + 3 is under the quota of 5 on both; each one alone under it too.
  CHECK(f.admits(0));
  CHECK(f.admits(1));
  CHECK(f.q(0).errors(SyncError::Timeout) + f.q(0).errors(SyncError::Connect) + f.q(0).errors(SyncError::Reply) == 0);
  // O(tenants) per interval: every sync of 12 s is one pipeline of a bounded size.
  CHECK(f.nodes[0]->sync->syncs() >= 58);
  CHECK(f.nodes[0]->sync->commands_sent() < 40 * f.nodes[0]->sync->syncs());
}

TEST_CASE("sim fleet: the fleet's usage is enforced: over quota together, refused on both") {
  Fleet f({3.0, 3.0});  // 6 > 5, each alone 3 < 5
  f.start();
  f.run_to(12s);
  CHECK(f.q(0).state() == SyncState::Synced);
  CHECK(!f.admits(0));
  CHECK(!f.admits(1));
}

TEST_CASE("sim fleet: an outage puts both in Fallback; recovery returns them to Synced, without a reset") {
  for (auto mode : {sim::RedisModel::OutageMode::Hang, sim::RedisModel::OutageMode::Refuse}) {
    Fleet f({1.0, 1.5}, /*max_instances=*/2);
    f.redis.add_outage({at(10s), at(13s), mode, false});
    f.start();
    f.run_to(10s);
    CHECK(f.q(0).state() == SyncState::Synced);
    CHECK(f.q(1).state() == SyncState::Synced);
    // Within one interval plus the timeout (or connect timeout) both notice.
    f.run_to(10s + 200ms + 200ms + 10ms);
    CHECK(f.q(0).state() == SyncState::Fallback);
    CHECK(f.q(1).state() == SyncState::Fallback);
    // quota / max_instances = 2.5: the one at 1.5 is under it alone, still admitted.
    CHECK(f.admits(1));
    f.run_to(12s);
    const auto kind = mode == sim::RedisModel::OutageMode::Hang ? SyncError::Timeout : SyncError::Connect;
    CHECK(f.q(0).errors(kind) > 0);
    f.run_to(13s + 200ms + 200ms + 10ms);
    for (std::size_t i = 0; i < 2; ++i) {
      CHECK(f.q(i).state() == SyncState::Synced);
      CHECK(f.q(i).resets() == 0);  // the same Redis, with its data
      // The totals resume from the fleet's data, no burst and no gap.
      CHECK_THAT(f.q(i).fleet_usage(0, kHeavy), WithinRel(2.5, 0.08));
      const double fb = core::to_seconds(f.q(i).time_in_fallback(f.e.now()));
      CHECK(fb > 2.6);
      CHECK(fb < 3.5);
    }
  }
}

TEST_CASE("sim fleet: a Redis that restarts empty is noticed (new epoch) and refilled from the instances' windows") {
  Fleet f({1.0, 2.0});
  f.redis.add_outage({at(10s), at(11s), sim::RedisModel::OutageMode::Refuse, /*flush=*/true});
  f.start();
  f.run_to(10s);
  CHECK_THAT(f.q(0).fleet_usage(0, kHeavy), WithinRel(3.0, 0.05));
  f.run_to(12s);
  for (std::size_t i = 0; i < 2; ++i) {
    CHECK(f.q(i).state() == SyncState::Synced);
    CHECK(f.q(i).resets() == 1);
    CHECK_THAT(f.q(i).fleet_usage(0, kHeavy), WithinRel(3.0, 0.08));  // the window pushed again
  }
}

TEST_CASE("sim fleet: after Redis comes back empty, no burst and no stop (sim/scenarios/fleet.yaml)") {
  // 10 instances, the noisy tenant at 4x its quota of 2 CPU-s/s (200
  // requests/s of 10 ms); Redis refuses from 8 s and is back empty at 12 s.
  // Enforcing the first, partial totals of the new epoch let every instance
  // admit at once (about 300/s for a second) and then stop the tenant
  // entirely for a second (0/s) once the windows were pushed again.
  auto res = sim::load_scenario_file(std::string(LEVEE_SOURCE_DIR) + "/sim/scenarios/fleet.yaml");
  REQUIRE(res.scenario);
  test::Run r{std::make_unique<sim::Scenario>(std::move(*res.scenario)), nullptr};
  r.world = std::make_unique<sim::World>(*r.scenario);
  r.world->run();
  const auto& s = r.w().clients("load").seconds();
  REQUIRE(s.size() >= 20);
  for (int i = 12; i < 20; ++i) {
    INFO("second " << i);
    CHECK(s[i].ok_by_class[0] >= 60);   // never stopped (steady state: 140-300 a second)
    CHECK(s[i].ok_by_class[0] <= 280);  // never a burst past 1.4x the quota
  }
  for (const auto& in : r.w().instances("levee")) CHECK(in->fleet()->quota().resets() == 1);
}

TEST_CASE("sim fleet: a key of the wrong type is an unexpected answer: Fallback, and Synced once it is deleted") {
  Fleet f({1.0, 1.0});
  f.start();
  f.run_to(5s);
  // An operator's mistake: a string where the members set should be.
  f.redis.exec_one(f.e.now(), {"SET", "levee:{test}:members", "oops", "PX", "1000"});
  f.run_to(5s + 250ms);
  CHECK(f.q(0).state() == SyncState::Fallback);
  CHECK(f.q(0).errors(SyncError::Reply) > 0);
  // Its expiry does not save it: every sync's PEXPIRE of the members key
  // refreshes it, as a real Redis would. The operator deletes it.
  f.run_to(7s);
  CHECK(f.q(0).state() == SyncState::Fallback);
  f.redis.exec_one(f.e.now(), {"DEL", "levee:{test}:members"});
  f.run_to(7s + 250ms);
  CHECK(f.q(0).state() == SyncState::Synced);
  CHECK(f.q(1).state() == SyncState::Synced);
}

TEST_CASE("sim fleet: scenario keys: outages with mode and flush, and the same seed gives the same output") {
  const std::string s =
      "name: f\nseed: 3\n"
      "backends:\n  - {name: app, instances: 4, workers: 10, service: fixed:10ms}\n"
      "levee:\n  - name: levee\n    instances: 4\n    fleet: {interval: 100ms, latency: 1ms}\n" +
      test::levee_yaml("concurrency: {enabled: false}",
                       "tenants: {source: {header: x-tenant-id, trusted_networks: [127.0.0.0/8]}, "
                       "quotas: {default: 1, noisy: 0.5}, enforce: always}") +
      "redis: {outages: [{from: 2s, to: 3s, mode: refuse, flush: true}]}\n"
      "clients:\n  - {name: load, count: 20, target: levee, phases: 5s@400,\n"
      "     classes: [{name: n, weight: 1, tenant: noisy, criticality: CRITICAL, deadline: 1s}]}\n";
  test::Run a = test::run(s), b = test::run(s);
  CHECK(test::json_of(a) == test::json_of(b));
  const auto& in = a.w().instances("levee");
  REQUIRE(in.size() == 4);
  for (const auto& i : in) {
    REQUIRE(i->fleet() != nullptr);
    CHECK(i->fleet()->quota().resets() == 1);
    CHECK(i->fleet()->state() == SyncState::Synced);
    CHECK(i->fleet()->quota().fleet_size() == 4);
  }
  auto bad = sim::load_scenario_string(
      "levee:\n  - name: l\n    fleet: {interval: 100ms, timeout: 200ms}\n" + test::levee_yaml("") +
          "redis: {outages: [{from: 2s, to: 1s, mode: sulk}]}\n",
      "bad", ".");
  std::string all;
  for (const auto& e : bad.errors) all += e + "\n";
  CHECK(all.find("fleet.timeout") != std::string::npos);
  CHECK(all.find("mode: must be hang or refuse") != std::string::npos);
  CHECK(all.find("to: must not be before from") != std::string::npos);
}

// Small versions of the scenarios in docs/simulation.md, each asserting its
// qualitative result, so the claims stay true as the code changes. Fixed
// seeds; each runs in well under a few seconds.
#include <catch2/catch_test_macros.hpp>

#include <algorithm>
#include <cmath>

#include "sim_helpers.hpp"

using namespace levee;
using levee::test::levee_yaml;
using levee::test::run;
using levee::test::Run;

namespace {

// 1. Retry amplification with every backend down.
std::string amplification(const std::string& client_extra) {
  return "name: amp\nseed: 1\n"
         "backends:\n  - {name: app, workers: 10, service: fixed:5ms}\n"
         "clients:\n  - name: load\n    target: app\n    phases: 5s@500\n    retries: 2\n    backoff: 10ms\n"
         "    retry_connect_errors: true\n" +
         client_extra +
         "    classes: [{name: all, weight: 1, deadline: 2s}]\n"
         "events:\n  - {at: 0s, action: kill, target: app}\n";
}

std::string three_layers(bool levee) {
  const std::string naive = "retries: 2, backoff: 5ms, retry_connect_errors: true";
  std::string s = "name: stack\nseed: 1\nbackends:\n";
  s += "  - {name: svc_a, workers: 0, service: fixed:1ms, downstream: {target: " +
       std::string(levee ? "side_a, timeout: 5s" : "svc_b, timeout: 5s, " + naive) + "}}\n";
  s += "  - {name: svc_b, workers: 0, service: fixed:1ms, downstream: {target: " +
       std::string(levee ? "side_b, timeout: 5s" : "db, timeout: 5s, " + naive) + "}}\n";
  s += "  - {name: db, workers: 10, service: fixed:5ms}\n";
  if (levee) {
    s += "levee:\n";
    for (auto [name, target] : {std::pair{"edge", "svc_a"}, {"side_a", "svc_b"}, {"side_b", "db"}})
      s += std::string("  - name: ") + name + "\n    targets: {app: " + target + "}\n" + levee_yaml("concurrency: {limit: 100}");
  }
  s += "clients:\n  - name: load\n    target: " + std::string(levee ? "edge" : "svc_a") +
       "\n    phases: 3s@200\n    retries: 2\n    backoff: 5ms\n    retry_connect_errors: true\n"
       "    classes: [{name: all, weight: 1, deadline: 10s}]\n"
       "events:\n  - {at: 0s, action: kill, target: db}\n";
  return s;
}

}  // namespace

TEST_CASE("claim 1: all backends down, 3 attempts: ~3x load without a budget, < 1.2x with a 10% budget") {
  Run none = run(amplification(""));
  const double offered = static_cast<double>(none.w().clients("load").offered());
  const double amp = none.backend_calls("app") / offered;
  CHECK(amp > 2.95);
  CHECK(amp <= 3.0);
  Run budget = run(amplification("    retry_budget: {ratio: 0.1}\n"));
  const double amp_b = budget.backend_calls("app") / static_cast<double>(budget.w().clients("load").offered());
  CHECK(amp_b > 1.0);
  CHECK(amp_b < 1.2);
}

TEST_CASE("claim 1: three layers of retries: 27x without budgets; levee at each hop holds it under 2x") {
  Run naive = run(three_layers(false));
  const double offered = static_cast<double>(naive.w().clients("load").offered());
  CHECK(naive.backend_calls("db") / offered > 26.0);
  Run levee = run(three_layers(true));
  const double amp = levee.backend_calls("db") / static_cast<double>(levee.w().clients("load").offered());
  CHECK(amp < 2.0);
}

namespace {
// 2. Client-side throttling in front of a levee that refuses what its
// backend cannot take; the backend fails completely from 10 s to 20 s.
std::string throttled(double k) {
  return "name: throttle\nseed: 2\n"
         "backends:\n  - {name: app, workers: 10, service: fixed:10ms}\n"
         "levee:\n  - name: levee\n" +
         levee_yaml("concurrency: {limit: 10}, queue: {target: 50ms}, retry: {enabled: false}") +
         "clients:\n  - name: load\n    target: levee\n    phases: 50s@4000\n"
         "    throttle: {k: " + std::to_string(k) + ", window: 2s}\n"
         "    classes: [{name: all, weight: 1, criticality: CRITICAL, deadline: 1s}]\n"
         "events:\n  - {at: 10s, action: fail, target: app, rate: 1}\n  - {at: 20s, action: recover, target: app}\n";
}
double seconds_to_recover(Run& r, double level) {
  const auto& s = r.w().clients("load").seconds();
  for (std::size_t i = 20; i < s.size(); ++i)
    if (static_cast<double>(s[i].ok) >= level) return static_cast<double>(i) - 20.0;
  return 1e9;
}
}  // namespace

TEST_CASE("claim 2: client-side throttling, K = 2: the backend sees about twice what it accepts; it recovers at once") {
  Run k2 = run(throttled(2.0));
  Run k11 = run(throttled(1.1));
  auto ratio = [](Run& r) {
    const auto& in = r.w().instances("levee")[0]->received_by_second;
    const auto& ok = r.w().instances("levee")[0]->ok_by_second;
    double a = 0, b = 0;
    for (int i = 4; i < 10; ++i) {
      a += static_cast<double>(in[i]);
      b += static_cast<double>(ok[i]);
    }
    return a / b;
  };
  CHECK(ratio(k2) > 1.8);
  CHECK(ratio(k2) < 2.2);
  // K = 1.1 sends less than K = 2 but more than 1.1x: the levee in front
  // accepts in streaks while its queue drains, and a streak of 73 accepts
  // over 250 ms (the recovery run at K = 1.1) clears the client's window;
  // the fresh window throttles again within min_requests. Measured 1.28.
  CHECK(ratio(k11) > 1.0);
  CHECK(ratio(k11) < 1.35);
  CHECK(ratio(k11) < ratio(k2) - 0.4);
  // After a total outage the window holds only refusals; the cap (p <= 0.9)
  // keeps probes going and a run of accepted ones clears it: both K are
  // back within 2 s (before the recovery rule, K = 2 took ~10 windows and
  // K = 1.1 ~100, growing by a factor e every window / (K - 1)).
  CHECK(seconds_to_recover(k2, 900) <= 2);
  CHECK(seconds_to_recover(k11, 900) <= 2);
}

namespace {
// 3. A cascading failure: healthy at 1000/s, 1200/s for 5 s triggers a
// crash (its queue), clients retry, the restart is cold.
std::string cascade(bool levee) {
  std::string s = "name: cascade\nseed: 3\n"
                  "backends:\n  - {name: app, workers: 21, service: fixed:20ms, crash_queue: 400, restart_after: 1s,"
                  " warmup_seconds: 3, warmup_factor: 2}\n";
  if (levee) s += "levee:\n  - name: levee\n" + levee_yaml("concurrency: {limit: 21}, queue: {target: 50ms}");
  s += "clients:\n  - name: load\n    target: " + std::string(levee ? "levee" : "app") +
       "\n    phases: 5s@1000,5s@1200,12s@1000\n    retries: 3\n    backoff: 50ms\n    retry_connect_errors: true\n"
       "    classes: [{name: all, weight: 1, criticality: CRITICAL, deadline: 1s}]\n";
  return s;
}
}  // namespace

TEST_CASE("claim 3: cascading failure: without levee it does not recover when the trigger goes; with levee it never falls") {
  Run without = run(cascade(false));
  Run with = run(cascade(true));
  CHECK(without.w().backends("app")[0]->counters().crashes >= 2);
  CHECK(without.ok_rate("load", 15, 22) < 500);
  CHECK(with.w().backends("app")[0]->counters().crashes == 0);
  CHECK(with.ok_rate("load", 15, 22) >= 950);
  CHECK(with.ok_rate("load", 5, 10) >= 950);  // at capacity through the trigger
}

namespace {
// 4. A 12x spike of SHEDDABLE (prefetch) traffic.
std::string spike(bool levee) {
  std::string s = "name: spike\nseed: 4\nbackends:\n  - {name: app, workers: 10, service: fixed:10ms}\n";
  if (levee) s += "levee:\n  - name: levee\n" + levee_yaml("concurrency: {limit: 10}, queue: {target: 50ms}");
  const std::string t = levee ? "levee" : "app";
  s += "clients:\n"
       "  - name: steady\n    target: " + t + "\n    phases: 12s@500\n"
       "    classes:\n      - {name: cp, weight: 3, criticality: CRITICAL_PLUS, deadline: 1s}\n"
       "      - {name: c, weight: 2, criticality: CRITICAL, deadline: 1s}\n"
       "  - name: prefetch\n    target: " + t + "\n    phases: 4s@200,4s@2400,4s@200\n"
       "    classes: [{name: s, weight: 1, criticality: SHEDDABLE, deadline: 1s}]\n";
  return s;
}
}  // namespace

TEST_CASE("claim 4: a 12x spike of SHEDDABLE traffic: CRITICAL_PLUS keeps >= 99.9% with levee") {
  Run with = run(spike(true));
  Run without = run(spike(false));
  CHECK(Run::success(with.cls("steady", "cp")) >= 0.999);
  CHECK(Run::success(with.cls("steady", "c")) >= 0.999);
  CHECK(Run::success(without.cls("steady", "cp")) < 0.9);
}

namespace {
// 5. A 1.4x step in demand (0.8x to 1.12x of capacity), watched every 100 ms.
std::string step(bool levee, const std::string& cluster = "concurrency: {limit: 10}, queue: {target: 50ms}") {
  std::string s = "name: step\nseed: 5\ntimeline: 100ms\nbackends:\n  - {name: app, workers: 10, service: fixed:10ms}\n";
  if (levee) s += "levee:\n  - name: levee\n" + levee_yaml(cluster);
  s += "clients:\n  - name: load\n    target: " + std::string(levee ? "levee" : "app") +
       "\n    phases: 5s@800,10s@1120\n    classes: [{name: c, weight: 1, criticality: CRITICAL, deadline: 1s}]\n";
  return s;
}
/// Seconds after the step until goodput and mean latency, averaged over
/// half a second (5 intervals of 100 ms), stay within 10% and 2x of their
/// averages over the last 5 s.
double settle(Run& r) {
  const auto& t = r.w().clients("load").timeline;
  const std::size_t from = 50, last = std::min<std::size_t>(150, t.ok.size());
  auto avg = [&](std::size_t a, std::size_t b, double& g, double& l) {
    g = l = 0;
    for (std::size_t i = a; i < b; ++i) {
      g += static_cast<double>(t.ok[i]);
      l += t.latency_sum_ms[i];
    }
    l = g > 0 ? l / g : 0.0;
    g /= static_cast<double>(b - a);
  };
  double g = 0, l = 0;
  avg(last - 50, last, g, l);
  std::size_t settled = last;
  for (std::size_t i = last - 5 + 1; i-- > from;) {
    double wg = 0, wl = 0;
    avg(i, i + 5, wg, wl);
    if (std::abs(wg - g) > 0.1 * g || wl > 2 * l) break;
    settled = i;
  }
  return static_cast<double>(settled - from) / 10.0;
}
}  // namespace

TEST_CASE("claim 5: a 1.4x step: levee settles within a few control intervals, without collapse") {
  Run with = run(step(true));
  CHECK(settle(with) <= 1.0);
  CHECK(with.ok_rate("load", 6, 15) >= 950);
  Run adaptive = run(step(true, "queue: {target: 50ms}"));
  CHECK(settle(adaptive) <= 2.0);
  CHECK(adaptive.ok_rate("load", 6, 15) >= 900);
  Run without = run(step(false));
  CHECK(without.ok_rate("load", 13, 15) < 500);  // its queue outgrows the deadline
}

namespace {
// 6. Shared quotas: 10 instances, one tenant at 4x its fleet-wide quota.
std::string fleet(const std::string& fleet_cfg, const std::string& redis = "") {
  const std::string top =
      "tenants: {source: {header: x-tenant-id, trusted_networks: [127.0.0.0/8]}, "
      "quotas: {default: 1, noisy: 2.0, good: 100}, enforce: always}";
  std::string s = "name: fleet\nseed: 6\nbackends:\n  - {name: app, instances: 20, workers: 10, service: fixed:10ms}\n"
                  "levee:\n  - name: levee\n    instances: 10\n";
  if (!fleet_cfg.empty()) s += "    fleet: " + fleet_cfg + "\n";
  s += levee_yaml("concurrency: {enabled: false}", top);
  s += redis;
  s += "clients:\n  - name: load\n    count: 100\n    target: levee\n    phases: 16s@1200\n"
       "    classes:\n      - {name: noisy, weight: 2, tenant: noisy, criticality: CRITICAL, deadline: 1s}\n"
       "      - {name: good, weight: 1, tenant: good, criticality: CRITICAL, deadline: 1s}\n";
  return s;
}
double noisy_cpu(Run& r, int from, int to) {
  // 2xx of the noisy tenant per second x 10 ms each: CPU-seconds per second.
  const auto& s = r.w().clients("load").seconds();
  double n = 0;
  for (int i = from; i < to; ++i) n += static_cast<double>(s[i].ok_by_class[0]);
  return n / (to - from) * 0.010;
}
}  // namespace

TEST_CASE("claim 6: shared quotas: synced, a tenant's fleet-wide overshoot is small; in a Redis outage it falls back to quota / N") {
  Run local = run(fleet(""));
  Run synced = run(fleet("{interval: 200ms}"));
  Run outage = run(fleet("{interval: 200ms, max_instances: 10}", "redis: {outages: [{from: 6s, to: 14s}]}\n"));
  CHECK(noisy_cpu(local, 6, 14) > 6.0);    // each instance enforcing the whole quota alone
  CHECK(noisy_cpu(synced, 6, 14) < 2.4);   // <= 20% over
  CHECK(noisy_cpu(synced, 6, 14) > 1.6);
  CHECK(noisy_cpu(outage, 8, 14) < 2.2);   // quota / 10 on each of 10 instances
  CHECK(Run::success(synced.cls("load", "good")) >= 0.999);
}

TEST_CASE("claim 7: a fleet at 3x overload: CRITICAL_PLUS whole, goodput near capacity (adaptive limits)") {
  // With a static limit of exactly capacity / instances, goodput is ~82%:
  // ten balancers that each see only their own outstanding requests leave
  // some backends idle while others queue. The adaptive limit finds the
  // headroom itself (docs/simulation.md, claim 7).
  const std::string top =
      "tenants: {source: {header: x-tenant-id, trusted_networks: [127.0.0.0/8]}, quotas: {default: 1, a: 40, b: 40, c: 40}}";
  const std::string yaml =
      "name: fleet3x\nseed: 7\nwarmup: 1s\n"
      "backends:\n  - {name: app, instances: 30, workers: 4, service: fixed:10ms}\n"
      "levee:\n  - name: edge\n    instances: 10\n" +
      levee_yaml("queue: {target: 50ms}", top) +
      "clients:\n  - name: load\n    count: 500\n    target: edge\n    phases: 4s@36000\n"
      "    classes:\n"
      "      - {name: cp, weight: 10, tenant: a, criticality: CRITICAL_PLUS, deadline: 1s}\n"
      "      - {name: c, weight: 30, tenant: b, criticality: CRITICAL, deadline: 1s}\n"
      "      - {name: sp, weight: 30, tenant: c, criticality: SHEDDABLE_PLUS, deadline: 1s}\n"
      "      - {name: s, weight: 30, tenant: a, criticality: SHEDDABLE, deadline: 1s}\n";
  Run r = run(yaml);
  CHECK(Run::success(r.cls("load", "cp")) >= 0.999);
  CHECK(r.ok_rate("load", 1, 4) >= 0.9 * 12000);
  CHECK(Run::success(r.cls("load", "s")) < 0.05);
}

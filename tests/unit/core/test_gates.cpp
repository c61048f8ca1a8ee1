#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_floating_point.hpp>

#include <vector>

#include "core/executor_load.hpp"
#include "core/retry_budget.hpp"
#include "core/tenant_quota.hpp"
#include "core/throttle.hpp"
#include "sim_time.hpp"

using namespace levee::core;
using namespace levee::test;
using Catch::Matchers::WithinAbs;

TEST_CASE("executor load absorbs a short burst and rejects sustained load", "[executor]") {
  ExecutorLoad el;  // tau 1 s, thresholds .8/.9/1.0/1.2
  SimClock clk;
  for (int i = 0; i < 200; ++i) {  // 1 s idle at 5 ms samples
    el.sample(clk.now, 0, 2);
    clk.advance(5ms);
  }
  // A 50 ms fan-out burst with both workers busy and work queued behind them.
  for (int i = 0; i < 10; ++i) {
    el.sample(clk.now, 4, 2);
    clk.advance(5ms);
  }
  CHECK(el.load() < 0.2);
  CHECK_FALSE(el.over(Criticality::Sheddable));
  // Sustained: 3 s fully busy with a backlog of half a worker.
  for (int i = 0; i < 600; ++i) {
    el.sample(clk.now, 2.5, 2);
    clk.advance(5ms);
  }
  CHECK(el.load() > 1.1);
  CHECK(el.over(Criticality::Sheddable));
  CHECK_FALSE(el.over(Criticality::CriticalPlus));  // 1.2 not yet passed
}

TEST_CASE("executor thresholds never reject a higher criticality before a lower one", "[executor][property]") {
  ExecutorLoad el;
  SimClock clk;
  Rng rng(7);
  for (int i = 0; i < 5000; ++i) {
    el.sample(clk.now, rng.u() * 3.0, 2);
    clk.advance(5ms);
    for (std::size_t lo = 0; lo < kCriticalityCount; ++lo)
      for (std::size_t hi = lo + 1; hi < kCriticalityCount; ++hi)
        if (!el.over(criticality_from_index(lo))) REQUIRE_FALSE(el.over(criticality_from_index(hi)));
  }
}

TEST_CASE("throttle probability follows the SRE formula for every draw", "[throttle]") {
  AdaptiveThrottle t;  // K = 2
  SimClock clk;
  // 100 attempts, 20 accepted (u = 0.999 never rejects).
  for (int i = 0; i < 100; ++i) {
    REQUIRE(t.admit(Criticality::Critical, clk.now, 0.999).admitted());
    t.on_response(Criticality::Critical, clk.now, i < 20);
  }
  CHECK(t.requests(Criticality::Critical, clk.now) == 100);
  const double p = (100.0 - 2 * 20) / (100.0 + 1);
  CHECK_THAT(t.probability(Criticality::Critical, clk.now), WithinAbs(p, 1e-12));
  // Sweep the injected draw: rejected exactly when u < p.
  int rejected = 0;
  const int n = 1000;
  for (int i = 0; i < n; ++i) {
    AdaptiveThrottle copy = t;
    double u = (i + 0.5) / n;
    bool rej = !copy.admit(Criticality::Critical, clk.now, u).admitted();
    CHECK(rej == (u < p));
    rejected += rej;
  }
  CHECK(std::abs(rejected / double(n) - p) < 0.002);
  // Criticalities are tracked separately.
  CHECK(t.probability(Criticality::CriticalPlus, clk.now) == 0.0);
}

TEST_CASE("throttle stays quiet below its minimum volume", "[throttle]") {
  AdaptiveThrottle t;  // min_requests 20
  SimClock clk;
  for (int i = 0; i < 19; ++i) {
    REQUIRE(t.admit(Criticality::Critical, clk.now, 0.0).admitted());
    t.on_response(Criticality::Critical, clk.now, false);
  }
  CHECK(t.probability(Criticality::Critical, clk.now) == 0.0);
  t.on_response(Criticality::Critical, clk.now, false);
  // 20 attempts, no accepts: the formula says 20/21, the cap holds it at
  // 0.9 so that probes keep reaching the backend.
  CHECK(t.probability(Criticality::Critical, clk.now) == t.config().max_probability);
}

TEST_CASE("requests shed by later local gates do not count against the backend", "[throttle]") {
  AdaptiveThrottle t;
  SimClock clk;
  // 10000 arrivals pass the throttle, but only 1000 are attempted (the queue
  // gate shed the rest) and all of those are accepted.
  for (int i = 0; i < 10000; ++i) {
    REQUIRE(t.admit(Criticality::Sheddable, clk.now, 0.0).admitted());
    if (i % 10 == 0) t.on_response(Criticality::Sheddable, clk.now, true);
  }
  CHECK(t.probability(Criticality::Sheddable, clk.now) == 0.0);
}

TEST_CASE("throttle never rejects while the backend accepts", "[throttle]") {
  AdaptiveThrottle t;
  SimClock clk;
  for (int i = 0; i < 10000; ++i) {
    REQUIRE(t.admit(Criticality::Sheddable, clk.now, 0.0).admitted());
    t.on_response(Criticality::Sheddable, clk.now, true);
    clk.advance(1ms);
  }
}

TEST_CASE("throttle forgets after its window", "[throttle]") {
  AdaptiveThrottle t;
  SimClock clk;
  for (int i = 0; i < 1000; ++i) t.on_response(Criticality::Critical, clk.now, false);
  CHECK(t.probability(Criticality::Critical, clk.now) == t.config().max_probability);
  clk.advance(24h);
  CHECK(t.probability(Criticality::Critical, clk.now) == 0.0);
  CHECK(t.requests(Criticality::Critical, clk.now) == 0.0);
}

namespace {
/// `rate` requests a second (190 by default) through the throttle to a
/// backend that accepts what `accepts(t)` says; returns, per 100 ms, the
/// share of offered requests that reached the backend and the share it
/// accepted.
struct ThrottleRun {
  std::vector<double> reached, accepted;
  double sent = 0, ok = 0;
};
template <typename Accepts>
ThrottleRun drive(AdaptiveThrottle& t, SimClock& clk, Rng& rng, Duration span, Accepts&& accepts, int rate = 190) {
  ThrottleRun r;
  const Duration gap = Duration(1s) / rate;
  const int slice = rate / 10;
  int in_slice = 0, reached = 0, ok = 0;
  for (Duration d{}; d < span; d += gap) {
    clk.advance(gap);
    ++in_slice;
    if (t.admit(Criticality::Critical, clk.now, rng.u()).admitted()) {
      const bool a = accepts(clk.now, rng);
      t.on_response(Criticality::Critical, clk.now, a);
      ++reached;
      r.sent += 1;
      if (a) {
        ++ok;
        r.ok += 1;
      }
    }
    if (in_slice == slice) {
      r.reached.push_back(reached / static_cast<double>(slice));
      r.accepted.push_back(ok / static_cast<double>(slice));
      in_slice = reached = ok = 0;
    }
  }
  return r;
}

/// A backend that accepts `per_second` requests a second (a token bucket
/// of 5, refilled at random around that rate: real service times vary, and
/// a regular refill would make accepts regular too) and refuses the rest.
struct Capacity {
  double per_second;
  double budget = 0;
  TimePoint last{};
  bool operator()(TimePoint now, Rng& rng) {
    budget = std::min(5.0, budget + to_seconds(now - last) * per_second * 2.0 * rng.u());
    last = now;
    if (budget < 1.0) return false;
    budget -= 1.0;
    return true;
  }
};
}  // namespace

TEST_CASE("the throttle lets a recovered backend back in within a second", "[throttle][recovery]") {
  // The shipped defaults: K = 2, a 2-minute window. One backend answers 503
  // to everything for 20 s, then is healthy again (before the cap and the
  // recovery run, 93% was still refused 280 s later).
  // Twice: levee starting into the outage, and an outage after 5 s healthy.
  for (Duration healthy : {Duration::zero(), Duration(5s)}) {
    AdaptiveThrottle t;
    SimClock clk;
    Rng rng(11);
    drive(t, clk, rng, healthy, [](TimePoint, Rng&) { return true; });
    const auto down = drive(t, clk, rng, 20s, [](TimePoint, Rng&) { return false; });
    // Started into the outage, the window holds only refusals: the backend
    // gets the probes the cap lets through (10%), and little more. (After
    // 5 s healthy it keeps getting up to K x what it accepted in them.)
    double probes = 0;
    for (std::size_t i = down.reached.size() - 100; i < down.reached.size(); ++i) probes += down.reached[i] / 100;
    INFO("healthy first for " << to_seconds(healthy) << " s; probes " << probes);
    CHECK(probes > 0.06);
    if (healthy == Duration::zero()) CHECK(probes < 0.16);
    const auto up = drive(t, clk, rng, 10s, [](TimePoint, Rng&) { return true; });
    // Within 1 s of the recovery, every 100 ms slice after it passes >= 90%.
    std::size_t first_good = up.reached.size();
    for (std::size_t i = 0; i < up.reached.size(); ++i) {
      bool all_after = true;
      for (std::size_t j = i; j < up.reached.size(); ++j) all_after = all_after && up.reached[j] >= 0.9;
      if (all_after) {
        first_good = i;
        break;
      }
    }
    INFO("slices of 100 ms until >= 90% passes for good: " << first_good);
    CHECK(first_good <= 10);
  }
}

TEST_CASE("a backend that keeps refusing gets about K times what it accepts", "[throttle][recovery]") {
  // K = 2 lets about twice what the backend accepts reach it. At the low
  // rate the cap's probes (10% of 190/s) are the floor; at the high rate
  // the backend accepts half of what reaches it, so ten accepts in a row
  // happen about twice a second, and only the recovery span (250 ms of
  // them, ~250 in a row) keeps them from clearing the window.
  struct Case {
    int rate;
    double capacity;
  };
  for (Case c : {Case{190, 10}, Case{2000, 500}}) {
    AdaptiveThrottle t;
    SimClock clk;
    Rng rng(12);
    Capacity backend{c.capacity};
    drive(t, clk, rng, 150s, backend, c.rate);  // past a full window
    const auto r = drive(t, clk, rng, 60s, backend, c.rate);
    const double reached_per_s = r.sent / 60.0, accepted_per_s = r.ok / 60.0;
    WARN(c.rate << "/s offered: reached " << reached_per_s << "/s, accepted " << accepted_per_s << "/s");
    CHECK(accepted_per_s > 0.8 * c.capacity);
    const double floor = 0.1 * c.rate;
    CHECK(reached_per_s > 0.9 * floor);
    CHECK(reached_per_s < std::max(1.15 * 2.0 * accepted_per_s, 1.15 * floor));
    CHECK(reached_per_s > 0.85 * std::max(2.0 * accepted_per_s, floor));
  }
}

TEST_CASE("throttle rejections say don't retry", "[throttle]") {
  AdaptiveThrottle t;
  SimClock clk;
  for (int i = 0; i < 100; ++i) t.on_response(Criticality::Critical, clk.now, false);
  auto d = t.admit(Criticality::Critical, clk.now, 0.0);
  CHECK(d.reason == Reason::Throttle);
  CHECK(d.no_retry);
}

TEST_CASE("tenant quota is consumed from the most critical traffic down", "[quota]") {
  // tenant 1 quota 1.0 CPU-s/s
  TenantQuota q({}, {0.5, 1.0});
  SimClock clk;
  clk.advance(100s);
  // Over 10 s: CRITICAL_PLUS 0.6/s, SHEDDABLE 0.6/s.
  for (int i = 0; i < 100; ++i) {
    q.record(1, Criticality::CriticalPlus, 0.06, clk.now);
    q.record(1, Criticality::Sheddable, 0.06, clk.now);
    clk.advance(100ms);
  }
  CHECK_THAT(q.usage(1, Criticality::CriticalPlus, clk.now), WithinAbs(0.6, 0.05));
  CHECK_THAT(q.usage_total(1, clk.now), WithinAbs(1.2, 0.1));
  CHECK(q.admit(1, Criticality::CriticalPlus, clk.now, true).admitted());
  CHECK(q.admit(1, Criticality::Critical, clk.now, true).admitted());
  CHECK(q.admit(1, Criticality::SheddablePlus, clk.now, true).admitted());
  auto d = q.admit(1, Criticality::Sheddable, clk.now, true);
  CHECK(d.reason == Reason::TenantQuota);
  CHECK(d.status == 429);
  CHECK(d.retry_after >= 1s);
  // Not enforced when the cluster is not overloaded.
  CHECK(q.admit(1, Criticality::Sheddable, clk.now, false).admitted());
}

TEST_CASE("unknown tenants share the default quota", "[quota]") {
  TenantQuota q({}, {0.1, 5.0});
  SimClock clk;
  clk.advance(20s);
  for (int i = 0; i < 100; ++i) {
    q.record(42, Criticality::Critical, 0.05, clk.now);  // 42 is not configured
    clk.advance(100ms);
  }
  CHECK(q.quota(42) == 0.1);
  CHECK_FALSE(q.admit(kDefaultTenant, Criticality::Critical, clk.now, true).admitted());
  CHECK(q.admit(1, Criticality::Critical, clk.now, true).admitted());
}

TEST_CASE("quota retry-after says when usage decays under quota", "[quota]") {
  TenantQuota q({10s, 10, 1s}, {1.0});
  SimClock clk;
  clk.advance(50s);
  q.record(0, Criticality::Critical, 20.0, clk.now);  // a burst: 2 CPU-s/s over the window
  clk.advance(10ms);
  auto d = q.admit(0, Criticality::Critical, clk.now, true);
  REQUIRE_FALSE(d.admitted());
  // The only bucket expires ~10 s after it was filled.
  CHECK(d.retry_after > 9s);
  CHECK(d.retry_after <= 10s);
  clk.advance(d.retry_after);
  CHECK(q.admit(0, Criticality::Critical, clk.now, true).admitted());
}

TEST_CASE("quota properties hold on random traffic", "[quota][property]") {
  for (std::uint64_t seed = 1; seed <= 10; ++seed) {
    Rng rng(seed);
    TenantQuota q({}, {0.5, 1.0, 2.0, 4.0});
    SimClock clk;
    for (int step = 0; step < 3000; ++step) {
      clk.advance(std::chrono::milliseconds(rng.below(20)));
      TenantId t = static_cast<TenantId>(rng.below(4));
      auto c = criticality_from_index(rng.below(4));
      q.record(t, c, rng.u() * 0.05, clk.now);
      for (TenantId tt = 0; tt < 4; ++tt) {
        // A tenant under quota is never rejected by the quota gate.
        if (q.usage_total(tt, clk.now) < q.quota(tt))
          for (auto cc : kAllCriticalities) REQUIRE(q.admit(tt, cc, clk.now, true).admitted());
        // A higher criticality is never rejected while a lower one is admitted.
        for (std::size_t lo = 0; lo < kCriticalityCount; ++lo)
          for (std::size_t hi = lo + 1; hi < kCriticalityCount; ++hi)
            if (q.admit(tt, criticality_from_index(lo), clk.now, true).admitted())
              REQUIRE(q.admit(tt, criticality_from_index(hi), clk.now, true).admitted());
      }
    }
  }
}

TEST_CASE("retry budget allows about ratio of requests plus a floor", "[retry]") {
  RetryBudget b({0.1, 0.0, 3, 10s});
  SimClock clk;
  for (int i = 0; i < 1000; ++i) b.on_request(clk.now);
  int allowed = 0;
  for (int i = 0; i < 500; ++i) allowed += b.try_retry(clk.now, 2);
  CHECK(allowed == 100);
  CHECK_FALSE(b.try_retry(clk.now, 4));  // attempt cap
  clk.advance(1h);
  CHECK_FALSE(b.try_retry(clk.now, 2));  // no requests, no floor
  RetryBudget floor({0.1, 3.0, 3, 10s});
  int low = 0;
  for (int i = 0; i < 100; ++i) low += floor.try_retry(clk.now, 2);
  CHECK(low == 30);  // 3/s over 10 s lets low traffic retry
}

TEST_CASE("attempt histogram answers don't-retry when many arrivals are retries", "[retry]") {
  AttemptHistogram h;
  SimClock clk;
  for (int i = 0; i < 100; ++i) h.record(clk.now, 1);
  for (int i = 0; i < 10; ++i) h.record(clk.now, 2);
  CHECK(h.admit(clk.now, 2).admitted());  // 9% retries
  for (int i = 0; i < 40; ++i) h.record(clk.now, 3);
  CHECK_THAT(h.retry_share(clk.now), WithinAbs(50.0 / 150.0, 1e-9));
  auto d = h.admit(clk.now, 2);
  CHECK(d.reason == Reason::RetryStorm);
  CHECK(d.no_retry);
  CHECK(h.admit(clk.now, 1).admitted());  // first attempts are never turned away here
  clk.advance(1h);
  CHECK(h.admit(clk.now, 3).admitted());
}

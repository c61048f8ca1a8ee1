#include <catch2/catch_test_macros.hpp>
#include <map>
#include <vector>

#include "core/queue_gate.hpp"
#include "sim_time.hpp"

using namespace levee::core;
using namespace levee::test;
using Outcome = QueueGate::Outcome;

namespace {

struct Collect {
  std::vector<QueueGate::Wake> wakes;
  void operator()(const QueueGate::Wake& w) { wakes.push_back(w); }
};

ConcurrencyLimitConfig static_limit(std::uint32_t n) {
  ConcurrencyLimitConfig c;
  c.static_limit = n;
  return c;
}

const TimePoint kFar = TimePoint::max();

/// Ten requests of class c keep the gate's 10 permits busy, each taking
/// 10 ms: one completes and another arrives every millisecond (1000/s),
/// for `ms` milliseconds.
void keep_busy(QueueGate& g, SimClock& clk, Collect& s, Criticality c, int ms) {
  for (int i = 0; i < 10; ++i) g.arrive(clk.now, c, kFar, 0, s);
  for (int t = 0; t < ms; ++t) {
    clk.advance(1ms);
    QueueGate::Sample smp{10ms, 10, false};
    g.release(clk.now, &smp, s);
    g.arrive(clk.now, c, kFar, 0, s);
  }
}

}  // namespace

TEST_CASE("requests under the limit are granted at once", "[queue]") {
  QueueGate g({}, static_limit(2));
  SimClock clk;
  Collect s;
  CHECK(g.arrive(clk.now, Criticality::Critical, kFar, 1, s).outcome == Outcome::Granted);
  CHECK(g.arrive(clk.now, Criticality::Critical, kFar, 2, s).outcome == Outcome::Granted);
  CHECK(g.in_flight() == 2);
  auto a = g.arrive(clk.now, Criticality::Critical, kFar, 3, s);
  CHECK(a.outcome == Outcome::Queued);
  CHECK(g.depth() == 1);
  g.release(clk.now, nullptr, s);
  REQUIRE(s.wakes.size() == 1);
  CHECK(s.wakes[0].granted);
  CHECK(s.wakes[0].cookie == 3);
  CHECK(s.wakes[0].ticket == a.ticket);
  CHECK(g.in_flight() == 2);
}

TEST_CASE("the queue serves most critical first, FIFO within a class", "[queue]") {
  QueueGate g({}, static_limit(1));
  SimClock clk;
  Collect s;
  g.arrive(clk.now, Criticality::Critical, kFar, 0, s);
  g.arrive(clk.now, Criticality::Sheddable, kFar, 1, s);
  g.arrive(clk.now, Criticality::Critical, kFar, 2, s);
  g.arrive(clk.now, Criticality::CriticalPlus, kFar, 3, s);
  g.arrive(clk.now, Criticality::Critical, kFar, 4, s);
  std::vector<std::uint64_t> order;
  for (int i = 0; i < 4; ++i) {
    s.wakes.clear();
    g.release(clk.now, nullptr, s);
    REQUIRE(s.wakes.size() == 1);
    order.push_back(s.wakes[0].cookie);
  }
  CHECK(order == std::vector<std::uint64_t>{3, 2, 4, 1});
}

TEST_CASE("arrival is rejected at once when the estimated wait exceeds the target", "[queue]") {
  QueueConfig qc;
  qc.target = 50ms;
  QueueGate g(qc, static_limit(10));
  SimClock clk;
  Collect s;
  // Establish a drain rate of 1000/s: 10 in flight, each taking 10 ms.
  keep_busy(g, clk, s, Criticality::Sheddable, 200);
  CHECK(g.drain_rate(clk.now) > 800);
  CHECK(g.drain_rate(clk.now) < 1200);
  // Fill the queue: the budget is the target plus two hold times (the
  // permits' own cycle), 50 + 2 x 10 ms, so about 70 entries fit at 1000/s.
  int queued = 0;
  QueueGate::Arrival last{};
  for (int i = 0; i < 200; ++i) {
    last = g.arrive(clk.now, Criticality::Sheddable, kFar, 100 + i, s);
    if (last.outcome == Outcome::Queued) ++queued;
    else break;
  }
  CHECK(queued >= 55);
  CHECK(queued <= 85);
  CHECK(last.outcome == Outcome::Rejected);
  CHECK(last.decision.reason == Reason::QueueWait);
  CHECK(last.decision.retry_after > 30ms);
  // A CRITICAL_PLUS arrival only waits behind CRITICAL_PLUS: it still fits.
  CHECK(g.arrive(clk.now, Criticality::CriticalPlus, kFar, 999, s).outcome == Outcome::Queued);
  // A request whose own deadline is shorter than its wait is rejected too.
  auto d = g.arrive(clk.now, Criticality::Critical, clk.now + 300us, 1000, s);
  CHECK(d.outcome == Outcome::Rejected);
  CHECK(d.decision.reason == Reason::QueueWait);
  // One whose deadline already passed never queues.
  auto gone = g.arrive(clk.now, Criticality::CriticalPlus, clk.now, 1001, s);
  CHECK(gone.decision.reason == Reason::Deadline);
}

TEST_CASE("a silent backend shows in the estimate: cold start and hangs", "[queue]") {
  QueueConfig qc;
  qc.target = 10ms;
  QueueGate g(qc, static_limit(1));
  SimClock clk;
  Collect s;
  REQUIRE(g.arrive(clk.now, Criticality::Critical, kFar, 0, s).outcome == Outcome::Granted);
  clk.advance(1ms);
  // 1 ms into the first request nothing says it is slow: queue.
  CHECK(g.arrive(clk.now, Criticality::Critical, kFar, 1, s).outcome == Outcome::Queued);
  clk.advance(30ms);
  // 31 ms without a permit coming back: at most ~32/s, a wait of 31 ms.
  auto a = g.arrive(clk.now, Criticality::Critical, kFar, 2, s);
  CHECK(a.outcome == Outcome::Rejected);
  CHECK(a.decision.reason == Reason::QueueWait);
  CHECK(g.drain_rate(clk.now) < 40);
}

TEST_CASE("the silence rule waits out the longest answered hold, never a timeout's", "[queue]") {
  // Mixed costs: permits taken together come back together one hold time
  // later, and the gap between those bursts is no stall. But permits that
  // come back unanswered (at a hung backend's response timeout) must not
  // teach the rule that silences that long are normal.
  QueueGate g({}, static_limit(10));
  SimClock clk;
  Collect s;
  auto refill = [&] {
    while (g.in_flight() < 10) g.arrive(clk.now, Criticality::Critical, kFar, 0, s);
  };
  refill();
  for (int i = 0; i < 30; ++i) {  // ten 100 ms permits taken and returned together, answered
    clk.advance(100ms);
    for (int k = 0; k < 10; ++k) {
      QueueGate::Sample smp{100ms, 10, false};
      g.release(clk.now, &smp, s);
    }
    refill();
  }
  // 90 ms into the next burst's hold: nothing is wrong.
  clk.advance(90ms);
  CHECK(g.drain_rate(clk.now) > 90);
  clk.advance(10ms);
  for (int k = 0; k < 10; ++k) {
    QueueGate::Sample smp{100ms, 10, false};
    g.release(clk.now, &smp, s);
  }
  refill();
  // Now the backend hangs: one permit comes back every 300 ms, unanswered
  // (the response timeout), and is taken again at once.
  for (int i = 0; i < 30; ++i) {
    clk.advance(300ms);
    g.release(clk.now, nullptr, s);
    refill();
  }
  // 250 ms of silence, well past the longest answered hold (100 ms, and
  // decaying): the estimate says so.
  clk.advance(250ms);
  CHECK(g.drain_rate(clk.now) < 10 / 0.15);
}

TEST_CASE("a cold start in front of a backend slower than the target keeps the critical requests that fit", "[queue]") {
  // Found by the admission integration test at 8 workers x 100 ms with the
  // default 50 ms target: the first permits come back only after 100 ms,
  // all at once. Before, a CRITICAL_PLUS request queued in the first
  // moments was dropped at twice the target (queue_timeout), just before
  // the burst that would have served it, and one arriving later was
  // refused (queue_wait), though its class asks for a third of capacity.
  QueueConfig qc;
  qc.target = 50ms;
  QueueGate g(qc, static_limit(8));
  SimClock clk;
  Collect s;
  for (int i = 0; i < 8; ++i) REQUIRE(g.arrive(clk.now, Criticality::Sheddable, kFar, 0, s).outcome == Outcome::Granted);
  const TimePoint deadline = clk.now + 1s;
  std::vector<QueueGate::Ticket> critical;
  int sheddable_refused = 0;
  // 30/s of CRITICAL_PLUS and 570/s of SHEDDABLE for the first 99 ms.
  for (int ms = 1; ms < 100; ++ms) {
    clk.advance(1ms);
    if (ms % 33 == 1) {
      auto a = g.arrive(clk.now, Criticality::CriticalPlus, deadline, 100 + ms, s);
      CHECK(a.outcome == Outcome::Queued);
      critical.push_back(a.ticket);
    }
    if (g.arrive(clk.now, Criticality::Sheddable, deadline, ms, s).outcome == Outcome::Rejected) ++sheddable_refused;
  }
  REQUIRE(critical.size() == 3);
  for (const auto& w : s.wakes) CHECK(w.cookie < 100);  // no critical entry was dropped meanwhile
  // The flood that cannot fit is refused at arrival, as before.
  CHECK(sheddable_refused > 50);
  // The first burst of permits comes back, a few ms after the service time
  // (levee's and the network's own time): the critical requests go first.
  clk.advance(4ms);
  for (const auto& w : s.wakes) CHECK(w.cookie < 100);
  s.wakes.clear();
  for (int i = 0; i < 8; ++i) {
    QueueGate::Sample smp{100ms, 8, false};
    g.release(clk.now, &smp, s);
  }
  int critical_granted = 0;
  for (const auto& w : s.wakes)
    if (w.cookie >= 100) {
      CHECK(w.granted);
      ++critical_granted;
    }
  CHECK(critical_granted == 3);
}

TEST_CASE("a cold start's first burst is measured over the time it took, not a whole bucket", "[queue]") {
  // Found by the overhead benchmark: 50 clients against a fast backend, a
  // limit of 20, and the first 20 answers back within 8 ms. Over a 100 ms
  // bucket that read as 200/s, a 55 ms wait for the 11th queued request,
  // and a 503 for a healthy backend.
  QueueConfig qc;
  qc.target = 50ms;
  QueueGate g(qc, static_limit(20));
  SimClock clk;
  Collect s;
  for (int i = 0; i < 20; ++i) REQUIRE(g.arrive(clk.now, Criticality::Critical, kFar, 0, s).outcome == Outcome::Granted);
  for (int i = 0; i < 10; ++i) REQUIRE(g.arrive(clk.now, Criticality::Critical, kFar, 0, s).outcome == Outcome::Queued);
  for (int i = 0; i < 20; ++i) {
    clk.advance(400us);
    QueueGate::Sample smp{8ms, 20, false};
    g.release(clk.now, &smp, s);
  }
  // 20 departures in 8 ms: about 2500/s.
  CHECK(g.drain_rate(clk.now) > 2000);
  for (int i = 0; i < 30; ++i) {
    auto a = g.arrive(clk.now, Criticality::Critical, kFar, 0, s);
    CHECK(a.outcome != Outcome::Rejected);
  }
}

TEST_CASE("a burst after a quiet spell is measured by the service rate, not the quiet throughput", "[queue]") {
  // Found by the overhead benchmark too: a client pausing, then 50
  // connections at once. The window held the pause's trickle (50/s), which
  // read as a 200 ms wait for the 10th queued request.
  QueueConfig qc;
  qc.target = 50ms;
  QueueGate g(qc, static_limit(20));
  SimClock clk;
  Collect s;
  for (int i = 0; i < 100; ++i) {  // 100/s for a second, 1 ms each
    REQUIRE(g.arrive(clk.now, Criticality::Critical, kFar, 0, s).outcome == Outcome::Granted);
    clk.advance(1ms);
    QueueGate::Sample smp{1ms, 1, false};
    g.release(clk.now, &smp, s);
    clk.advance(9ms);
  }
  clk.advance(500ms);
  int rejected = 0;
  for (int i = 0; i < 50; ++i)
    rejected += g.arrive(clk.now, Criticality::Critical, kFar, 0, s).outcome == Outcome::Rejected;
  CHECK(rejected == 0);
  CHECK(g.depth() == 30);
  // 20 permits at 1 ms each: 20,000/s.
  CHECK(g.drain_rate(clk.now) > 10000);
}

TEST_CASE("a class is refused at arrival while the classes above it take the capacity", "[queue]") {
  QueueConfig qc;
  qc.target = 50ms;
  QueueGate g(qc, static_limit(10));
  SimClock clk;
  Collect s;
  // CRITICAL_PLUS alone keeps the 10 permits busy at 1000/s for a second.
  keep_busy(g, clk, s, Criticality::CriticalPlus, 1000);
  // A SHEDDABLE request would wait for ever behind it: told so at once,
  // even though it would be first in its own class.
  g.arrive(clk.now, Criticality::Sheddable, kFar, 1, s);  // ahead = 0: queues
  auto second = g.arrive(clk.now, Criticality::Sheddable, kFar, 2, s);
  CHECK(second.outcome == Outcome::Rejected);
  CHECK(second.decision.reason == Reason::QueueWait);
  // CRITICAL_PLUS itself still queues: nothing is above it.
  CHECK(g.arrive(clk.now, Criticality::CriticalPlus, kFar, 3, s).outcome == Outcome::Queued);
  CHECK(g.arrive(clk.now, Criticality::CriticalPlus, kFar, 4, s).outcome == Outcome::Queued);
}

TEST_CASE("a full queue evicts the newest least critical entry for a more critical one", "[queue]") {
  QueueConfig qc;
  qc.max = 3;
  QueueGate g(qc, static_limit(1));
  SimClock clk;
  Collect s;
  g.arrive(clk.now, Criticality::Critical, kFar, 0, s);
  g.arrive(clk.now, Criticality::Sheddable, kFar, 1, s);
  g.arrive(clk.now, Criticality::Sheddable, kFar, 2, s);
  g.arrive(clk.now, Criticality::Critical, kFar, 3, s);
  CHECK(g.depth() == 3);
  auto same = g.arrive(clk.now, Criticality::Sheddable, kFar, 4, s);
  CHECK(same.decision.reason == Reason::QueueFull);
  auto a = g.arrive(clk.now, Criticality::CriticalPlus, kFar, 5, s);
  CHECK(a.outcome == Outcome::Queued);
  REQUIRE(s.wakes.size() == 1);
  CHECK(s.wakes[0].cookie == 2);  // newest SHEDDABLE
  CHECK_FALSE(s.wakes[0].granted);
  CHECK(s.wakes[0].decision.reason == Reason::QueueFull);
  CHECK(g.depth() == 3);
}

TEST_CASE("expired entries are dropped and never granted", "[queue]") {
  QueueConfig qc;
  qc.target = 50ms;
  QueueGate g(qc, static_limit(1));
  SimClock clk;
  Collect s;
  g.arrive(clk.now, Criticality::Critical, kFar, 0, s);
  g.arrive(clk.now, Criticality::Critical, kFar, 1, s);               // queue target 50 ms
  g.arrive(clk.now, Criticality::Critical, clk.now + 20ms, 2, s);     // deadline 20 ms
  g.arrive(clk.now, Criticality::Critical, kFar, 3, s);
  clk.advance(30ms);
  // Entry 2's deadline passed while it sat behind entry 1: when 1 is granted
  // and released, 2 must be skipped.
  g.release(clk.now, nullptr, s);
  REQUIRE(s.wakes.size() == 1);
  CHECK(s.wakes[0].cookie == 1);
  s.wakes.clear();
  g.release(clk.now, nullptr, s);
  REQUIRE(s.wakes.size() == 2);
  CHECK(s.wakes[0].cookie == 2);
  CHECK_FALSE(s.wakes[0].granted);
  CHECK(s.wakes[0].decision.reason == Reason::Deadline);
  CHECK(s.wakes[1].cookie == 3);
  CHECK(s.wakes[1].granted);
  // Now nothing waits; queue one more while the permit is never returned
  // (a backend that stopped answering). Past the target it still waits
  // (the arrival decision holds); past its give-up time, at least
  // max_wait_factor x target, it is dropped, not held to its deadline.
  s.wakes.clear();
  const TimePoint queued_at = clk.now;
  const auto four = g.arrive(clk.now, Criticality::Critical, kFar, 4, s);
  REQUIRE(four.outcome == Outcome::Queued);
  CHECK(four.expires - queued_at >= qc.target * 2);
  CHECK(four.expires - queued_at < 1s);
  clk.advance(60ms);
  g.pump(clk.now, s);
  CHECK(s.wakes.empty());
  clk.advance(four.expires - clk.now);
  g.pump(clk.now, s);
  REQUIRE(s.wakes.size() == 1);
  CHECK(s.wakes[0].decision.reason == Reason::QueueTimeout);
  CHECK(s.wakes[0].waited == four.expires - queued_at);
}

TEST_CASE("cancel removes a queued entry; stale tickets cannot cancel reused slots", "[queue]") {
  QueueGate g({}, static_limit(1));
  SimClock clk;
  Collect s;
  g.arrive(clk.now, Criticality::Critical, kFar, 0, s);
  auto a = g.arrive(clk.now, Criticality::Critical, kFar, 1, s);
  CHECK(g.cancel(a.ticket, clk.now));
  CHECK(g.depth() == 0);
  CHECK_FALSE(g.cancel(a.ticket, clk.now));
  auto b = g.arrive(clk.now, Criticality::Critical, kFar, 2, s);  // reuses the slot
  CHECK(b.ticket != a.ticket);
  CHECK_FALSE(g.cancel(a.ticket, clk.now));
  CHECK(g.depth() == 1);
  g.release(clk.now, nullptr, s);
  CHECK_FALSE(g.cancel(b.ticket, clk.now));  // already granted: caller owns a permit
  CHECK(g.in_flight() == 1);
}

TEST_CASE("CoDel detects a standing queue and recovers when it drains", "[queue][codel]") {
  QueueConfig qc;
  qc.target = 1s;
  qc.lifo_on_overload = false;  // FIFO: every entry waits the queue's length
  QueueGate g(qc, static_limit(1));
  SimClock clk;
  Collect s;
  g.arrive(clk.now, Criticality::Critical, kFar, 0, s);
  // Keep 3 entries queued for 1.5 s; each waits ~30 ms > 5 ms.
  for (int i = 0; i < 3; ++i) g.arrive(clk.now, Criticality::Critical, kFar, 0, s);
  for (int t = 0; t < 150; ++t) {
    clk.advance(10ms);
    g.release(clk.now, nullptr, s);
    g.arrive(clk.now, Criticality::Critical, kFar, 0, s);
  }
  CHECK(g.overloaded());
  CHECK(g.queue_time() > 10ms);
  // Drain the queue and let an interval pass with direct grants.
  while (g.depth() > 0) g.release(clk.now, nullptr, s);
  g.release(clk.now, nullptr, s);
  for (int t = 0; t < 30; ++t) {
    clk.advance(10ms);
    g.arrive(clk.now, Criticality::Critical, kFar, 0, s);
    g.release(clk.now, nullptr, s);
  }
  CHECK_FALSE(g.overloaded());
}

TEST_CASE("under CoDel overload with LIFO enabled, newest is served first", "[queue][codel]") {
  QueueConfig qc;
  qc.target = 10s;
  qc.lifo_on_overload = true;
  QueueGate g(qc, static_limit(1));
  SimClock clk;
  Collect s;
  g.arrive(clk.now, Criticality::Critical, kFar, 0, s);
  for (int i = 0; i < 5; ++i) g.arrive(clk.now, Criticality::Critical, kFar, 0, s);
  clk.advance(200ms);  // nothing left the queue for two intervals: standing
  g.pump(clk.now, s);
  clk.advance(100ms);
  g.pump(clk.now, s);
  REQUIRE(g.overloaded());
  CHECK(g.lifo());
  g.arrive(clk.now, Criticality::Critical, kFar, 77, s);
  s.wakes.clear();
  g.release(clk.now, nullptr, s);
  REQUIRE(s.wakes.size() == 1);
  CHECK(s.wakes[0].cookie == 77);
}

TEST_CASE("queue invariants hold on random operation sequences", "[queue][property]") {
  for (std::uint64_t seed = 1; seed <= 30; ++seed) {
    Rng rng(seed);
    QueueConfig qc;
    qc.max = 16;
    qc.target = 40ms;
    qc.lifo_on_overload = seed % 2 == 0;
    QueueGate g(qc, static_limit(4));
    SimClock clk;
    std::map<QueueGate::Ticket, TimePoint> queued;   // ticket -> deadline
    std::map<QueueGate::Ticket, TimePoint> expires;  // ticket -> the give-up time the gate gave it
    std::uint32_t held = 0;
    std::uint64_t cookie = 0;
    auto sink = [&](const QueueGate::Wake& w) {
      REQUIRE(queued.count(w.ticket) == 1);
      if (w.granted) {
        // An expired entry is never handed out: not past its deadline, not
        // past the give-up time it was told at arrival.
        REQUIRE(queued[w.ticket] > clk.now);
        REQUIRE(expires[w.ticket] > clk.now);
        ++held;
      }
      queued.erase(w.ticket);
    };
    for (int step = 0; step < 3000; ++step) {
      clk.advance(std::chrono::microseconds(rng.below(5000)));
      double r = rng.u();
      if (r < 0.5) {
        TimePoint dl = rng.u() < 0.3 ? clk.now + std::chrono::milliseconds(rng.below(60)) : kFar;
        auto a = g.arrive(clk.now, criticality_from_index(rng.below(4)), dl, ++cookie, sink);
        if (a.outcome == Outcome::Granted) ++held;
        if (a.outcome == Outcome::Queued) {
          queued[a.ticket] = dl;
          expires[a.ticket] = a.expires;
          REQUIRE(a.expires <= dl);
          REQUIRE(a.expires > clk.now);
        }
      } else if (r < 0.85) {
        if (held > 0) {
          --held;
          QueueGate::Sample smp{std::chrono::milliseconds(rng.below(20)), g.in_flight(), false};
          g.release(clk.now, &smp, sink);
        }
      } else if (!queued.empty()) {
        auto it = queued.begin();
        std::advance(it, static_cast<long>(rng.below(queued.size())));
        REQUIRE(g.cancel(it->first, clk.now));
        queued.erase(it);
      }
      REQUIRE(g.depth() <= qc.max);
      REQUIRE(g.depth() == queued.size());
      REQUIRE(g.in_flight() == held);
      REQUIRE(g.in_flight() <= g.limit());
    }
  }
}

TEST_CASE("the limit scales with the share of the cluster that is ready", "[queue]") {
  QueueGate g({}, static_limit(10));
  SimClock clk;
  Collect s;
  g.set_limit_scale(0.35);  // e.g. one of three endpoints up, plus a ramp
  CHECK(g.limit() == 3);
  for (int i = 0; i < 3; ++i) CHECK(g.arrive(clk.now, Criticality::Critical, kFar, 0, s).outcome == Outcome::Granted);
  CHECK(g.arrive(clk.now, Criticality::Critical, kFar, 9, s).outcome == Outcome::Queued);
  // The ramp completes: the waiting request gets the freed-up capacity at
  // the next pump.
  g.set_limit_scale(1.0);
  g.pump(clk.now, s);
  REQUIRE(s.wakes.size() == 1);
  CHECK(s.wakes[0].granted);
  g.set_limit_scale(0.0);
  CHECK(g.limit() == 1);  // never zero: a cluster is never frozen by the scale
}

TEST_CASE("over-quota requests use only capacity nobody in quota takes", "[queue][quota]") {
  QueueConfig qc;
  qc.target = 80ms;  // the lane drains at 2% of 1000/s: 50 ms for the first, 100 ms for the second
  QueueGate g(qc, static_limit(10));
  SimClock clk;
  Collect s;
  // Spare capacity: an over-quota request is served at once.
  CHECK(g.arrive(clk.now, Criticality::Critical, kFar, 1, s, /*over_quota=*/true).outcome == Outcome::Granted);
  g.release(clk.now, nullptr, s);
  // In-quota SHEDDABLE traffic keeps the 10 permits busy at 1000/s.
  keep_busy(g, clk, s, Criticality::Sheddable, 1000);
  // Now even a CRITICAL_PLUS request over its quota waits behind all of
  // that, so it is refused at arrival; an in-quota SHEDDABLE one queues.
  g.arrive(clk.now, Criticality::CriticalPlus, kFar, 2, s, true);  // first in its lane
  auto over = g.arrive(clk.now, Criticality::CriticalPlus, kFar, 3, s, true);
  CHECK(over.outcome == Outcome::Rejected);
  CHECK(g.depth_over_quota() == 1);
  CHECK(g.arrive(clk.now, Criticality::Sheddable, kFar, 4, s).outcome == Outcome::Queued);
  // And it is served last.
  s.wakes.clear();
  g.release(clk.now, nullptr, s);
  REQUIRE(s.wakes.size() == 1);
  CHECK(s.wakes[0].cookie == 4);
}

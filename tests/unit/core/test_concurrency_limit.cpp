#include <catch2/catch_test_macros.hpp>
#include <catch2/generators/catch_generators.hpp>

#include "backend_model.hpp"
#include "core/concurrency_limit.hpp"
#include "core/queue_gate.hpp"
#include "sim_time.hpp"

using namespace levee::core;
using namespace levee::test;

namespace {

ConcurrencyLimitConfig adaptive(std::uint32_t initial = AdaptiveLimitConfig{}.initial) {
  ConcurrencyLimitConfig cfg;
  cfg.adaptive = true;
  cfg.adaptive_cfg.initial = initial;
  return cfg;
}

struct Result {
  std::uint32_t final_limit;
  double min_limit_late;
  double max_limit_late;
};

// Saturating demand: whenever the limit has room, a request is sent.
Result run(int workers, std::function<Duration()> service, Duration total) {
  ConcurrencyLimitConfig cfg = adaptive(5);
  ConcurrencyLimit lim(cfg);
  BackendModel be(workers, std::move(service));
  SimClock clk;
  std::uint32_t inflight = 0;
  Result r{0, 1e9, 0};
  TimePoint half = TimePoint{total / 2};
  for (;;) {
    while (inflight < lim.limit()) {
      ++inflight;
      be.submit(clk.now, inflight, lim.on_start(clk.now));
    }
    auto d = be.next();
    clk.now = d.at;
    if (clk.now >= TimePoint{total}) break;
    --inflight;
    lim.on_sample(clk.now, d.at - d.sent, d.inflight_at_start, false, d.tag);
    if (clk.now >= half) {
      r.min_limit_late = std::min<double>(r.min_limit_late, lim.base_limit());
      r.max_limit_late = std::max<double>(r.max_limit_late, lim.base_limit());
    }
  }
  r.final_limit = lim.base_limit();
  return r;
}

}  // namespace

TEST_CASE("static limit never moves", "[limit]") {
  ConcurrencyLimit lim({false, 32, {}});
  SimClock clk;
  for (int i = 0; i < 1000; ++i) {
    clk.advance(1ms);
    lim.on_sample(clk.now, 500ms, 32, true, 0);
  }
  CHECK(lim.limit() == 32);
}

TEST_CASE("adaptive limit finds a fixed-capacity backend's worker count", "[limit][sim]") {
  const int n = GENERATE(8, 32, 100);
  auto r = run(n, [] { return Duration(10ms); }, 60s);
  INFO("workers " << n << " final " << r.final_limit << " range " << r.min_limit_late << ".."
                  << r.max_limit_late);
  // Enough to keep every worker busy, not so much that the backend queue grows.
  CHECK(r.final_limit >= static_cast<std::uint32_t>(n));
  CHECK(r.final_limit <= static_cast<std::uint32_t>(n * 1.4 + 4));
  // Outside the probe window it never falls below capacity.
  CHECK(r.max_limit_late <= n * 1.4 + 4);
}

TEST_CASE("adaptive limit copes with variable service times", "[limit][sim]") {
  Rng rng(3);
  auto r = run(20, [&] { return std::chrono::duration_cast<Duration>(std::chrono::duration<double>(-std::log(1 - rng.u()) * 0.02)); }, 120s);
  INFO("final " << r.final_limit);
  CHECK(r.final_limit >= 20);
  CHECK(r.final_limit <= 36);
  CHECK(r.min_limit_late >= 20);  // never starves the backend outside probes
}

namespace {

/// `clients` clients (each sending again as its answer comes; a huge
/// number is unbounded demand) on `workers` at `service` each, from
/// clk.now for `total`; samples cover the whole service time. A new
/// backend: what was in flight at the last one is gone. `seen(inflight)`
/// runs after each round of sends, before the next answer.
template <typename Seen>
void drive(ConcurrencyLimit& lim, SimClock& clk, int workers, Duration service, std::uint32_t clients,
           Duration total, Seen seen) {
  BackendModel be(workers, [service] { return service; });
  std::uint32_t inflight = 0;
  const TimePoint end = clk.now + total;
  while (clk.now < end) {
    while (inflight < clients && inflight < lim.limit()) {
      ++inflight;
      be.submit(clk.now, inflight, lim.on_start(clk.now));
    }
    seen(inflight);
    auto d = be.next();
    clk.now = d.at;
    --inflight;
    lim.on_sample(clk.now, d.at - d.sent, d.inflight_at_start, false, d.tag);
  }
}
void drive(ConcurrencyLimit& lim, SimClock& clk, int workers, Duration service, std::uint32_t clients,
           Duration total) {
  drive(lim, clk, workers, service, clients, total, [](std::uint32_t) {});
}
constexpr std::uint32_t kUnbounded = 1000000;

/// Counts the probes that begin, seen between answers.
struct ProbeCount {
  int probes = 0;
  bool was = false;
  void see(const ConcurrencyLimit& lim) {
    if (lim.probing() && !was) ++probes;
    was = lim.probing();
  }
};

}  // namespace

TEST_CASE("adaptive limit follows a backend that loses capacity", "[limit][sim]") {
  ConcurrencyLimitConfig cfg = adaptive();
  ConcurrencyLimit lim(cfg);
  SimClock clk;
  // Phase 1: 40 workers x 10 ms. Phase 2: latency grows as if only 10 workers remain.
  drive(lim, clk, 40, 10ms, kUnbounded, 30s);
  CHECK(lim.base_limit() >= 40);
  drive(lim, clk, 10, 10ms, kUnbounded, 30s);
  CHECK(lim.base_limit() >= 10);
  CHECK(lim.base_limit() <= 18);
}

TEST_CASE("backend overload answers shrink the adaptive limit", "[limit]") {
  ConcurrencyLimitConfig cfg = adaptive(100);
  ConcurrencyLimit lim(cfg);
  SimClock clk;
  for (int i = 0; i < 2000; ++i) {
    clk.advance(1ms);
    lim.on_sample(clk.now, 10ms, 100, true, 0);
  }
  CHECK(lim.limit() < 50);
  CHECK(lim.limit() >= cfg.adaptive_cfg.min);
}

namespace {

// Saturating demand on 32 workers at 1 ms; the share of the time spent
// probing over 60 s. Samples cover three quarters of each request's time
// (the proxy measures from the send to the answer's head); every
// `lost_every`-th request comes back without a sample (0: none). The
// tolerance is 0.1 ms, below those 0.75 ms: within the default 1 ms the
// probes would be put off (the test below).
double probing_share(int lost_every, int& probes) {
  ConcurrencyLimitConfig cfg = adaptive(32);
  cfg.adaptive_cfg.rtt_tolerance = std::chrono::microseconds(100);
  ConcurrencyLimit lim(cfg);
  BackendModel be(32, [] { return Duration(1ms); });
  SimClock clk;
  std::uint32_t inflight = 0;
  Duration probing{};
  bool was_probing = false;
  int n = 0;
  probes = 0;
  const TimePoint end{60s};
  while (clk.now < end) {
    while (inflight < lim.limit()) {
      ++inflight;
      be.submit(clk.now, inflight, lim.on_start(clk.now));
    }
    auto d = be.next();
    if (lim.probing()) probing += d.at - clk.now;
    clk.now = d.at;
    --inflight;
    if (lost_every > 0 && ++n % lost_every == 0) lim.on_lost(clk.now, d.tag);
    else lim.on_sample(clk.now, (d.at - d.sent) * 3 / 4, d.inflight_at_start, false, d.tag);
    if (lim.probing() && !was_probing) ++probes;
    was_probing = lim.probing();
  }
  return to_seconds(probing) / to_seconds(end.time_since_epoch());
}

}  // namespace

TEST_CASE("a probe ends when the requests it started are back, whatever their latency covers", "[limit][sim]") {
  // A probe that worked out each request's start as `now - rtt` lost the
  // last requests it started and stayed open until its time limit (20
  // windows, 2 s) every time (4.2% of the time here; live, with the
  // proxy's latencies, 2 s in every 12).
  int probes = 0;
  const double share = probing_share(0, probes);
  INFO("probes " << probes << ", share of time probing " << share);
  CHECK(probes >= 5);  // every 10 s, the first after 2 s
  // A probe lasts its 100 ms window and the requests it started (1 ms each).
  CHECK(share < 0.02);
}

TEST_CASE("a probe does not wait for requests that came back without a sample", "[limit][sim]") {
  // Failed requests and clients that left return their permits without a
  // latency: each is told as lost, or it would hold the probe open until
  // its time limit (16% of the time here when they are not).
  int probes = 0;
  const double share = probing_share(20, probes);
  INFO("probes " << probes << ", share of time probing " << share);
  CHECK(probes >= 5);
  CHECK(share < 0.02);
}

namespace {

// `workers` clients on `workers` at `service` each, 60 s: how many probes
// began, and how many requests found the limit full while one ran (a
// proxy queues them).
std::pair<int, int> probes_against(int workers, Duration service) {
  ConcurrencyLimit lim(adaptive(5));
  SimClock clk;
  ProbeCount count;
  int held_back = 0;
  const auto clients = static_cast<std::uint32_t>(workers);
  drive(lim, clk, workers, service, clients, 60s, [&](std::uint32_t inflight) {
    count.see(lim);
    if (lim.probing()) held_back += static_cast<int>(clients - inflight);
  });
  return {count.probes, held_back};
}

}  // namespace

TEST_CASE("a backend answering within the tolerance is never probed, one above it is", "[limit][sim]") {
  // 64 clients on a backend of 64 workers answering in 0.3 ms: the latency
  // is within the 1 ms tolerance whatever the no-load latency, so no probe
  // could change a decision; each would halve the limit and hold requests
  // back (live, 1.9% of all requests waited in the queue).
  const auto [fast_probes, fast_held] = probes_against(64, std::chrono::microseconds(300));
  INFO("fast: probes " << fast_probes << ", requests held back " << fast_held);
  CHECK(fast_probes == 0);
  CHECK(fast_held == 0);
  // The control: the same at 5 ms is probed every 10 s, first after 2 s.
  const auto [slow_probes, slow_held] = probes_against(64, std::chrono::milliseconds(5));
  INFO("slow: probes " << slow_probes << ", requests held back " << slow_held);
  CHECK(slow_probes >= 5);
  CHECK(slow_held > 0);
}

TEST_CASE("a probe put off for long leaves no stale no-load latency behind", "[limit][sim]") {
  // 50 clients on 64 workers at 20 ms (probed: the no-load latency is 20
  // ms), then at 0.3 ms for 30 s (probes put off), then the backend loses
  // capacity (10 workers at 5 ms) under unbounded demand. Kept from the
  // slow past, the estimate would read the new queue as a small one and
  // cut the limit slowly; the windows that stood in for the probes
  // brought it down as the probes would have (blended, 2.8 ms), and the
  // limit reaches the backend's size within 5 s.
  ConcurrencyLimit lim(adaptive(5));
  SimClock clk;
  ProbeCount count;
  const auto see = [&](std::uint32_t) { count.see(lim); };
  drive(lim, clk, 64, 20ms, 50, 30s, see);
  REQUIRE(count.probes >= 2);
  const int slow_probes = count.probes;
  drive(lim, clk, 64, std::chrono::microseconds(300), 50, 30s, see);
  CHECK(count.probes == slow_probes);  // put off throughout
  INFO("limit before the loss " << lim.base_limit());
  drive(lim, clk, 10, 5ms, kUnbounded, 5s);
  INFO("limit 5 s after the loss " << lim.base_limit());
  CHECK(lim.base_limit() <= 18);  // 1.4 x 10 + 4, as the capacity tests allow
}

namespace {

// Two kinds of request on 10 workers under saturating demand: cheap ones
// (10 ms) and dear ones (100 ms), one in four dear. While the limit probes,
// one in `probe_dear_every` is dear (0: none), as the queue serves its upper
// lanes first at half the limit (an over-quota tenant's dear requests wait
// in the lowest). Returns the lowest and highest limit over the last 40 of
// 60 s. tell_kinds: each start says which kind it is (the queue's lane);
// otherwise none does.
std::pair<std::uint32_t, std::uint32_t> limit_with_two_kinds(bool tell_kinds, std::uint64_t probe_dear_every) {
  ConcurrencyLimit lim(adaptive(5));
  BackendModel be(10, [] { return Duration(10ms); });
  SimClock clk;
  std::uint32_t inflight = 0;
  std::uint64_t n = 0, np = 0;
  std::uint32_t lo = 1000000, hi = 0;
  while (clk.now < TimePoint{60s}) {
    while (inflight < lim.limit()) {
      ++inflight;
      const bool dear = lim.probing() ? probe_dear_every > 0 && ++np % probe_dear_every == 0 : ++n % 4 == 0;
      const std::uint32_t tag = lim.on_start(clk.now, tell_kinds ? (dear ? 2 : 1) : 0);
      be.submit(clk.now, inflight, tag, dear ? Duration(100ms) : Duration(10ms));
    }
    auto d = be.next();
    clk.now = d.at;
    --inflight;
    lim.on_sample(clk.now, d.at - d.sent, d.inflight_at_start, false, d.tag);
    if (clk.now >= TimePoint{20s}) {
      lo = std::min(lo, lim.base_limit());
      hi = std::max(hi, lim.base_limit());
    }
  }
  return {lo, hi};
}

}  // namespace

TEST_CASE("a probe that sees another mix of requests does not hold the limit under the backend's size",
          "[limit][sim]") {
  // The probe sees no dear request: told apart, the dear ones have no
  // no-load latency of their own and sit out, and the cheap ones show the
  // backend's queue. The limit keeps the 10 workers busy, with a short
  // queue on top.
  const auto [lo, hi] = limit_with_two_kinds(true, 0);
  INFO("no dear request in probes, kinds told: limit " << lo << ".." << hi);
  CHECK(lo >= 10);
  CHECK(hi <= 14);
  // The probe sees a few (one in ten, against one in four otherwise): each
  // kind is measured against its own no-load latency.
  const auto [lo1, hi1] = limit_with_two_kinds(true, 10);
  INFO("one in ten in probes, kinds told: limit " << lo1 << ".." << hi1);
  CHECK(lo1 >= 10);
  CHECK(hi1 <= 14);
  // The controls: with one no-load latency for all, the probe's cheaper
  // mix makes the usual one (32.5 ms on average) read as a queue, and the
  // limit stays under the backend's size (as in issue 19's case before
  // the kinds).
  const auto [lo0, hi0] = limit_with_two_kinds(false, 0);
  INFO("no dear request in probes, kinds not told: limit " << lo0 << ".." << hi0);
  CHECK(hi0 < 10);
  const auto [lo2, hi2] = limit_with_two_kinds(false, 10);
  INFO("one in ten in probes, kinds not told: limit " << lo2 << ".." << hi2);
  CHECK(hi2 < 10);
}

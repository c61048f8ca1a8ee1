// Proves the admit path of the admission core does not allocate: every
// operator new is counted, and a million decisions after warm-up must add
// nothing. (A separate binary: it replaces the global allocator.)
#include <catch2/catch_test_macros.hpp>

#include <atomic>
#include <cstdlib>
#include <new>
#include <vector>

#include "core/executor_load.hpp"
#include "core/headers.hpp"
#include "core/queue_gate.hpp"
#include "core/retry_budget.hpp"
#include "core/tenant_quota.hpp"
#include "core/throttle.hpp"

namespace {
std::atomic<std::size_t> g_allocations{0};
int* volatile g_sink = nullptr;  // an allocation the compiler may not elide
}

void* operator new(std::size_t n) {
  ++g_allocations;
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }

using namespace levee::core;
using namespace std::chrono_literals;

TEST_CASE("a million admission decisions and completions allocate nothing", "[alloc]") {
  ExecutorLoad executor;
  AttemptHistogram attempts;
  AdaptiveThrottle throttle;
  TenantQuota quota({}, {0.5, 4.0});
  QueueConfig qc;
  qc.max = 64;
  QueueGate gate(qc, ConcurrencyLimitConfig{false, 8, {}});
  std::vector<QueueGate::Wake> wakes;
  wakes.reserve(128);
  auto sink = [&](const QueueGate::Wake& w) { wakes.push_back(w); };
  TimePoint now{};
  auto one = [&](std::uint64_t i) {
    now += 7us;
    auto c = criticality_from_index(i & 3);
    TenantId t = static_cast<TenantId>(i & 1);
    executor.sample(now, 0.3, 1);
    (void)executor.admit(c);
    attempts.record(now, 1 + (i % 5 == 0));
    (void)attempts.admit(now, 1);
    (void)throttle.admit(c, now, 0.5);
    (void)quota.admit(t, c, now, true);
    wakes.clear();
    auto a = gate.arrive(now, c, now + 1s, i, sink);
    if (a.outcome == QueueGate::Outcome::Queued && (i & 7) == 0) gate.cancel(a.ticket, now);
    QueueGate::Sample s{5ms, gate.in_flight(), false};
    if (gate.in_flight() > 4) gate.release(now, &s, sink);
    throttle.on_response(c, now, true);
    quota.record(t, c, 0.001, now);
    LoadReport r;
    (void)parse_orca("TEXT cpu_utilization=0.5, request_cost.cpu=0.002", r);
  };
  for (std::uint64_t i = 0; i < 10000; ++i) one(i);  // warm-up
  // The counter does see allocations.
  const std::size_t probe = g_allocations.load();
  g_sink = new int(7);
  delete g_sink;
  REQUIRE(g_allocations.load() == probe + 1);
  const std::size_t before = g_allocations.load();
  for (std::uint64_t i = 0; i < 1000000; ++i) one(i);
  CHECK(g_allocations.load() - before == 0);
}

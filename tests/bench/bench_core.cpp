// Microbenchmarks of the admission core (not part of the test pass/fail):
//   build/levee_bench --benchmark-samples 50
// Figures and the command are recorded in docs/benchmarks.md.
#include <catch2/benchmark/catch_benchmark.hpp>
#include <catch2/catch_test_macros.hpp>

#include <mutex>
#include <vector>

#include "core/admission.hpp"

using namespace levee::core;
using namespace std::chrono_literals;

namespace {

/// The real pipeline: gate 1 and gates 2-4 as the proxy composes them.
struct Gates {
  SelfProtectionPolicy sp;
  LoadLevels levels{};
  Admission admission{[] {
    AdmissionConfig c;
    c.limit.adaptive = false;
    c.limit.static_limit = 1u << 30;
    c.quotas = {0.5, 4.0, 4.0, 3.0};
    c.quota_when = QuotaWhen::Always;
    return c;
  }()};
  std::vector<QueueGate::Wake> wakes;

  /// One request through every gate, granted; then its completion.
  bool decide(TimePoint now, double u, TenantId t, Criticality c) {
    auto sink = [this](const QueueGate::Wake& w) { wakes.push_back(w); };
    if (screen(sp, levels, c).rejected()) return false;
    return admission.admit({c, t, 1, now, now + 1s, u, 0}, sink).granted();
  }
  void complete(TimePoint now, TenantId t, Criticality c) {
    auto sink = [this](const QueueGate::Wake& w) { wakes.push_back(w); };
    QueueGate::Sample s{10ms, 10, false};
    // tenants stay under quota: the admit path
    admission.on_attempt({now, c, t, Answer::Accepted, 1e-6, std::nullopt});
    admission.release(now, &s, sink);
  }
};

}  // namespace

TEST_CASE("admission decision cost", "[bench]") {
  Gates g;
  g.wakes.reserve(64);
  TimePoint now{};
  std::uint64_t i = 0;
  BENCHMARK("full decision through all gates (admit path)") {
    now += 10us;
    ++i;
    return g.decide(now, 0.5, static_cast<TenantId>(i & 3), criticality_from_index(i & 3));
  };
  BENCHMARK("completion accounting (attempt report, release)") {
    now += 10us;
    ++i;
    g.complete(now, static_cast<TenantId>(i & 3), criticality_from_index(i & 3));
  };
  BENCHMARK("decision + completion, no lock") {
    now += 10us;
    ++i;
    bool ok = g.decide(now, 0.5, static_cast<TenantId>(i & 3), criticality_from_index(i & 3));
    g.complete(now, static_cast<TenantId>(i & 3), criticality_from_index(i & 3));
    return ok;
  };
  std::mutex mu;
  BENCHMARK("decision + completion under an uncontended std::mutex") {
    now += 10us;
    ++i;
    bool ok;
    {
      std::lock_guard lk(mu);
      ok = g.decide(now, 0.5, static_cast<TenantId>(i & 3), criticality_from_index(i & 3));
    }
    std::lock_guard lk(mu);
    g.complete(now, static_cast<TenantId>(i & 3), criticality_from_index(i & 3));
    return ok;
  };
}

TEST_CASE("rejection cost", "[bench]") {
  TenantQuota quota({}, {0.5});
  TimePoint now{};
  for (int k = 0; k < 10000; ++k) {
    now += 1ms;
    quota.record(0, Criticality::Sheddable, 0.01, now);  // 10 CPU-s/s against 0.5
  }
  BENCHMARK("tenant-quota rejection, with its Retry-After estimate") {
    now += 10us;
    return quota.admit(0, Criticality::Sheddable, now, true).retry_after.count();
  };
  // The same with a fleet view (issue 16): local usage plus the others'.
  TenantQuota fleet_quota{{}, {0.5, 4.0}};
  TenantQuota::FleetView view;
  view.remote_at_least.assign(2, {0.2, 0.2, 0.1, 0.0});
  view.synced = true;
  view.valid_until = now + 1h;
  fleet_quota.set_fleet_view(view);
  for (int k = 0; k < 1000; ++k) fleet_quota.record(0, Criticality::Sheddable, 0.01, now + std::chrono::milliseconds(k));
  BENCHMARK("tenant-quota rejection with a fleet view") {
    now += 10us;
    return fleet_quota.admit(0, Criticality::Sheddable, now, true).retry_after.count();
  };
  BENCHMARK("tenant-quota admission with a fleet view") {
    now += 10us;
    return fleet_quota.admit(1, Criticality::Critical, now, true).status;
  };
  SelfProtectionPolicy sp;
  const LoadLevels levels{bit(Criticality::Sheddable), 0};
  BENCHMARK("executor-load rejection (gate 1)") { return screen(sp, levels, Criticality::Sheddable).decision.status; };
}

TEST_CASE("queue operations at depth 10k", "[bench]") {
  QueueConfig qc;
  qc.max = 20000;
  qc.target = 1h;
  QueueGate gate(qc, ConcurrencyLimitConfig{false, 1, {}});
  std::vector<QueueGate::Wake> wakes;
  wakes.reserve(16);
  auto sink = [&](const QueueGate::Wake& w) { wakes.push_back(w); };
  TimePoint now{};
  gate.arrive(now, Criticality::Critical, TimePoint::max(), 0, sink);  // holds the one permit
  for (int k = 0; k < 10000; ++k)
    gate.arrive(now, criticality_from_index(static_cast<std::size_t>(k) & 3), TimePoint::max(), 0, sink);
  std::uint64_t i = 0;
  BENCHMARK("enqueue + dequeue (release grants the head) at depth 10k") {
    now += 1us;
    ++i;
    wakes.clear();
    gate.arrive(now, criticality_from_index(i & 3), TimePoint::max(), i, sink);
    gate.release(now, nullptr, sink);
    return wakes.size();
  };
  BENCHMARK("enqueue + cancel at depth 10k") {
    now += 1us;
    ++i;
    auto a = gate.arrive(now, criticality_from_index(i & 3), TimePoint::max(), i, sink);
    return gate.cancel(a.ticket, now);
  };
}

#include <chrono>
#include <cstdio>
#include <thread>

TEST_CASE("cluster state shared by two workers: one mutex, contended", "[bench][threads]") {
  // The shell keeps each cluster's admission state behind one mutex shared
  // by all workers. This measures the cost per decision+completion pair
  // when two threads hammer the same cluster with nothing else to do: the
  // worst case for the lock (real workers spend ~10 us of I/O per request
  // between two such critical sections).
  for (int threads : {1, 2}) {
    Gates g;
    g.wakes.reserve(1 << 16);
    std::mutex mu;
    const int per = 2'000'000 / threads;
    auto t0 = std::chrono::steady_clock::now();
    std::vector<std::thread> ts;
    for (int k = 0; k < threads; ++k) {
      ts.emplace_back([&, k] {
        TimePoint now{};
        for (int i = 0; i < per; ++i) {
          now += 10us;
          auto c = criticality_from_index(static_cast<std::size_t>(i + k) & 3);
          {
            std::lock_guard lk(mu);
            g.wakes.clear();
            g.decide(now, 0.5, 1, c);
          }
          std::lock_guard lk(mu);
          g.complete(now, 1, c);
        }
      });
    }
    for (auto& t : ts) t.join();
    double ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count() / 2'000'000;
    std::printf("contended-mutex: %d thread(s): %.1f ns per decision+completion (wall time / total pairs)\n", threads, ns);
    CHECK(ns > 0);
  }
}

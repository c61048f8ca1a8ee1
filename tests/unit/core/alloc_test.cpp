// Proves the request path's decisions do not allocate: every operator new
// is counted, and a million requests through the real pipeline after
// warm-up (classification, gate 1, gates 2-4 with queueing and
// cancellation, attempt reports, permits returned, load reports parsed)
// must add nothing. (A separate binary: it replaces the global allocator.)
#include <catch2/catch_test_macros.hpp>

#include <atomic>
#include <cstdlib>
#include <new>
#include <vector>

#include "core/admission.hpp"
#include "core/classify.hpp"
#include "core/headers.hpp"
#include "core/orca.hpp"

namespace {
std::atomic<std::size_t> g_allocations{0};
int* volatile g_sink = nullptr;  // an allocation the compiler may not elide
}  // namespace

void* operator new(std::size_t n) {
  ++g_allocations;
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }

using namespace levee::core;
using namespace std::chrono_literals;

namespace {
struct F {
  std::string_view name;
  std::string_view value;
};
}  // namespace

TEST_CASE("a million requests through the admission pipeline allocate nothing", "[alloc]") {
  TenantTable tenants({"gmail"});
  TenantSource src;
  src.trusted.any = true;
  src.api_key_header = "x-api-key";
  src.api_keys.emplace("k1", 1);
  std::vector<RouteRule> routes(2);
  routes[0].host = "*.example.com";
  routes[0].prefix = "/api";
  routes[1].prefix = "/";
  Classifier classifier(routes, {src}, tenants, {});
  AdmissionConfig cfg;
  cfg.limit.adaptive = false;
  cfg.limit.static_limit = 8;
  cfg.queue.max = 64;
  cfg.quotas = {0.5, 4.0};
  cfg.quota_when = QuotaWhen::Always;
  Admission admission(cfg);
  SelfProtectionPolicy sp;
  std::vector<QueueGate::Wake> wakes;
  wakes.reserve(128);
  auto sink = [&](const QueueGate::Wake& w) { wakes.push_back(w); };
  const Address peer = *parse_address("10.1.2.3");
  const F fields[] = {{"Host", "www.example.com"},    {"X-Criticality", "SHEDDABLE_PLUS"},
                      {"x-tenant-id", "gmail"},      {"x-request-timeout-ms", "800"},
                      {"x-attempt-count", "1"},      {"User-Agent", "bench"}};
  TimePoint now{};
  std::vector<QueueGate::Ticket> queued;
  queued.reserve(64);
  OrcaSelection vllm;
  vllm.utilization = *parse_orca_metric("named_metrics.kv_cache_usage_perc");
  auto one = [&](std::uint64_t i) {
    now += 7us;
    const auto cls = classifier.classify("www.example.com", "/api/x", fields, peer, now);
    const auto crit = criticality_from_index(i & 3);
    LoadLevels levels{static_cast<CriticalityMask>(i % 7 == 0 ? bit(Criticality::Sheddable) : 0), 0};
    if (screen(sp, levels, crit).rejected()) return;
    wakes.clear();
    const auto v = admission.admit({crit, cls.tenant, cls.attempt, now, cls.deadline, 0.5, i}, sink);
    if (v.queued()) {
      if ((i & 7) == 0) admission.cancel(v.ticket, now);
    }
    if (admission.queue().in_flight() > 4) {
      admission.on_attempt({now, crit, cls.tenant, Answer::Accepted, 0.001, 0.5});
      QueueGate::Sample s{5ms, admission.queue().in_flight(), false};
      admission.release(now, &s, sink);
    }
    LoadReport r;
    (void)parse_orca("TEXT cpu_utilization=0.5, request_cost.cpu=0.002", r);
    (void)parse_orca("JSON {\"named_metrics\": {\"kv_cache_usage_perc\": 0.4}}", r, vllm);
    (void)parse_orca_bin("CZqZmZmZmbk/MQAAAAAAAABAQg4KA2ZvbxGamZmZmZm5P0IOCgNiYXIRmpmZmZmZyT8", r, vllm);
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

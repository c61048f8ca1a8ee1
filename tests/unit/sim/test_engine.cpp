// The engine and the models: determinism, speed, scenario validation, and
// the simulator reproducing what the real benchmarks show (docs/benchmarks.md).
#include <catch2/catch_test_macros.hpp>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>

#include "sim/engine.hpp"
#include "sim_helpers.hpp"

using namespace levee;
using levee::test::levee_yaml;
using levee::test::run;
using levee::test::Run;

namespace {

std::string overload(const std::string& target, std::uint64_t seed, const std::string& rate = "5000") {
  return "name: overload\nseed: " + std::to_string(seed) +
         "\nwarmup: 1s\n"
         "backends:\n  - {name: app, workers: 10, service: fixed:10ms}\n"
         "levee:\n  - name: levee\n" +
         levee_yaml("concurrency: {limit: 10}, queue: {target: 50ms}") +
         "clients:\n"
         "  - name: load\n"
         "    target: " + target + "\n"
         "    phases: 4s@" + rate + "\n"
         "    classes:\n"
         "      - {name: cp, weight: 5, criticality: CRITICAL_PLUS, deadline: 1s}\n"
         "      - {name: c, weight: 20, criticality: CRITICAL, deadline: 1s}\n"
         "      - {name: s, weight: 75, criticality: SHEDDABLE, deadline: 1s}\n";
}

}  // namespace

TEST_CASE("engine: events run in time order, ties in scheduling order") {
  struct Rec final : sim::Handler {
    std::vector<std::uint32_t> seen;
    void fire(std::uint32_t kind, std::uint32_t, std::uint32_t) override { seen.push_back(kind); }
  } r;
  sim::Engine e(1);
  using std::chrono::milliseconds;
  e.at(sim::TimePoint{} + milliseconds(5), &r, 3);
  e.at(sim::TimePoint{} + milliseconds(1), &r, 1);
  e.at(sim::TimePoint{} + milliseconds(5), &r, 4);
  e.at(sim::TimePoint{} + milliseconds(2), &r, 2);
  e.run_until(sim::TimePoint{} + milliseconds(4));
  CHECK(r.seen == std::vector<std::uint32_t>{1, 2});
  CHECK(e.now() == sim::TimePoint{} + milliseconds(4));
  e.run_until(sim::TimePoint{} + milliseconds(10));
  CHECK(r.seen == std::vector<std::uint32_t>{1, 2, 3, 4});
}

TEST_CASE("engine: the same seed gives the same output, byte for byte; another seed does not") {
  Run a = run(overload("levee", 11));
  Run b = run(overload("levee", 11));
  Run c = run(overload("levee", 12));
  const std::string ja = test::json_of(a), jb = test::json_of(b), jc = test::json_of(c);
  CHECK(ja.size() > 1000);
  CHECK(ja == jb);
  CHECK(ja != jc);
}

TEST_CASE("scenario: every problem is reported with its key path") {
  const std::string bad =
      "name: x\n"
      "backends:\n  - {name: app, workers: 10, service: fixed:10ms, wrokers: 3}\n"
      "clients:\n  - {name: c, target: nowhere, phases: 1s@10}\n"
      "events:\n  - {at: 1s, action: explode, target: app}\n";
  auto res = sim::load_scenario_string(bad, "x", ".");
  REQUIRE_FALSE(res.scenario);
  std::string all;
  for (const auto& e : res.errors) all += e + "\n";
  CHECK(all.find("backends[0].wrokers: unknown key") != std::string::npos);
  CHECK(all.find("events[0].action: unknown action 'explode'") != std::string::npos);
  CHECK(all.find("clients[0].target: no group 'nowhere'") != std::string::npos);
}

TEST_CASE("validation: at 5x levee holds goodput at capacity and CRITICAL_PLUS whole; the backend alone collapses") {
  // docs/benchmarks.md, overload sweep: levee 99.6% at 5x, direct 0%.
  Run with = run(overload("levee", 1));
  Run without = run(overload("app", 1));
  CHECK(with.ok_rate("load", 1, 4) >= 950);
  CHECK(Run::success(with.cls("load", "cp")) >= 0.999);
  CHECK(Run::success(with.cls("load", "s")) < 0.05);  // shed, cheaply
  CHECK(with.cls("load", "s").timeouts == 0);
  CHECK(without.ok_rate("load", 1, 4) < 50);
}

TEST_CASE("speed: simulated requests per wall second (printed; asserted only against a generous floor)") {
  const std::string yaml = "name: speed\nseed: 1\n"
                           "backends:\n  - {name: app, workers: 100, service: exp:10ms}\n"
                           "levee:\n  - name: levee\n" +
                           levee_yaml("concurrency: {limit: 100}") +
                           "clients:\n  - name: load\n    target: levee\n    phases: 20s@15000\n"
                           "    classes:\n      - {name: c, weight: 1, criticality: CRITICAL, deadline: 1s}\n";
  const auto t0 = std::chrono::steady_clock::now();
  Run r = run(yaml);
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double reqs = static_cast<double>(r.w().info().requests);
  std::cout << "levee-sim speed: " << reqs << " requests, " << r.w().engine().events() << " events in " << wall
            << " s: " << reqs / wall << " requests per wall second\n";
  CHECK(reqs > 250000);
  CHECK(reqs / wall > 20000);
}

TEST_CASE("clients: a trace file gives the arrival times and classes") {
  const std::string path = "sim_test_trace.csv";
  {
    std::ofstream f(path);
    f << "# seconds,class\n0.10,b\n0.20,a\n0.25,b\n1.50,a\n";
  }
  const std::string yaml =
      "name: trace\nbackends:\n  - {name: app, workers: 10, service: fixed:1ms}\n"
      "clients:\n  - name: load\n    target: app\n    trace: " + path + "\n"
      "    classes: [{name: a, weight: 1, deadline: 1s}, {name: b, weight: 1, deadline: 1s}]\n";
  Run r = run(yaml);
  std::remove(path.c_str());
  CHECK(r.cls("load", "a").offered == 2);
  CHECK(r.cls("load", "b").offered == 2);
  CHECK(r.cls("load", "a").ok == 2);
  const auto& s = r.w().clients("load").seconds();
  CHECK(s[0].offered == 3);
  CHECK(s[1].offered == 1);
}

TEST_CASE("clients: honouring Retry-After, a refused client waits instead of coming straight back") {
  auto yaml = [](bool honor) {
    return "name: ra\nseed: 9\nbackends:\n  - {name: app, workers: 10, service: fixed:10ms}\n"
           "levee:\n  - name: levee\n" +
           levee_yaml("concurrency: {limit: 10}, queue: {target: 50ms}, retry: {storm_share: 1.0}") +
           "clients:\n  - name: load\n    target: levee\n    phases: 4s@3000\n    retries: 3\n    backoff: 20ms\n"
           "    honor_retry_after: " + std::string(honor ? "true" : "false") +
           "\n    classes: [{name: c, weight: 1, criticality: CRITICAL, deadline: 1s}]\n";
  };
  Run eager = run(yaml(false));
  Run polite = run(yaml(true));
  const auto& e = eager.cls("load", "c");
  const auto& p = polite.cls("load", "c");
  CHECK(static_cast<double>(e.attempts) / static_cast<double>(e.offered) > 2.5);
  // Retry-After is at least a second, jittered by 0.5-1.5x as levee-loadgen
  // does: only a retry drawn under the 1 s deadline happens at all.
  CHECK(static_cast<double>(p.attempts) / static_cast<double>(p.offered) < 1.3);
}

// Helpers for the simulator's tests: a scenario from YAML text, run to the
// end, and the figures the tests assert on.
#pragma once

#include <catch2/catch_test_macros.hpp>

#include <sstream>
#include <string>

#include "sim/scenario.hpp"
#include "sim/world.hpp"

namespace levee::test {

/// A levee config (the proxy's YAML) with one listener and one cluster
/// `app`; `cluster` adds keys to the cluster, `top` adds top-level keys.
inline std::string levee_yaml(const std::string& cluster, const std::string& top = "") {
  return "    config_inline:\n"
         "      admin: {port: 9901}\n"
         "      workers: 1\n"
         "      access_log: {enabled: false}\n" +
         (top.empty() ? "" : "      " + top + "\n") +
         "      listeners: [{name: l, port: 8080, routes: [{cluster: app, timeout: 5s}]}]\n"
         "      clusters: [{name: app, endpoints: ['127.0.0.1:9000'], " +
         cluster + "}]\n";
}

struct Run {
  std::unique_ptr<sim::Scenario> scenario;  // the world refers into it: it must not move
  std::unique_ptr<sim::World> world;

  sim::World& w() { return *world; }
  /// Calls that reached the backend group (accepted or refused), all run long.
  double backend_calls(const std::string& g) {
    double n = 0;
    for (const auto& b : world->backends(g)) n += static_cast<double>(b->counters().received + b->counters().refused);
    return n;
  }
  const sim::ClassStats& cls(const std::string& group, const std::string& name) {
    for (const auto& c : world->clients(group).classes())
      if (c.name == name) return c;
    FAIL("no class " << name);
    throw;
  }
  static double success(const sim::ClassStats& c) {
    return c.offered ? static_cast<double>(c.ok) / static_cast<double>(c.offered) : 0.0;
  }
  /// 2xx per second over [from, to) by arrival second, all classes of a group.
  double ok_rate(const std::string& group, int from, int to) {
    const auto& s = world->clients(group).seconds();
    double n = 0;
    for (int i = from; i < to && i < static_cast<int>(s.size()); ++i) n += static_cast<double>(s[i].ok);
    return n / (to - from);
  }
};

inline Run run(const std::string& yaml) {
  auto res = sim::load_scenario_string(yaml, "test", ".");
  if (!res.scenario) {
    std::string all;
    for (const auto& e : res.errors) all += e + "\n";
    FAIL(all);
  }
  Run r{std::make_unique<sim::Scenario>(std::move(*res.scenario)), nullptr};
  r.world = std::make_unique<sim::World>(*r.scenario);
  r.world->run();
  return r;
}

inline std::string json_of(Run& r) {
  std::ostringstream o;
  r.w().write_json(o, /*wall=*/false);
  r.w().write_csv(o);
  return o.str();
}

}  // namespace levee::test

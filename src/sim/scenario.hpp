// Scenario files: YAML, validated before anything runs; every problem is
// reported with its key path. The format (docs/simulation.md has the
// reference and examples under sim/scenarios/):
//
//   name: overload
//   seed: 42
//   warmup: 3s                       # excluded from the summary, as levee-loadgen --warmup
//   network: {delay: 50us, jitter: 0us}
//   front: levee                     # labels copied into the JSON summary
//   step: 2
//   capacity: 1000
//   backends:
//     - {name: app, instances: 1, workers: 10, service: fixed:10ms, cost_factor: 1,
//        warmup_seconds: 0, warmup_factor: 1, warmup_mode: slow, crash_queue: 0, restart_after: 5s,
//        downstream: {target: db, timeout: 1s, retries: 2, backoff: 25ms, ...caller options}}
//   levee:
//     - name: edge
//       instances: 1
//       config: levee.yaml           # the proxy's own config file (relative to this file),
//       # config_inline: {...}       # or the same YAML inline
//       targets: {app: app}          # cluster -> group whose instances are its endpoints
//       cpu: {workers: 1, request: 10us, reject: 4us}
//       fleet: {interval: 200ms, latency: 500us, timeout: 100ms, max_instances: 0,
//               bucket: 1s, member_ttl: 2s, connect_timeout: 200ms}   # defaults: the config's quota_sync
//   redis: {outages: [{from: 10s, to: 20s, mode: hang, flush: false}]}   # mode: hang or refuse
//   clients:
//     - name: users
//       count: 1                     # clients; each sticks to one instance of the target
//       target: edge                 # a levee or backend group
//       phases: 10s@500,20s@5000     # or rate: 1000 + duration: 10s, or trace: file
//       poisson: true
//       retries: 3
//       backoff: 50ms
//       honor_retry_after: false
//       honor_no_retry: false
//       retry_connect_errors: false
//       retry_budget: {ratio: 0.1, min_per_second: 0}
//       throttle: {k: 2, window: 2m, min_requests: 20}
//       classes: [{name: cp, weight: 5, criticality: CRITICAL_PLUS, tenant: a, deadline: 1s}]
//   events:                          # seconds from the start
//     - {at: 8s, action: kill, target: app, instance: 0}   # instance omitted: every one
//       # kill restart hang unhang fail recover health_fail health_ok rate
//       # (fail: status, rate; rate: scale, for a client group)
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "sim/backend.hpp"
#include "sim/clients.hpp"
#include "sim/instance.hpp"
#include "sim/network.hpp"

namespace levee::sim {

struct EventSpec {
  Duration at{};
  std::string action;
  std::string target;
  int instance = -1;  ///< -1: every instance
  double value = 1.0; ///< rate scale, or failure rate
  std::uint16_t status = 503;
};

struct RedisOutageSpec {
  Duration from{}, to{};
  RedisModel::OutageMode mode = RedisModel::OutageMode::Hang;
  bool flush = false;  ///< comes back empty
};

struct Scenario {
  std::string name;
  std::string description;
  std::uint64_t seed = 1;
  Duration warmup{};
  Duration timeline{};  ///< a finer series of the first client group (JSON sim.timeline); zero: none
  NetworkConfig network;
  std::string front = "levee";
  double step = 0;
  double capacity = 0;
  std::vector<BackendConfig> backends;
  std::vector<InstanceGroupConfig> levee;
  std::vector<ClientGroupConfig> clients;
  std::vector<std::string> client_targets;  ///< by client group
  std::vector<std::string> downstream_targets;  ///< by backend group ("" when none)
  std::vector<RedisOutageSpec> redis_outages;
  std::vector<EventSpec> events;
};

struct ScenarioResult {
  std::optional<Scenario> scenario;
  std::vector<std::string> errors;
};

/// Loads a scenario file (paths inside it are relative to its folder).
ScenarioResult load_scenario_file(const std::string& path);
/// Same, from text; `dir` is where relative paths point.
ScenarioResult load_scenario_string(const std::string& text, const std::string& name, const std::string& dir);

}  // namespace levee::sim

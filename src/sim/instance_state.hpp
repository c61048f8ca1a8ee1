// The simulated instance's private state: its clusters and its exchanges,
// shared by the files that make up Instance (instance.cpp: arrival, the CPU,
// local answers and timers; instance_upstream.cpp: attempts, answers from
// the backends and health checks). Nothing outside src/sim/instance*.cpp
// includes it.
#pragma once

#include <cstdint>
#include <vector>

#include "sim/instance.hpp"

namespace levee::sim {

struct Instance::Cluster {
  Cluster(const config::ClusterConfig& c, core::AdmissionConfig a, core::EndpointPolicy p,
          const std::vector<double>& weights, TimePoint now)
      : cfg(&c), adm(std::move(a)), eps(p, weights, now) {}
  const config::ClusterConfig* cfg;
  core::Admission adm;
  core::EndpointSet eps;
  std::vector<Node*> nodes;
  std::vector<std::uint32_t> outstanding;
  core::WeightedSet set;
  std::vector<core::EndpointLoad> loads;
  bool dirty = true;
  struct Check {
    core::HealthState state;
    bool decided = false;
    Duration interval{};
  };
  std::vector<Check> checks;
};

struct Instance::Ex {
  // Abandoned: answered (or its client gone) while the backend still works
  // on its last attempt; it holds the permit until the backend answers or
  // the response timeout passes (proxy/abandoned.hpp).
  enum class St : std::uint8_t { Cpu, Queued, Attempt, Backoff, Abandoned };
  Peer* from = nullptr;
  std::uint64_t cookie = 0;
  Call call;
  St st = St::Cpu;
  core::Classification cls;
  std::uint32_t cluster = 0;
  TimePoint start{};
  core::QueueGate::Ticket ticket = core::QueueGate::kNoTicket;
  bool permit = false;
  std::uint32_t in_flight_at_start = 0;
  std::uint32_t tag = 0;  ///< the concurrency limit's tag for its grant (lane, probe)
  std::uint32_t attempts = 0;  // counted attempts made
  std::size_t avoid = core::kNoEndpoint;
  std::size_t ep = core::kNoEndpoint;
  std::uint32_t number = 1;
  TimePoint sent_at{};
  std::uint64_t up_ticket = 0;
  bool up_accepted = false;
  bool held = false;        // a timed-out attempt the backend may still work on
  std::uint32_t timer = 0;  // the one timer armed for it
  std::uint32_t token = 0;  // the attempt in flight
};

struct Instance::Sink {
  Instance* s;
  void operator()(const core::QueueGate::Wake& w) const { s->wakes_.push_back(w); }
};

}  // namespace levee::sim

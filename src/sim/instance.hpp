// A levee instance in the simulator: the real admission core, configured
// from the same YAML file as the proxy (config::load_* and config/to_core),
// driven the way src/proxy/exchange.cpp and src/proxy/cluster.cpp drive it,
// call for call and in the same order:
//
//   classify (core::Classifier) -> screen (gate 1, from a modelled CPU)
//   -> Admission::admit (retry storm, throttle, quota with demotion, queue)
//   -> queued: wait for the wake, with the proxy's give-up time
//   -> attempts: P2C pick (avoiding the last endpoint), the remaining
//      deadline forwarded, a watchdog at min(deadline, response_timeout);
//      plan_retry + try_retry + retry_backoff after a failure or a 503
//   -> on_attempt reports and EndpointSet updates (Cluster::on_attempt)
//   -> release with the latency sample (Permit::finish) or without
//   -> every 100 ms: EndpointSet::refresh, set_limit_scale, Admission::tick
//      (LoadSampler::tick); active health checks as HealthChecker does.
//   -> with fleet quotas: the real sync (sim/fleet.hpp) wired to every
//      cluster's quota gate as control/server.cpp wires quota::FleetSync
//      (take_recorded / set_fleet_view).
//
// Not modelled: connection pools (no stale connections), request bodies
// (every request is replayable), the batch fuse, degraded responses.
//
// The CPU: each request costs levee CPU time (a proxied one more than a
// refused one); work queues on the instance's workers (a fluid FIFO), so an
// overloaded levee delays what it handles, and every sample_interval the
// executor load (busy workers plus ready work waiting) is fed to
// core::ExecutorLoad, whose per-criticality bits gate 1 reads.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "core/admission.hpp"
#include "core/balancer.hpp"
#include "core/classify.hpp"
#include "core/endpoints.hpp"
#include "core/executor_load.hpp"
#include "core/health.hpp"
#include "core/retry.hpp"
#include "sim/fleet.hpp"
#include "sim/network.hpp"

namespace levee::sim {

struct CpuModel {
  std::uint32_t workers = 0;  ///< 0: the config's `workers`, else 1
  Duration request = std::chrono::microseconds(10);  ///< a proxied request (docs/benchmarks.md: 94k/s on a core)
  Duration reject = std::chrono::microseconds(4);    ///< a request levee answers itself (<= 0.44x a proxied one)
};

struct InstanceGroupConfig {
  std::string name;
  std::uint32_t instances = 1;
  std::shared_ptr<const config::Config> cfg;
  std::string listener;  ///< which listener's routes; empty: the first
  /// By cluster index: the group whose instances are its endpoints.
  std::vector<std::string> cluster_targets;
  CpuModel cpu;
  std::optional<FleetSyncConfig> fleet;
};

class Instance final : public Handler, public Node, public Peer {
 public:
  /// endpoints[c]: the nodes behind cluster c, in endpoint order.
  Instance(Engine& e, Wire& w, const InstanceGroupConfig& g, std::uint32_t index,
           std::vector<std::vector<Node*>> endpoints, RedisModel* redis);
  ~Instance();

  void start();

  std::uint64_t receive(const Call& c, Peer* from, std::uint64_t cookie) override;
  void abandon(std::uint64_t ticket) override;
  bool on_accepted(std::uint64_t cookie, std::uint64_t ticket) override;
  void on_reply(std::uint64_t cookie, const Reply& r) override;
  void fire(std::uint32_t kind, std::uint32_t slot, std::uint32_t gen) override;

  struct Counters {
    std::uint64_t received = 0, admitted = 0, attempts = 0, retries = 0, ok = 0;
    std::array<std::uint64_t, core::kReasonCount> answers{};  ///< local answers by reason
  };
  const Counters& counters() const noexcept { return n_; }
  std::vector<std::uint64_t> received_by_second, ok_by_second;
  core::Admission& admission(std::size_t cluster);
  /// The concurrency limit in force for a cluster (0 when it has none).
  double limit(std::size_t cluster) const;
  const FleetSync* fleet() const noexcept { return fleet_.get(); }
  double executor_load() const noexcept { return load_.load(); }

 private:
  struct Cluster;
  struct Ex;
  struct Sink;
  enum Kind : std::uint32_t { kProcess, kGiveUp, kWatchdog, kBackoff, kTick, kSample, kHealth, kHealthResult };

  void process(std::uint32_t i);
  void forward(std::uint32_t i);
  void relay(std::uint32_t i, const Reply& r);
  void after_attempt(std::uint32_t i, bool failed, core::AttemptFailure f, const Reply* r);
  void report(std::uint32_t i, core::Answer a, bool failure, std::optional<Duration> latency, const Reply* load);
  void reject(std::uint32_t i, const core::Decision& d);
  void fail(std::uint32_t i, core::Reason r);
  /// Answered, its last attempt still at the backend: keeps the permit (St::Abandoned).
  void hold(std::uint32_t i);
  void answer(std::uint32_t i, const Reply& r);
  void finish(std::uint32_t i);
  void release_permit(std::uint32_t i, const core::QueueGate::Sample* s);
  void flush_wakes();
  std::size_t pick(Cluster& c, std::size_t avoid);
  void weights_changed(Cluster& c);
  Duration charge(Duration cost);
  void sample_cpu();
  void health_check(std::uint32_t c, std::uint32_t ep);
  void health_result(std::uint32_t c, std::uint32_t ep, bool ok);
  std::uint32_t arm(std::uint32_t i, Duration d, Kind k);
  void bump(std::vector<std::uint64_t>& v);

  Engine& e_;
  Wire& w_;
  const InstanceGroupConfig& g_;
  std::uint32_t index_;
  Rng rng_;
  core::TenantTable tenants_;
  std::unique_ptr<core::Classifier> classifier_;
  std::vector<std::size_t> route_cluster_;
  core::SelfProtectionPolicy self_protection_;
  core::ExecutorLoad load_;
  core::LoadLevels levels_{};
  std::vector<std::unique_ptr<Cluster>> clusters_;
  std::unique_ptr<Slab<Ex>> ex_;
  std::vector<core::QueueGate::Wake> wakes_;
  bool flushing_ = false;
  std::uint32_t timer_seq_ = 0;
  // CPU
  double workers_ = 1;
  TimePoint cpu_free_{};
  double charged_s_ = 0;
  Duration sample_interval_{};
  // fleet quotas
  std::unique_ptr<FleetSync> fleet_;
  Counters n_;
};

}  // namespace levee::sim

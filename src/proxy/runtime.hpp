// The running configuration: what every worker shares. Built once from a
// Config; immutable except for the atomics and the per-cluster admission
// state behind Cluster::mu_.
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/ip/tcp.hpp>

#include <algorithm>
#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "config/config.hpp"
#include "core/balancer.hpp"
#include "core/decision.hpp"
#include "core/ewma.hpp"
#include "core/executor_load.hpp"
#include "core/health.hpp"
#include "core/permit.hpp"
#include "core/queue_gate.hpp"
#include "core/retry_budget.hpp"
#include "core/slow_start.hpp"
#include "core/tenant_quota.hpp"
#include "core/throttle.hpp"
#include "metrics/metrics.hpp"

namespace levee::proxy {

using boost::asio::ip::tcp;
using core::Criticality;
using core::Decision;
using core::Duration;
using core::TenantId;
using core::TimePoint;

/// One backend address shared by all workers.
struct Endpoint {
  std::string host;
  std::uint16_t port = 0;
  double weight = 1.0;
  std::string label;  ///< "host:port"
  std::size_t index = 0;

  std::atomic<std::uint32_t> outstanding{0};
  std::atomic<bool> healthy{true};      ///< active health checks
  std::atomic<bool> ejected{false};     ///< passive outlier detection
  std::atomic<double> effective_weight{1.0};  ///< weight x slow start; 0 when out
  std::atomic<double> utilization{-1.0};      ///< smoothed ORCA utilization, -1 unknown
  std::atomic<std::uint64_t> ejections{0};    ///< outlier ejections so far
  std::atomic<std::uint64_t> health_transitions{0};

  // Under Cluster::mu_.
  core::OutlierState outlier;
  core::SlowStart slow_start;
  core::Ewma util_avg{std::chrono::seconds(1)};
  core::Ewma latency_avg{std::chrono::seconds(1)};  ///< response-header latency, seconds

  std::vector<tcp::endpoint> addresses() const {
    std::lock_guard lk(addr_mu_);
    return addrs_;
  }
  /// Returns true when the set changed (not on the first resolution).
  bool set_addresses(std::vector<tcp::endpoint> a) {
    std::lock_guard lk(addr_mu_);
    std::sort(a.begin(), a.end());
    if (a == addrs_) return false;
    const bool had = !addrs_.empty();
    addrs_ = std::move(a);
    addr_generation.fetch_add(1, std::memory_order_release);
    return had;
  }
  /// Bumped when the resolved addresses change; pooled connections made
  /// under an older generation are not reused.
  std::atomic<std::uint64_t> addr_generation{0};

 private:
  mutable std::mutex addr_mu_;
  std::vector<tcp::endpoint> addrs_;
};

/// A request waiting in a cluster queue, on some worker's executor.
class Waiter {
 public:
  virtual void on_wake(const core::QueueGate::Wake& w) = 0;
  boost::asio::any_io_executor executor;

 protected:
  ~Waiter() = default;
};

struct AdmitInput {
  Criticality crit;
  TenantId tenant;
  std::uint32_t attempt;
  TimePoint now;
  TimePoint deadline;
  double u;  ///< uniform draw for the throttle
  Waiter* waiter;
};

/// Which gate would have rejected, in dry-run mode.
struct DryRun {
  core::Reason reason = core::Reason::None;
};

struct AdmitResult {
  core::QueueGate::Outcome outcome;
  Decision decision;
  core::QueueGate::Ticket ticket = core::QueueGate::kNoTicket;
  std::uint32_t inflight_at_start = 0;
  bool overloaded = false;
  core::Reason dry_run = core::Reason::None;  ///< a dry-run gate would have rejected
};

struct Completion {
  Criticality crit;
  TenantId tenant;
  TimePoint now;
  Duration rtt;
  std::uint32_t inflight_at_start;
  bool reached_backend;   ///< a response header arrived
  bool overload_answer;   ///< 429/503 or an overload marker from the backend
  bool failure;           ///< 5xx, connect failure or timeout (outlier detection)
  bool release;           ///< the request is done: return its permit
  std::optional<double> cost;
  std::optional<double> utilization;
  std::size_t endpoint;
};

class Runtime;

class Cluster final : public core::PermitOwner {
 public:
  Cluster(const Runtime& rt, const config::ClusterConfig& cfg, std::size_t index);

  const config::ClusterConfig& cfg;
  const std::size_t index;
  std::vector<std::unique_ptr<Endpoint>> endpoints;

  /// Gates 2-4 (and the retry-storm check) in one critical section.
  AdmitResult admit(const AdmitInput& in);
  /// The queued request gives up (client gone, timer). False: it was
  /// granted or dropped meanwhile and its wake is on the way.
  bool cancel(core::QueueGate::Ticket t, TimePoint now);
  /// Returns a permit with what the attempt learned.
  void complete(const Completion& c);
  /// Consumes retry budget for attempt number `attempt` when there is some.
  bool try_retry(TimePoint now, std::uint32_t attempt);
  /// Returns a permit without a sample (the request never reached a backend).
  void release_permit(std::uint64_t token) noexcept override;
  /// Expires queue heads; called by the admin tick so idle queues drain.
  void tick(TimePoint now);

  // Endpoint results outside admission (health checks, connect errors).
  void endpoint_result(std::size_t ep, TimePoint now, bool success);

  /// An active health check changed the endpoint's state.
  void set_endpoint_health(std::size_t ep, bool healthy, TimePoint now);
  /// DNS gave the endpoint a different address set: it is a new backend as
  /// far as warm-up goes, so it ramps again.
  void endpoint_moved(std::size_t ep, TimePoint now);

  /// Bumped whenever effective weights change; workers rebuild their sets.
  std::atomic<std::uint64_t> weights_version{1};
  /// Recomputes effective weights from health, ejection and slow start.
  void refresh_weights(TimePoint now);

  // Snapshot for metrics and the admin page (takes the lock).
  struct Snapshot {
    std::uint32_t in_flight, depth, limit;
    std::array<std::uint32_t, core::kCriticalityCount> depth_by_crit;
    std::uint32_t depth_over_quota;
    double queue_time_s, drain_rate, utilization;
    bool codel_overloaded, overloaded;
    std::array<double, core::kCriticalityCount> throttle_p;
    std::vector<double> tenant_usage;  ///< by TenantId, CPU-s/s
    std::vector<double> tenant_quota;
    double retry_share;
  };
  Snapshot snapshot(TimePoint now);

  std::size_t healthy_endpoints() const;

  // Fleet quotas (issue 16): the quota sync's two entry points, each a
  // short critical section on the sync's own thread.
  /// Adds the tenant cost recorded since the last call to out[tenant][criticality].
  void take_quota_usage(std::vector<core::TenantQuota::PerCriticality>& out);
  /// Installs the fleet's view in the quota gate; v gets the previous one.
  void set_fleet_view(core::TenantQuota::FleetView& v);

 private:
  bool overloaded_locked(TimePoint now);
  void post_wakes();

  const Runtime& rt_;
  std::mutex mu_;
  core::QueueGate gate_;
  core::AdaptiveThrottle throttle_;
  core::TenantQuota quota_;
  core::RetryBudget budget_;
  core::AttemptHistogram attempts_;
  core::Ewma utilization_{std::chrono::seconds(1)};
  bool have_utilization_ = false;
};

struct Route {
  std::string host;  ///< "", "*", "*.suffix" or exact (lower case)
  std::string prefix;
  Cluster* cluster;
  Criticality criticality;
  Duration timeout;
  const config::TenantSource* tenant;
  std::size_t metric_index;
  std::string label;
  bool fuse = false;  ///< through the listener's fuse pool
};

struct Listener {
  const config::ListenerConfig& cfg;
  std::size_t index;
  std::vector<Route> routes;
  const config::TenantSource* tenant;  ///< listener or global source
  std::atomic<std::uint32_t> connections{0};
  std::atomic<std::uint32_t> refusing{0};  ///< polite refusals in progress
  // Fuse pools, all clusters (written by the workers, read at scrape).
  std::atomic<std::uint32_t> fuse_open{0};
  std::atomic<std::uint32_t> fuse_in_use{0};
  std::atomic<std::uint32_t> fuse_waiting{0};

  /// Accept-rate limit: a token bucket shared by the workers.
  bool take_accept_token(TimePoint now);
  /// Per-source connection cap; true when the source may open one more.
  bool source_enter(const std::array<std::uint8_t, 16>& addr);
  void source_leave(const std::array<std::uint8_t, 16>& addr);
  /// Whether any of its traffic goes through a fuse: a batch listener, or
  /// a route marked `fuse`.
  bool uses_fuse() const noexcept;
  /// First matching route, or null.
  const Route* match(std::string_view host, std::string_view path) const noexcept;
  explicit Listener(const config::ListenerConfig& c, std::size_t i) : cfg(c), index(i) {}

 private:
  std::mutex rate_mu_;
  double tokens_ = -1;
  TimePoint last_refill_{};
  struct AddrHash {
    std::size_t operator()(const std::array<std::uint8_t, 16>& a) const noexcept {
      std::uint64_t h = 1469598103934665603ull;
      for (auto b : a) h = (h ^ b) * 1099511628211ull;
      return static_cast<std::size_t>(h);
    }
  };
  std::mutex src_mu_;
  std::unordered_map<std::array<std::uint8_t, 16>, std::uint32_t, AddrHash> per_source_;
};

/// Metrics the request path writes (sharded per worker).
struct ProxyMetrics {
  ProxyMetrics(const config::Config& cfg, const std::vector<std::string>& tenants, std::size_t shards);

  metrics::CounterTable requests;       // route, code class
  metrics::CounterTable admitted;       // cluster, criticality, tenant
  metrics::CounterTable rejected;       // cluster, reason, criticality, tenant
  metrics::CounterTable dry_run;        // cluster, reason, criticality
  metrics::CounterTable local_replies;  // listener, reason
  metrics::CounterTable connections;    // listener
  metrics::CounterTable refused;        // listener, cause
  metrics::CounterTable upstream_requests;  // cluster, endpoint, code class
  metrics::CounterTable upstream_errors;    // cluster, endpoint, kind
  metrics::CounterTable upstream_connects;  // cluster
  metrics::CounterTable load_report_errors; // cluster
  metrics::CounterTable bytes;              // direction
  metrics::HistogramTable upstream_latency;  // cluster
  metrics::HistogramTable request_duration;  // cluster, outcome (served, rejected)
  metrics::HistogramTable queue_time;        // cluster
  metrics::CounterTable health_checks;       // cluster, endpoint, result
  metrics::HistogramTable health_check_latency;  // cluster

  std::vector<std::string> route_labels;
  std::vector<std::string> endpoint_labels;  ///< flattened cluster endpoints
  std::vector<std::size_t> endpoint_base;    ///< first flattened index per cluster
};

class Runtime {
 public:
  explicit Runtime(std::shared_ptr<const config::Config> cfg, std::size_t workers);

  std::shared_ptr<const config::Config> cfg;
  std::vector<std::string> tenant_names;  ///< index = TenantId; 0 = default
  std::vector<std::unique_ptr<Cluster>> clusters;
  std::vector<std::unique_ptr<Listener>> listeners;
  std::unique_ptr<ProxyMetrics> metrics;
  std::size_t workers;

  /// TenantId of a name; kDefaultTenant for unknown names.
  TenantId tenant_id(std::string_view name) const noexcept;
  /// Quotas for a cluster, by TenantId.
  std::vector<double> quotas_for(const config::ClusterConfig& c) const;
  bool quotas_configured() const noexcept { return !cfg->tenants.quotas.empty(); }

  // Gate 1 state, written by the load sampler, read lock-free per request.
  std::atomic<double> executor_load{0.0};
  std::atomic<double> host_cpu{0.0};
  std::array<std::atomic<bool>, core::kCriticalityCount> executor_over{};
  std::array<std::atomic<bool>, core::kCriticalityCount> host_over{};
  std::atomic<bool> close_connections{false};
  std::atomic<bool> draining{false};

 private:
  struct Hash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
  };
  std::unordered_map<std::string, TenantId, Hash, std::equal_to<>> tenant_ids_;
};

}  // namespace levee::proxy

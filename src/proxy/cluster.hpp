// A cluster: one backend service, shared by every worker.
//
// Locking. Each cluster has one mutex (in its ClusterCore), and it guards exactly two
// things: the core admission pipeline (queue, concurrency limit, throttle,
// tenant quotas, retry budget, attempt histogram) and the core endpoint set
// (health, outlier ejection, slow start). It is held only for calls into
// those two, which are O(1) in the request count: never across I/O, never
// while posting, never while taking another lock.
//
// Read without it: the Endpoint atomics (effective weights, outstanding
// counts, health mirrors) and weights_version, which the cluster publishes
// after every change under the lock, and the workers' balancers read.
//
// Who wakes whom. A queued request is granted by whichever thread returns a
// permit or ticks the queue. While the lock is held, the wakes go into a
// thread-local list; once it is released each is posted to the waiter's own
// worker, so a waiter is only ever resumed on its own thread and no thread
// touches another worker's objects.
#pragma once

#include <boost/asio/any_io_executor.hpp>

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "config/config.hpp"
#include "core/admission.hpp"
#include "core/balancer.hpp"
#include "core/endpoints.hpp"
#include "proxy/clock.hpp"
#include "proxy/endpoint.hpp"

namespace levee::proxy {

using core::Criticality;
using core::Duration;
using core::TenantId;
using core::TimePoint;

/// A request waiting in a cluster's queue, on some worker's executor.
class QueueWaiter {
 public:
  /// Runs on the waiter's executor.
  virtual void on_wake(const core::QueueGate::Wake& w) = 0;
  boost::asio::any_io_executor executor;

 protected:
  ~QueueWaiter() = default;
};

/// What one attempt at an endpoint learned, for the cluster's state.
struct AttemptResult {
  TimePoint now{};
  Criticality criticality = Criticality::Critical;
  TenantId tenant = core::kDefaultTenant;
  std::size_t endpoint = 0;
  core::Answer answer = core::Answer::Accepted;
  bool failure = false;                  ///< 5xx, connect failure, reset or timeout (outlier detection)
  std::optional<Duration> latency;       ///< to the response head, when one arrived
  std::optional<double> cost;
  std::optional<double> utilization;
};

/// The lock and the admission pipeline of a cluster. Successive Cluster
/// objects of one cluster (across reloads and DNS changes) share it while
/// the cluster's admission settings stay the same, so the queue, the
/// permits in flight, the learned limit, the throttle's history and the
/// tenants' usage carry on as if nothing happened.
struct ClusterCore {
  explicit ClusterCore(core::AdmissionConfig c) : admission(std::move(c)) {}
  std::mutex mu;
  core::Admission admission;
};

/// One worker's view of a cluster's effective weights (used by that worker
/// only), rebuilt when the cluster publishes new ones.
struct alignas(64) PickView {
  std::uint64_t version = 0;
  core::WeightedSet set;
  std::vector<core::EndpointLoad> loads;
};

class Cluster {
 public:
  /// `previous`: the same cluster in the Runtime this one replaces, or
  /// null. Its ClusterCore is shared when the admission settings allow it
  /// (core::same_shape; the gate modes are switched in place), and its
  /// endpoints' state is adopted by address.
  Cluster(const config::ClusterConfig& cfg, std::size_t index, core::AdmissionConfig admission,
          core::EndpointPolicy endpoints, std::vector<EndpointSpec> specs, std::size_t workers, TimePoint now,
          Cluster* previous);

  /// TLS to the endpoints (proxy/tls_context.hpp); null: cleartext.
  std::shared_ptr<const class ClientTls> tls;
  const config::ClusterConfig& cfg;
  const std::size_t index;
  std::vector<std::unique_ptr<Endpoint>> endpoints;
  /// Bumped whenever effective weights change; workers rebuild their sets.
  std::atomic<std::uint64_t> weights_version{1};
  /// Per worker, indexed by worker.
  std::vector<PickView> views;

  /// Whether this cluster carries on its predecessor's admission state.
  bool shares_core() const noexcept { return shared_core_; }
  /// Replaced by a newer Runtime's cluster: requests still in flight here
  /// report their results, but no longer steer the shared pipeline's limit.
  void retire() noexcept { retired_.store(true, std::memory_order_relaxed); }
  std::size_t find_endpoint(std::string_view label) const noexcept;

  /// Gates 2-4. A Queued verdict is resolved by a call to waiter.on_wake.
  core::Verdict admit(core::Arrival a, QueueWaiter& waiter);
  /// The queued request gives up. False: it was granted or dropped meanwhile
  /// and its wake is on the way.
  bool cancel(core::QueueGate::Ticket t, TimePoint now);
  /// One attempt at an endpoint: throttle, quota cost, utilization, outlier state.
  void on_attempt(const AttemptResult& r);
  /// Returns a permit: with the last attempt's latency sample, or without
  /// when the request never reached a backend. tag: its grant's.
  void release(TimePoint now, const core::QueueGate::Sample* sample, std::uint32_t tag);
  /// Spends retry budget on attempt number `attempt`.
  bool try_retry(TimePoint now, std::uint32_t attempt);
  /// Periodic: slow-start ramps, expired ejections, queued requests whose
  /// time is up.
  void tick(TimePoint now);

  /// An active health check's verdict.
  void set_endpoint_health(std::size_t ep, bool healthy, TimePoint now);
  /// An operator drains, disables or enables an endpoint. False: no change.
  bool set_endpoint_admin(std::size_t ep, core::AdminState s, TimePoint now);
  /// An operator's weight (nullopt: back to the configured one).
  void set_endpoint_weight(std::size_t ep, std::optional<double> w);

  // Fleet quotas: the quota sync's two entry points, each a short critical
  // section on the sync's own thread (src/quota, docs/algorithms.md).
  /// Adds the tenant cost recorded since the last call to out[tenant][criticality].
  void take_quota_usage(std::vector<core::TenantQuota::PerCriticality>& out);
  /// Installs the fleet's view in the quota gate; v gets the previous one.
  void set_fleet_view(core::TenantQuota::FleetView& v);

  bool limited() const noexcept { return limited_; }
  std::size_t available_endpoints() const;
  /// The gate modes in force (throttle, quota, queue).
  std::array<core::GateMode, 3> modes();

  /// For metrics and the admin page (takes the lock).
  struct Snapshot {
    std::uint32_t in_flight = 0, depth = 0, limit = 0, depth_over_quota = 0;
    std::array<std::uint32_t, core::kCriticalityCount> depth_by_crit{};
    double queue_time_s = 0, drain_rate = 0, utilization = -1;
    bool codel_overloaded = false, overloaded = false;
    std::array<double, core::kCriticalityCount> throttle_p{};
    std::vector<double> tenant_usage;  ///< by TenantId, CPU-s/s
    /// by TenantId: usage at each criticality alone, CPU-s/s
    std::vector<std::array<double, core::kCriticalityCount>> tenant_usage_by_crit;
    std::vector<double> tenant_quota;
    double retry_share = 0;
    double retry_budget = 0;  ///< retries the budget would allow now
  };
  Snapshot snapshot(TimePoint now);

 private:
  /// Copies the endpoint set's state into the Endpoint atomics. Under the lock.
  void publish_endpoints(bool weights_changed);
  /// Passes the endpoint set's ready share to the pipeline, unless retired. Under the lock.
  void rescale();
  static void post_wakes();

  std::shared_ptr<ClusterCore> core_;
  core::Admission& admission_;
  core::EndpointSet eps_;
  const bool limited_;
  bool shared_core_ = false;
  std::atomic<bool> retired_{false};
};

/// A concurrency permit of a cluster. It ends in one of two ways: finish()
/// returns it with the last attempt's latency sample; otherwise it returns
/// itself, without a sample, when it goes out of scope.
class Permit {
 public:
  Permit() noexcept = default;
  /// tag: the concurrency limit's tag for the grant (its lane, and the
  /// probe it was part of), told again when the permit comes back.
  Permit(Cluster* c, std::uint32_t tag) noexcept : c_(c), tag_(tag) {}
  Permit(Permit&& o) noexcept : c_(std::exchange(o.c_, nullptr)), tag_(o.tag_) {}
  Permit& operator=(Permit&& o) noexcept {
    if (this != &o) {
      reset();
      c_ = std::exchange(o.c_, nullptr);
      tag_ = o.tag_;
    }
    return *this;
  }
  Permit(const Permit&) = delete;
  Permit& operator=(const Permit&) = delete;
  ~Permit() { reset(); }

  explicit operator bool() const noexcept { return c_ != nullptr; }
  void finish(TimePoint at, const core::QueueGate::Sample& s) {
    if (auto* c = std::exchange(c_, nullptr)) c->release(at, &s, tag_);
  }
  void reset() noexcept {
    if (auto* c = std::exchange(c_, nullptr)) c->release(now(), nullptr, tag_);
  }

 private:
  Cluster* c_ = nullptr;
  std::uint32_t tag_ = 0;
};

}  // namespace levee::proxy

// The fleet quota sync (issue 16): a thread of its own that, every
// interval, takes each cluster's local usage since the last sync, sends one
// pipeline to Redis (core::FleetQuota decides what is in it), and hands each
// cluster's quota gate the fleet's view. The request path never waits on
// any of this: it reads the last view under the cluster lock it already
// holds. Redis standalone, Sentinel (the master re-resolved after any
// failure) or Cluster (MOVED and ASK followed; every key of a sync is in one
// slot), AUTH with a password or an ACL user, TLS.
//
// The proxy wires it with two hooks (take usage, apply a view), so this
// layer knows nothing of the proxy's types.
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "config/config.hpp"
#include "core/fleet_quota.hpp"
#include "core/tenant_quota.hpp"
#include "metrics/metrics.hpp"
#include "quota/redis_link.hpp"

namespace levee::quota {

class FleetSync {
 public:
  using PerCriticality = core::TenantQuota::PerCriticality;
  struct Hooks {
    /// Adds cluster `c`'s usage since the last call to `out` (Cluster::take_quota_usage).
    std::function<void(std::size_t c, std::vector<PerCriticality>& out)> take;
    /// Installs a view in cluster `c`'s gate, swapping (Cluster::set_fleet_view).
    std::function<void(std::size_t c, core::TenantQuota::FleetView& v)> apply;
  };

  /// Applies the start-up view (fallback limit until the first answer) to
  /// every cluster at once, so no request is ever enforced without one.
  /// Throws std::runtime_error when TLS files cannot be used.
  FleetSync(const config::QuotaSyncConfig& cfg, core::Duration window, core::FleetLayout layout, Hooks hooks);
  ~FleetSync();
  FleetSync(const FleetSync&) = delete;
  FleetSync& operator=(const FleetSync&) = delete;

  /// Starts the thread; the first sync is sent at once.
  void start();
  /// Pushes what is unpushed, deregisters (both bounded by the timeouts),
  /// and joins the thread.
  void stop();

  /// levee_quota_* metrics.
  void register_metrics(metrics::Registry& r);

 private:
  void run();
  void sync_once();
  /// (Re)connects by the mode: standalone, Sentinel lookup, Cluster seed.
  LinkResult connect(Deadline deadline);
  LinkResult connect_to(const std::string& host, std::uint16_t port, Deadline deadline, bool check_master);
  LinkResult handshake(Deadline deadline, bool check_master);
  /// A Cluster redirection in the replies: follows it once.
  LinkResult follow_redirects(const std::vector<core::RedisCommand>& cmds, std::vector<core::RedisReply>& replies,
                              Deadline deadline);
  void publish();
  void record_error(core::SyncError e, const std::string& what);
  core::TimePoint mono() const;
  std::int64_t wall_ms() const;

  config::QuotaSyncConfig cfg_;
  core::FleetLayout layout_;
  Hooks hooks_;
  std::unique_ptr<TlsContext> tls_;
  RedisLink link_;
  core::FleetQuota fleet_;
  std::vector<PerCriticality> deltas_;
  core::TenantQuota::FleetView view_;
  std::vector<core::RedisReply> replies_;
  std::size_t next_server_ = 0;  ///< which address (sentinel, seed) to try first
  std::string master_;           ///< last Sentinel answer, for the log
  std::string last_error_;

  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  bool started_ = false;

  // Read by the scrape (admin thread), written by the sync thread.
  std::atomic<int> state_{0};
  std::atomic<double> fallback_seconds_{0.0};
  std::atomic<std::uint32_t> fleet_size_{0};
  std::atomic<std::uint64_t> resets_{0};
  std::mutex usage_mu_;
  std::vector<double> fleet_usage_;  ///< by cluster x tenant
  metrics::CounterTable errors_;
  metrics::CounterTable commands_;
  metrics::HistogramTable latency_;
};

}  // namespace levee::quota

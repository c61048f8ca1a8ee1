// Fleet quotas in the simulator: the real sync logic (core::FleetQuota,
// issue 16) driven against the modelled Redis (sim/redis.hpp) in simulated
// time, the way src/quota/fleet_sync.cpp drives it against a real one:
//
//   every interval (a slow sync delays the next, never two at once):
//     per cluster: TenantQuota::take_recorded -> FleetQuota::add_local
//     FleetQuota::prepare -> the pipeline travels `latency` to Redis, runs
//     there at its arrival, and the replies travel `latency` back ->
//     FleetQuota::complete; no answer within `timeout` -> fail(Timeout)
//     per cluster: FleetQuota::view -> TenantQuota::set_fleet_view
//
// As the shell does, a failed sync closes the connection, and the next one
// connects first (one more round trip, within connect_timeout); a refusing
// Redis fails a connect after one round trip, a hanging one at
// connect_timeout; a Redis that restarted resets the connections opened
// before. The wall clock the core needs (bucket numbers, registrations) is
// kWallEpochMs plus simulated time, the same for every instance. Not
// modelled: AUTH/SELECT round trips, Sentinel, Cluster redirections, TLS.
#pragma once

#include <functional>
#include <vector>

#include "core/fleet_quota.hpp"
#include "core/tenant_quota.hpp"
#include "sim/engine.hpp"
#include "sim/redis.hpp"

namespace levee::sim {

/// Simulated time zero on the shared wall clock (Unix ms; a whole second).
inline constexpr std::int64_t kWallEpochMs = 1'700'000'000'000;
inline std::int64_t wall_ms(TimePoint t) {
  return kWallEpochMs + std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count();
}

struct FleetSyncConfig {
  /// The core's: interval, bucket, window, timeout, member_ttl,
  /// max_instances, key_prefix, fleet, instance_id.
  core::FleetQuotaConfig core;
  Duration latency = std::chrono::microseconds(500);  ///< one way, instance to Redis
  Duration connect_timeout = std::chrono::milliseconds(200);
};

/// One instance's sync: src/quota/fleet_sync.cpp with the modelled Redis.
class FleetSync final : public Handler {
 public:
  using PerCriticality = core::TenantQuota::PerCriticality;
  struct Hooks {
    /// Adds cluster c's usage since the last call to out (TenantQuota::take_recorded).
    std::function<void(std::size_t c, std::vector<PerCriticality>& out)> take;
    /// Installs a view in cluster c's gate, swapping (TenantQuota::set_fleet_view).
    std::function<void(std::size_t c, core::TenantQuota::FleetView& v)> apply;
  };

  /// Applies the start-up view (the fallback limit until the first answer)
  /// to every cluster, as the shell's constructor does.
  FleetSync(Engine& e, RedisModel& r, FleetSyncConfig cfg, core::FleetLayout layout, Hooks hooks);

  /// phase in [0,1): where in its interval this instance's first sync falls
  /// (instances do not start at the same moment).
  void start(double phase);

  const core::FleetQuota& quota() const noexcept { return fleet_; }
  core::SyncState state() const noexcept { return fleet_.state(); }
  Duration time_in_fallback(TimePoint now) const noexcept { return fleet_.time_in_fallback(now); }
  std::uint64_t syncs() const noexcept { return syncs_; }
  std::uint64_t failures() const noexcept { return failures_; }
  std::uint64_t commands_sent() const noexcept { return commands_; }

  void fire(std::uint32_t kind, std::uint32_t slot, std::uint32_t gen) override;

 private:
  enum Kind : std::uint32_t { kSync, kConnectArrive, kConnected, kArrive, kReply, kTimeout };
  void send();
  void done(bool ok, core::SyncError e);
  void publish();

  Engine& e_;
  RedisModel& redis_;
  FleetSyncConfig cfg_;
  std::size_t clusters_;
  std::size_t tenants_;
  Hooks hooks_;
  core::FleetQuota fleet_;
  std::vector<PerCriticality> deltas_;
  core::TenantQuota::FleetView view_;
  std::vector<core::RedisReply> replies_;
  const std::vector<core::RedisCommand>* cmds_ = nullptr;

  bool connected_ = false;
  std::uint32_t conn_gen_ = 0;  ///< Redis's generation when this connection opened
  bool busy_ = false;
  bool refused_ = false;        ///< the attempt in flight was refused or reset
  std::uint32_t seq_ = 0;       ///< the attempt in flight; stale events carry an older one
  TimePoint started_{};         ///< of the sync in flight
  std::uint64_t syncs_ = 0, failures_ = 0, commands_ = 0;
};

}  // namespace levee::sim

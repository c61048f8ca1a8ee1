// Fleet quotas in the simulator: many levee instances sharing tenant usage
// through a modelled Redis, with a sync interval, a round-trip latency and
// outage windows.
//
// The real sync logic (issue 16, core/fleet_quota.hpp) is not on this
// branch yet. Until it is, FleetSync is the model of it that the simulator
// plugs in, behind the interface the real one will sit behind:
//   - every `interval` an instance pushes the usage it recorded since its
//     last good sync and reads back the fleet's totals; what the others
//     added since its last read is recorded into its own tenant-quota
//     window (so the quota gate compares the fleet's usage, up to one sync
//     interval and one round trip stale, with the quota);
//   - a sync that gets no answer within `timeout` (Redis down, or slower
//     than the timeout) puts the instance in fallback, where its local
//     usage counts `divisor` times: the same as comparing it with
//     quota / max_instances (or / the last known fleet size), which is the
//     design's conservative local limit; unpushed usage is kept and pushed
//     at the next good sync.
// Known difference from the real logic, to go when it is plugged in: usage
// recorded while in fallback stays scaled in the local window until it
// ages out (tenants.window), so enforcement is stricter than needed for one
// window after Redis comes back.
#pragma once

#include <functional>
#include <vector>

#include "sim/engine.hpp"

namespace levee::sim {

struct FleetSyncConfig {
  Duration interval = std::chrono::milliseconds(200);
  Duration latency = std::chrono::microseconds(500);  ///< one way, instance to Redis
  Duration timeout = std::chrono::milliseconds(100);
  std::uint32_t max_instances = 0;  ///< fallback divisor; 0: the last known fleet size
  Duration member_ttl = std::chrono::seconds(2);
};

/// The shared store: running totals per field, members by last sync, and
/// the windows when it does not answer.
class RedisModel {
 public:
  void add_outage(TimePoint from, TimePoint to) { outages_.emplace_back(from, to); }
  bool up(TimePoint t) const noexcept {
    for (const auto& [a, b] : outages_)
      if (t >= a && t < b) return false;
    return true;
  }
  /// One sync arriving at t: adds deltas, registers the instance, and
  /// returns the totals and the number of live members.
  std::uint32_t exec(TimePoint t, std::uint32_t instance, Duration ttl, const std::vector<double>& deltas,
                     std::vector<double>& totals);
  std::uint64_t syncs() const noexcept { return syncs_; }

 private:
  std::vector<std::pair<TimePoint, TimePoint>> outages_;
  std::vector<double> totals_;
  std::vector<TimePoint> members_;  ///< by instance: last sync (TimePoint{} never)
  std::vector<bool> seen_;
  std::uint64_t syncs_ = 0;
};

enum class SyncState : std::uint8_t { Starting, Synced, Fallback };

/// One instance's side of the sync.
class FleetSync final : public Handler {
 public:
  /// remote(field, cpu_seconds): usage the rest of the fleet added, to be
  /// recorded into the instance's quota window.
  FleetSync(Engine& e, RedisModel& r, FleetSyncConfig cfg, std::uint32_t instance, std::size_t fields,
            std::function<void(std::size_t, double)> remote);

  /// phase in [0,1): where in its interval this instance's syncs fall.
  void start(double phase);
  void add_local(std::size_t field, double cpu_seconds) { unpushed_[field] += cpu_seconds; }
  SyncState state() const noexcept { return state_; }
  /// How many times local usage counts while not synced.
  double divisor() const noexcept;
  std::uint32_t fleet_size() const noexcept { return fleet_size_; }
  Duration time_in_fallback(TimePoint now) const noexcept;
  std::uint64_t failures() const noexcept { return failures_; }

  void fire(std::uint32_t kind, std::uint32_t slot, std::uint32_t gen) override;

 private:
  enum Kind : std::uint32_t { kSync, kArrive, kReply, kTimeout };
  void enter(SyncState s);
  void fail();

  Engine& e_;
  RedisModel& redis_;
  FleetSyncConfig cfg_;
  std::uint32_t instance_;
  std::function<void(std::size_t, double)> remote_;
  std::vector<double> unpushed_, in_flight_, last_totals_, reply_;
  std::uint32_t seq_ = 0;
  bool busy_ = false;
  bool applied_ = false;  ///< the sync in flight reached Redis
  SyncState state_ = SyncState::Starting;
  std::uint32_t fleet_size_ = 0;
  TimePoint fallback_since_{};
  Duration fallback_total_{};
  std::uint64_t failures_ = 0;
};

}  // namespace levee::sim

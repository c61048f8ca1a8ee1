// Fleet quotas: many levee instances share tenant CPU usage through Redis
// (issue 16). This is the sync's *logic*, as plain deterministic C++: what
// to add to which key for which time bucket, how the fleet's answer becomes
// the "remote usage" the quota gate adds to local usage, the fallback state
// machine, and how a restarted or reconnected instance resumes. The Redis
// client and its thread live in src/quota; the simulator drives this class
// with a modelled Redis. Time is passed in twice: `now` on levee's monotonic
// timeline (what the gate compares with) and `wall_ms`, Unix milliseconds,
// the one clock all instances share (bucket numbers and registrations).
//
// Keys (all with the hash tag {fleet}, so one sync touches one Cluster slot):
//   <prefix>:{<fleet>}:u:<bucket>  hash  "<cluster>|<tenant>|<CRITICALITY>" ->
//                                        CPU-seconds the fleet used in that bucket
//   <prefix>:{<fleet>}:members     zset  instance id -> last sync (wall ms)
//   <prefix>:{<fleet>}:epoch       string "<creator id>:<created wall ms>":
//                                        tells a Redis that lost its data
//                                        (restart, failover) from one that did not
//   <prefix>:{<fleet>}:since       hash  "<cluster>|<tenant>" -> wall ms of the
//                                        tenant's first usage: the span its
//                                        fleet rate is measured over, as the
//                                        local window measures from its start
// Each sync is one pipeline: register, add this instance's unpushed usage
// to its buckets (HINCRBYFLOAT), read back the window's buckets (HGETALL).
// See docs/algorithms.md ("Fleet quotas") for the overshoot bound.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/criticality.hpp"
#include "core/tenant_quota.hpp"
#include "core/time.hpp"

namespace levee::core {

/// A reply as the Redis protocol (RESP2) gives it. The shell converts its
/// client library's replies into this; a modelled Redis builds them directly.
struct RedisReply {
  enum class Type : std::uint8_t { Nil, Integer, String, Status, Error, Array };
  Type type = Type::Nil;
  std::int64_t integer = 0;
  std::string str;  ///< String, Status and Error
  std::vector<RedisReply> elements;

  static RedisReply nil() { return {}; }
  static RedisReply integer_of(std::int64_t v) { return {Type::Integer, v, {}, {}}; }
  static RedisReply string_of(std::string s) { return {Type::String, 0, std::move(s), {}}; }
  static RedisReply status_of(std::string s) { return {Type::Status, 0, std::move(s), {}}; }
  static RedisReply error_of(std::string s) { return {Type::Error, 0, std::move(s), {}}; }
};

/// One command: its arguments, the name first.
using RedisCommand = std::vector<std::string>;

struct FleetQuotaConfig {
  Duration interval = std::chrono::milliseconds(200);  ///< between syncs
  Duration bucket = std::chrono::seconds(1);           ///< width of a usage bucket
  Duration window = std::chrono::seconds(10);          ///< = tenants.window
  Duration timeout = std::chrono::milliseconds(100);   ///< a sync's command timeout
  Duration member_ttl = std::chrono::seconds(2);       ///< registration lifetime
  std::uint32_t max_instances = 0;  ///< fallback divisor; 0: the last known fleet size
  std::string key_prefix = "levee";
  std::string fleet = "default";  ///< hash tag: fleets sharing a Redis keep apart
  std::string instance_id;        ///< unique per process (the shell makes one)
};

/// The names the sync uses on the wire, by index: instances agree on names,
/// not on the order of their configuration files.
struct FleetLayout {
  std::vector<std::string> clusters;
  std::vector<std::string> tenants;  ///< by TenantId (0: default)
};

enum class SyncState : std::uint8_t {
  Starting,  ///< no fleet view yet: fallback limit until the first sync answers
  Synced,    ///< enforcing against the fleet's usage
  Fallback,  ///< Redis unreachable, slow or strange: quota / fleet size, locally
};
std::string_view to_string(SyncState s) noexcept;

/// Why a sync failed; one metric label value each.
enum class SyncError : std::uint8_t {
  Connect,   ///< no connection (refused, unreachable, TLS or AUTH failed, no master)
  Timeout,   ///< no complete answer within the timeout
  Protocol,  ///< bytes that are not RESP (a garbage server)
  Reply,     ///< RESP, but not the expected answer (error reply, wrong type, script error)
  Count_,
};
inline constexpr std::size_t kSyncErrorCount = static_cast<std::size_t>(SyncError::Count_);
std::string_view to_string(SyncError e) noexcept;

class FleetQuota {
 public:
  using PerCriticality = TenantQuota::PerCriticality;

  FleetQuota(FleetQuotaConfig cfg, FleetLayout layout, TimePoint now);

  /// Usage a cluster recorded since the last call (CPU-seconds by TenantId
  /// and criticality, as TenantQuota::take_recorded gives it), attributed to
  /// the bucket of wall_ms.
  void add_local(std::size_t cluster, const std::vector<PerCriticality>& deltas, std::int64_t wall_ms);

  /// The commands of the next sync (one pipeline); complete() or fail()
  /// must follow before the next prepare().
  const std::vector<RedisCommand>& prepare(std::int64_t wall_ms);
  /// The commands of a clean exit: push what is unpushed, deregister.
  const std::vector<RedisCommand>& prepare_leave(std::int64_t wall_ms);

  /// The answers to prepare()'s commands, one each, in order. Returns false
  /// when they are not what was asked for (the sync then counts as failed
  /// with SyncError::Reply, and fail() need not be called).
  bool complete(const std::vector<RedisReply>& replies, TimePoint now);
  /// The sync got no usable answer.
  void fail(SyncError e, TimePoint now);

  /// The gate's view for one cluster (reuses out's buffers).
  void view(std::size_t cluster, TenantQuota::FleetView& out) const;

  SyncState state() const noexcept { return state_; }
  /// Instances registered at the last sync (this one included); 0 before.
  std::uint32_t fleet_size() const noexcept { return fleet_size_; }
  /// What the quota is divided by while not synced.
  double fallback_divisor() const noexcept;
  /// Total time spent in Fallback, up to now.
  Duration time_in_fallback(TimePoint now) const noexcept;
  /// The fleet's usage (every instance) at the last sync, CPU-s/s, all criticalities.
  double fleet_usage(std::size_t cluster, TenantId t) const noexcept;
  /// Redis commands in the last prepare() (for the commands-sent metric).
  std::size_t commands() const noexcept { return cmds_.size(); }
  /// Failures by kind since start.
  std::uint64_t errors(SyncError e) const noexcept { return errors_[static_cast<std::size_t>(e)]; }
  /// How often Redis was found to have lost the fleet's data (a new epoch).
  std::uint64_t resets() const noexcept { return resets_; }

  const std::string& bucket_key(std::int64_t bucket) const;
  std::int64_t bucket_of(std::int64_t wall_ms) const noexcept;

 private:
  struct Slot {
    std::int64_t bucket = -1;
    std::vector<double> own;     ///< recorded here, by field
    std::vector<double> pushed;  ///< acknowledged by Redis
    std::vector<double> sent;    ///< in the pipeline being answered
    std::vector<double> fleet;   ///< every instance's total at the last read
  };
  std::size_t field(std::size_t cluster, std::size_t tenant, std::size_t crit) const noexcept {
    return (cluster * tenants_ + tenant) * kCriticalityCount + crit;
  }
  Slot& slot_for(std::int64_t bucket);
  void reset_slot(Slot& s, std::int64_t bucket);
  void push_commands(std::int64_t wall_ms);
  void enter(SyncState s, TimePoint now);
  static bool parse_double(const std::string& s, double& out) noexcept;

  FleetQuotaConfig cfg_;
  FleetLayout layout_;
  std::size_t tenants_ = 0;
  std::size_t nfields_ = 0;
  std::int64_t bucket_ms_ = 1000;
  std::int64_t nbuckets_ = 10;  ///< buckets in the window
  std::vector<std::string> field_names_;
  std::vector<std::string> group_names_;  ///< "<cluster>|<tenant>", by cluster x tenant
  std::unordered_map<std::string, std::size_t> field_index_;
  std::string key_base_;  ///< "<prefix>:{<fleet>}:"
  std::string members_key_, epoch_key_, since_key_;
  std::unordered_map<std::string, std::size_t> group_index_;
  std::vector<std::int64_t> first_local_ms_;  ///< by group: this instance's first usage (kNever: none)
  std::vector<bool> since_sent_;              ///< by group: HSETNX acknowledged since the last epoch
  std::vector<std::int64_t> since_ms_;        ///< by group: the fleet's answer (kNever: none)
  mutable std::string key_buf_;

  std::vector<Slot> ring_;  ///< nbuckets_ + 2 slots, by bucket number
  std::int64_t newest_ = -1;

  // The pipeline being answered, and where its parts are.
  std::vector<RedisCommand> cmds_;
  enum class Expect : std::uint8_t { Ok, Epoch, Integer, Increment, Card, Read, Since, SinceSet };
  struct Part {
    Expect expect;
    std::size_t slot = 0;   ///< Increment, Read
    std::size_t field = 0;  ///< Increment
  };
  std::vector<Part> parts_;
  bool leaving_ = false;

  // The last good answer.
  std::string epoch_;                ///< "" before the first answer
  std::int64_t epoch_created_ms_ = 0;
  /// After a reset: until this wall time the fleet's data is still being
  /// pushed again, and the answers are not enforced (see complete()).
  std::int64_t settle_until_ms_ = INT64_MIN;
  std::uint32_t fleet_size_ = 0;
  std::vector<double> remote_rate_;  ///< by field: others' CPU-s/s
  std::vector<double> fleet_rate_;   ///< by field: everyone's CPU-s/s
  TimePoint valid_until_{};

  SyncState state_ = SyncState::Starting;
  TimePoint fallback_since_{};
  Duration fallback_total_{};
  std::int64_t prepared_wall_ms_ = 0;
  static constexpr std::int64_t kNever = INT64_MAX;
  std::int64_t started_ms_ = kNever;  ///< wall clock of this instance's first sync
  std::array<std::uint64_t, kSyncErrorCount> errors_{};
  std::uint64_t resets_ = 0;
};

}  // namespace levee::core

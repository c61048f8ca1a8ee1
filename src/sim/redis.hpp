// The simulator's Redis: an in-memory store that executes the commands the
// fleet quota sync (core/fleet_quota) sends, with Redis's reply shapes,
// errors and key expiry, in simulated time; plus the windows when it does
// not answer. It is not a Redis: only the commands core::FleetQuota emits
// (SET with NX/XX and PX/EX, GET, PEXPIRE, EXPIRE, DEL, HINCRBYFLOAT, HSETNX,
// HGETALL, ZADD, ZREMRANGEBYSCORE, ZCARD, ZREM), each as Redis answers it.
// Anything else gets "ERR unknown command", as from a Redis that lacks it.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/fleet_quota.hpp"
#include "sim/engine.hpp"

namespace levee::sim {

class RedisModel {
 public:
  /// What a client sees while Redis is out.
  enum class OutageMode : std::uint8_t {
    Hang,    ///< nothing answers (a partition, a stopped host): the client's timeout decides
    Refuse,  ///< the port refuses and open connections are reset (the process is gone)
  };
  struct Outage {
    TimePoint from, to;
    OutageMode mode = OutageMode::Hang;
    bool flush = false;  ///< comes back empty (a restart without persistence); connections are reset
  };
  void add_outage(const Outage& o) { outages_.push_back(o); }
  /// The outage in force at t, or nullptr.
  const Outage* outage(TimePoint t) const noexcept;
  bool up(TimePoint t) const noexcept { return outage(t) == nullptr; }
  /// Counts the restarts (flushing outages) that ended by t: a connection
  /// opened in an earlier generation is reset by the server.
  std::uint32_t generation(TimePoint t) const noexcept;

  /// Executes a pipeline arriving at t, in order; one reply per command.
  void exec(TimePoint t, const std::vector<core::RedisCommand>& cmds, std::vector<core::RedisReply>& out);
  /// One command (tests).
  core::RedisReply exec_one(TimePoint t, const core::RedisCommand& c);

  std::uint64_t commands() const noexcept { return commands_; }
  std::uint64_t pipelines() const noexcept { return pipelines_; }
  /// Keys alive at t (expired ones dropped first).
  std::size_t keys(TimePoint t);
  /// A restart without persistence, now (tests; outages with flush do it themselves).
  void flush() { keys_.clear(); }

 private:
  enum class Kind : std::uint8_t { String, Hash, ZSet };
  struct Value {
    Kind kind = Kind::String;
    std::string str;
    std::map<std::string, std::string> hash;  ///< ordered: HGETALL answers in a fixed order
    std::map<std::string, double> zset;       ///< member -> score
    TimePoint expires = TimePoint::max();
  };
  Value* find(TimePoint t, const std::string& key);
  Value* find_or_make(TimePoint t, const std::string& key, Kind k, core::RedisReply& err);
  void expire_all(TimePoint t);
  void catch_up(TimePoint t);

  std::vector<Outage> outages_;
  std::uint32_t generation_ = 0;
  std::vector<bool> flushed_;  ///< by outage: its flush has been applied
  std::unordered_map<std::string, Value> keys_;
  TimePoint next_sweep_{};
  std::uint64_t commands_ = 0, pipelines_ = 0;
};

}  // namespace levee::sim

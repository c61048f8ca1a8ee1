#include "sim/fleet.hpp"

#include <algorithm>

namespace levee::sim {

namespace {
// Which failure a timer or a reply stands for (the event's slot).
constexpr std::uint32_t kAsTimeout = 0, kAsConnect = 1;
}  // namespace

FleetSync::FleetSync(Engine& e, RedisModel& r, FleetSyncConfig cfg, core::FleetLayout layout, Hooks hooks)
    : e_(e),
      redis_(r),
      cfg_(std::move(cfg)),
      clusters_(layout.clusters.size()),
      tenants_(layout.tenants.size()),
      hooks_(std::move(hooks)),
      fleet_(cfg_.core, std::move(layout), e.now()) {
  publish();  // Starting: the fallback limit until the first answer
}

void FleetSync::start(double phase) {
  e_.after(core::from_seconds(core::to_seconds(cfg_.core.interval) * phase), this, kSync);
}

void FleetSync::publish() {
  for (std::size_t c = 0; c < clusters_; ++c) {
    fleet_.view(c, view_);
    hooks_.apply(c, view_);  // swaps: view_ holds the previous view afterwards
  }
}

void FleetSync::send() {
  // The pipeline's own deadline starts once connected (the shell's order).
  ++seq_;
  commands_ += cmds_->size();
  e_.after(cfg_.latency, this, kArrive, 0, seq_);
  e_.after(cfg_.core.timeout, this, kTimeout, kAsTimeout, seq_);
}

void FleetSync::done(bool ok, core::SyncError err) {
  const TimePoint now = e_.now();
  busy_ = false;
  ++seq_;  // whatever is still on its way for this sync is stale
  ++syncs_;
  if (ok) {
    if (!fleet_.complete(replies_, now)) ++failures_;  // an unexpected answer: Fallback, the link stays
  } else {
    ++failures_;
    connected_ = false;  // the shell closes the link after any failure
    fleet_.fail(err, now);
  }
  publish();
  // A slow sync delays the next one; it never makes two in a row.
  e_.at(std::max(started_ + cfg_.core.interval, now), this, kSync);
}

void FleetSync::fire(std::uint32_t kind, std::uint32_t slot, std::uint32_t gen) {
  const TimePoint now = e_.now();
  switch (kind) {
    case kSync: {
      if (busy_) return;
      busy_ = true;
      started_ = now;
      const std::int64_t wall = wall_ms(now);
      for (std::size_t c = 0; c < clusters_; ++c) {
        deltas_.assign(tenants_, PerCriticality{});
        hooks_.take(c, deltas_);
        fleet_.add_local(c, deltas_, wall);
      }
      cmds_ = &fleet_.prepare(wall);
      if (connected_) {
        send();
        return;
      }
      ++seq_;
      e_.after(cfg_.latency, this, kConnectArrive, 0, seq_);
      e_.after(cfg_.connect_timeout, this, kTimeout, kAsConnect, seq_);
      return;
    }
    case kConnectArrive: {
      if (gen != seq_) return;
      const auto* o = redis_.outage(now);
      if (o != nullptr && o->mode == RedisModel::OutageMode::Hang) return;  // connect_timeout decides
      const bool refused = o != nullptr;
      if (!refused) conn_gen_ = redis_.generation(now);
      e_.after(cfg_.latency, this, kConnected, refused ? kAsConnect : 0, seq_);
      return;
    }
    case kConnected:
      if (gen != seq_) return;
      if (slot == kAsConnect) return done(false, core::SyncError::Connect);
      connected_ = true;
      send();
      return;
    case kArrive: {
      if (gen != seq_) return;
      const auto* o = redis_.outage(now);
      if (o != nullptr && o->mode == RedisModel::OutageMode::Hang) return;  // the timeout decides
      if (o != nullptr || redis_.generation(now) != conn_gen_) {
        // The process is gone, or it restarted since this connection
        // opened: the connection is reset.
        e_.after(cfg_.latency, this, kReply, kAsConnect, seq_);
        return;
      }
      redis_.exec(now, *cmds_, replies_);
      e_.after(cfg_.latency, this, kReply, 0, seq_);
      return;
    }
    case kReply:
      if (gen != seq_) return;
      if (slot == kAsConnect) return done(false, core::SyncError::Connect);
      return done(true, core::SyncError::Reply);
    case kTimeout:
      if (gen != seq_ || !busy_) return;
      return done(false, slot == kAsConnect ? core::SyncError::Connect : core::SyncError::Timeout);
  }
}

}  // namespace levee::sim

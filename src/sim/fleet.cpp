#include "sim/fleet.hpp"

#include <algorithm>

namespace levee::sim {

std::uint32_t RedisModel::exec(TimePoint t, std::uint32_t instance, Duration ttl, const std::vector<double>& deltas,
                               std::vector<double>& totals) {
  ++syncs_;
  if (totals_.size() < deltas.size()) totals_.resize(deltas.size(), 0.0);
  for (std::size_t f = 0; f < deltas.size(); ++f) totals_[f] += deltas[f];
  if (members_.size() <= instance) {
    members_.resize(instance + 1);
    seen_.resize(instance + 1, false);
  }
  members_[instance] = t;
  seen_[instance] = true;
  std::uint32_t live = 0;
  for (std::size_t i = 0; i < members_.size(); ++i) live += seen_[i] && t - members_[i] < ttl;
  totals.assign(totals_.begin(), totals_.begin() + static_cast<std::ptrdiff_t>(deltas.size()));
  return live;
}

FleetSync::FleetSync(Engine& e, RedisModel& r, FleetSyncConfig cfg, std::uint32_t instance, std::size_t fields,
                     std::function<void(std::size_t, double)> remote)
    : e_(e),
      redis_(r),
      cfg_(cfg),
      instance_(instance),
      remote_(std::move(remote)),
      unpushed_(fields, 0.0),
      in_flight_(fields, 0.0),
      last_totals_(fields, 0.0) {}

void FleetSync::start(double phase) {
  // Instances start at different moments: their syncs are not in step.
  fallback_since_ = e_.now();
  e_.after(core::from_seconds(core::to_seconds(cfg_.interval) * phase), this, kSync);
}

double FleetSync::divisor() const noexcept {
  if (cfg_.max_instances > 0) return cfg_.max_instances;
  return std::max<std::uint32_t>(1, fleet_size_);
}

Duration FleetSync::time_in_fallback(TimePoint now) const noexcept {
  return fallback_total_ + (state_ == SyncState::Synced ? Duration::zero() : now - fallback_since_);
}

void FleetSync::enter(SyncState s) {
  if (s == state_) return;
  const TimePoint now = e_.now();
  if (state_ != SyncState::Synced) fallback_total_ += now - fallback_since_;
  if (s != SyncState::Synced) fallback_since_ = now;
  state_ = s;
}

void FleetSync::fail() {
  ++failures_;
  busy_ = false;
  // Keep what did not get through: it goes with the next sync. What did get
  // through (an answer slower than the timeout) is ours in the totals.
  for (std::size_t f = 0; f < unpushed_.size(); ++f) {
    if (applied_) last_totals_[f] += in_flight_[f];
    else unpushed_[f] += in_flight_[f];
  }
  std::fill(in_flight_.begin(), in_flight_.end(), 0.0);
  enter(state_ == SyncState::Starting ? SyncState::Starting : SyncState::Fallback);
}

void FleetSync::fire(std::uint32_t kind, std::uint32_t, std::uint32_t gen) {
  switch (kind) {
    case kSync:
      e_.after(cfg_.interval, this, kSync);
      if (busy_) return;  // the previous sync is still out
      busy_ = true;
      applied_ = false;
      ++seq_;
      in_flight_.swap(unpushed_);
      std::fill(unpushed_.begin(), unpushed_.end(), 0.0);
      e_.after(cfg_.latency, this, kArrive, 0, seq_);
      e_.after(cfg_.timeout, this, kTimeout, 0, seq_);
      return;
    case kArrive:
      if (gen != seq_ || !busy_) return;
      if (!redis_.up(e_.now())) return;  // no answer: the timeout decides
      fleet_size_ = redis_.exec(e_.now(), instance_, cfg_.member_ttl, in_flight_, reply_);
      applied_ = true;
      e_.after(cfg_.latency, this, kReply, 0, seq_);
      return;
    case kReply: {
      if (gen != seq_ || !busy_) return;
      busy_ = false;
      // What the others added since our last read.
      for (std::size_t f = 0; f < reply_.size(); ++f) {
        const double d = reply_[f] - last_totals_[f] - in_flight_[f];
        last_totals_[f] = reply_[f];
        if (d > 1e-12) remote_(f, d);
      }
      std::fill(in_flight_.begin(), in_flight_.end(), 0.0);
      enter(SyncState::Synced);
      return;
    }
    case kTimeout:
      if (gen != seq_ || !busy_) return;
      fail();
      return;
  }
}

}  // namespace levee::sim

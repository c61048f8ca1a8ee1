#include "core/fleet_quota.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>

namespace levee::core {

namespace {

std::int64_t to_ms(Duration d) noexcept {
  return std::chrono::duration_cast<std::chrono::milliseconds>(d).count();
}

std::int64_t floor_div(std::int64_t a, std::int64_t b) noexcept {
  std::int64_t q = a / b;
  return (a % b != 0 && (a < 0) != (b < 0)) ? q - 1 : q;
}

std::string num(std::int64_t v) { return std::to_string(v); }

std::string num(double v) {
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, v);  // shortest form that reads back exactly
  return std::string(buf, r.ptr);
}

// Below this a delta is rounding noise, not usage worth a command.
constexpr double kEpsilon = 1e-12;

}  // namespace

std::string_view to_string(SyncState s) noexcept {
  switch (s) {
    case SyncState::Starting: return "starting";
    case SyncState::Synced: return "synced";
    case SyncState::Fallback: return "fallback";
  }
  return "unknown";
}

std::string_view to_string(SyncError e) noexcept {
  switch (e) {
    case SyncError::Connect: return "connect";
    case SyncError::Timeout: return "timeout";
    case SyncError::Protocol: return "protocol";
    case SyncError::Reply: return "reply";
    case SyncError::Count_: break;
  }
  return "unknown";
}

FleetQuota::FleetQuota(FleetQuotaConfig cfg, FleetLayout layout, TimePoint now)
    : cfg_(std::move(cfg)), layout_(std::move(layout)) {
  tenants_ = layout_.tenants.size();
  nfields_ = layout_.clusters.size() * tenants_ * kCriticalityCount;
  bucket_ms_ = std::max<std::int64_t>(1, to_ms(cfg_.bucket));
  // The window in whole buckets, rounded up: the fleet never looks back less
  // far than a local window does.
  nbuckets_ = std::max<std::int64_t>(1, (to_ms(cfg_.window) + bucket_ms_ - 1) / bucket_ms_);
  field_names_.reserve(nfields_);
  for (const auto& c : layout_.clusters)
    for (const auto& t : layout_.tenants)
      for (std::size_t k = 0; k < kCriticalityCount; ++k) {
        field_names_.push_back(c + "|" + t + "|" + std::string(core::to_string(criticality_from_index(k))));
        field_index_.emplace(field_names_.back(), field_names_.size() - 1);
      }
  for (const auto& c : layout_.clusters)
    for (const auto& t : layout_.tenants) {
      group_names_.push_back(c + "|" + t);
      group_index_.emplace(group_names_.back(), group_names_.size() - 1);
    }
  first_local_ms_.assign(group_names_.size(), kNever);
  since_sent_.assign(group_names_.size(), false);
  since_ms_.assign(group_names_.size(), kNever);
  key_base_ = (cfg_.key_prefix.empty() ? std::string() : cfg_.key_prefix + ":") + "{" + cfg_.fleet + "}:";
  members_key_ = key_base_ + "members";
  epoch_key_ = key_base_ + "epoch";
  since_key_ = key_base_ + "since";
  // The window's N buckets, the oldest one partly counted, and a spare so
  // that the next bucket never reuses a slot still read.
  ring_.resize(static_cast<std::size_t>(nbuckets_ + 2));
  for (auto& s : ring_) reset_slot(s, -1);
  remote_rate_.assign(nfields_, 0.0);
  fleet_rate_.assign(nfields_, 0.0);
  fallback_since_ = now;
}

std::int64_t FleetQuota::bucket_of(std::int64_t wall_ms) const noexcept { return floor_div(wall_ms, bucket_ms_); }

const std::string& FleetQuota::bucket_key(std::int64_t bucket) const {
  key_buf_ = key_base_ + "u:" + num(bucket);
  return key_buf_;
}

void FleetQuota::reset_slot(Slot& s, std::int64_t bucket) {
  s.bucket = bucket;
  s.own.assign(nfields_, 0.0);
  s.pushed.assign(nfields_, 0.0);
  s.sent.assign(nfields_, 0.0);
  s.fleet.assign(nfields_, 0.0);
}

FleetQuota::Slot& FleetQuota::slot_for(std::int64_t bucket) {
  const auto n = static_cast<std::int64_t>(ring_.size());
  Slot& s = ring_[static_cast<std::size_t>(((bucket % n) + n) % n)];
  // A slot is reused once its bucket has left the window: what it held is
  // history (never replayed into a newer bucket).
  if (s.bucket != bucket) reset_slot(s, bucket);
  return s;
}

void FleetQuota::add_local(std::size_t cluster, const std::vector<PerCriticality>& deltas, std::int64_t wall_ms) {
  if (cluster >= layout_.clusters.size()) return;
  std::int64_t b = bucket_of(wall_ms);
  if (newest_ >= 0 && b < newest_) {
    // The wall clock went back. By a bucket (NTP slewing, a step of a few
    // ms at a boundary): keep filling the newest. By more: the old buckets
    // no longer line up with the rest of the fleet; start the ring afresh.
    if (newest_ - b <= 1) b = newest_;
    else for (auto& s : ring_) reset_slot(s, -1);
  }
  newest_ = b;
  Slot& s = slot_for(b);
  const std::size_t n = std::min(deltas.size(), tenants_);
  for (std::size_t t = 0; t < n; ++t)
    for (std::size_t c = 0; c < kCriticalityCount; ++c)
      if (deltas[t][c] > 0) {
        s.own[field(cluster, t, c)] += deltas[t][c];
        // The time of the take, not of the first request: later by up to an
        // interval, so the span is shorter and the rate, if anything, higher.
        auto& first = first_local_ms_[cluster * tenants_ + t];
        first = std::min(first, wall_ms);
      }
}

void FleetQuota::push_commands(std::int64_t wall_ms) {
  const std::int64_t cur = newest_ >= 0 ? std::max(bucket_of(wall_ms), newest_) : bucket_of(wall_ms);
  for (std::size_t i = 0; i < ring_.size(); ++i) {
    Slot& s = ring_[i];
    std::fill(s.sent.begin(), s.sent.end(), 0.0);
    // Only buckets still inside the window: usage that has left it is not
    // pushed late (that would be a replay, counted against the present).
    if (s.bucket < 0 || s.bucket > cur || s.bucket < cur - nbuckets_) continue;
    bool any = false;
    for (std::size_t f = 0; f < nfields_; ++f) {
      const double d = s.own[f] - s.pushed[f];
      if (d <= kEpsilon) continue;
      cmds_.push_back({"HINCRBYFLOAT", bucket_key(s.bucket), field_names_[f], num(d)});
      parts_.push_back({Expect::Increment, i, f});
      s.sent[f] = d;
      any = true;
    }
    if (any) {
      // Kept until the bucket has left every instance's window, plus one
      // bucket of slack for clocks that disagree a little.
      const std::int64_t ttl = std::max<std::int64_t>(1, (s.bucket + nbuckets_ + 2) * bucket_ms_ - wall_ms);
      cmds_.push_back({"PEXPIRE", bucket_key(s.bucket), num(ttl)});
      parts_.push_back({Expect::Integer});
    }
  }
}

const std::vector<RedisCommand>& FleetQuota::prepare(std::int64_t wall_ms) {
  cmds_.clear();
  parts_.clear();
  leaving_ = false;
  std::int64_t cur = bucket_of(wall_ms);
  if (newest_ >= 0 && cur < newest_ - 1) {
    for (auto& s : ring_) reset_slot(s, -1);  // the clock stepped back (see add_local)
    newest_ = -1;
  }
  if (newest_ >= 0) cur = std::max(cur, newest_);
  prepared_wall_ms_ = wall_ms;
  if (started_ms_ == kNever) started_ms_ = wall_ms;
  const std::int64_t data_ttl = (nbuckets_ + 3) * bucket_ms_;

  // The epoch: created by whoever comes first after Redis lost the data,
  // refreshed by every sync, so it lives exactly as long as the data does.
  cmds_.push_back({"SET", epoch_key_, cfg_.instance_id + ":" + num(wall_ms), "NX", "PX", num(data_ttl)});
  parts_.push_back({Expect::Ok});
  cmds_.push_back({"GET", epoch_key_});
  parts_.push_back({Expect::Epoch});
  cmds_.push_back({"PEXPIRE", epoch_key_, num(data_ttl)});
  parts_.push_back({Expect::Integer});

  // Usage first, so the reads below include this instance's own push.
  push_commands(wall_ms);

  // When each tenant's usage began, fleet-wide: first writer wins. After
  // Redis lost its data, what this instance knows (its own first usage,
  // within the window) goes back in.
  for (std::size_t g = 0; g < group_names_.size(); ++g) {
    if (since_sent_[g] || first_local_ms_[g] == kNever) continue;
    const std::int64_t since = std::max(first_local_ms_[g], wall_ms - nbuckets_ * bucket_ms_);
    cmds_.push_back({"HSETNX", since_key_, group_names_[g], num(since)});
    parts_.push_back({Expect::SinceSet, 0, g});
  }
  cmds_.push_back({"PEXPIRE", since_key_, num(data_ttl)});
  parts_.push_back({Expect::Integer});
  cmds_.push_back({"HGETALL", since_key_});
  parts_.push_back({Expect::Since});

  // Registration: a sorted set scored by the last sync; members that have
  // not synced for member_ttl are gone.
  const std::int64_t ttl = std::max<std::int64_t>(1, to_ms(cfg_.member_ttl));
  cmds_.push_back({"ZADD", members_key_, num(wall_ms), cfg_.instance_id});
  parts_.push_back({Expect::Integer});
  cmds_.push_back({"ZREMRANGEBYSCORE", members_key_, "-inf", "(" + num(wall_ms - ttl)});
  parts_.push_back({Expect::Integer});
  cmds_.push_back({"ZCARD", members_key_});
  parts_.push_back({Expect::Card});
  cmds_.push_back({"PEXPIRE", members_key_, num(2 * ttl)});
  parts_.push_back({Expect::Integer});

  // The window's buckets, oldest (the partly counted one) first.
  for (std::int64_t b = cur - nbuckets_; b <= cur; ++b) {
    Slot& s = slot_for(b);
    cmds_.push_back({"HGETALL", bucket_key(b)});
    parts_.push_back({Expect::Read, static_cast<std::size_t>(&s - ring_.data())});
  }
  return cmds_;
}

const std::vector<RedisCommand>& FleetQuota::prepare_leave(std::int64_t wall_ms) {
  cmds_.clear();
  parts_.clear();
  leaving_ = true;
  prepared_wall_ms_ = wall_ms;
  push_commands(wall_ms);
  cmds_.push_back({"ZREM", members_key_, cfg_.instance_id});
  parts_.push_back({Expect::Integer});
  return cmds_;
}

bool FleetQuota::parse_double(const std::string& s, double& out) noexcept {
  const char* b = s.data();
  const char* e = b + s.size();
  auto r = std::from_chars(b, e, out);
  // The whole string, and a finite number: "inf" (or "nan") from a broken
  // or hostile Redis would hold a tenant over its quota for good.
  return r.ec == std::errc{} && r.ptr == e && std::isfinite(out);
}

bool FleetQuota::complete(const std::vector<RedisReply>& replies, TimePoint now) {
  using T = RedisReply::Type;
  bool ok = replies.size() == cmds_.size();
  std::int64_t card = -1;
  // Replies are taken one by one, all of them: an increment Redis
  // acknowledged counts as pushed even when another reply is wrong, so it
  // is never sent twice.
  const std::size_t n = std::min(replies.size(), cmds_.size());
  for (std::size_t i = 0; i < n; ++i) {
    const RedisReply& r = replies[i];
    const Part& p = parts_[i];
    bool good = false;
    switch (p.expect) {
      case Expect::Ok:
        good = (r.type == T::Status && r.str == "OK") || r.type == T::Nil;
        break;
      case Expect::Integer:
        good = r.type == T::Integer;
        break;
      case Expect::Card:
        good = r.type == T::Integer && r.integer >= 0;
        card = r.integer;
        break;
      case Expect::Epoch: {
        if (r.type != T::String) break;
        auto colon = r.str.rfind(':');
        std::int64_t created = 0;
        if (colon == std::string::npos ||
            std::from_chars(r.str.data() + colon + 1, r.str.data() + r.str.size(), created).ec != std::errc{})
          break;
        good = true;
        if (r.str != epoch_) {
          // Not the Redis this instance pushed to before: it restarted empty
          // or a replica without our latest writes took over. Everything
          // still in the window is pushed again, into its own bucket (the
          // increments below, sent after the GET, landed in this Redis).
          if (!epoch_.empty()) {
            ++resets_;
            for (auto& s : ring_) std::fill(s.pushed.begin(), s.pushed.end(), 0.0);
            std::fill(since_sent_.begin(), since_sent_.end(), false);
            // Every instance needs two syncs in the new epoch (one to see
            // it, one to push its window again) before the totals are whole.
            settle_until_ms_ = created + 2 * (to_ms(cfg_.interval) + to_ms(cfg_.timeout));
          }
          epoch_ = r.str;
          epoch_created_ms_ = created;
        }
        break;
      }
      case Expect::Increment: {
        double total = 0;
        good = r.type == T::String && parse_double(r.str, total);
        if (good) {
          Slot& s = ring_[p.slot];
          s.pushed[p.field] += s.sent[p.field];
          s.sent[p.field] = 0.0;
        }
        break;
      }
      case Expect::SinceSet:
        good = r.type == T::Integer;
        if (good) since_sent_[p.field] = true;
        break;
      case Expect::Since: {
        if (r.type != T::Array || r.elements.size() % 2 != 0) break;
        std::fill(since_ms_.begin(), since_ms_.end(), kNever);
        good = true;
        for (std::size_t k = 0; good && k < r.elements.size(); k += 2) {
          const auto& name = r.elements[k];
          const auto& value = r.elements[k + 1];
          std::int64_t v = 0;
          good = name.type == T::String && value.type == T::String &&
                 std::from_chars(value.str.data(), value.str.data() + value.str.size(), v).ec == std::errc{};
          if (!good) break;
          auto it = group_index_.find(name.str);
          if (it != group_index_.end()) since_ms_[it->second] = v;
        }
        break;
      }
      case Expect::Read: {
        if (r.type != T::Array || r.elements.size() % 2 != 0) break;
        Slot& s = ring_[p.slot];
        std::fill(s.fleet.begin(), s.fleet.end(), 0.0);
        good = true;
        for (std::size_t k = 0; good && k < r.elements.size(); k += 2) {
          const auto& name = r.elements[k];
          const auto& value = r.elements[k + 1];
          double v = 0;
          good = name.type == T::String && value.type == T::String && parse_double(value.str, v);
          // Fields of clusters or tenants this instance does not know
          // (another configuration, mid-rollout) are not ours to enforce.
          if (!good) break;
          auto it = field_index_.find(name.str);
          if (it != field_index_.end()) s.fleet[it->second] = std::max(0.0, v);
        }
        break;
      }
    }
    ok = ok && good;
  }
  for (auto& s : ring_) std::fill(s.sent.begin(), s.sent.end(), 0.0);
  if (leaving_) return ok;
  if (!ok) {
    ++errors_[static_cast<std::size_t>(SyncError::Reply)];
    enter(SyncState::Fallback, now);
    return false;
  }
  fleet_size_ = static_cast<std::uint32_t>(std::clamp<std::int64_t>(card, 1, 1 << 20));

  // Rates over a window that slides with the clock, not by whole buckets:
  // the newest bucket counts as far as it has filled, the oldest (one past
  // the window's N) for the part of it still inside. Dropping whole buckets
  // would free a bucket's worth of quota on every instance at the same
  // moment, and each would fill it before seeing the others do the same.
  // The span is the window, or less while the fleet's data is younger (a
  // fleet that started 2 s ago used its CPU in 2 s, not in 10 s; the local
  // window counts the same way).
  const std::int64_t wall = prepared_wall_ms_;
  const std::int64_t cur = std::max(bucket_of(wall), newest_);
  const std::int64_t into = std::clamp<std::int64_t>(wall - cur * bucket_ms_, 0, bucket_ms_);
  const double oldest_weight = 1.0 - static_cast<double>(into) / static_cast<double>(bucket_ms_);
  const std::int64_t full = nbuckets_ * bucket_ms_;
  // After Redis lost its data the epoch is new but the usage pushed again
  // is not: an instance that has been running longer knows the fleet is at
  // least as old as itself.
  const std::int64_t fleet_since = std::min(epoch_created_ms_, started_ms_);
  std::fill(remote_rate_.begin(), remote_rate_.end(), 0.0);
  std::fill(fleet_rate_.begin(), fleet_rate_.end(), 0.0);
  for (const auto& s : ring_) {
    if (s.bucket < 0 || s.bucket > cur || s.bucket < cur - nbuckets_) continue;
    const double w = s.bucket == cur - nbuckets_ ? oldest_weight : 1.0;
    for (std::size_t f = 0; f < nfields_; ++f) {
      // The others' part: the fleet's total less what this instance pushed
      // there. Never negative (a Redis that lost our push answers less).
      remote_rate_[f] += w * std::max(0.0, s.fleet[f] - s.pushed[f]);
      fleet_rate_[f] += w * s.fleet[f];
    }
  }
  for (std::size_t f = 0; f < nfields_; ++f) {
    // Per tenant: since its first usage anywhere in the fleet (as the
    // local window counts from the tenant's first request), else since the
    // fleet's data began.
    const std::int64_t g_since = since_ms_[f / kCriticalityCount];
    const std::int64_t since = g_since == kNever ? fleet_since : g_since;
    const std::int64_t span_ms = std::clamp<std::int64_t>(wall - since, std::min(bucket_ms_, full), full);
    const double span = static_cast<double>(span_ms) / 1000.0;
    remote_rate_[f] /= span;
    fleet_rate_[f] /= span;
  }
  // The view holds while syncs keep coming; a sync thread that stalled
  // (rather than failed) must not leave a stale view enforced for ever.
  valid_until_ = now + 2 * (cfg_.interval + cfg_.timeout);
  if (wall < settle_until_ms_) {
    // Redis lost the fleet's data and the instances are still pushing
    // their windows again: these totals are short of the others' usage.
    // Enforcing them would let every instance admit against too little
    // remote usage at the same moment (a burst, then a stop once the
    // windows are back: the simulator showed +50% for a second, then zero).
    // The fallback limit holds until the data is whole.
    if (state_ == SyncState::Synced) enter(SyncState::Fallback, now);
    return true;
  }
  enter(SyncState::Synced, now);
  return true;
}

void FleetQuota::fail(SyncError e, TimePoint now) {
  ++errors_[static_cast<std::size_t>(e)];
  // Increments that may or may not have been applied are sent again: at
  // worst one interval's usage counts twice for one window (conservative).
  for (auto& s : ring_) std::fill(s.sent.begin(), s.sent.end(), 0.0);
  if (!leaving_) enter(SyncState::Fallback, now);
}

void FleetQuota::enter(SyncState s, TimePoint now) {
  if (s == state_) return;
  if (state_ == SyncState::Fallback) fallback_total_ += now - fallback_since_;
  if (s == SyncState::Fallback) fallback_since_ = now;
  state_ = s;
}

double FleetQuota::fallback_divisor() const noexcept {
  if (cfg_.max_instances > 0) return static_cast<double>(cfg_.max_instances);
  return static_cast<double>(std::max<std::uint32_t>(1, fleet_size_));
}

Duration FleetQuota::time_in_fallback(TimePoint now) const noexcept {
  return fallback_total_ + (state_ == SyncState::Fallback ? now - fallback_since_ : Duration::zero());
}

double FleetQuota::fleet_usage(std::size_t cluster, TenantId t) const noexcept {
  if (cluster >= layout_.clusters.size() || t >= tenants_) return 0.0;
  double u = 0;
  for (std::size_t c = 0; c < kCriticalityCount; ++c) u += fleet_rate_[field(cluster, t, c)];
  return u;
}

void FleetQuota::view(std::size_t cluster, TenantQuota::FleetView& out) const {
  out.remote_at_least.resize(tenants_);
  for (std::size_t t = 0; t < tenants_; ++t) {
    double sum = 0;
    // Suffix sums, most critical first: usage by criticality >= c.
    for (std::size_t c = kCriticalityCount; c-- > 0;) {
      if (cluster < layout_.clusters.size()) sum += remote_rate_[field(cluster, t, c)];
      out.remote_at_least[t][c] = sum;
    }
  }
  out.synced = state_ == SyncState::Synced;
  out.valid_until = valid_until_;
  out.fallback_divisor = fallback_divisor();
}

}  // namespace levee::core

// Gate 4, the queue-time gate: a cluster's concurrency limit with a bounded
// priority queue in front of it.
//
//  * At most limit() requests are in flight; the rest wait, most critical
//    first, FIFO within a criticality.
//  * On arrival the wait is estimated as the time until the permit this
//    request will get comes back: with r = (permits over the limit) +
//    (entries served before it) + its own turn + (what the classes above it
//    will take meanwhile), the r-th permit release from now. Releases are
//    predicted from the permits' own start times and the smoothed time a
//    permit is held: the oldest permit comes back first, and each permit
//    comes back every hold time after. A backend with long service times
//    frees permits in bursts, not smoothly, and this sees the bursts.
//    (Before any permit has come back, entries / drain rate stands in, and
//    the budget below applies with that drain rate, its silence bound
//    included: a class that fits waits for the first permits however long
//    the backend takes, a backend that hangs has none fit before long.)
//  * The budget for that wait is the request's remaining deadline. While
//    the demand of its class and the classes above it (their arrivals over
//    the last drain window) is below what the cluster drains, that is all:
//    such a class is never refused for lack of capacity, however long its
//    backend takes per request. Otherwise the budget is also two hold times
//    plus the queue-time target: waiting for permits to come back is the
//    inherent wait of a backend at its limit (with long service times they
//    come back a hold time apart, in bursts), not a queue rotting; and two
//    permit cycles' worth of the class at the margin keeps one waiting
//    whenever a permit frees, so it goes to that class and not to one
//    below it that happens to arrive as it frees.
//    (The hold time, not the time to the next release: a budget that jumps
//    at every release would let the same state refuse one class and admit
//    the class below it a moment later.) Over budget, the request is rejected
//    at once (503 + Retry-After), instead of failing later. An admitted
//    entry is dropped only if it waits past `max_wait_factor` x the larger
//    of its estimated wait and (hold time + target), or past its deadline:
//    the arrival decision is the one meant to hold, and estimation noise
//    must not turn it into a late rejection after a wasted wait.
//  * A silence is information: while permits are held and none has come
//    back for time T beyond the longest recent hold time, the drain rate
//    is at most in_flight / T. So a cold start or a backend that hangs
//    shows up in the estimate at once, and requests are refused at arrival
//    rather than queued to time out. (Only the silence beyond the longest
//    hold: permits taken together come back together, so the natural gap
//    between their bursts is one hold time, and with requests of mixed
//    cost, as long as the costliest one's.)
//  * More critical traffic jumps ahead, so class c drains only at what the
//    classes above it leave: rate_c = drain - sum over k > c of the rate
//    at which k is granted permits. With that, lower classes are refused
//    at arrival when the classes above them use all the capacity, instead
//    of being admitted and then starved in the queue.
//  * Work-conserving quotas: a request whose tenant is over quota while the
//    cluster is overloaded may enter a lane below SHEDDABLE. It gets only
//    what every in-quota request leaves (its drain rate is what the lanes
//    above take away), so spare capacity is not wasted, and when there is
//    none it is refused at arrival like any other.
//  * A full queue makes room for a more critical arrival by evicting the
//    newest entry of the least critical class below it.
//  * CoDel-style overload detection: if the minimum time spent queued over
//    an interval (default 100 ms) stays above a target (default 5 ms), the
//    queue is "standing": the cluster is overloaded. The queue then serves
//    newest-first within a class (adaptive LIFO; lifo_on_overload), so
//    fresh requests meet their deadlines while stale ones age out.
//  * An entry whose deadline or queue-time target passes is dropped and
//    never granted; a cancelled entry (client gone) leaves at once.
//  * The smoothed queuing time is exported as the cluster's overload signal.
//
// Entries live in a slab allocated once, linked per criticality, so enqueue,
// dequeue and cancel are O(1) and never allocate. Tickets carry a generation
// so a stale ticket can never cancel a reused slot.
#pragma once

#include <array>
#include <cstdint>
#include <limits>
#include <vector>

#include "core/concurrency_limit.hpp"
#include "core/criticality.hpp"
#include "core/decision.hpp"
#include "core/ewma.hpp"
#include "core/window.hpp"

namespace levee::core {

struct QueueConfig {
  std::uint32_t max = 1024;
  Duration target = std::chrono::milliseconds(50);
  double max_wait_factor = 2.0;
  Duration codel_target = std::chrono::milliseconds(5);
  Duration codel_interval = std::chrono::milliseconds(100);
  bool lifo_on_overload = true;
  Duration drain_window = std::chrono::seconds(1);
  bool operator==(const QueueConfig&) const = default;
};

class QueueGate {
 public:
  using Ticket = std::uint64_t;
  static constexpr Ticket kNoTicket = 0;

  enum class Outcome : std::uint8_t { Granted, Queued, Rejected };

  struct Arrival {
    Outcome outcome;
    Ticket ticket = kNoTicket;
    Decision decision{};
    Duration estimated_wait{};
    TimePoint expires{};  ///< a queued entry is dropped at this time (its give-up time)
    std::uint32_t tag = 0;  ///< Granted: the limit's tag for it (its lane and probe), for release()
  };

  /// What a sink receives for a queued entry that leaves the queue.
  struct Wake {
    std::uint64_t cookie;
    Ticket ticket;
    bool granted;
    Decision decision;  ///< the rejection when !granted
    Duration waited;
    std::uint32_t in_flight = 0;  ///< in flight once granted (for latency samples)
    std::uint32_t tag = 0;        ///< granted: the limit's tag for it (its lane and probe), for release()
  };

  /// A latency sample returned with a permit.
  struct Sample {
    Duration rtt;
    std::uint32_t inflight_at_start;
    bool dropped;  ///< backend overload answer or timeout
  };

  QueueGate(QueueConfig q, ConcurrencyLimitConfig l);

  /// A request arrives. Granted: it holds a permit now. Queued: wait for a
  /// Wake with its ticket. Rejected: answer with decision. Queued entries
  /// that leave because of this arrival (evicted, or granted a free slot)
  /// are reported to sink.
  template <typename Sink>
  Arrival arrive(TimePoint now, Criticality c, TimePoint deadline, std::uint64_t cookie,
                 Sink&& sink, bool over_quota = false);

  /// Returns a permit; sample is null when the request never reached a
  /// backend. `tag`: what its grant said (Arrival::tag, Wake::tag; 0 for
  /// a permit the limit never counted, or with a static limit).
  template <typename Sink>
  void release(TimePoint now, const Sample* sample, Sink&& sink, std::uint32_t tag = 0);

  /// Grants free slots to waiting entries and drops expired ones.
  template <typename Sink>
  void pump(TimePoint now, Sink&& sink);

  /// Removes a queued entry. Returns false if it is no longer queued (it was
  /// granted, dropped or never existed): if it was granted, its Wake is on
  /// its way and the caller will hold a permit it must release.
  bool cancel(Ticket t, TimePoint now) noexcept;

  /// Takes a permit regardless of the limit (dry-run mode: the request goes
  /// through, and in-flight stays truthful for the estimates).
  /// Returns the limit's tag for it (its lane; never part of a probe).
  std::uint32_t force_acquire(TimePoint now, Criticality c, bool over_quota) {
    ++in_flight_;
    push_start(now);
    return limit_.tag(static_cast<std::uint32_t>(lane(c, over_quota)) + 1);
  }

  // --- observability -------------------------------------------------------
  std::uint32_t in_flight() const noexcept { return in_flight_; }
  std::uint32_t depth() const noexcept { return depth_; }
  std::uint32_t depth(Criticality c) const noexcept { return lists_[lane(c, false)].size; }
  /// Requests waiting in the over-quota lane.
  std::uint32_t depth_over_quota() const noexcept { return lists_[0].size; }
  /// The limit in force: the controller's, scaled down while endpoints are
  /// missing or ramping up (see set_limit_scale).
  std::uint32_t limit() const noexcept {
    const std::uint32_t l = limit_.limit();
    if (scale_ >= 1.0) return l;
    return std::max<std::uint32_t>(1, static_cast<std::uint32_t>(static_cast<double>(l) * scale_));
  }
  /// Scales the limit by the share of the cluster's weight that is ready:
  /// sum of effective weights / sum of configured weights. An endpoint in
  /// slow start then takes a share of the concurrency in line with its
  /// ramp, and a cluster missing endpoints admits correspondingly less.
  void set_limit_scale(double s) noexcept { scale_ = std::clamp(s, 0.0, 1.0); }
  double limit_scale() const noexcept { return scale_; }
  bool overloaded() const noexcept { return overloaded_; }
  bool lifo() const noexcept { return cfg_.lifo_on_overload && overloaded_; }
  /// Smoothed time spent queued by granted requests (0 for direct grants).
  Duration queue_time() const noexcept { return from_seconds(queue_time_.value()); }
  /// Permits returned per second, smoothed.
  double drain_rate(TimePoint now) noexcept;
  /// Smoothed time a permit is held, grant to release (0 before any release).
  Duration hold_time() const noexcept { return hold_.initialized() ? from_seconds(hold_.value()) : Duration::zero(); }
  /// Time from now until the r-th permit release (r >= 1), from the
  /// permits' start times and the hold time.
  Duration time_until_release(TimePoint now, std::uint32_t r) const noexcept;
  const ConcurrencyLimit& limiter() const noexcept { return limit_; }
  const QueueConfig& config() const noexcept { return cfg_; }

 private:
  static constexpr std::uint32_t kNil = std::numeric_limits<std::uint32_t>::max();
  /// Lane 0 holds over-quota requests; lanes 1..4 the criticalities.
  static constexpr std::size_t kLanes = kCriticalityCount + 1;
  // Each lane is a kind of request to the limit (lane + 1; 0 is "not told").
  static_assert(kLanes < ConcurrencyLimit::kKinds);
  static constexpr std::size_t lane(Criticality c, bool over_quota) noexcept {
    return over_quota ? 0 : index(c) + 1;
  }

  struct Node {
    TimePoint enqueued{};
    TimePoint expires{};
    TimePoint deadline{};
    std::uint64_t cookie = 0;
    std::uint32_t prev = kNil;
    std::uint32_t next = kNil;
    std::uint32_t gen = 0;
    std::uint8_t lane = 1;
    bool queued = false;
  };
  struct List {
    std::uint32_t head = kNil;
    std::uint32_t tail = kNil;
    std::uint32_t size = 0;
  };

  static Ticket make_ticket(std::uint32_t idx, std::uint32_t gen) noexcept {
    return (static_cast<Ticket>(gen) << 32) | idx;
  }
  std::uint32_t push(TimePoint now, std::size_t lane, TimePoint deadline, std::uint64_t cookie, Duration grace);
  void unlink(std::uint32_t i) noexcept;
  void roll_codel(TimePoint now) noexcept;
  /// Returns the limit's tag for the grant (ConcurrencyLimit::on_start).
  std::uint32_t note_grant(TimePoint now, Duration sojourn, std::size_t lane) noexcept;
  Wake drop(std::uint32_t i, TimePoint now) noexcept;
  Wake grant(std::uint32_t i, TimePoint now) noexcept;
  Duration estimate_wait(TimePoint now, std::uint32_t ahead) noexcept;
  /// Wait for a lane: the drain rate left after the lanes above it (the
  /// estimate while no permit has come back yet).
  Duration estimate_wait(TimePoint now, std::uint32_t ahead, std::size_t lane) noexcept;
  /// An arrival's wait and budget (see the top of this file).
  struct Outlook {
    Duration wait;
    Duration budget;  ///< refused at arrival when wait > budget
    Duration grace;   ///< queued: dropped after max_wait_factor x grace
  };
  Outlook outlook(TimePoint now, std::uint32_t ahead, std::size_t lane, TimePoint deadline) noexcept;
  /// The demand of `lane` and the lanes above it (arrivals over the drain
  /// window, less `sigmas` standard deviations of Poisson noise, with 10%
  /// of margin) fits in `drain`.
  bool fits(TimePoint now, std::size_t lane, double drain, double sigmas) noexcept;
  void push_start(TimePoint t);
  /// Forgets the oldest permit's start, learning its hold time; `answered`:
  /// the permit came back with an answer (see peak_hold_).
  void pop_start(TimePoint now, bool answered) noexcept;
  /// The longest recent answered hold, decayed, at most a drain window.
  double peak_hold(TimePoint now) const noexcept;

  QueueConfig cfg_;
  ConcurrencyLimit limit_;
  double scale_ = 1.0;
  std::uint32_t in_flight_ = 0;
  std::uint32_t depth_ = 0;
  std::vector<Node> nodes_;
  std::uint32_t free_ = kNil;
  std::array<List, kLanes> lists_{};

  // CoDel
  TimePoint interval_start_{};
  Duration min_sojourn_ = Duration::max();
  bool overloaded_ = false;

  Ewma queue_time_;
  Ewma latency_;
  Ewma hold_;  ///< seconds a permit is held, per release
  /// The longest recent hold of an answered permit (seconds), decaying by
  /// half a drain window: how long a silence may last with nothing wrong.
  /// (Not one returned without an answer: a permit back at a hung
  /// backend's response timeout must not teach it to wait that long.)
  double peak_hold_ = 0;
  TimePoint peak_at_{};
  /// Start times of the permits in flight, oldest first (a ring): the
  /// oldest is taken to come back first.
  std::vector<TimePoint> starts_;
  std::size_t starts_head_ = 0;
  std::size_t starts_size_ = 0;
  SlidingWindow<1> departures_;
  SlidingWindow<kLanes> grants_;
  SlidingWindow<kLanes> arrivals_;  ///< every arrival, by lane: the demand
  TimePoint last_departure_{};  ///< or the start of the current busy period
};

// ---------------------------------------------------------------------------

template <typename Sink>
QueueGate::Arrival QueueGate::arrive(TimePoint now, Criticality c, TimePoint deadline, std::uint64_t cookie,
                                     Sink&& sink, bool over_quota) {
  pump(now, sink);
  const std::size_t ln = lane(c, over_quota);
  arrivals_.add(now, ln, 1.0);
  if (deadline <= now) {
    return {Outcome::Rejected, kNoTicket, Decision::reject(Reason::Deadline, Duration::zero()), {}};
  }
  if (in_flight_ < limit() && (!over_quota || depth_ == 0)) {
    // pump() left free slots only if the queue is empty.
    if (in_flight_ == 0) last_departure_ = now;  // a busy period starts
    ++in_flight_;
    const std::uint32_t tag = note_grant(now, Duration::zero(), ln);
    return {Outcome::Granted, kNoTicket, Decision::admit(), Duration::zero(), {}, tag};
  }
  std::uint32_t ahead = 0;
  for (std::size_t k = ln + 1; k < kLanes; ++k) ahead += lists_[k].size;
  if (!lifo()) ahead += lists_[ln].size;
  const Outlook o = outlook(now, ahead, ln, deadline);
  const Duration wait = o.wait;
  const Duration budget = o.budget;
  if (wait > budget) {
    // Retry once the queue in front has drained.
    Duration drain = estimate_wait(now, depth_);
    return {Outcome::Rejected, kNoTicket, Decision::reject(Reason::QueueWait, drain), wait};
  }
  if (depth_ >= cfg_.max) {
    // Evict the newest entry of the lowest lane below this one, if any.
    std::uint32_t victim = kNil;
    for (std::size_t k = 0; k < ln; ++k) {
      if (lists_[k].size > 0) {
        victim = lists_[k].tail;
        break;
      }
    }
    if (victim == kNil) {
      Duration drain = estimate_wait(now, depth_);
      return {Outcome::Rejected, kNoTicket, Decision::reject(Reason::QueueFull, drain), wait};
    }
    Wake w = drop(victim, now);
    w.decision = Decision::reject(Reason::QueueFull, estimate_wait(now, depth_));
    sink(w);
  }
  // The give-up time, saturating: a far deadline must not overflow it.
  const double factor = std::max(1.0, cfg_.max_wait_factor);
  const Duration grace = to_seconds(o.grace) * factor >= to_seconds(deadline - now)
                             ? deadline - now
                             : from_seconds(to_seconds(o.grace) * factor);
  std::uint32_t i = push(now, ln, deadline, cookie, grace);
  return {Outcome::Queued, make_ticket(i, nodes_[i].gen), Decision::admit(), wait, nodes_[i].expires};
}

template <typename Sink>
void QueueGate::release(TimePoint now, const Sample* sample, Sink&& sink, std::uint32_t tag) {
  if (in_flight_ > 0) --in_flight_;
  pop_start(now, sample != nullptr);
  departures_.add(now, 0, 1.0);
  last_departure_ = now;
  if (sample != nullptr) {
    latency_.update_weighted(to_seconds(sample->rtt), 0.05);
    limit_.on_sample(now, sample->rtt, sample->inflight_at_start, sample->dropped, tag);
  } else {
    limit_.on_lost(now, tag);
  }
  pump(now, sink);
}

template <typename Sink>
void QueueGate::pump(TimePoint now, Sink&& sink) {
  roll_codel(now);
  if (depth_ == 0) return;
  // Drop entries that expired at the old end of each class. (Entries with an
  // earlier personal deadline further in are cancelled by their own timer,
  // and are never granted: see below.)
  for (auto& l : lists_) {
    while (l.head != kNil && nodes_[l.head].expires <= now) sink(drop(l.head, now));
  }
  const bool newest_first = lifo();
  while (in_flight_ < limit() && depth_ > 0) {
    std::size_t k = kLanes;
    while (k > 0 && lists_[k - 1].size == 0) --k;
    List& l = lists_[k - 1];
    std::uint32_t i = newest_first ? l.tail : l.head;
    if (nodes_[i].expires <= now) {
      sink(drop(i, now));
      continue;
    }
    sink(grant(i, now));
  }
}

}  // namespace levee::core

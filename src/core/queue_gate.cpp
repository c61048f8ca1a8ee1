#include "core/queue_gate.hpp"

#include <algorithm>
#include <cmath>

namespace levee::core {

QueueGate::QueueGate(QueueConfig q, ConcurrencyLimitConfig l)
    : cfg_(q),
      limit_(l),
      nodes_(std::max<std::uint32_t>(1, q.max)),
      queue_time_(q.codel_interval * 10),
      departures_(q.drain_window, 10),
      grants_(q.drain_window, 10),
      arrivals_(q.drain_window, 10) {
  // Thread the free list through the slab once; nothing allocates after this.
  for (std::uint32_t i = 0; i + 1 < nodes_.size(); ++i) nodes_[i].next = i + 1;
  nodes_.back().next = kNil;
  free_ = 0;
}

std::uint32_t QueueGate::push(TimePoint now, std::size_t ln, TimePoint deadline, std::uint64_t cookie,
                              Duration grace) {
  std::uint32_t i = free_;
  Node& n = nodes_[i];
  free_ = n.next;
  n.enqueued = now;
  n.deadline = deadline;
  n.expires = std::min(deadline, now + grace);
  n.cookie = cookie;
  n.lane = static_cast<std::uint8_t>(ln);
  n.queued = true;
  ++n.gen;
  if (n.gen == 0) n.gen = 1;  // ticket 0 means "no ticket"
  List& l = lists_[ln];
  n.prev = l.tail;
  n.next = kNil;
  if (l.tail != kNil) nodes_[l.tail].next = i; else l.head = i;
  l.tail = i;
  ++l.size;
  ++depth_;
  return i;
}

void QueueGate::unlink(std::uint32_t i) noexcept {
  Node& n = nodes_[i];
  List& l = lists_[n.lane];
  if (n.prev != kNil) nodes_[n.prev].next = n.next; else l.head = n.next;
  if (n.next != kNil) nodes_[n.next].prev = n.prev; else l.tail = n.prev;
  --l.size;
  --depth_;
  n.queued = false;
  n.prev = kNil;
  n.next = free_;
  free_ = i;
  if (depth_ == 0) min_sojourn_ = Duration::zero();  // the queue drained
}

QueueGate::Wake QueueGate::drop(std::uint32_t i, TimePoint now) noexcept {
  Node& n = nodes_[i];
  Wake w{n.cookie, make_ticket(i, n.gen), false, {}, now - n.enqueued};
  w.decision = n.deadline <= now
                   ? Decision::reject(Reason::Deadline, Duration::zero())
                   : Decision::reject(Reason::QueueTimeout, estimate_wait(now, depth_));
  unlink(i);
  return w;
}

QueueGate::Wake QueueGate::grant(std::uint32_t i, TimePoint now) noexcept {
  Node& n = nodes_[i];
  Wake w{n.cookie, make_ticket(i, n.gen), true, Decision::admit(), now - n.enqueued};
  unlink(i);
  ++in_flight_;
  w.in_flight = in_flight_;
  w.tag = note_grant(now, w.waited, n.lane);
  return w;
}

bool QueueGate::cancel(Ticket t, TimePoint now) noexcept {
  auto i = static_cast<std::uint32_t>(t & 0xffffffffu);
  auto gen = static_cast<std::uint32_t>(t >> 32);
  if (t == kNoTicket || i >= nodes_.size()) return false;
  Node& n = nodes_[i];
  if (!n.queued || n.gen != gen) return false;
  (void)now;
  unlink(i);
  return true;
}

void QueueGate::push_start(TimePoint t) {
  if (starts_size_ == starts_.size()) {
    // Grow (rare: the limit rose): unroll the ring into a larger one.
    std::vector<TimePoint> next(std::max<std::size_t>(64, starts_.size() * 2));
    for (std::size_t k = 0; k < starts_size_; ++k) next[k] = starts_[(starts_head_ + k) % starts_.size()];
    starts_ = std::move(next);
    starts_head_ = 0;
  }
  starts_[(starts_head_ + starts_size_) % starts_.size()] = t;
  ++starts_size_;
}

void QueueGate::pop_start(TimePoint now, bool answered) noexcept {
  if (starts_size_ == 0) return;
  const TimePoint oldest = starts_[starts_head_];
  starts_head_ = (starts_head_ + 1) % starts_.size();
  --starts_size_;
  const double h = to_seconds(std::max(Duration::zero(), now - oldest));
  hold_.update_weighted(h, 0.05);
  if (!answered) return;
  peak_hold_ = std::max(h, peak_hold(now));
  peak_at_ = now;
}

double QueueGate::peak_hold(TimePoint now) const noexcept {
  // Halves every half drain window: a hold that long is forgotten within
  // a few windows once no permit is held so long any more.
  // At most a drain window: a silence longer than that is a stall whatever
  // the backend's usual pace.
  const double half_life = to_seconds(cfg_.drain_window) / 2;
  return std::min(to_seconds(cfg_.drain_window), peak_hold_ * std::exp2(-to_seconds(now - peak_at_) / half_life));
}

Duration QueueGate::time_until_release(TimePoint now, std::uint32_t r) const noexcept {
  if (r == 0 || starts_size_ == 0 || !hold_.initialized()) return Duration::zero();
  const Duration hold = from_seconds(hold_.value());
  const std::size_t n = starts_size_;
  const std::size_t idx = (r - 1) % n;
  const auto rounds = static_cast<std::int64_t>((r - 1) / n);
  // A permit held past the hold time is overdue: it comes back any moment.
  const TimePoint first = std::max(starts_[(starts_head_ + idx) % starts_.size()] + hold, now);
  return first + hold * rounds - now;
}

QueueGate::Outlook QueueGate::outlook(TimePoint now, std::uint32_t ahead, std::size_t ln, TimePoint deadline) noexcept {
  const Duration left = deadline - now;
  if (!hold_.initialized()) {
    // No permit has come back yet: the drain rate is all there is (after
    // the first moments, the bound the silence since the busy period began
    // sets). A class that fits within it is bounded by its deadline alone,
    // as below: with service times longer than the target the first permits
    // come back only after a whole service time, in one burst, and the most
    // critical requests of a cold start must not be refused or dropped for
    // waiting for it. As the silence lengthens the bound falls, and a
    // backend that hangs soon has no class fit. (With no allowance for
    // noise: the first arrivals are too few to tell noise from demand, and
    // an entry that fits is held to its deadline.)
    const Duration wait = estimate_wait(now, ahead + 1, ln);
    if (fits(now, ln, drain_rate(now), 0.0)) return {wait, left, left};
    return {wait, std::min(cfg_.target, left), cfg_.target};
  }
  const Duration hold = from_seconds(hold_.value());
  const std::uint32_t over = in_flight_ > limit() ? in_flight_ - limit() : 0;
  const double drain = drain_rate(now);
  // What the classes above take meanwhile: they arrive at rate a (their
  // recent arrivals) and go ahead, so a request that needs `base` releases
  // needs base + a w of them, w its wait. With releases at rate mu after
  // the first (at t1), w = (t1 + (base - 1) / mu) / (1 - a / mu); the
  // releases that makes are then placed on the permits' own schedule. A
  // class is starved only while the ones above ask for (nearly) all of it:
  // a is held below 98% of mu.
  const std::uint32_t base = over + ahead + 1;
  double r = base;
  if (ln + 1 < kLanes && drain > 0) {
    const double span = to_seconds(arrivals_.span(now, std::chrono::milliseconds(1)));
    const double a = span > 0 ? std::min(0.98 * drain, arrivals_.sum(now, ln + 1, kLanes - 1) / span) : 0.0;
    const double t1 = to_seconds(time_until_release(now, over + 1));
    const double w = (t1 + static_cast<double>(base - 1) / drain) / (1.0 - a / drain);
    r += a * w;
  }
  const Duration wait = time_until_release(now, static_cast<std::uint32_t>(std::min(1e9, std::ceil(r))));
  // Dropped from the queue if it waits far longer than foreseen: twice the
  // larger of its estimate and the target budget (a backend that stopped
  // answering must not hold it to its deadline).
  Duration grace = std::max(wait, hold + cfg_.target);
  // A class that, with the classes above it, asks for less than the
  // cluster drains is never refused for lack of capacity: only its deadline
  // bounds its wait. The demand is n arrivals over the window; a count
  // that is two standard deviations (2 sqrt(n), Poisson) from fitting is
  // taken to fit, so a low-rate class is not refused for a burst of noise,
  // and 10% of margin covers the drain rate being an estimate too (a
  // class exactly at capacity starves what is below it, so it must not
  // read as fitting).
  if (fits(now, ln, drain, 2.0)) return {wait, left, left};
  return {wait, std::min(2 * hold + cfg_.target, left), grace};
}

bool QueueGate::fits(TimePoint now, std::size_t ln, double drain, double sigmas) noexcept {
  const double span = to_seconds(arrivals_.span(now, std::chrono::milliseconds(1)));
  const double n = arrivals_.sum(now, ln, kLanes - 1);
  return span > 0 && (n - sigmas * std::sqrt(n)) / span < 0.9 * drain;
}

std::uint32_t QueueGate::note_grant(TimePoint now, Duration sojourn, std::size_t ln) noexcept {
  push_start(now);
  grants_.add(now, ln, 1.0);
  min_sojourn_ = std::min(min_sojourn_, sojourn);
  queue_time_.update(now, to_seconds(sojourn));
  return limit_.on_start(now, static_cast<std::uint32_t>(ln) + 1);  // kind 0 is "not told"
}

void QueueGate::roll_codel(TimePoint now) noexcept {
  if (interval_start_ == TimePoint{}) {
    interval_start_ = now;
    min_sojourn_ = depth_ == 0 ? Duration::zero() : Duration::max();
    return;
  }
  if (now - interval_start_ < cfg_.codel_interval) return;
  // Nothing left the queue all interval while it held entries: min stays max,
  // which is above any target, i.e. a standing queue.
  overloaded_ = min_sojourn_ > cfg_.codel_target;
  interval_start_ = now;
  min_sojourn_ = depth_ == 0 ? Duration::zero() : Duration::max();
}

double QueueGate::drain_rate(TimePoint now) noexcept {
  // The larger of departures over the last second (when there were enough
  // to count) and Little's law on the current limit: the window measures
  // throughput, which after a quiet spell is the light demand of that spell,
  // not what the backend can do; limit / latency is the service rate with
  // the permits busy, which is the only time anyone queues.
  double rate = 0.0;
  double n = departures_.sum(now, 0);
  // Over the time actually elapsed, down to 1 ms: in the first bucket
  // (100 ms by default) a bucket-wide span would read 20 departures in the
  // first 8 ms of a cold start as 200/s, and reject a healthy backend's
  // first burst. Ten departures are the guard against noise here; an
  // overestimate only lets a request queue, where the target still bounds it.
  if (n >= 10) rate = n / to_seconds(departures_.span(now, std::chrono::milliseconds(1)));
  if (latency_.initialized() && latency_.value() > 0)
    rate = std::max(rate, static_cast<double>(std::max<std::uint32_t>(1, limit())) / latency_.value());
  // No permit back for `quiet` (beyond the longest recent hold, once one
  // is known) while some are held: at most in_flight / quiet.
  if (in_flight_ > 0) {
    const double quiet = to_seconds(now - last_departure_) - (hold_.initialized() ? peak_hold(now) : 0.0);
    if (quiet > 0) {
      const double bound = static_cast<double>(in_flight_) / quiet;
      rate = rate > 0 ? std::min(rate, bound) : bound;
    }
  }
  return rate;
}

Duration QueueGate::estimate_wait(TimePoint now, std::uint32_t ahead, std::size_t ln) noexcept {
  if (ahead == 0) return Duration::zero();
  double rate = drain_rate(now);
  if (rate <= 0) return Duration::zero();
  if (ln + 1 < kLanes) {
    // The lanes above take their share of recent grants off the top. A share,
    // not a rate: the drain may come from Little's law, not the window.
    const double all = grants_.sum(now, 0, kLanes - 1);
    const double above = all > 0 ? grants_.sum(now, ln + 1, kLanes - 1) / all : 0.0;
    // Never below 2% of the drain: a class is starved only while the ones
    // above it demonstrably take (nearly) everything.
    rate *= std::max(1.0 - above, 0.02);
  }
  return from_seconds(static_cast<double>(ahead) / rate);
}

Duration QueueGate::estimate_wait(TimePoint now, std::uint32_t ahead) noexcept {
  if (ahead == 0) return Duration::zero();
  double rate = drain_rate(now);
  // No measurement yet: let it queue; the target and deadline still bound it.
  if (rate <= 0) return Duration::zero();
  return from_seconds(static_cast<double>(ahead) / rate);
}

}  // namespace levee::core

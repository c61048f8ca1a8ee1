#include "core/queue_gate.hpp"

#include <algorithm>

namespace levee::core {

QueueGate::QueueGate(QueueConfig q, ConcurrencyLimitConfig l)
    : cfg_(q),
      limit_(l),
      nodes_(std::max<std::uint32_t>(1, q.max)),
      queue_time_(q.codel_interval * 10),
      departures_(q.drain_window, 10),
      grants_(q.drain_window, 10) {
  // Thread the free list through the slab once; nothing allocates after this.
  for (std::uint32_t i = 0; i + 1 < nodes_.size(); ++i) nodes_[i].next = i + 1;
  nodes_.back().next = kNil;
  free_ = 0;
}

std::uint32_t QueueGate::push(TimePoint now, std::size_t ln, TimePoint deadline,
                              std::uint64_t cookie) {
  std::uint32_t i = free_;
  Node& n = nodes_[i];
  free_ = n.next;
  n.enqueued = now;
  n.deadline = deadline;
  const auto grace = std::chrono::duration_cast<Duration>(cfg_.target * std::max(1.0, cfg_.max_wait_factor));
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
  note_grant(now, w.waited, n.lane);
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

void QueueGate::note_grant(TimePoint now, Duration sojourn, std::size_t ln) noexcept {
  limit_.on_start(now);
  grants_.add(now, ln, 1.0);
  min_sojourn_ = std::min(min_sojourn_, sojourn);
  queue_time_.update(now, to_seconds(sojourn));
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
  // No permit back for `quiet` while some are held: at most in_flight/quiet.
  if (in_flight_ > 0) {
    const double quiet = to_seconds(now - last_departure_);
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

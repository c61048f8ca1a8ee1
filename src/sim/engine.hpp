// The discrete-event engine: a simulated clock, an event queue and seeded
// randomness. Nothing here reads a real clock or real entropy, so a run is
// a pure function of its scenario and seed: the same seed gives the same
// output, bit for bit.
//
// Events are plain values (a handler, a kind, a slot and a generation), not
// closures: a run of a million requests schedules several million of them,
// and a heap of small PODs with no allocation per event is what keeps the
// simulator at millions of events per wall second. A handler keeps its own
// per-request state in slabs and uses the generation to ignore a timer whose
// request has moved on (a cancelled timer is simply left to fire and be
// ignored, which is cheaper than removing it from the heap).
//
// Ties are broken by scheduling order (a sequence number), so two events at
// the same instant always run in the same order.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "core/time.hpp"

namespace levee::sim {

using core::Duration;
using core::TimePoint;
using namespace std::chrono_literals;

/// xoshiro256** seeded through splitmix64: fast, good enough for
/// simulation, and identical on every platform (unlike std distributions,
/// whose algorithms the standard leaves to the library).
class Rng {
 public:
  explicit Rng(std::uint64_t seed = 1) noexcept { reseed(seed); }
  void reseed(std::uint64_t seed) noexcept {
    std::uint64_t x = seed;
    for (auto& w : s_) {
      x += 0x9e3779b97f4a7c15ull;
      std::uint64_t z = x;
      z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
      z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
      w = z ^ (z >> 31);
    }
  }
  std::uint64_t next() noexcept {
    const std::uint64_t r = rotl(s_[1] * 5, 7) * 9;
    const std::uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return r;
  }
  /// Uniform in [0,1).
  double uniform() noexcept { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
  /// Uniform integer in [0, n).
  std::uint64_t below(std::uint64_t n) noexcept { return n == 0 ? 0 : next() % n; }
  /// A child generator, for a component that needs its own stream.
  Rng split() noexcept { return Rng(next()); }

 private:
  static std::uint64_t rotl(std::uint64_t x, int k) noexcept { return (x << k) | (x >> (64 - k)); }
  std::uint64_t s_[4]{};
};

/// Something events are delivered to.
class Handler {
 public:
  virtual void fire(std::uint32_t kind, std::uint32_t slot, std::uint32_t gen) = 0;

 protected:
  ~Handler() = default;
};

class Engine {
 public:
  explicit Engine(std::uint64_t seed) : rng(seed) {}

  TimePoint now() const noexcept { return now_; }

  void at(TimePoint t, Handler* h, std::uint32_t kind, std::uint32_t slot = 0, std::uint32_t gen = 0) {
    if (t < now_) t = now_;
    heap_.push_back(Event{t, seq_++, h, kind, slot, gen});
    sift_up(heap_.size() - 1);
  }
  void after(Duration d, Handler* h, std::uint32_t kind, std::uint32_t slot = 0, std::uint32_t gen = 0) {
    at(now_ + d, h, kind, slot, gen);
  }

  /// Runs events up to and including time `end`; the clock ends at `end`.
  void run_until(TimePoint end) {
    while (!heap_.empty() && heap_.front().at <= end) {
      const Event e = pop();
      now_ = e.at;
      ++events_;
      e.h->fire(e.kind, e.slot, e.gen);
    }
    if (end > now_) now_ = end;
  }

  std::uint64_t events() const noexcept { return events_; }
  std::size_t pending() const noexcept { return heap_.size(); }

  Rng rng;

 private:
  struct Event {
    TimePoint at;
    std::uint64_t seq;
    Handler* h;
    std::uint32_t kind, slot, gen;
    bool before(const Event& o) const noexcept { return at < o.at || (at == o.at && seq < o.seq); }
  };
  // A 4-ary heap: shallower than a binary one, fewer cache misses per pop.
  void sift_up(std::size_t i) {
    Event e = heap_[i];
    while (i > 0) {
      std::size_t p = (i - 1) / 4;
      if (!e.before(heap_[p])) break;
      heap_[i] = heap_[p];
      i = p;
    }
    heap_[i] = e;
  }
  Event pop() {
    Event top = heap_.front();
    Event last = heap_.back();
    heap_.pop_back();
    const std::size_t n = heap_.size();
    if (n == 0) return top;
    std::size_t i = 0;
    for (;;) {
      std::size_t c = 4 * i + 1;
      if (c >= n) break;
      std::size_t best = c;
      const std::size_t end = std::min(c + 4, n);
      for (std::size_t k = c + 1; k < end; ++k)
        if (heap_[k].before(heap_[best])) best = k;
      if (!heap_[best].before(last)) break;
      heap_[i] = heap_[best];
      i = best;
    }
    heap_[i] = last;
    return top;
  }

  TimePoint now_{};
  std::uint64_t seq_ = 0;
  std::uint64_t events_ = 0;
  std::vector<Event> heap_;
};

/// A slab of per-request state with a free list and generations, so an
/// event can name a slot and know whether it still means the same request.
template <typename T>
class Slab {
 public:
  struct Entry {
    T v{};
    std::uint32_t gen = 0;
    bool used = false;
    std::uint32_t next_free = 0;
  };
  std::uint32_t alloc() {
    std::uint32_t i;
    if (free_ != kNone) {
      i = free_;
      free_ = items_[i].next_free;
    } else {
      i = static_cast<std::uint32_t>(items_.size());
      items_.emplace_back();
    }
    Entry& e = items_[i];
    e.v = T{};
    e.used = true;
    ++e.gen;
    ++live_;
    return i;
  }
  void release(std::uint32_t i) {
    Entry& e = items_[i];
    if (!e.used) return;
    e.used = false;
    ++e.gen;  // every outstanding event for it is now stale
    e.next_free = free_;
    free_ = i;
    --live_;
  }
  T& operator[](std::uint32_t i) { return items_[i].v; }
  std::uint32_t gen(std::uint32_t i) const { return items_[i].gen; }
  bool live(std::uint32_t i, std::uint32_t gen) const {
    return i < items_.size() && items_[i].used && items_[i].gen == gen;
  }
  std::size_t size() const noexcept { return live_; }
  bool used(std::uint32_t i) const { return i < items_.size() && items_[i].used; }
  /// Calls f(slot) for every live entry, in slot order.
  template <typename F>
  void each(F&& f) {
    for (std::uint32_t i = 0; i < items_.size(); ++i)
      if (items_[i].used) f(i);
  }

 private:
  static constexpr std::uint32_t kNone = 0xffffffffu;
  std::vector<Entry> items_;
  std::uint32_t free_ = kNone;
  std::size_t live_ = 0;
};

}  // namespace levee::sim

// The batch fuse: a listener's small, fixed pool of upstream connections to
// one cluster, whatever the number of downstream connections. At most
// `per_endpoint` connections to each endpoint, open or idle; requests wait
// for a slot in a bounded FIFO (AdmissionWait) and a returned slot goes
// straight to the longest waiter. Lives on one worker (a batch listener is
// served by one worker; a fuse route on a normal listener splits its
// budget between workers), so it needs no lock.
#pragma once

#include <cstdint>
#include <deque>
#include <utility>
#include <memory>
#include <vector>

#include "core/time.hpp"

namespace levee::proxy {

class AdmissionWait;
class Cluster;
class Listener;
struct UpstreamConn;

class Fuse {
 public:
  Fuse(Listener& l, const Cluster& c, std::uint32_t per_endpoint);
  ~Fuse();
  Fuse(const Fuse&) = delete;
  Fuse& operator=(const Fuse&) = delete;

  Listener& listener;
  const std::uint32_t per_endpoint;
  const std::uint32_t queue_max;

  /// A slot now, if one is free and nobody is waiting.
  bool try_acquire(const Cluster& c);
  /// Returns a slot; it passes to the longest waiter, if any.
  void release();
  /// Waiting for a slot: false when the queue is full.
  bool enqueue(AdmissionWait& w);
  /// A waiter that gave up (not woken).
  void leave(AdmissionWait& w);

  /// An available endpoint with an idle connection or room for one.
  std::size_t pick(const Cluster& c) const;
  std::unique_ptr<UpstreamConn> take(std::size_t endpoint, core::TimePoint now, const Cluster& c, bool retry_free);
  void put(std::unique_ptr<UpstreamConn> conn, core::TimePoint now);
  /// A new connection counts against the fuse from before it connects.
  void note_open(UpstreamConn& conn);
  void note_closed(const UpstreamConn& conn) noexcept;
  void close_idle();
  /// Replaced by a reload: connections coming back are closed, not pooled.
  void retire() noexcept {
    retired_ = true;
    close_idle();
  }
  /// Nothing holds or waits for it any more (a retired fuse can go).
  bool unused() const noexcept;

 private:
  bool retired_ = false;
  struct PerEndpoint {
    std::vector<std::unique_ptr<UpstreamConn>> idle;
    std::uint32_t open = 0;
  };
  std::vector<PerEndpoint> eps_;
  std::uint32_t in_use_ = 0;  ///< slots held by requests
  std::deque<AdmissionWait*> waiters_;
};

/// A fuse slot held by a request; returned when the upstream part is done,
/// or at the latest when the request ends.
class FuseSlot {
 public:
  FuseSlot() noexcept = default;
  explicit FuseSlot(Fuse& f) noexcept : f_(&f) {}
  FuseSlot(FuseSlot&& o) noexcept : f_(std::exchange(o.f_, nullptr)) {}
  FuseSlot& operator=(FuseSlot&& o) noexcept {
    if (this != &o) {
      reset();
      f_ = std::exchange(o.f_, nullptr);
    }
    return *this;
  }
  ~FuseSlot() { reset(); }
  Fuse* fuse() const noexcept { return f_; }
  void reset() noexcept {
    if (auto* f = std::exchange(f_, nullptr)) f->release();
  }

 private:
  Fuse* f_ = nullptr;
};

}  // namespace levee::proxy

// A worker: one thread, one io_context, its own SO_REUSEPORT acceptors, and
// everything its connections use that needs no lock because only this
// thread touches it: pools of per-request scratch and read buffers, idle
// upstream connections, the balancer's view of each cluster, fuses, and the
// lists its periodic sweep walks (idle connections, long upstream waits).
// Other threads reach a worker only by posting to its io_context.
//
// A reload reaches it the same way: apply() runs on the worker's thread,
// switches it to the new Runtime, keeps the acceptors of listener slots
// that remain, opens the new ones from sockets bound beforehand, moves
// pooled connections to the endpoints that remain, and retires what the old
// Runtime's requests still use (fuses) until they are done with it.
#pragma once

#include <boost/asio/io_context.hpp>

#include <array>
#include <atomic>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "config/config.hpp"
#include "core/criticality.hpp"
#include "control/access_log.hpp"
#include "proxy/asio.hpp"
#include "proxy/clock.hpp"
#include "proxy/exchange_buffers.hpp"
#include "proxy/fuse.hpp"
#include "proxy/http2_upstream.hpp"
#include "proxy/io_buffer.hpp"
#include "proxy/stock.hpp"
#include "proxy/timed_list.hpp"
#include "proxy/upstream.hpp"

namespace levee::proxy {

class Cluster;
class Listener;
class Runtime;

/// A downstream connection the worker's sweep may act on while it is idle.
/// A listening socket for listener c (SO_REUSEPORT, so every worker has
/// its own accept queue), bound and listening. Throws std::system_error
/// naming the listener, its address and port.
int bind_listener(const config::ListenerConfig& c);

class IdleConnection : public TimedHook {
 public:
  /// Idle for a while: give the read buffer back to the pool.
  virtual void park() noexcept = 0;
  /// Idle too long, or the worker drains: close.
  virtual void expire() noexcept = 0;

 protected:
  ~IdleConnection() = default;
};

class Worker {
 public:
  Worker(std::size_t index, std::shared_ptr<Runtime> rt, control::AccessLog::Shard& log);
  ~Worker();
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  /// Opens this worker's acceptors (SO_REUSEPORT) on every listener it serves.
  void open_listeners();
  void start();
  /// Stops accepting and closes idle keep-alive connections (drain).
  void begin_drain();
  /// Closes idle keep-alive connections (a drain that keeps accepting).
  void close_idle_connections();
  /// Whether this worker accepts on listener l (a batch listener has one worker).
  bool serves(const Listener& l) const noexcept;
  /// Switches to `next`, on this worker's thread (posted by the reload).
  /// `bound`: listening sockets for the slots new to this worker, by slot id.
  void apply(std::shared_ptr<Runtime> next, std::vector<std::pair<std::size_t, int>> bound);
  /// The Runtime generation this worker runs (written by its thread).
  std::atomic<std::uint64_t> applied_generation{0};
  void stop();
  void join();

  // Every socket and timer of a worker is used on its thread only, so the
  // reactor's per-descriptor locks are dropped; the scheduler keeps its
  // lock because other threads post wake-ups and probes here.
 private:
  std::optional<asio::io_context> ctx_;  // destroyed first, see ~Worker

 public:
  asio::io_context& ctx;
  const std::size_t index;
  /// The Runtime new requests use. Changed only on this thread (apply).
  std::shared_ptr<Runtime> rt;

  /// Keeps the worker's Runtime alive while a request runs under it, with
  /// no atomic operation: a request pins the current Runtime (a count on
  /// this thread); apply() keeps the one it replaces until its pins are
  /// gone. (A shared_ptr copy per request would bounce one reference
  /// count between every worker's cache.)
  class Pin {
   public:
    explicit Pin(Worker& w) noexcept : w_(w), rt_(w.rt.get()) { ++w_.pins_; }
    /// Pins `r`, which must be pinned already (by the request handing
    /// something of it on): the worker's Runtime or one it keeps.
    Pin(Worker& w, const Runtime* r) noexcept : w_(w), rt_(r) { w_.pin(r); }
    ~Pin() { w_.unpin(rt_); }
    Pin(const Pin&) = delete;
    Pin& operator=(const Pin&) = delete;

   private:
    Worker& w_;
    const Runtime* rt_;
  };
  control::AccessLog::Shard& log;
  Rng rng;
  UpstreamPool pool;
  H2UpstreamPool h2pool;  ///< clusters that speak HTTP/2
  Balancer balancer;
  /// Readiness of cleartext sockets, upstream and kept-alive clients
  /// (proxy/readiness.hpp).
  Readiness readiness;
  std::atomic<int> tid{0};
  std::atomic<std::uint32_t> connections{0};  ///< open downstream connections

  bool draining() const noexcept { return draining_; }
  bool serves_batch() const noexcept { return index == 0; }
  Fuse& fuse(Listener& l, const Cluster& c);
  /// The listener a slot has in this worker's Runtime (null: none here).
  Listener* listener_in_slot(std::size_t slot) const noexcept {
    return slot < slot_listener_.size() ? slot_listener_[slot] : nullptr;
  }

  // Pools ---------------------------------------------------------------------
  std::unique_ptr<ExchangeBuffers> take_buffers();
  void put_buffers(std::unique_ptr<ExchangeBuffers> b);
  std::unique_ptr<IoBuffer> take_read_buffer();
  void put_read_buffer(std::unique_ptr<IoBuffer> b);

  // Lists the sweep walks ------------------------------------------------------
  /// An idle connection of listener l joins at the back. fresh: it has not
  /// sent a request yet (it waits without a buffer, and is not an idle
  /// keep-alive connection to close for room).
  void idle(IdleConnection& c, std::size_t slot, core::TimePoint since, bool fresh);
  /// Closes up to n idle keep-alive connections of a slot, oldest first (near the cap).
  void close_idle(std::size_t slot, std::size_t n);
  TimedList upstream_waits;  ///< exchanges waiting for a response head

  /// Self-protection let a request of criticality c through at t (gate 1).
  void screened(core::Criticality c, core::TimePoint t) noexcept { screened_at_[core::index(c)] = t; }
  /// Whether self-protection let any request more critical than c through
  /// within the last second: shedding c is then for their sake, and a
  /// connection shed again and again may be read less often
  /// (listener shed_backoff). When nothing above c is being served, that
  /// would only leave the worker idle behind the load's smoothing.
  bool screened_above(core::Criticality c, core::TimePoint now) const noexcept {
    for (std::size_t i = core::index(c) + 1; i < core::kCriticalityCount; ++i)
      if (now - screened_at_[i] < std::chrono::seconds(1)) return true;
    return false;
  }

  // Executor-load probe: posted by the sampler, timed here.
  std::atomic<std::int64_t> probe_posted_ns{0};
  std::atomic<std::int64_t> probe_delay_ns{0};
  std::atomic<bool> probe_pending{false};

 private:
  std::array<core::TimePoint, core::kCriticalityCount> screened_at_{};
  void sweep();
  void arm_sweep();
  void start_acceptor(std::size_t slot, std::shared_ptr<Acceptor> a);
  void size_buffers();

  struct IdleLists {
    TimedList fresh;   ///< accepted, no request yet: no buffer
    TimedList hot;     ///< idle after a request, still in its coroutine (TLS: with its buffers)
    TimedList parked;  ///< idle past park_after: no buffer
  };
  IdleLists* lists(std::size_t slot);
  static void expire_all(IdleLists& lists);
  std::vector<std::shared_ptr<Acceptor>> acceptors_;  // [slot]; null: not served here
  std::vector<Listener*> slot_listener_;              // [slot]; in rt
  std::vector<std::unique_ptr<IdleLists>> idle_;      // [slot]
  std::vector<std::vector<std::unique_ptr<Fuse>>> fuses_;  // [listener][cluster] of rt
  /// Fuses of older Runtimes still used by their requests; freed once idle.
  struct RetiredFuse {
    std::shared_ptr<Runtime> rt;
    const Listener* listener;
    const Cluster* cluster;
    std::unique_ptr<Fuse> fuse;
  };
  std::vector<RetiredFuse> retired_fuses_;
  /// Requests running under rt (Pin), and replaced Runtimes kept for theirs.
  std::uint32_t pins_ = 0;
  struct Kept {
    std::shared_ptr<Runtime> rt;
    std::uint32_t pins;
  };
  std::vector<Kept> kept_;
  void pin(const Runtime* r) noexcept;
  void unpin(const Runtime* r) noexcept;
  /// Request scratch, and read buffers for connections with bytes to read.
  Stock<ExchangeBuffers> buffers_{1024};
  Stock<IoBuffer> read_buffers_{4096};
  void trim_stocks();
  std::size_t max_fields_ = 100;
  std::size_t read_buffer_max_ = 80 * 1024;
  std::optional<Timer> sweep_timer_;
  core::TimePoint last_pool_sweep_{};
  std::thread thread_;
  bool draining_ = false;
  bool shutting_down_ = false;  ///< returned buffers are freed, not pooled
};

}  // namespace levee::proxy

// A worker: one thread, one io_context, its own SO_REUSEPORT acceptors, and
// everything its connections use that needs no lock because only this
// thread touches it: pools of per-request scratch and read buffers, idle
// upstream connections, the balancer's view of each cluster, fuses, and the
// lists its periodic sweep walks (idle connections, long upstream waits).
// Other threads reach a worker only by posting to its io_context.
#pragma once

#include <boost/asio/io_context.hpp>

#include <atomic>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "control/access_log.hpp"
#include "proxy/asio.hpp"
#include "proxy/clock.hpp"
#include "proxy/exchange_buffers.hpp"
#include "proxy/fuse.hpp"
#include "proxy/io_buffer.hpp"
#include "proxy/timed_list.hpp"
#include "proxy/upstream.hpp"

namespace levee::proxy {

class Cluster;
class Listener;
class Runtime;

/// A downstream connection the worker's sweep may act on while it is idle.
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
  const std::shared_ptr<Runtime> rt;
  control::AccessLog::Shard& log;
  Rng rng;
  UpstreamPool pool;
  Balancer balancer;
  std::atomic<int> tid{0};
  std::atomic<std::uint32_t> connections{0};  ///< open downstream connections

  bool draining() const noexcept { return draining_; }
  bool serves_batch() const noexcept { return index == 0; }
  Fuse& fuse(Listener& l, const Cluster& c);

  // Pools ---------------------------------------------------------------------
  std::unique_ptr<ExchangeBuffers> take_buffers();
  void put_buffers(std::unique_ptr<ExchangeBuffers> b);
  std::unique_ptr<IoBuffer> take_read_buffer();
  void put_read_buffer(std::unique_ptr<IoBuffer> b);

  // Lists the sweep walks ------------------------------------------------------
  /// An idle connection of listener l joins at the back. fresh: it has not
  /// sent a request yet (it waits without a buffer, and is not an idle
  /// keep-alive connection to close for room).
  void idle(IdleConnection& c, const Listener& l, core::TimePoint since, bool fresh);
  /// Closes up to n idle keep-alive connections of l, oldest first (near the cap).
  void close_idle(const Listener& l, std::size_t n);
  TimedList upstream_waits;  ///< exchanges waiting for a response head

  // Executor-load probe: posted by the sampler, timed here.
  std::atomic<std::int64_t> probe_posted_ns{0};
  std::atomic<std::int64_t> probe_delay_ns{0};
  std::atomic<bool> probe_pending{false};

 private:
  void sweep();
  void arm_sweep();

  struct IdleLists {
    TimedList fresh;   ///< accepted, no request yet: no buffer
    TimedList hot;     ///< idle after a request, still holding a read buffer
    TimedList parked;  ///< idle past park_after: no buffer
  };
  std::vector<std::unique_ptr<Acceptor>> acceptors_;
  std::vector<Listener*> acceptor_listener_;
  std::vector<std::unique_ptr<IdleLists>> idle_;  // [listener]
  std::vector<std::vector<std::unique_ptr<Fuse>>> fuses_;  // [listener][cluster]
  std::vector<std::unique_ptr<ExchangeBuffers>> buffers_;
  std::vector<std::unique_ptr<IoBuffer>> read_buffers_;
  std::size_t max_fields_ = 100;
  std::size_t read_buffer_max_ = 80 * 1024;
  std::optional<Timer> sweep_timer_;
  core::TimePoint last_pool_sweep_{};
  std::thread thread_;
  bool draining_ = false;
  bool shutting_down_ = false;  ///< returned buffers are freed, not pooled
};

}  // namespace levee::proxy

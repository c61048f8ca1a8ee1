// A worker: one thread, one io_context, its own SO_REUSEPORT acceptors,
// upstream connection pools and load-balancer view. Nothing here is shared
// with other workers except through Runtime's atomics and cluster locks.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>

#include <atomic>
#include <deque>
#include <memory>
#include <thread>
#include <vector>

#include "proxy/clock.hpp"
#include "proxy/http.hpp"
#include "proxy/io_buffer.hpp"
#include "proxy/runtime.hpp"

namespace levee::proxy {

class Server;
class Session;
struct Fuse;

/// An upstream connection, pooled per worker and endpoint.
struct UpstreamConn {
  UpstreamConn(boost::asio::io_context& ctx, std::size_t max_head)
      : sock(ctx), buf(8 * 1024, max_head + 16 * 1024) {}
  ~UpstreamConn();
  tcp::socket sock;
  Fuse* fuse = nullptr;  ///< the batch fuse this connection counts against
  IoBuffer buf;
  TimePoint idle_since{};
  std::uint64_t uses = 0;
  std::uint64_t generation = 0;  ///< the endpoint's address generation when connected
  std::size_t cluster = 0;
  std::size_t endpoint = 0;
};

/// A batch listener's fuse for one cluster: at most `per_endpoint`
/// upstream connections to each endpoint, open or idle, whatever the
/// number of downstream connections. Requests wait for a slot in a bounded
/// FIFO; a returned slot goes straight to the next waiter. Lives on the one
/// worker that serves batch listeners, so it needs no lock.
struct FuseWaiter {
  bool granted = false;
  boost::asio::steady_timer* timer = nullptr;
};
struct Fuse {
  struct Endpoint {
    std::vector<std::unique_ptr<UpstreamConn>> idle;
    std::uint32_t open = 0;
  };
  Listener* listener = nullptr;
  std::uint32_t per_endpoint = 4;
  std::uint32_t queue_max = 1024;
  std::vector<Endpoint> eps;
  std::uint32_t in_use = 0;  ///< slots held by requests
  std::deque<FuseWaiter*> waiters;
};

/// Per-request scratch space, pooled per worker so that idle keep-alive
/// connections hold only their read buffer.
struct Exchange {
  Exchange(std::size_t max_fields)
      : req_head(max_fields), req_body(16 * 1024), resp_head(256), resp_body(16 * 1024) {
    out.reserve(4096);
  }
  Head req_head;
  RequestInfo req;
  BodySink req_body;
  Head resp_head;
  ResponseInfo resp;
  BodySink resp_body;
  std::string out;
  std::optional<RequestParser> req_parser;
  std::optional<ResponseParser> resp_parser;
  void reset() {
    req_head.reset();
    req = RequestInfo{};
    req_body.clear();
    resp_head.reset();
    resp = ResponseInfo{};
    resp_body.clear();
    out.clear();
    req_parser.reset();
    resp_parser.reset();
  }
};

class Worker {
 public:
  Worker(Server& server, std::size_t index, std::shared_ptr<Runtime> rt);
  ~Worker();

  /// Opens this worker's acceptors (SO_REUSEPORT) on every listener.
  void open_listeners();
  void start();
  /// Stops accepting and closes idle keep-alive connections (drain).
  void begin_drain();
  void stop();
  void join();

  // Every socket and timer of a worker is used on its thread only, so the
  // reactor's per-descriptor locks are dropped; the scheduler keeps its
  // lock because other threads post wake-ups and probes here.
  boost::asio::io_context ctx{BOOST_ASIO_CONCURRENCY_HINT_UNSAFE_IO};
  Server& server;
  const std::size_t index;
  std::shared_ptr<Runtime> rt;
  Rng rng;
  std::atomic<int> tid{0};

  // Upstream pools ------------------------------------------------------------
  std::unique_ptr<UpstreamConn> take_idle(std::size_t cluster, std::size_t endpoint, TimePoint t);
  void put_idle(std::unique_ptr<UpstreamConn> c, TimePoint t);
  std::size_t idle_count() const noexcept { return idle_total_.load(std::memory_order_relaxed); }

  /// P2C pick over this worker's view of the cluster; kNoEndpoint if none.
  std::size_t pick(Cluster& c, std::size_t avoid);

  // Batch fuse (only on the worker that serves batch listeners) ------------
  Fuse& fuse(Listener& l, Cluster& c);
  /// A slot now, if one is free and nobody is waiting.
  bool fuse_try_acquire(Fuse& f, Cluster& c);
  /// Returns a slot; it goes to the longest waiter, if any.
  void fuse_release(Fuse& f);
  /// An available endpoint with an idle fuse connection or room for one.
  std::size_t fuse_pick(Fuse& f, Cluster& c);
  std::unique_ptr<UpstreamConn> fuse_take(Fuse& f, std::size_t endpoint, TimePoint t);
  void fuse_note_open(Fuse& f, UpstreamConn& conn, std::size_t endpoint);
  bool serves_batch() const noexcept { return index == 0; }

  std::unique_ptr<Exchange> take_exchange();
  void put_exchange(std::unique_ptr<Exchange> e);

  // Sessions, for drain -----------------------------------------------------
  void attach(Session* s);
  void detach(Session* s);
  std::atomic<std::uint32_t> active_sessions{0};

  // Executor-load probe: posted by the sampler, timed here.
  std::atomic<std::int64_t> probe_posted_ns{0};
  std::atomic<std::int64_t> probe_delay_ns{0};
  std::atomic<bool> probe_pending{false};

  const WatchedNames& watched() const noexcept { return watched_; }
  const ResponseWatched& response_watched() const noexcept { return resp_watched_; }

 private:
  boost::asio::awaitable<void> accept_loop(tcp::acceptor& a, Listener& l);
  /// Refuses a connection politely: reads the request briefly, answers 503
  /// with Retry-After and the reason, closes.
  boost::asio::awaitable<void> refuse(tcp::socket s, Listener& l, core::Reason reason);
  /// Near the connection cap: close this listener's idle keep-alive
  /// connections on this worker, up to n.
  void close_idle_sessions(Listener& l, std::size_t n);
  void sweep_idle();

  std::vector<std::unique_ptr<tcp::acceptor>> acceptors_;
  std::vector<Listener*> acceptor_listener_;
  std::vector<std::vector<std::vector<std::unique_ptr<UpstreamConn>>>> idle_;  // [cluster][endpoint]
  std::atomic<std::size_t> idle_total_{0};
  boost::asio::steady_timer sweep_timer_;

  struct LbView {
    std::uint64_t version = 0;
    core::WeightedSet set;
    std::vector<core::EndpointLoad> loads;
  };
  std::vector<LbView> lb_;

  std::vector<std::unique_ptr<Exchange>> exchanges_;
  std::vector<std::vector<std::unique_ptr<Fuse>>> fuses_;  // [listener][cluster]
  Session* sessions_ = nullptr;
  WatchedNames watched_;
  ResponseWatched resp_watched_;
  std::thread thread_;
  bool draining_ = false;
};

}  // namespace levee::proxy

// The upstream side of the data plane, per worker: connections to
// endpoints, the pool of idle keep-alive ones, and the worker's view of
// each cluster for choosing an endpoint.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "core/balancer.hpp"
#include "core/time.hpp"
#include "proxy/asio.hpp"
#include "proxy/clock.hpp"
#include "proxy/io_buffer.hpp"
#include "proxy/stream.hpp"

namespace levee::proxy {

class Cluster;
class Fuse;
class Runtime;

/// A connection to one endpoint. Owned by one request at a time, or by a
/// pool while idle; closed by destruction.
struct UpstreamConn {
  UpstreamConn(Executor ex, const Cluster& c, std::size_t ep, std::uint64_t gen);
  ~UpstreamConn();
  UpstreamConn(const UpstreamConn&) = delete;
  UpstreamConn& operator=(const UpstreamConn&) = delete;

  Stream stream;  ///< cleartext, or TLS when the cluster says so
  Socket& sock() noexcept { return stream.socket(); }
  IoBuffer buf;
  Fuse* fuse = nullptr;  ///< the fuse this connection counts against
  core::TimePoint idle_since{};
  std::uint64_t uses = 0;
  const Cluster* owner;  ///< the cluster (of some Runtime) it was made for
  std::size_t cluster;   ///< owner's index
  std::size_t endpoint;
  std::uint64_t generation;  ///< the endpoint's address generation when connected

  /// Whether an idle connection may carry a request. Anything readable on
  /// it is a close or bytes that belong to no request: either way it is
  /// not reusable. A request whose retry is free (`retry_free`: it may be
  /// sent again, and its body is held whole) trusts what the event loop
  /// last saw (Stream::seen_quiet: no syscall, and HAProxy's rule): should
  /// the backend have closed since, the attempt fails as Stale before any
  /// response byte and is retried. Any other gets a look at the socket now.
  bool reusable(bool retry_free) noexcept { return (retry_free && stream.seen_quiet()) || stream.quiet(); }
};

/// Idle keep-alive connections of one worker, per cluster and endpoint.
/// A connection comes back only when its last response ended exactly where
/// its framing said and nothing more had arrived; and before one is reused
/// it is checked for anything that arrived since (bytes the backend should
/// not have sent, or its close), so a response never reaches a request it
/// does not belong to (UpstreamConn::reusable says how).
///
/// The pool belongs to the worker's current Runtime. A reload moves idle
/// connections to the same (cluster, address) in the new one (rebind); a
/// connection coming back from a request of the previous Runtime is moved
/// the same way, and one of an older Runtime is closed.
class UpstreamPool {
 public:
  explicit UpstreamPool(const Runtime& rt);
  /// Null when none is idle, or when `cluster` is not of the pool's Runtime.
  /// `retry_free`: see UpstreamConn::reusable.
  std::unique_ptr<UpstreamConn> take(const Cluster& cluster, std::size_t endpoint, core::TimePoint now,
                                     bool retry_free);
  void put(std::unique_ptr<UpstreamConn> c, core::TimePoint now);
  /// Moves to `next` (on the worker's thread).
  void rebind(const Runtime& next);
  /// Drops connections idle longer than their cluster's idle_timeout.
  void sweep(core::TimePoint now);
  void close_all();
  std::size_t idle() const noexcept { return idle_total_; }
  bool draining = false;

 private:
  /// Where a connection of the previous Runtime's cluster goes now.
  struct Moved {
    std::size_t cluster = 0;
    std::vector<std::size_t> endpoint;  ///< new index by old; kNoEndpoint: gone
  };
  bool adopt(UpstreamConn& c) const;

  const Runtime* rt_;
  std::vector<std::vector<std::vector<std::unique_ptr<UpstreamConn>>>> idle_;  // [cluster][endpoint]
  std::vector<const Cluster*> owner_;  // [cluster]
  std::map<const Cluster*, Moved> moved_;
  std::size_t idle_total_ = 0;
};

/// The worker's view of each cluster's effective weights, rebuilt when the
/// cluster publishes new ones; endpoints are chosen by weighted power of
/// two choices over it.
class Balancer {
 public:
  /// The views live in each cluster (Cluster::views), one per worker.
  explicit Balancer(std::size_t worker) : worker_(worker) {}
  /// kNoEndpoint when none is available. `avoid` (a retry's previous
  /// endpoint) gets one more draw.
  std::size_t pick(Cluster& c, std::size_t avoid, Rng& rng);

 private:
  std::size_t worker_;
};

}  // namespace levee::proxy

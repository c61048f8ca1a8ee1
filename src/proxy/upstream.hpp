// The upstream side of the data plane, per worker: connections to
// endpoints, the pool of idle keep-alive ones, and the worker's view of
// each cluster for choosing an endpoint.
#pragma once

#include <cstdint>
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
  UpstreamConn(Executor ex, std::size_t c, std::size_t ep, std::uint64_t gen)
      : stream(ex), buf(8 * 1024, 80 * 1024), cluster(c), endpoint(ep), generation(gen) {}
  ~UpstreamConn();
  UpstreamConn(const UpstreamConn&) = delete;
  UpstreamConn& operator=(const UpstreamConn&) = delete;

  Stream stream;  ///< cleartext, or TLS when the cluster says so
  Socket& sock() noexcept { return stream.socket(); }
  IoBuffer buf;
  Fuse* fuse = nullptr;  ///< the fuse this connection counts against
  core::TimePoint idle_since{};
  std::uint64_t uses = 0;
  std::size_t cluster;
  std::size_t endpoint;
  std::uint64_t generation;  ///< the endpoint's address generation when connected
};

/// Idle keep-alive connections of one worker, per cluster and endpoint.
/// A connection comes back only when its last response ended exactly where
/// its framing said and nothing more had arrived; and before one is reused
/// the socket is checked for anything that arrived since (bytes the backend
/// should not have sent, or its close), so a response never reaches a
/// request it does not belong to.
class UpstreamPool {
 public:
  explicit UpstreamPool(const Runtime& rt);
  std::unique_ptr<UpstreamConn> take(std::size_t cluster, std::size_t endpoint, core::TimePoint now);
  void put(std::unique_ptr<UpstreamConn> c, core::TimePoint now);
  /// Drops connections idle longer than their cluster's idle_timeout.
  void sweep(core::TimePoint now);
  void close_all();
  std::size_t idle() const noexcept { return idle_total_; }
  bool draining = false;

 private:
  const Runtime& rt_;
  std::vector<std::vector<std::vector<std::unique_ptr<UpstreamConn>>>> idle_;  // [cluster][endpoint]
  std::size_t idle_total_ = 0;
};

/// The worker's view of each cluster's effective weights, rebuilt when the
/// cluster publishes new ones; endpoints are chosen by weighted power of
/// two choices over it.
class Balancer {
 public:
  explicit Balancer(std::size_t clusters) : views_(clusters) {}
  /// kNoEndpoint when none is available. `avoid` (a retry's previous
  /// endpoint) gets one more draw.
  std::size_t pick(Cluster& c, std::size_t avoid, Rng& rng);

 private:
  struct View {
    std::uint64_t version = 0;
    core::WeightedSet set;
    std::vector<core::EndpointLoad> loads;
  };
  std::vector<View> views_;
};

}  // namespace levee::proxy

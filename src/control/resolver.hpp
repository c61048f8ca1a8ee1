// Name resolution for endpoints given as hostnames, off every request-path
// and sampler thread: on the admin thread with Asio's asynchronous
// resolver (whose lookups run on a thread of its own). Literal addresses
// are set at once; hostnames are resolved at start and then every
// resolve_interval. A failed lookup keeps the last good set. An endpoint
// whose address set changes is a new backend as far as warm-up goes: it
// ramps again (slow start).
#pragma once

#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>

namespace levee::proxy {
class Cluster;
class Runtime;
struct Endpoint;
}  // namespace levee::proxy

namespace levee::control {

class Resolver {
 public:
  Resolver(boost::asio::io_context& ctx, proxy::Runtime& rt);
  /// Sets literal addresses now and starts resolving the rest.
  void start();

 private:
  boost::asio::awaitable<void> loop(proxy::Cluster& c, proxy::Endpoint& ep);

  boost::asio::io_context& ctx_;
  proxy::Runtime& rt_;
};

}  // namespace levee::control

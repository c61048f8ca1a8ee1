// Active health checks, run on the admin thread: one coroutine per endpoint
// of every cluster that enables them, so at most one check is in flight per
// endpoint; the connection is kept and reused; intervals carry jitter so a
// fleet of levees never probes in lockstep, and back off (doubling, up to
// max_interval) while an endpoint stays down. Transitions use the core's
// hysteresis (HealthState): `unhealthy` consecutive failures to leave,
// `healthy` consecutive successes to return; the very first result decides
// at once so a fresh levee is ready as soon as its backends are.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>

#include <memory>

#include "proxy/clock.hpp"

namespace levee::proxy {
class Cluster;
class Runtime;
struct Endpoint;
}  // namespace levee::control

namespace levee::control {

class HealthChecker {
 public:
  HealthChecker(boost::asio::io_context& ctx, std::shared_ptr<proxy::Runtime> rt, std::size_t metrics_shard);
  void start();

 private:
  boost::asio::awaitable<void> loop(proxy::Cluster& c, proxy::Endpoint& ep);

  boost::asio::io_context& ctx_;
  std::shared_ptr<proxy::Runtime> rt_;
  std::size_t shard_;
  proxy::Rng rng_;
};

}  // namespace levee::control

// Active health checks, run on the admin thread: one coroutine per endpoint
// of every cluster that enables them, so at most one check is in flight per
// endpoint; the connection is kept and reused; intervals carry jitter so a
// fleet of levees never probes in lockstep, and back off (doubling, up to
// max_interval) while an endpoint stays down. Transitions use the core's
// hysteresis (HealthState): `unhealthy` consecutive failures to leave,
// `healthy` consecutive successes to return; the very first result decides
// at once so a fresh levee is ready as soon as its backends are.
//
// Each Runtime gets its own set of checks (start); a reload stops the old
// set and starts one for the new Runtime, where an endpoint that remained
// begins from the health it had (its state was carried over). An endpoint
// an operator disabled is not probed.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>

#include <memory>

#include "proxy/clock.hpp"

namespace levee::proxy {
class H2Upstream;
class Cluster;
class Runtime;
struct Endpoint;
}  // namespace levee::proxy

namespace levee::control {

class HealthChecker {
 public:
  HealthChecker(boost::asio::io_context& ctx, std::size_t metrics_shard);
  ~HealthChecker();
  /// Stops the checks of the previous Runtime, if any, and starts rt's.
  void start(std::shared_ptr<proxy::Runtime> rt);
  void stop();

 private:
  struct Run;
  boost::asio::awaitable<void> loop(std::shared_ptr<Run> run, proxy::Cluster& c, proxy::Endpoint& ep);
  /// One probe over HTTP/2 (gRPC's health protocol, or a GET): `ok` set
  /// when it passed. `conn` is the endpoint's probe connection, kept
  /// between probes (made again when it has gone).
  boost::asio::awaitable<void> probe_h2(std::shared_ptr<Run> run, proxy::Cluster& c, proxy::Endpoint& ep,
                                        std::shared_ptr<proxy::H2Upstream>& conn, const std::string& host, bool& ok);

  boost::asio::io_context& ctx_;
  std::size_t shard_;
  proxy::Rng rng_;
  std::shared_ptr<Run> run_;
};

}  // namespace levee::control

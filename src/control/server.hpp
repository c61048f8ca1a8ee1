// The process: the workers (the data plane), and the control plane around
// them: the load sampler on a thread of its own; the admin listener,
// health checks, name resolution, signals and the drain sequence on the
// admin thread; the access log's writer thread.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>

#include <memory>
#include <vector>

#include "config/config.hpp"
#include "control/access_log.hpp"
#include "control/admin.hpp"
#include "control/health_checker.hpp"
#include "control/load_sampler.hpp"
#include "control/resolver.hpp"
#include "core/time.hpp"
#include "metrics/metrics.hpp"
#include "quota/fleet_sync.hpp"

namespace levee::proxy {
class Runtime;
class Worker;
}  // namespace levee::proxy

namespace levee::control {

class Server {
 public:
  explicit Server(std::shared_ptr<const config::Config> cfg);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  /// Binds everything and starts; throws std::system_error naming the
  /// address (or file) that could not be used.
  void start();
  /// Runs the admin thread until drained; returns the exit code.
  int run();

 private:
  void on_signal(int sig);
  void wait_signals();
  void begin_drain();
  void check_drained();
  std::pair<bool, std::string> ready() const;
  std::string clusters_json() const;

  // Declared in the order that makes destruction safe: what coroutines on
  // admin_ctx_ reference outlives it, and I/O objects bound to it die first.
  std::shared_ptr<const config::Config> cfg_;
  std::shared_ptr<proxy::Runtime> rt_;
  std::unique_ptr<AccessLog> log_;
  std::vector<std::unique_ptr<proxy::Worker>> workers_;
  std::unique_ptr<LoadSampler> sampler_;
  /// Fleet quotas through Redis; null unless quota_sync.enabled.
  std::unique_ptr<quota::FleetSync> fleet_;
  std::unique_ptr<HealthChecker> health_;
  std::unique_ptr<Resolver> resolver_;
  std::unique_ptr<AdminServer> admin_;
  metrics::Registry registry_;
  boost::asio::io_context admin_ctx_{1};
  boost::asio::signal_set signals_;
  boost::asio::steady_timer drain_timer_;
  core::TimePoint drain_deadline_{};
  bool draining_ = false;
  int exit_code_ = 0;
};

}  // namespace levee::control

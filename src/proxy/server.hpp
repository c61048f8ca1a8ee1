// The process: workers, the admin thread (admin listener, load sampler,
// weight refresh, DNS, signals) and the drain sequence.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>

#include <memory>
#include <vector>

#include "config/config.hpp"
#include "core/executor_load.hpp"
#include "metrics/metrics.hpp"
#include "proxy/access_log.hpp"
#include "proxy/cpu.hpp"
#include "proxy/health_checker.hpp"
#include "proxy/runtime.hpp"
#include "proxy/worker.hpp"
#include "quota/fleet_sync.hpp"

namespace levee::proxy {

class Server {
 public:
  explicit Server(std::shared_ptr<const config::Config> cfg);
  ~Server();

  /// Binds everything; throws std::system_error when a port is unavailable.
  void start();
  /// Runs the admin loop until drained; returns the exit code.
  int run();

  AccessLog& access_log() { return *log_; }
  std::size_t workers() const noexcept { return workers_.size(); }

 private:
  boost::asio::awaitable<void> admin_accept();
  boost::asio::awaitable<void> admin_session(boost::asio::ip::tcp::socket s);
  std::string admin_clusters_json();
  bool ready() const;
  void sample_load();
  void sample_host_cpu();
  void tick();
  void resolve_all(bool blocking);
  void begin_drain();
  void check_drained();
  void build_registry();

  std::shared_ptr<const config::Config> cfg_;
  std::shared_ptr<Runtime> rt_;
  std::unique_ptr<AccessLog> log_;
  std::vector<std::unique_ptr<Worker>> workers_;
  std::unique_ptr<HealthChecker> health_;

  boost::asio::io_context admin_ctx_{1};
  std::unique_ptr<boost::asio::ip::tcp::acceptor> admin_acceptor_;
  boost::asio::signal_set signals_;
  boost::asio::steady_timer load_timer_;
  boost::asio::steady_timer host_timer_;
  boost::asio::steady_timer tick_timer_;
  boost::asio::steady_timer resolve_timer_;
  boost::asio::steady_timer drain_timer_;
  TimePoint drain_deadline_{};
  bool draining_ = false;
  int exit_code_ = 0;

  metrics::Registry registry_;
  metrics::CounterTable log_dropped_{"levee_access_log_dropped_total", "Access log lines dropped because the queue was full", {}, 1};

  // self-protection
  core::ExecutorLoad executor_;
  core::ExecutorLoad host_load_;
  HostCpu host_cpu_;
  struct ThreadProbe {
    std::unique_ptr<ThreadSchedReader> reader;
    ThreadSched last{};
    std::uint64_t last_wall = 0;
    bool primed = false;
  };
  std::vector<ThreadProbe> probes_;
  std::uint64_t last_dropped_ = 0;

  /// Fleet quotas through Redis (issue 16); null unless quota_sync.enabled.
  /// Last, so it stops before the state its hooks reach is torn down.
  std::unique_ptr<quota::FleetSync> fleet_;
};

}  // namespace levee::proxy

// The process: the workers (the data plane), and the control plane around
// them: the load sampler on a thread of its own; the admin listener,
// health checks, signals, reloads and the drain sequence on the admin
// thread; name resolution on its own thread; the access log's writer.
//
// One class, its concerns in separate files:
//   server.cpp         start-up, signals, the drain sequence, shutdown
//   reload.cpp         building and installing Runtimes: reloads, DNS
//                      changes, policy overrides; metrics across them
//   admin_actions.cpp  the admin API: routing, authorisation, actions
//   admin_pages.cpp    what the admin API shows (JSON, the live page)
#pragma once

#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>

#include <array>
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "control/access_log.hpp"
#include "control/admin.hpp"
#include "control/health_checker.hpp"
#include "control/load_sampler.hpp"
#include "control/resolver.hpp"
#include "core/decision.hpp"
#include "core/time.hpp"
#include "metrics/metrics.hpp"
#include "proxy/runtime.hpp"
#include "quota/fleet_sync.hpp"

namespace levee::proxy {
class Worker;
}  // namespace levee::proxy

namespace levee::control {

/// What the TLS files a config names (certificates, keys, CA bundles) look
/// like on disk now: path, inode, size and mtime of each (tls_watch.cpp).
std::string tls_files_stamp(const config::Config& c);

/// The live admin page (admin_page.cpp).
std::string_view admin_page_html() noexcept;

/// The SHA-256 of a configuration file's text, in hex: start-up and reload name the config by it.
std::string sha256_hex(std::string_view data);

/// The admin actions, as levee_admin_actions_total labels them.
inline const std::vector<std::string> kAdminActions = {"reload",          "drain",           "undrain",
                                                       "endpoint_drain",  "endpoint_disable", "endpoint_enable",
                                                       "endpoint_weight", "dry_run",         "log_level"};

/// Shedding over the last minutes, per second, for the admin page's charts:
/// sampled from the rejection counters once a second on the admin thread.
struct ShedHistory {
  static constexpr std::size_t kPoints = 300;  // five minutes
  std::vector<std::string> reasons;            ///< shed reasons, in core's order
  std::deque<std::vector<double>> by_reason;   ///< per second: rejections per reason
  std::deque<std::array<double, core::kCriticalityCount>> by_criticality;
  std::deque<double> admitted;
  std::vector<double> last_reason;
  std::array<double, core::kCriticalityCount> last_crit{};
  double last_admitted = 0;
  bool primed = false;
};

class Server {
 public:
  /// cfg as loaded from `text`, the configuration file's bytes (kept for
  /// its hash and for placing errors a reload finds after loading).
  /// workers_override: --workers (kept across reloads; 0: none).
  Server(std::shared_ptr<const config::Config> cfg, std::string text, unsigned workers_override = 0);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  /// Binds everything and starts; throws std::system_error naming the
  /// address (or file) that could not be used.
  void start();
  /// Runs the admin thread until drained; returns the exit code.
  int run();

  struct ReloadResult {
    bool ok = false;
    std::vector<std::string> errors;  ///< "file:line:col: key: message"
    std::string summary;              ///< what changed, on success
    std::uint64_t generation = 0;     ///< the Runtime now running
  };
  /// Reads the configuration file again; validates it; on any error keeps
  /// the running configuration; otherwise switches to it without dropping
  /// a request or a connection. On the admin thread.
  ReloadResult reload(std::string_view why);

 private:
  using Bound = std::vector<std::vector<std::pair<std::size_t, int>>>;  // [worker] (slot, fd)

  // --- reload.cpp
  std::shared_ptr<proxy::Runtime> build(std::shared_ptr<const config::Config> cfg,
                                        const proxy::PolicyOverrides& overrides) const;
  std::vector<std::string> restart_only(const config::Config& next, const std::string& text) const;
  bool bind_new(const proxy::Runtime& next, Bound& bound, std::vector<std::string>& errors,
                const std::string& text) const;
  void install(std::shared_ptr<proxy::Runtime> next, Bound bound);
  /// The same configuration again (a hostname's addresses changed, an
  /// operator's override): coalesced, on the admin thread.
  void schedule_rebuild(std::string why);
  void rebuild();
  void retire_tick();
  void build_registry();
  std::string serialize_metrics() const;
  /// Waits (briefly) until every worker runs `generation`.
  boost::asio::awaitable<bool> applied(std::uint64_t generation);

  // --- server.cpp
  void on_signal(int sig);
  void wait_signals();
  /// Starts a drain: /ready 503 now, the rest after drain_delay. exit: stop
  /// accepting then and exit once the connections are done.
  void begin_drain(bool exit);
  void drain_active();
  bool undrain();
  void check_drained();
  void sample_history();
  // --- tls_watch.cpp
  /// Once a second: rebuilds when the TLS files the config names changed.
  void watch_tls_files();
  /// Once a second: new session-ticket keys where a listener's rotation is due.
  void rotate_ticket_keys();

  // --- admin_actions.cpp
  boost::asio::awaitable<AdminReply> admin_request(const AdminRequest& r);
  AdminReply endpoint_action(const AdminRequest& r, std::string_view action);
  AdminReply dry_run_action(const AdminRequest& r);
  AdminReply log_level_action(const AdminRequest& r);
  /// Why `r` may not act or read every page, or empty when it may: a
  /// loopback client sent by no browser page from elsewhere, or the token.
  std::string_view unauthorized(const AdminRequest& r) const;
  /// Why a GET of `path` is refused, or empty: it is answered to those
  /// authorised and for a page in admin.open_paths.
  std::string_view unreadable(const AdminRequest& r, std::string_view path) const;
  void count_action(std::string_view action, bool ok);
  /// Logs a refused admin request, at most one line a second.
  void refused(const std::string& what, const AdminRequest& r, std::string_view why);
  /// The refusals refused() did not log, in one line once their second is
  /// over (arm_refusal_flush: the timer for it; flush_refusals: the line,
  /// also written at exit).
  void arm_refusal_flush();
  void flush_refusals();

  // --- admin_pages.cpp
  std::pair<bool, std::string> ready() const;
  std::string clusters_json() const;
  std::string stats_json() const;
  std::string info_json() const;
  std::string config_json() const;

  // Declared in the order that makes destruction safe: what coroutines on
  // admin_ctx_ reference outlives it, and I/O objects bound to it die first.
  std::shared_ptr<const config::Config> cfg_;
  unsigned workers_override_ = 0;
  std::string text_;         ///< the running configuration's file contents
  std::string config_hash_;  ///< sha256 of text_
  std::string started_at_;   ///< ISO 8601, UTC
  double started_unix_ = 0;
  std::shared_ptr<proxy::ProcessState> process_;
  std::shared_ptr<proxy::Runtime> rt_;
  /// Replaced Runtimes still used by requests in flight; their counters are
  /// merged into scrapes until they are folded into the current tables.
  std::vector<std::shared_ptr<proxy::Runtime>> retired_;
  std::vector<std::unique_ptr<metrics::Registry>> retired_registries_;
  proxy::PolicyOverrides overrides_;
  std::unique_ptr<AccessLog> log_;
  std::vector<std::unique_ptr<proxy::Worker>> workers_;
  std::unique_ptr<LoadSampler> sampler_;
  /// Fleet quotas through Redis; null unless quota_sync.enabled. Its hooks
  /// reach the current Runtime through fleet_rt_.
  std::unique_ptr<quota::FleetSync> fleet_;
  std::shared_ptr<std::pair<std::mutex, std::shared_ptr<proxy::Runtime>>> fleet_rt_;
  std::unique_ptr<HealthChecker> health_;
  std::unique_ptr<Resolver> resolver_;
  std::unique_ptr<AdminServer> admin_;
  std::unique_ptr<metrics::Registry> registry_;
  // Counters of the control plane itself (written on the admin thread: shard 0).
  metrics::CounterTable reloads_;
  metrics::CounterTable actions_;
  double last_reload_ok_ = 0;  ///< unix seconds of the last successful reload (or start)
  std::chrono::steady_clock::time_point refusal_logged_{};  ///< the last refusal logged (admin thread)
  std::uint64_t refusals_unlogged_ = 0;                      ///< refusals since, not logged
  ShedHistory history_;
  boost::asio::io_context admin_ctx_{1};
  boost::asio::signal_set signals_;
  boost::asio::steady_timer drain_timer_;
  boost::asio::steady_timer delay_timer_;
  boost::asio::steady_timer tick_timer_;
  boost::asio::steady_timer refusal_timer_;  ///< writes the count of refusals not logged, a second on
  bool refusal_flush_armed_ = false;
  core::TimePoint drain_deadline_{};
  enum class Drain : std::uint8_t { None, Delay, Active };
  Drain drain_ = Drain::None;
  bool exiting_ = false;
  bool rebuild_pending_ = false;
  std::string rebuild_why_;
  std::string tls_stamp_;    ///< the TLS files as last loaded (tls_files_stamp)
  std::string tls_pending_;  ///< a change seen, waiting a tick to settle
  metrics::CounterTable ticket_rotations_{"levee_tls_ticket_key_rotations_total",
                                          "New session-ticket keys drawn (listeners' session_ticket_rotation)", {}, 1};
  metrics::CounterTable rebuilds_{"levee_runtime_rebuilds_total",
                                  "Runtimes rebuilt from the running config (DNS changes, TLS files changed), by result",
                                  {{"result", {"ok", "error"}}}, 1};
  int exit_code_ = 0;
};

}  // namespace levee::control

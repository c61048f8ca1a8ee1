// Service discovery for endpoints given as hostnames. A hostname stands for
// every address it resolves to, one endpoint each (headless Kubernetes
// services, DNS round robin), so power of two choices, outlier ejection,
// slow start and health checks act on each backend, not on one virtual IP.
//
// Lookups run on a thread of their own ("levee-dns"), never on a worker,
// the sampler or the admin thread: with `resolver.servers`, levee asks
// those DNS servers itself (UDP, A and AAAA) and re-resolves when the
// answer's TTL runs out (no sooner than resolver.min_ttl, no later than the
// cluster's resolve_interval); otherwise the system's resolver
// (getaddrinfo: /etc/hosts, nsswitch) every resolve_interval. Results go
// to the admin thread; when a hostname's set changes the Server rebuilds
// its Runtime, where endpoints that remain keep their state, new ones join
// with slow start and those gone are drained (requests in flight to them
// finish). A failed lookup keeps the last good set and is counted.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "config/config.hpp"
#include "proxy/runtime.hpp"

namespace levee::control {

class Resolver {
 public:
  using Key = std::pair<std::string, std::uint16_t>;
  struct Stats {
    std::uint64_t lookups = 0, failures = 0, changes = 0;
    std::size_t addresses = 0;
  };

  /// on_change runs on the admin thread when some hostname's set changed.
  Resolver(boost::asio::io_context& admin, std::function<void()> on_change);
  ~Resolver();
  Resolver(const Resolver&) = delete;
  Resolver& operator=(const Resolver&) = delete;

  /// Watches the hostnames of c's clusters from now on (admin thread):
  /// new ones are looked up at once, dropped ones forgotten.
  void watch(const config::Config& c);
  void start();
  void stop();

  /// What every watched hostname last resolved to (admin thread).
  const proxy::Discovered& discovered() const noexcept { return found_; }
  const std::map<Key, Stats>& stats() const noexcept { return stats_; }

 private:
  struct Watch;
  struct Result {
    bool ok = false;
    std::vector<std::string> addresses;
    std::optional<std::uint32_t> ttl;
    std::string error;
  };
  boost::asio::awaitable<void> loop(std::shared_ptr<Watch> w);
  boost::asio::awaitable<Result> lookup_dns(Watch& w);
  boost::asio::awaitable<Result> lookup_system(const Watch& w);
  void report(const Key& k, std::uint64_t generation, Result r);

  boost::asio::io_context& admin_;
  std::function<void()> on_change_;
  boost::asio::io_context ctx_{1};  // the lookups' thread
  std::optional<boost::asio::executor_work_guard<boost::asio::io_context::executor_type>> work_;
  std::thread thread_;
  // Admin thread:
  std::map<Key, std::shared_ptr<Watch>> watches_;
  proxy::Discovered found_;
  std::map<Key, Stats> stats_;
  std::map<Key, bool> warned_;
  std::uint64_t generation_ = 0;
};

}  // namespace levee::control

// One backend address of a cluster, shared by every worker. What the
// balancer and the metrics read is published here in atomics (written by
// the cluster under its lock, read by anyone without one); the addresses a
// hostname resolved to sit behind their own small lock, taken only when a
// new upstream connection is opened.
#pragma once

#include <boost/asio/ip/tcp.hpp>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace levee::proxy {

using boost::asio::ip::tcp;

struct Endpoint {
  std::string host;
  std::uint16_t port = 0;
  double weight = 1.0;
  std::string label;  ///< "host:port", as in metrics and logs
  std::size_t index = 0;

  std::atomic<std::uint32_t> outstanding{0};  ///< requests in flight to it (all workers)
  // Published by the cluster after every change of its endpoint state.
  std::atomic<double> effective_weight{0.0};  ///< weight x slow start; 0 when out
  std::atomic<bool> healthy{true};
  std::atomic<bool> ejected{false};
  std::atomic<double> utilization{-1.0};      ///< smoothed ORCA utilization, -1 unknown
  std::atomic<std::uint64_t> ejections{0};
  std::atomic<std::uint64_t> health_transitions{0};
  /// Bumped when the resolved addresses change; pooled connections made
  /// under an older generation are not reused.
  std::atomic<std::uint64_t> addr_generation{0};

  std::vector<tcp::endpoint> addresses() const {
    std::lock_guard lk(addr_mu_);
    return addrs_;
  }
  /// Returns true when the set changed (not on the first resolution).
  bool set_addresses(std::vector<tcp::endpoint> a) {
    std::sort(a.begin(), a.end());
    std::lock_guard lk(addr_mu_);
    if (a == addrs_) return false;
    const bool had = !addrs_.empty();
    addrs_ = std::move(a);
    addr_generation.fetch_add(1, std::memory_order_release);
    return had;
  }
  bool resolved() const {
    std::lock_guard lk(addr_mu_);
    return !addrs_.empty();
  }

 private:
  mutable std::mutex addr_mu_;
  std::vector<tcp::endpoint> addrs_;
};

/// Counts a request against an endpoint for as long as it lives.
class Outstanding {
 public:
  explicit Outstanding(Endpoint& e) noexcept : e_(&e) { e_->outstanding.fetch_add(1, std::memory_order_relaxed); }
  Outstanding(const Outstanding&) = delete;
  Outstanding& operator=(const Outstanding&) = delete;
  ~Outstanding() { e_->outstanding.fetch_sub(1, std::memory_order_relaxed); }

 private:
  Endpoint* e_;
};

}  // namespace levee::proxy

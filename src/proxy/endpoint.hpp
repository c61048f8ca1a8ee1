// One backend address of a cluster, shared by every worker. What the
// balancer and the metrics read is published here in atomics (written by
// the cluster under its lock, read by anyone without one).
//
// An endpoint is one address: a hostname in the configuration stands for
// as many endpoints as it resolves to (Runtime::expand_endpoints), each with
// its own health, ejection, slow start and pool. When the addresses change,
// the cluster is rebuilt and the endpoints that remain carry their state.
#pragma once

#include <boost/asio/ip/tcp.hpp>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace levee::proxy {

using boost::asio::ip::tcp;

/// What an endpoint is, before it has state.
struct EndpointSpec {
  std::string host;       ///< as configured: a literal address or a hostname
  std::uint16_t port = 0;
  std::string address;    ///< the literal address it connects to
  double weight = 1.0;
  std::string label;      ///< "address:port" ([v6]:port), as in metrics and logs
  std::string authority;  ///< "host:port": the Host of requests that had none
};

struct Endpoint {
  explicit Endpoint(const EndpointSpec& s, std::shared_ptr<std::atomic<std::uint32_t>> in_flight = nullptr);

  const std::string host;
  const std::uint16_t port;
  const double weight;
  const std::string label;
  const std::string authority;
  std::size_t index = 0;
  /// Carried over from the Runtime this endpoint replaces (its state too).
  bool adopted = false;

 private:
  // Shared by the successive Endpoint objects of one address, so requests
  // still in flight under an older Runtime count against it.
  std::shared_ptr<std::atomic<std::uint32_t>> outstanding_;

 public:
  std::atomic<std::uint32_t>& outstanding;  ///< requests in flight to it (all workers)
  std::shared_ptr<std::atomic<std::uint32_t>> outstanding_counter() const { return outstanding_; }
  // Published by the cluster after every change of its endpoint state.
  std::atomic<double> effective_weight{0.0};  ///< weight x slow start; 0 when out
  std::atomic<double> base_weight{1.0};       ///< the configured weight, or an operator's
  std::atomic<bool> healthy{true};
  std::atomic<bool> ejected{false};
  std::atomic<std::uint8_t> admin{0};         ///< core::AdminState
  std::atomic<double> utilization{-1.0};      ///< smoothed ORCA utilization, -1 unknown
  std::atomic<std::uint64_t> ejections{0};
  std::atomic<std::uint64_t> health_transitions{0};
  /// Pooled connections remember it; constant now that an endpoint is one
  /// address (kept for the pools' check).
  std::atomic<std::uint64_t> addr_generation{0};

  /// The address to connect to (empty when it is not a valid one).
  const std::vector<tcp::endpoint>& addresses() const noexcept { return addrs_; }
  bool resolved() const noexcept { return !addrs_.empty(); }

 private:
  std::vector<tcp::endpoint> addrs_;
};

/// Counts a request against an endpoint for as long as it lives.
class Outstanding {
 public:
  // The counter lives as long as the endpoint, which the request's Runtime keeps.
  explicit Outstanding(Endpoint& e) noexcept : n_(&e.outstanding) { n_->fetch_add(1, std::memory_order_relaxed); }
  Outstanding(const Outstanding&) = delete;
  Outstanding& operator=(const Outstanding&) = delete;
  ~Outstanding() { n_->fetch_sub(1, std::memory_order_relaxed); }

 private:
  std::atomic<std::uint32_t>* n_;
};

}  // namespace levee::proxy

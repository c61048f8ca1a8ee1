// The running configuration: everything the workers share, built from a
// Config. Immutable after construction except for the atomics and each
// cluster's own state.
//
// A reload (or a change of what a hostname resolves to) builds a new
// Runtime beside the old one and hands it to each worker on its own thread
// (src/control/reload.cpp). Requests in flight keep the Runtime they started
// with alive through a shared_ptr, so nothing on the request path takes a
// lock to find its configuration. What must not start afresh is carried
// from the previous Runtime by name: each cluster's admission state (shared,
// when its settings allow), endpoint state by (cluster, address), listener
// guards by address and port (ListenerSlot).
#pragma once

#include <array>
#include <atomic>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "config/config.hpp"
#include "core/admission.hpp"
#include "core/classify.hpp"
#include "http/parser.hpp"
#include "http/rewrite.hpp"
#include "proxy/cluster.hpp"
#include "proxy/listener.hpp"
#include "proxy/request_metrics.hpp"

namespace levee::proxy {

/// Process-wide state that outlives every configuration: what the load
/// sampler publishes and the drain sequence sets. Every Runtime refers to
/// the same one.
struct ProcessState {
  std::atomic<double> executor_load{0.0};
  std::atomic<double> host_cpu{0.0};
  /// Above close_connections_above: answers carry Connection: close.
  std::atomic<bool> close_connections{false};
  /// Answers carry Connection: close and connections end after them.
  std::atomic<bool> draining{false};
  /// /ready answers 503 (a drain has begun, or an operator asked).
  std::atomic<bool> not_ready{false};
  std::atomic<std::uint16_t> levels{0};
  /// Listener slot ids are never reused within a process.
  std::atomic<std::size_t> next_slot{0};
  /// Client connections served at least once that stay open for more
  /// (keep-alive HTTP/1.1, HTTP/2 after a stream): the established clients
  /// a flood of new handshakes would take the workers from.
  std::atomic<std::uint32_t> returning_clients{0};
};

/// What a hostname endpoint resolved to, by (host, port): the addresses the
/// resolver last saw. A hostname absent here has no endpoint yet.
using Discovered = std::map<std::pair<std::string, std::uint16_t>, std::vector<std::string>>;

/// Runtime changes an operator made that a rebuild must keep (a reload of
/// the file resets them: policies come from the file).
struct PolicyOverrides {
  /// cluster name -> (throttle, quota, queue) dry-run on/off, when set.
  struct Cluster {
    std::optional<bool> throttle, quota, queue;
  };
  std::map<std::string, Cluster> clusters;
  std::optional<bool> self_protection;
  bool empty() const { return clusters.empty() && !self_protection; }
};

class Runtime : public std::enable_shared_from_this<Runtime> {
 public:
  /// `previous`: the Runtime this one replaces (state to carry), or null.
  Runtime(std::shared_ptr<const config::Config> cfg, std::size_t workers, std::shared_ptr<ProcessState> process,
          const Runtime* previous, const Discovered& discovered, const PolicyOverrides& overrides);

  const std::shared_ptr<const config::Config> cfg;
  const std::size_t workers;
  const std::shared_ptr<ProcessState> process;
  const std::uint64_t generation;  ///< 1 for the first, +1 per rebuild
  const core::TenantTable tenants;
  std::vector<std::unique_ptr<Cluster>> clusters;
  std::vector<std::unique_ptr<Listener>> listeners;
  std::unique_ptr<RequestMetrics> metrics;
  const core::SelfProtectionPolicy self_protection;
  const http::RewriteNames rewrite_names;
  const http::ResponseSignals response_signals;

  Cluster* cluster(std::string_view name) const noexcept;
  Listener* listener_in_slot(std::size_t slot) const noexcept;

  /// Gate 1's inputs, published by the load sampler, read per request.
  void publish_load(core::LoadLevels l) noexcept {
    process->levels.store(static_cast<std::uint16_t>(l.executor_over | (l.host_over << 8)), std::memory_order_relaxed);
  }
  core::LoadLevels load_levels() const noexcept {
    const auto v = process->levels.load(std::memory_order_relaxed);
    return {static_cast<core::CriticalityMask>(v & 0xff), static_cast<core::CriticalityMask>(v >> 8)};
  }
  // The process's, under the names the request path has always used.
  std::atomic<double>& executor_load;
  std::atomic<double>& host_cpu;
  std::atomic<bool>& close_connections;
  std::atomic<bool>& draining;
};

/// The endpoints a cluster's configuration stands for: a literal address is
/// one, a hostname one per address it resolved to (none before it has).
/// Duplicates (two names resolving to one address) are kept once.
std::vector<EndpointSpec> expand_endpoints(const config::ClusterConfig& c, const Discovered& d);

}  // namespace levee::proxy

// The running configuration: everything the workers share, built once from
// a Config. Immutable after construction except for the atomics (load
// levels published by the control plane) and each cluster's own state.
#pragma once

#include <array>
#include <atomic>
#include <memory>
#include <string>
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

class Runtime {
 public:
  Runtime(std::shared_ptr<const config::Config> cfg, std::size_t workers);

  const std::shared_ptr<const config::Config> cfg;
  const std::size_t workers;
  const core::TenantTable tenants;
  std::vector<std::unique_ptr<Cluster>> clusters;
  std::vector<std::unique_ptr<Listener>> listeners;
  std::unique_ptr<RequestMetrics> metrics;
  const core::SelfProtectionPolicy self_protection;
  const http::RewriteNames rewrite_names;
  const http::ResponseSignals response_signals;

  /// Gate 1's inputs, published by the load sampler, read per request.
  void publish_load(core::LoadLevels l) noexcept {
    levels_.store(static_cast<std::uint16_t>(l.executor_over | (l.host_over << 8)), std::memory_order_relaxed);
  }
  core::LoadLevels load_levels() const noexcept {
    const auto v = levels_.load(std::memory_order_relaxed);
    return {static_cast<core::CriticalityMask>(v & 0xff), static_cast<core::CriticalityMask>(v >> 8)};
  }
  std::atomic<double> executor_load{0.0};
  std::atomic<double> host_cpu{0.0};
  /// Above close_connections_above: answers carry Connection: close.
  std::atomic<bool> close_connections{false};
  std::atomic<bool> draining{false};

 private:
  std::atomic<std::uint16_t> levels_{0};
};

}  // namespace levee::proxy

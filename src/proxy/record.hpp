// What happened to one request, settled exactly once on every exit (the
// idea of Envoy's Cleanup): the request metrics and the access-log line are
// written when the Record goes out of scope, so no early return can forget
// them.
#pragma once

#include <cstdint>
#include <string_view>

#include "core/classify.hpp"
#include "core/decision.hpp"

namespace levee::proxy {

class Cluster;
class Downstream;
class Listener;
class Worker;
struct ExchangeBuffers;
struct Route;

class Record {
 public:
  Record(Worker& w, Listener& l, Downstream& d, ExchangeBuffers& b, core::TimePoint at) noexcept
      : start(at), w_(w), l_(l), d_(d), b_(b) {}
  Record(const Record&) = delete;
  Record& operator=(const Record&) = delete;
  ~Record() { settle(); }

  /// Writes metrics and the log line; later calls do nothing.
  void settle() noexcept;

  core::TimePoint start;
  const Route* route = nullptr;
  Cluster* cluster = nullptr;
  std::size_t endpoint = static_cast<std::size_t>(-1);
  core::Criticality criticality = core::Criticality::Critical;
  core::TenantId tenant = core::kDefaultTenant;
  int status = 0;
  core::Reason reason = core::Reason::None;
  bool rejected = false;  ///< shed by a gate (the request-duration outcome)
  std::uint32_t attempts = 0;
  double upstream_ms = -1;
  double queue_ms = 0;
  std::string_view request_id;

 private:
  Worker& w_;
  Listener& l_;
  Downstream& d_;
  ExchangeBuffers& b_;
  bool settled_ = false;
};

}  // namespace levee::proxy

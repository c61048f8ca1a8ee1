// The access log: one line per request (text or JSON) through an spdlog
// async logger. Under overload logging must not become the bottleneck, so
//  - the queue is bounded and drops the oldest line when full (never blocks
//    a worker), with the drop count exported as a metric;
//  - served requests and rejections are sampled separately (rejections are
//    the cheap, numerous path: by default 1% of them are logged, all are
//    counted in metrics).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "config/config.hpp"
#include "core/criticality.hpp"
#include "core/decision.hpp"

namespace spdlog {
class logger;
namespace details { class thread_pool; }
}  // namespace spdlog

namespace levee::proxy {

struct LogRecord {
  std::string_view client;  ///< "ip:port"
  std::string_view method;
  std::string_view target;
  int version = 11;
  int status = 0;
  std::string_view route;
  std::string_view cluster;
  std::string_view endpoint;
  core::Criticality criticality = core::Criticality::Critical;
  std::string_view tenant;
  double duration_ms = 0;
  double upstream_ms = -1;
  double queue_ms = 0;
  std::uint64_t rx_bytes = 0;
  std::uint64_t tx_bytes = 0;
  core::Reason reason = core::Reason::None;
  std::string_view request_id;
  std::uint32_t attempts = 0;
};

class AccessLog {
 public:
  explicit AccessLog(const config::AccessLogConfig& cfg);
  ~AccessLog();

  /// u: a uniform draw for sampling.
  void log(const LogRecord& r, double u);
  std::uint64_t dropped() const;
  void flush();

 private:
  config::AccessLogConfig cfg_;
  std::shared_ptr<spdlog::details::thread_pool> pool_;
  std::shared_ptr<spdlog::logger> logger_;
};

/// The process log (start-up, errors, reloads) on stderr.
void init_process_log(bool debug);

}  // namespace levee::proxy

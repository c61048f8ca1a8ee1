#include "proxy/access_log.hpp"

#include <spdlog/async.h>
#include <spdlog/async_logger.h>
#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <ctime>

namespace levee::proxy {

namespace {

/// "2026-11-30T20:11:15.123Z", with the seconds part cached per thread.
std::string_view timestamp(char (&buf)[32]) {
  using namespace std::chrono;
  thread_local std::time_t cached_sec = -1;
  thread_local char cached[24];
  auto t = system_clock::now();
  auto sec = system_clock::to_time_t(t);
  if (sec != cached_sec) {
    std::tm tm{};
    gmtime_r(&sec, &tm);
    std::strftime(cached, sizeof cached, "%Y-%m-%dT%H:%M:%S", &tm);
    cached_sec = sec;
  }
  auto ms = duration_cast<milliseconds>(t.time_since_epoch()).count() % 1000;
  auto n = fmt::format_to_n(buf, sizeof buf - 1, "{}.{:03}Z", cached, ms).size;
  return {buf, n};
}

void json_string(fmt::memory_buffer& b, std::string_view s) {
  b.push_back('"');
  for (char c : s) {
    switch (c) {
      case '"': b.append(std::string_view("\\\"")); break;
      case '\\': b.append(std::string_view("\\\\")); break;
      case '\n': b.append(std::string_view("\\n")); break;
      case '\r': b.append(std::string_view("\\r")); break;
      case '\t': b.append(std::string_view("\\t")); break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) fmt::format_to(std::back_inserter(b), "\\u{:04x}", c);
        else b.push_back(c);
    }
  }
  b.push_back('"');
}

std::string_view or_dash(std::string_view s) { return s.empty() ? std::string_view("-") : s; }

}  // namespace

AccessLog::AccessLog(const config::AccessLogConfig& cfg) : cfg_(cfg) {
  if (!cfg_.enabled) return;
  spdlog::sink_ptr sink;
  if (cfg_.path == "stdout") sink = std::make_shared<spdlog::sinks::stdout_sink_mt>();
  else if (cfg_.path == "stderr") sink = std::make_shared<spdlog::sinks::stderr_sink_mt>();
  else sink = std::make_shared<spdlog::sinks::basic_file_sink_mt>(cfg_.path);
  pool_ = std::make_shared<spdlog::details::thread_pool>(cfg_.queue, 1);
  logger_ = std::make_shared<spdlog::async_logger>("access", sink, pool_,
                                                   spdlog::async_overflow_policy::overrun_oldest);
  logger_->set_pattern("%v");
  logger_->flush_on(spdlog::level::off);
}

AccessLog::~AccessLog() { flush(); }

void AccessLog::flush() {
  if (logger_) logger_->flush();
}

std::uint64_t AccessLog::dropped() const { return pool_ ? pool_->overrun_counter() : 0; }

void AccessLog::log(const LogRecord& r, double u) {
  if (!logger_) return;
  const bool rejected = r.reason != core::Reason::None && core::is_shed(r.reason);
  if (u >= (rejected ? cfg_.reject_sample : cfg_.sample)) return;
  char tsbuf[32];
  auto ts = timestamp(tsbuf);
  fmt::memory_buffer b;
  auto out = std::back_inserter(b);
  if (cfg_.format == config::AccessLogConfig::Format::Json) {
    b.append(std::string_view("{\"ts\":\""));
    b.append(ts);
    b.append(std::string_view("\",\"client\":"));
    json_string(b, r.client);
    b.append(std::string_view(",\"method\":"));
    json_string(b, r.method);
    b.append(std::string_view(",\"target\":"));
    json_string(b, r.target);
    fmt::format_to(out, ",\"status\":{},\"route\":", r.status);
    json_string(b, r.route);
    b.append(std::string_view(",\"cluster\":"));
    json_string(b, r.cluster);
    b.append(std::string_view(",\"endpoint\":"));
    json_string(b, r.endpoint);
    fmt::format_to(out, ",\"criticality\":\"{}\",\"tenant\":", core::to_string(r.criticality));
    json_string(b, r.tenant);
    fmt::format_to(out, ",\"duration_ms\":{:.3f},\"upstream_ms\":{:.3f},\"queue_ms\":{:.3f},\"rx\":{},\"tx\":{},\"attempts\":{},\"reason\":\"{}\",\"request_id\":",
                   r.duration_ms, r.upstream_ms, r.queue_ms, r.rx_bytes, r.tx_bytes, r.attempts,
                   core::to_string(r.reason));
    json_string(b, r.request_id);
    b.push_back('}');
  } else {
    fmt::format_to(out, "{} {} \"{} {} HTTP/{}.{}\" {} route={} cluster={} endpoint={} crit={} tenant={} dur_ms={:.3f} up_ms={:.3f} queue_ms={:.3f} rx={} tx={} attempts={} reason={} rid={}",
                   ts, or_dash(r.client), or_dash(r.method), or_dash(r.target), r.version / 10, r.version % 10,
                   r.status, or_dash(r.route), or_dash(r.cluster), or_dash(r.endpoint),
                   core::to_string(r.criticality), or_dash(r.tenant), r.duration_ms, r.upstream_ms,
                   r.queue_ms, r.rx_bytes, r.tx_bytes, r.attempts, core::to_string(r.reason),
                   or_dash(r.request_id));
  }
  logger_->info(std::string_view(b.data(), b.size()));
}

void init_process_log(bool debug) {
  auto l = spdlog::stderr_logger_mt("levee");
  l->set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%l%$ %v");
  l->set_level(debug ? spdlog::level::debug : spdlog::level::info);
  spdlog::set_default_logger(l);
}

}  // namespace levee::proxy

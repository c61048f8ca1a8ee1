// The access log: one line per request (text or JSON), written without a
// lock, an allocation or a system call on the request path.
//
//  - Each worker formats its lines into a stack buffer and copies them into
//    its own shard: a byte ring with one producer (the worker) and one
//    consumer (the writer thread). No lock, no shared cache line per line.
//  - The writer thread wakes every flush_interval (and when a ring passes
//    half full: one notify per half ring, not per line), writes what every
//    shard holds with one writev per shard, and frees the space.
//  - When a ring is full because the writer fell behind (a slow disk, a
//    slow pipe reader), the line is dropped and counted, never waited for.
//  - Write errors (a closed pipe: SIGPIPE is ignored) drop what could not be
//    written and count it; reopen() (SIGUSR1) reopens the file, for log
//    rotation; stop() writes everything left and joins the writer, so
//    nothing buffered is lost on exit; a crash loses at most one
//    flush_interval of lines.
//  - Which fields a line has, and their order, is configurable
//    (access_log.fields); a reload changes them, the format, the sampling
//    and the path (each worker takes the new settings on its own thread).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string_view>
#include <thread>
#include <vector>

#include "config/config.hpp"
#include "core/criticality.hpp"
#include "core/decision.hpp"

namespace levee::control {

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
  std::string_view host;
  std::string_view user_agent;
  std::string_view xff;  ///< X-Forwarded-For as the request came
};

class AccessLog {
 public:
  /// One worker's part of the log. Used by that worker's thread only.
  class Shard {
   public:
    /// u: a uniform draw in [0,1) for sampling.
    void log(const LogRecord& r, double u) noexcept;
    std::uint64_t dropped() const noexcept { return dropped_.load(std::memory_order_relaxed); }
    /// New settings (a reload), on the shard's worker thread.
    void configure(const config::AccessLogConfig& cfg);
    /// Whether lines carry fields read from request headers (user agent, XFF).
    bool wants_headers() const noexcept { return wants_headers_; }

   private:
    friend class AccessLog;
    Shard(AccessLog& log, std::size_t size);
    bool push(std::string_view line) noexcept;

    AccessLog& log_;
    bool enabled_ = true;
    bool json_ = false;
    double sample_ = 1.0, reject_sample_ = 0.01;
    std::vector<std::uint8_t> fields_;  ///< indices into config::kAccessLogFields; empty: the default layout
    bool wants_headers_ = false;
    std::unique_ptr<char[]> ring_;
    const std::size_t size_;  // a power of two
    alignas(64) std::atomic<std::uint64_t> head_{0};  // written by the worker
    alignas(64) std::atomic<std::uint64_t> tail_{0};  // written by the writer
    std::atomic<std::uint64_t> dropped_{0};
  };

  AccessLog(const config::AccessLogConfig& cfg, std::size_t shards);
  ~AccessLog();
  AccessLog(const AccessLog&) = delete;
  AccessLog& operator=(const AccessLog&) = delete;

  bool enabled() const noexcept { return cfg_.enabled; }
  /// A reload's path (reopened by the writer) and whether to run at all;
  /// the formatting settings go to each shard on its worker (Shard::configure).
  void reconfigure(const config::AccessLogConfig& cfg);
  Shard& shard(std::size_t i) noexcept { return *shards_[i]; }
  /// Opens the file and starts the writer thread. Throws std::system_error
  /// naming the path when the file cannot be opened.
  void start();
  /// Writes everything buffered and joins the writer.
  void stop();
  /// Reopens the file at its path (log rotation). Returns at once.
  void reopen() noexcept;

  std::uint64_t dropped() const noexcept;
  std::uint64_t write_errors() const noexcept { return write_errors_.load(std::memory_order_relaxed); }
  std::uint64_t bytes_written() const noexcept { return written_.load(std::memory_order_relaxed); }

 private:
  void run();
  /// Writes what every shard holds; true when anything was written.
  bool drain();
  void open_file();
  void kick() noexcept;

  config::AccessLogConfig cfg_;  // path and enabled change under mu_ (reconfigure)
  std::string path_;             // under mu_
  std::vector<std::unique_ptr<Shard>> shards_;
  int fd_ = -1;
  bool owns_fd_ = false;
  std::thread writer_;
  std::mutex mu_;  // the writer's sleep only: never taken on the request path
  std::condition_variable cv_;
  std::atomic<bool> kicked_{false};
  std::atomic<bool> stop_{false};
  std::atomic<bool> reopen_{false};
  std::atomic<std::uint64_t> write_errors_{0};
  std::atomic<std::uint64_t> written_{0};
};

}  // namespace levee::control

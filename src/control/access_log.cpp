#include "control/access_log.hpp"

#include <fcntl.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstring>
#include <ctime>
#include <system_error>

#include "core/text.hpp"

namespace levee::control {

namespace {

/// Formats one line into a fixed buffer; never allocates. A line that would
/// not fit is cut, and still ends with its newline.
class Line {
 public:
  void put(std::string_view s) noexcept {
    const std::size_t n = std::min(s.size(), room());
    std::memcpy(buf_ + len_, s.data(), n);
    len_ += n;
  }
  void put(char c) noexcept {
    if (room() > 0) buf_[len_++] = c;
  }
  void put_uint(std::uint64_t v) noexcept {
    char tmp[24];
    auto [p, ec] = std::to_chars(tmp, tmp + sizeof tmp, v);
    (void)ec;
    put(std::string_view(tmp, static_cast<std::size_t>(p - tmp)));
  }
  void put_int(std::int64_t v) noexcept {
    char tmp[24];
    auto [p, ec] = std::to_chars(tmp, tmp + sizeof tmp, v);
    (void)ec;
    put(std::string_view(tmp, static_cast<std::size_t>(p - tmp)));
  }
  void put_ms(double v) noexcept {
    char tmp[40];
    auto [p, ec] = std::to_chars(tmp, tmp + sizeof tmp, v, std::chars_format::fixed, 3);
    if (ec != std::errc{}) return put('0');
    put(std::string_view(tmp, static_cast<std::size_t>(p - tmp)));
  }
  /// Text format: bytes that would break the line or its quoting, and bytes
  /// that are not UTF-8, as \xNN.
  void put_text(std::string_view s) noexcept {
    if (s.empty()) return put('-');
    for (std::size_t i = 0; i < s.size();) {
      const auto c = static_cast<unsigned char>(s[i]);
      const std::size_t n = core::utf8_sequence(s, i);
      if (n == 0 || c < 0x20 || c == 0x7f || c == '"' || c == '\\') {
        hex_escape(c);
        ++i;
        continue;
      }
      put(s.substr(i, n));
      i += n;
    }
  }
  /// A JSON string that is always valid UTF-8: invalid bytes become U+FFFD.
  void put_json(std::string_view s) noexcept {
    put('"');
    for (std::size_t i = 0; i < s.size();) {
      const auto c = static_cast<unsigned char>(s[i]);
      const std::size_t n = core::utf8_sequence(s, i);
      if (n == 0) {
        put("\\ufffd");
        ++i;
        continue;
      }
      switch (c) {
        case '"': put("\\\""); break;
        case '\\': put("\\\\"); break;
        case '\n': put("\\n"); break;
        case '\r': put("\\r"); break;
        case '\t': put("\\t"); break;
        default:
          if (c < 0x20 || c == 0x7f) {
            put("\\u00");
            hex2(c);
          } else {
            put(s.substr(i, n));
          }
      }
      i += n;
    }
    put('"');
  }
  void end() noexcept {
    if (len_ == sizeof buf_) --len_;
    buf_[len_++] = '\n';
  }
  std::string_view view() const noexcept { return {buf_, len_}; }

 private:
  std::size_t room() const noexcept { return sizeof buf_ - 1 - len_; }  // one byte kept for '\n'
  void hex2(unsigned char c) noexcept {
    static constexpr char hex[] = "0123456789abcdef";
    put(hex[c >> 4]);
    put(hex[c & 0xf]);
  }
  void hex_escape(unsigned char c) noexcept {
    put("\\x");
    hex2(c);
  }
  char buf_[8192];
  std::size_t len_ = 0;
};

/// "2026-11-30T20:11:15.123Z", with the seconds part cached per thread.
void put_timestamp(Line& l) noexcept {
  using namespace std::chrono;
  thread_local std::time_t cached_sec = -1;
  thread_local char cached[24];
  thread_local std::size_t cached_len = 0;
  const auto t = system_clock::now();
  const auto sec = system_clock::to_time_t(t);
  if (sec != cached_sec) {
    std::tm tm{};
    gmtime_r(&sec, &tm);
    cached_len = std::strftime(cached, sizeof cached, "%Y-%m-%dT%H:%M:%S", &tm);
    cached_sec = sec;
  }
  const auto ms = duration_cast<milliseconds>(t.time_since_epoch()).count() % 1000;
  l.put(std::string_view(cached, cached_len));
  l.put('.');
  l.put(static_cast<char>('0' + ms / 100));
  l.put(static_cast<char>('0' + ms / 10 % 10));
  l.put(static_cast<char>('0' + ms % 10));
  l.put('Z');
}

void format_text(Line& l, const LogRecord& r) noexcept {
  put_timestamp(l);
  l.put(' ');
  l.put_text(r.client);
  l.put(" \"");
  l.put_text(r.method);
  l.put(' ');
  l.put_text(r.target);
  l.put(" HTTP/");
  l.put(static_cast<char>('0' + r.version / 10));
  l.put('.');
  l.put(static_cast<char>('0' + r.version % 10));
  l.put("\" ");
  l.put_int(r.status);
  l.put(" route=");
  l.put_text(r.route);
  l.put(" cluster=");
  l.put_text(r.cluster);
  l.put(" endpoint=");
  l.put_text(r.endpoint);
  l.put(" crit=");
  l.put(core::to_string(r.criticality));
  l.put(" tenant=");
  l.put_text(r.tenant);
  l.put(" dur_ms=");
  l.put_ms(r.duration_ms);
  l.put(" up_ms=");
  l.put_ms(r.upstream_ms);
  l.put(" queue_ms=");
  l.put_ms(r.queue_ms);
  l.put(" rx=");
  l.put_uint(r.rx_bytes);
  l.put(" tx=");
  l.put_uint(r.tx_bytes);
  l.put(" attempts=");
  l.put_uint(r.attempts);
  l.put(" reason=");
  l.put(core::to_string(r.reason));
  l.put(" rid=");
  l.put_text(r.request_id);
  l.end();
}

void format_json(Line& l, const LogRecord& r) noexcept {
  l.put("{\"ts\":\"");
  put_timestamp(l);
  l.put("\",\"client\":");
  l.put_json(r.client);
  l.put(",\"method\":");
  l.put_json(r.method);
  l.put(",\"target\":");
  l.put_json(r.target);
  l.put(",\"status\":");
  l.put_int(r.status);
  l.put(",\"route\":");
  l.put_json(r.route);
  l.put(",\"cluster\":");
  l.put_json(r.cluster);
  l.put(",\"endpoint\":");
  l.put_json(r.endpoint);
  l.put(",\"criticality\":\"");
  l.put(core::to_string(r.criticality));
  l.put("\",\"tenant\":");
  l.put_json(r.tenant);
  l.put(",\"duration_ms\":");
  l.put_ms(r.duration_ms);
  l.put(",\"upstream_ms\":");
  l.put_ms(r.upstream_ms);
  l.put(",\"queue_ms\":");
  l.put_ms(r.queue_ms);
  l.put(",\"rx\":");
  l.put_uint(r.rx_bytes);
  l.put(",\"tx\":");
  l.put_uint(r.tx_bytes);
  l.put(",\"attempts\":");
  l.put_uint(r.attempts);
  l.put(",\"reason\":\"");
  l.put(core::to_string(r.reason));
  l.put("\",\"request_id\":");
  l.put_json(r.request_id);
  l.put('}');
  l.end();
}

std::size_t ring_size(std::uint32_t bytes) {
  std::size_t n = 4096;
  while (n < bytes) n <<= 1;
  return n;
}

}  // namespace

// --- the producer side (a worker) -------------------------------------------

AccessLog::Shard::Shard(AccessLog& log, std::size_t size)
    : log_(log), ring_(std::make_unique<char[]>(size)), size_(size) {}

bool AccessLog::Shard::push(std::string_view line) noexcept {
  const std::uint64_t head = head_.load(std::memory_order_relaxed);
  const std::uint64_t tail = tail_.load(std::memory_order_acquire);
  const std::uint64_t used = head - tail;
  if (used + line.size() > size_) return false;
  const std::size_t at = static_cast<std::size_t>(head & (size_ - 1));
  const std::size_t first = std::min(line.size(), size_ - at);
  std::memcpy(ring_.get() + at, line.data(), first);
  std::memcpy(ring_.get(), line.data() + first, line.size() - first);
  head_.store(head + line.size(), std::memory_order_release);
  // Past half full: wake the writer rather than wait for its interval.
  if (used < size_ / 2 && used + line.size() >= size_ / 2) log_.kick();
  return true;
}

void AccessLog::Shard::log(const LogRecord& r, double u) noexcept {
  const auto& cfg = log_.cfg_;
  if (!cfg.enabled) return;
  const bool shed = r.reason != core::Reason::None && core::is_shed(r.reason);
  if (u >= (shed ? cfg.reject_sample : cfg.sample)) return;
  Line line;
  if (cfg.format == config::AccessLogConfig::Format::Json) format_json(line, r);
  else format_text(line, r);
  if (!push(line.view())) dropped_.fetch_add(1, std::memory_order_relaxed);
}

// --- the writer thread --------------------------------------------------------

AccessLog::AccessLog(const config::AccessLogConfig& cfg, std::size_t shards) : cfg_(cfg) {
  const std::size_t size = ring_size(cfg_.buffer);
  for (std::size_t i = 0; i < shards; ++i) shards_.push_back(std::unique_ptr<Shard>(new Shard(*this, size)));
}

AccessLog::~AccessLog() {
  stop();
  if (owns_fd_ && fd_ >= 0) ::close(fd_);
}

void AccessLog::open_file() {
  if (cfg_.path == "stdout") {
    fd_ = STDOUT_FILENO;
    owns_fd_ = false;
    return;
  }
  if (cfg_.path == "stderr") {
    fd_ = STDERR_FILENO;
    owns_fd_ = false;
    return;
  }
  const int fd = ::open(cfg_.path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) throw std::system_error(errno, std::generic_category(), "access log " + cfg_.path);
  if (owns_fd_ && fd_ >= 0) ::close(fd_);
  fd_ = fd;
  owns_fd_ = true;
}

void AccessLog::start() {
  if (!cfg_.enabled || writer_.joinable()) return;
  open_file();
  writer_ = std::thread([this] {
    pthread_setname_np(pthread_self(), "levee-log");
    run();
  });
}

void AccessLog::stop() {
  if (!writer_.joinable()) return;
  {
    std::lock_guard lk(mu_);
    stop_.store(true);
  }
  cv_.notify_one();
  writer_.join();
}

void AccessLog::reopen() noexcept {
  reopen_.store(true, std::memory_order_relaxed);
  kick();
}

void AccessLog::kick() noexcept {
  if (!kicked_.exchange(true, std::memory_order_acq_rel)) cv_.notify_one();
}

std::uint64_t AccessLog::dropped() const noexcept {
  std::uint64_t n = 0;
  for (const auto& s : shards_) n += s->dropped();
  return n;
}

bool AccessLog::drain() {
  bool any = false;
  for (auto& sp : shards_) {
    Shard& s = *sp;
    const std::uint64_t tail = s.tail_.load(std::memory_order_relaxed);
    const std::uint64_t head = s.head_.load(std::memory_order_acquire);
    if (head == tail) continue;
    any = true;
    const std::size_t at = static_cast<std::size_t>(tail & (s.size_ - 1));
    const std::size_t len = static_cast<std::size_t>(head - tail);
    const std::size_t first = std::min(len, s.size_ - at);
    iovec iov[2] = {{s.ring_.get() + at, first}, {s.ring_.get(), len - first}};
    int n_iov = len > first ? 2 : 1;
    std::size_t left = len;
    while (left > 0) {
      const ssize_t w = ::writev(fd_, iov, n_iov);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) {
        // A closed pipe, a full disk: what is left of this batch is lost.
        write_errors_.fetch_add(1, std::memory_order_relaxed);
        break;
      }
      written_.fetch_add(static_cast<std::uint64_t>(w), std::memory_order_relaxed);
      left -= static_cast<std::size_t>(w);
      auto done = static_cast<std::size_t>(w);
      while (n_iov > 0 && done >= iov[0].iov_len) {
        done -= iov[0].iov_len;
        iov[0] = iov[1];
        --n_iov;
      }
      if (n_iov > 0) {
        iov[0].iov_base = static_cast<char*>(iov[0].iov_base) + done;
        iov[0].iov_len -= done;
      }
    }
    s.tail_.store(head, std::memory_order_release);
  }
  return any;
}

void AccessLog::run() {
  const auto interval = std::chrono::duration_cast<std::chrono::steady_clock::duration>(cfg_.flush_interval);
  for (;;) {
    {
      std::unique_lock lk(mu_);
      cv_.wait_for(lk, interval, [this] { return stop_.load() || kicked_.load(); });
    }
    kicked_.store(false, std::memory_order_release);
    if (reopen_.exchange(false)) {
      try {
        open_file();
      } catch (const std::system_error&) {
        write_errors_.fetch_add(1, std::memory_order_relaxed);  // keep writing to the old file
      }
    }
    drain();
    if (stop_.load()) {
      drain();
      return;
    }
  }
}

}  // namespace levee::control

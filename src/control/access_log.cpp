#include "control/access_log.hpp"

#include <fcntl.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstring>
#include <ctime>
#include <iterator>
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
  /// Printable ASCII other than the quote and the backslash needs no
  /// escape in either format, so a run of it is copied at once (most fields
  /// are nothing else; a byte at a time cost more than the rest of the
  /// line). Advances `i` past the run; false if there is none at `i`.
  bool put_plain_run(std::string_view s, std::size_t& i) noexcept {
    std::size_t end = i;
    for (; end < s.size(); ++end) {
      const auto c = static_cast<unsigned char>(s[end]);
      if (c < 0x20 || c >= 0x7f || c == '"' || c == '\\') break;
    }
    if (end == i) return false;
    put(s.substr(i, end - i));
    i = end;
    return true;
  }
  /// Text format: bytes that would break the line or its quoting, and bytes
  /// that are not UTF-8, as \xNN.
  void put_text(std::string_view s) noexcept {
    if (s.empty()) return put('-');
    for (std::size_t i = 0; i < s.size();) {
      if (put_plain_run(s, i)) continue;
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
      if (put_plain_run(s, i)) continue;
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

enum Field : std::uint8_t {
  kTs, kClient, kMethod, kTarget, kPath, kHost, kProtocol, kStatus, kRoute, kCluster, kEndpoint, kCriticality,
  kTenant, kDuration, kUpstream, kQueue, kRx, kTx, kAttempts, kReason, kRequestId, kUserAgent, kXff
};
static_assert(std::size(config::kAccessLogFields) == kXff + 1, "the field list and its enum agree");

std::string_view path_of(std::string_view target) noexcept {
  const auto q = target.find('?');
  return q == std::string_view::npos ? target : target.substr(0, q);
}

/// One field's value: a string (quoted in JSON, escaped in text), or a
/// number written as is.
void put_field(Line& l, Field f, const LogRecord& r, bool json) noexcept {
  auto str = [&](std::string_view v) { json ? l.put_json(v) : l.put_text(v); };
  auto word = [&](std::string_view v) {
    if (json) l.put('"');
    l.put(v);
    if (json) l.put('"');
  };
  switch (f) {
    case kTs:
      if (json) l.put('"');
      put_timestamp(l);
      if (json) l.put('"');
      break;
    case kClient: str(r.client); break;
    case kMethod: str(r.method); break;
    case kTarget: str(r.target); break;
    case kPath: str(path_of(r.target)); break;
    case kHost: str(r.host); break;
    case kProtocol: {
      const char v[] = {'H', 'T', 'T', 'P', '/', static_cast<char>('0' + r.version / 10), '.',
                        static_cast<char>('0' + r.version % 10)};
      word(std::string_view(v, sizeof v));
      break;
    }
    case kStatus: l.put_int(r.status); break;
    case kRoute: str(r.route); break;
    case kCluster: str(r.cluster); break;
    case kEndpoint: str(r.endpoint); break;
    case kCriticality: word(core::to_string(r.criticality)); break;
    case kTenant: str(r.tenant); break;
    case kDuration: l.put_ms(r.duration_ms); break;
    case kUpstream: l.put_ms(r.upstream_ms); break;
    case kQueue: l.put_ms(r.queue_ms); break;
    case kRx: l.put_uint(r.rx_bytes); break;
    case kTx: l.put_uint(r.tx_bytes); break;
    case kAttempts: l.put_uint(r.attempts); break;
    case kReason: word(core::to_string(r.reason)); break;
    case kRequestId: str(r.request_id); break;
    case kUserAgent: str(r.user_agent); break;
    case kXff: str(r.xff); break;
  }
}

/// The configured fields: `name=value` pairs (text) or an object (JSON).
void format_fields(Line& l, const LogRecord& r, const std::vector<std::uint8_t>& fields, bool json) noexcept {
  if (json) l.put('{');
  for (std::size_t i = 0; i < fields.size(); ++i) {
    const auto f = static_cast<Field>(fields[i]);
    if (i) l.put(json ? ',' : ' ');
    if (json) l.put('"');
    l.put(config::kAccessLogFields[f]);
    l.put(json ? "\":" : "=");
    put_field(l, f, r, json);
  }
  if (json) l.put('}');
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
    : log_(log), ring_(std::make_unique<char[]>(size)), size_(size) {
  configure(log.cfg_);
}

void AccessLog::Shard::configure(const config::AccessLogConfig& cfg) {
  enabled_ = cfg.enabled;
  json_ = cfg.format == config::AccessLogConfig::Format::Json;
  sample_ = cfg.sample;
  reject_sample_ = cfg.reject_sample;
  fields_.clear();
  wants_headers_ = false;
  for (const auto& name : cfg.fields)
    for (std::size_t i = 0; i < std::size(config::kAccessLogFields); ++i)
      if (config::kAccessLogFields[i] == name) {
        fields_.push_back(static_cast<std::uint8_t>(i));
        wants_headers_ = wants_headers_ || i == kUserAgent || i == kXff;
      }
}

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
  if (!enabled_) return;
  const bool shed = r.reason != core::Reason::None && core::is_shed(r.reason);
  if (u >= (shed ? reject_sample_ : sample_)) return;
  Line line;
  if (!fields_.empty()) format_fields(line, r, fields_, json_);
  else if (json_) format_json(line, r);
  else format_text(line, r);
  if (!push(line.view())) dropped_.fetch_add(1, std::memory_order_relaxed);
}

// --- the writer thread --------------------------------------------------------

AccessLog::AccessLog(const config::AccessLogConfig& cfg, std::size_t shards) : cfg_(cfg), path_(cfg.path) {
  const std::size_t size = ring_size(cfg_.buffer);
  for (std::size_t i = 0; i < shards; ++i) shards_.push_back(std::unique_ptr<Shard>(new Shard(*this, size)));
}

AccessLog::~AccessLog() {
  stop();
  if (owns_fd_ && fd_ >= 0) ::close(fd_);
}

void AccessLog::open_file() {
  std::string path;
  {
    std::lock_guard lk(mu_);
    path = path_;
  }
  if (path == "stdout") {
    fd_ = STDOUT_FILENO;
    owns_fd_ = false;
    return;
  }
  if (path == "stderr") {
    fd_ = STDERR_FILENO;
    owns_fd_ = false;
    return;
  }
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) throw std::system_error(errno, std::generic_category(), "access log " + path);
  if (owns_fd_ && fd_ >= 0) ::close(fd_);
  fd_ = fd;
  owns_fd_ = true;
}

void AccessLog::reconfigure(const config::AccessLogConfig& cfg) {
  bool moved = false;
  {
    std::lock_guard lk(mu_);
    moved = path_ != cfg.path;
    path_ = cfg.path;
    cfg_.path = cfg.path;
    cfg_.enabled = cfg.enabled;
  }
  if (moved) reopen();
  if (cfg.enabled) start();  // was off until now
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

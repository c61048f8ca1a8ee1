// levee-backend: a naive backend of fixed capacity, for tests and load tests.
//
// N workers; each request holds one for a service time drawn from a
// distribution (sleeping, or burning real CPU with --burn); the rest wait in
// an unbounded FIFO, as a naive server's accept queue and thread pool do.
// Every response reports ORCA `endpoint-load-metrics` (the request's cost
// and the worker utilization). An admin API under /_admin/ scripts faults
// and reads counters. Other paths serve the integration tests:
//   /sha256           streams the request body, answers "<hex> <bytes>"
//   /download?size=N&chunked=1   N deterministic bytes
//   /status/N         answers status N
//   /slow?ms=N        answers after N ms, outside the worker pool
//   /headers          echoes the request head it received
//   /healthz          200, or 503 while health is set to fail
//   anything else     the fixed-capacity work
#include <openssl/evp.h>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <atomic>
#include <charconv>
#include <chrono>
#include <cmath>
#include <deque>
#include <iostream>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <unordered_set>

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using boost::system::error_code;
constexpr auto nothrow = asio::as_tuple(asio::use_awaitable);

namespace {

struct Options {
  std::string address = "127.0.0.1";
  unsigned short port = 9000;
  unsigned workers = 8;  // 0: unlimited (no queueing at all)
  std::string service = "fixed:10ms";
  bool burn = false;
  std::string orca = "text";  // text, json, none, garbage, when-asked (vLLM: only when the request asks)
  double cost_factor = 1.0;   // reported cost = service time x factor
  std::string id = "";
  unsigned threads = 1;
  // Cold start: right after start the service time is multiplied by
  // warmup_factor, decaying linearly to 1 over warmup_seconds (cold caches,
  // a cold runtime), so re-adding a backend at full share can hurt it.
  double warmup_seconds = 0;
  double warmup_factor = 1;
  // slow: cold means uniformly slower. thrash: cold means contention, the
  // slowdown grows with the square of the backend's own concurrency (cold
  // caches hammered by many requests), so throughput peaks at partial
  // concurrency and falls beyond it: a full share knocks it over.
  std::string warmup_mode = "slow";
};

double parse_ms(std::string_view s) {
  double v = 0;
  double scale = 1;
  if (s.ends_with("ms")) s.remove_suffix(2);
  else if (s.ends_with("us")) { s.remove_suffix(2); scale = 0.001; }
  else if (s.ends_with("s")) { s.remove_suffix(1); scale = 1000; }
  std::from_chars(s.data(), s.data() + s.size(), v);
  return v * scale;
}

/// "fixed:10ms", "exp:10ms", "uniform:5ms:15ms", "lognormal:10ms:0.5"
struct Distribution {
  std::string kind = "fixed";
  double a = 10, b = 0;
  explicit Distribution(const std::string& spec) {
    std::vector<std::string> parts;
    std::stringstream ss(spec);
    std::string p;
    while (std::getline(ss, p, ':')) parts.push_back(p);
    if (parts.empty()) return;
    kind = parts[0];
    if (parts.size() > 1) a = parse_ms(parts[1]);
    if (parts.size() > 2) b = kind == "lognormal" ? std::stod(parts[2]) : parse_ms(parts[2]);
  }
  double draw_ms(std::mt19937_64& g) const {
    if (kind == "exp") return std::exponential_distribution<double>(1.0 / a)(g);
    if (kind == "uniform") return std::uniform_real_distribution<double>(a, b)(g);
    if (kind == "lognormal") {
      double sigma = b > 0 ? b : 0.5;
      double mu = std::log(a) - sigma * sigma / 2;  // mean a
      return std::lognormal_distribution<double>(mu, sigma)(g);
    }
    return a;
  }
};

struct Stats {
  std::atomic<std::uint64_t> requests{0};
  std::atomic<std::uint64_t> work_requests{0};
  std::atomic<std::int64_t> connections{0};
  std::atomic<std::int64_t> max_connections{0};
  std::atomic<std::int64_t> busy{0};
  std::atomic<std::int64_t> max_busy{0};
  std::atomic<std::int64_t> queued{0};
  std::atomic<std::int64_t> max_queued{0};
  std::atomic<std::uint64_t> expired_on_arrival{0};  // deadline header already <= 0
  std::atomic<std::uint64_t> retries{0};             // attempt header > 1
  std::atomic<std::uint64_t> health_checks{0};
  std::mutex ids_mu;
  std::unordered_set<std::string> ids;  // x-test-id values seen
};

void bump_max(std::atomic<std::int64_t>& max, std::int64_t v) {
  auto m = max.load();
  while (v > m && !max.compare_exchange_weak(m, v)) {}
}

class Backend {
 public:
  Backend(asio::io_context& ctx, Options o)
      : ctx_(ctx), opt_(std::move(o)), dist_(opt_.service), rng_(std::random_device{}()),
        pool_(opt_.burn ? std::max(1u, opt_.workers) : 1) {}

  asio::awaitable<void> listen() {
    tcp::acceptor a(ctx_);
    tcp::endpoint ep(asio::ip::make_address(opt_.address), opt_.port);
    a.open(ep.protocol());
    a.set_option(asio::socket_base::reuse_address(true));
    a.bind(ep);
    a.listen(4096);
    std::cout << "levee-backend listening on " << opt_.address << ":" << a.local_endpoint().port()
              << " workers=" << opt_.workers << " service=" << opt_.service << (opt_.burn ? " burn" : "")
              << std::endl;
    for (;;) {
      auto [ec, s] = co_await a.async_accept(nothrow);
      if (ec) continue;
      asio::co_spawn(ctx_, session(std::move(s)), asio::detached);
    }
  }

 private:
  struct Slot {
    asio::steady_timer* timer;
  };

  // The worker pool: a counter and a FIFO of waiters, all on the io thread.
  asio::awaitable<void> acquire_worker() {
    if (opt_.workers == 0) co_return;
    if (free_workers_ > 0 && waiting_.empty()) {
      --free_workers_;
      co_return;
    }
    asio::steady_timer t(ctx_, asio::steady_timer::time_point::max());
    waiting_.push_back(&t);
    stats_.queued.fetch_add(1);
    bump_max(stats_.max_queued, static_cast<std::int64_t>(waiting_.size()));
    co_await t.async_wait(nothrow);  // cancelled when a worker is handed over
    stats_.queued.fetch_sub(1);
  }
  void release_worker() {
    if (opt_.workers == 0) return;
    if (!waiting_.empty()) {
      auto* t = waiting_.front();
      waiting_.pop_front();
      t->cancel();  // the worker passes straight to the next in line
    } else {
      ++free_workers_;
    }
  }

  static std::string_view field(const http::request_parser<http::buffer_body>& p, std::string_view name) {
    auto it = p.get().find(name);
    return it == p.get().end() ? std::string_view{} : std::string_view(it->value());
  }

  static std::string query(std::string_view target, std::string_view key) {
    auto q = target.find('?');
    if (q == std::string_view::npos) return {};
    std::string_view qs = target.substr(q + 1);
    while (!qs.empty()) {
      auto amp = qs.find('&');
      auto kv = qs.substr(0, amp);
      auto eq = kv.find('=');
      if (kv.substr(0, eq) == key) return std::string(eq == std::string_view::npos ? "" : kv.substr(eq + 1));
      if (amp == std::string_view::npos) break;
      qs.remove_prefix(amp + 1);
    }
    return {};
  }

  asio::awaitable<void> session(tcp::socket s) {
    stats_.connections.fetch_add(1);
    bump_max(stats_.max_connections, stats_.connections.load());
    beast::flat_buffer buf;
    s.set_option(tcp::no_delay(true));
    for (;;) {
      http::request_parser<http::buffer_body> p;
      p.body_limit(boost::none);
      p.header_limit(128 * 1024);
      auto [ec, n] = co_await http::async_read_header(s, buf, p, nothrow);
      if (ec) break;
      stats_.requests.fetch_add(1);
      std::string target(p.get().target());
      std::string path = target.substr(0, target.find('?'));
      if (auto id = field(p, "x-test-id"); !id.empty()) {
        std::lock_guard lk(stats_.ids_mu);
        stats_.ids.insert(std::string(id));
      }
      if (auto a = field(p, "x-attempt-count"); !a.empty() && a != "1") stats_.retries.fetch_add(1);
      if (auto d = field(p, "x-request-timeout-ms"); !d.empty() && (d == "0" || d.front() == '-'))
        stats_.expired_on_arrival.fetch_add(1);

      // Read (and, for /sha256, hash) the whole body in fixed pieces.
      EVP_MD_CTX* md = nullptr;
      if (path == "/sha256") {
        md = EVP_MD_CTX_new();
        EVP_DigestInit_ex(md, EVP_sha256(), nullptr);
      }
      std::uint64_t body_bytes = 0;
      char chunk[64 * 1024];
      bool read_ok = true;
      while (!p.is_done()) {
        p.get().body().data = chunk;
        p.get().body().size = sizeof chunk;
        auto [rec, rn] = co_await http::async_read(s, buf, p, nothrow);
        if (rec && rec != http::error::need_buffer) {
          read_ok = false;
          break;
        }
        std::size_t got = sizeof chunk - p.get().body().size;
        body_bytes += got;
        if (md) EVP_DigestUpdate(md, chunk, got);
      }
      if (!read_ok) {
        if (md) EVP_MD_CTX_free(md);
        break;
      }
      bool keep = p.get().keep_alive();
      bool ok;
      if (path == "/sha256") {
        unsigned char d[32];
        unsigned len = 0;
        EVP_DigestFinal_ex(md, d, &len);
        EVP_MD_CTX_free(md);
        std::string hex;
        static const char* x = "0123456789abcdef";
        for (unsigned i = 0; i < len; ++i) {
          hex.push_back(x[d[i] >> 4]);
          hex.push_back(x[d[i] & 15]);
        }
        std::string text = hex + " " + std::to_string(body_bytes) + "\n";
        ok = co_await simple(s, p, 200, std::move(text), keep);
      } else if (path.rfind("/_admin/", 0) == 0) {
        ok = co_await admin(s, p, path, target, keep);
      } else if (path == "/healthz") {
        stats_.health_checks.fetch_add(1);
        if (hang_) {
          asio::steady_timer t(ctx_, std::chrono::hours(1));
          co_await t.async_wait(nothrow);
        }
        int st = health_ok_ ? 200 : 503;
        std::string text = health_ok_ ? "healthy\n" : "unhealthy\n";
        ok = co_await simple(s, p, st, std::move(text), keep);
      } else if (path.rfind("/status/", 0) == 0) {
        int st = std::stoi(path.substr(8));
        std::string text = "status\n";
        ok = co_await simple(s, p, st, std::move(text), keep);
      } else if (path == "/slow") {
        std::string ms_s = query(target, "ms");
        int ms = ms_s.empty() ? 100 : std::stoi(ms_s);
        asio::steady_timer t(ctx_, std::chrono::milliseconds(ms));
        co_await t.async_wait(nothrow);
        ok = co_await simple(s, p, 200, "slow\n", keep);
      } else if (path == "/headers") {
        std::ostringstream o;
        o << p.get().method_string() << " " << p.get().target() << " HTTP/" << p.get().version() / 10 << "."
          << p.get().version() % 10 << "\n";
        for (auto& f : p.get()) o << f.name_string() << ": " << f.value() << "\n";
        std::string text = o.str();
        ok = co_await simple(s, p, 200, std::move(text), keep);
      } else if (path == "/download") {
        std::string size_s = query(target, "size");
        std::uint64_t size = size_s.empty() ? 0 : std::stoull(size_s);
        bool chunked = query(target, "chunked") == "1";
        ok = co_await download(s, p, size, chunked, keep);
      } else {
        ok = co_await work(s, p, keep);
      }
      if (!ok || !keep) break;
    }
    error_code ig;
    s.shutdown(tcp::socket::shutdown_both, ig);
    stats_.connections.fetch_sub(1);
  }

  asio::awaitable<bool> simple(tcp::socket& s, const http::request_parser<http::buffer_body>& p, int status,
                               std::string body, bool keep, std::string orca = {}) {
    http::response<http::string_body> res{static_cast<http::status>(status), p.get().version()};
    res.set(http::field::content_type, "text/plain");
    res.set("x-backend", opt_.id);
    if (!orca.empty()) res.set("endpoint-load-metrics", orca);
    res.keep_alive(keep);
    const bool bodyless = status < 200 || status == 204 || status == 304;
    if (p.get().method() != http::verb::head && !bodyless) res.body() = std::move(body);
    res.prepare_payload();
    auto [ec, n] = co_await http::async_write(s, res, nothrow);
    co_return !ec;
  }

  asio::awaitable<bool> work(tcp::socket& s, const http::request_parser<http::buffer_body>& p, bool keep) {
    stats_.work_requests.fetch_add(1);
    if (hang_) {
      asio::steady_timer t(ctx_, std::chrono::hours(1));
      co_await t.async_wait(nothrow);
      co_return false;
    }
    double ms = dist_.draw_ms(rng_);
    if (auto o = field(p, "x-test-service-ms"); !o.empty()) ms = std::stod(std::string(o));
    if (opt_.warmup_seconds > 0) {
      double age = std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
      double cold = std::max(0.0, 1.0 - age / opt_.warmup_seconds);
      double load = 1.0;
      if (opt_.warmup_mode == "thrash" && opt_.workers > 0) {
        double f = static_cast<double>(stats_.busy.load() + 1) / opt_.workers;
        load = f * f;
      }
      ms *= 1.0 + (opt_.warmup_factor - 1.0) * cold * load;
    }
    co_await acquire_worker();
    auto b = stats_.busy.fetch_add(1) + 1;
    bump_max(stats_.max_busy, b);
    if (opt_.burn) {
      // Real CPU on a worker thread; the io thread stays free.
      auto done = std::make_shared<asio::steady_timer>(ctx_, asio::steady_timer::time_point::max());
      asio::post(pool_, [this, ms, done] {
        auto end = std::chrono::steady_clock::now() + std::chrono::microseconds(static_cast<long>(ms * 1000));
        volatile std::uint64_t x = 0;
        while (std::chrono::steady_clock::now() < end) x = x + 1;
        asio::post(ctx_, [done] { done->cancel(); });
      });
      co_await done->async_wait(nothrow);
    } else {
      asio::steady_timer t(ctx_, std::chrono::microseconds(static_cast<long>(ms * 1000)));
      co_await t.async_wait(nothrow);
    }
    double util = opt_.workers ? static_cast<double>(stats_.busy.load()) / opt_.workers : 0.0;
    stats_.busy.fetch_sub(1);
    release_worker();
    int status = fail_status_ != 0 && std::uniform_real_distribution<double>(0, 1)(rng_) < fail_rate_ ? fail_status_ : 200;
    double cost = ms / 1000.0 * opt_.cost_factor;
    if (auto c = field(p, "x-test-cost"); !c.empty()) cost = std::stod(std::string(c));
    std::string orca;
    char buf[160];
    if (opt_.orca == "text") {
      std::snprintf(buf, sizeof buf, "TEXT cpu_utilization=%.4f, application_utilization=%.4f, request_cost.cpu=%.6f", util, util, cost);
      orca = buf;
    } else if (opt_.orca == "json") {
      std::snprintf(buf, sizeof buf, "JSON {\"cpu_utilization\": %.4f, \"application_utilization\": %.4f, \"request_cost\": {\"cpu\": %.6f}}", util, util, cost);
      orca = buf;
    } else if (opt_.orca == "garbage") {
      orca = "JSON {\"cpu_utilization\": banana";  // framing that cannot be read
    } else if (opt_.orca == "when-asked") {
      // As vLLM and Triton do: only when the request asks, in their metrics.
      const auto fmt = field(p, "endpoint-load-metrics-format");
      const auto waiting = static_cast<double>(stats_.queued.load());
      if (boost::beast::iequals(fmt, "text"))
        std::snprintf(buf, sizeof buf, "TEXT named_metrics.kv_cache_usage_perc=%.4f, named_metrics.num_requests_waiting=%.1f",
                      util, waiting);
      else if (boost::beast::iequals(fmt, "json"))
        std::snprintf(buf, sizeof buf, "JSON {\"named_metrics\": {\"kv_cache_usage_perc\": %.4f, \"num_requests_waiting\": %.1f}}",
                      util, waiting);
      else
        buf[0] = 0;
      orca = buf;
    }
    std::string text = status == 200 ? "ok\n" : "failed\n";
    co_return co_await simple(s, p, status, std::move(text), keep, std::move(orca));
  }

  asio::awaitable<bool> download(tcp::socket& s, const http::request_parser<http::buffer_body>& p,
                                 std::uint64_t size, bool chunked, bool keep) {
    http::response<http::buffer_body> res{http::status::ok, p.get().version()};
    res.set(http::field::content_type, "application/octet-stream");
    res.keep_alive(keep);
    if (chunked) res.chunked(true);
    else res.content_length(size);
    http::response_serializer<http::buffer_body> sr{res};
    res.body().data = nullptr;
    res.body().more = true;
    auto [hec, hn] = co_await http::async_write_header(s, sr, nothrow);
    if (hec) co_return false;
    // Deterministic content: byte i is (i * 31 + 7) mod 251.
    std::vector<char> chunk(16 * 1024);
    std::uint64_t sent = 0;
    while (sent < size) {
      std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(chunk.size(), size - sent));
      for (std::size_t i = 0; i < n; ++i) chunk[i] = static_cast<char>(((sent + i) * 31 + 7) % 251);
      res.body().data = chunk.data();
      res.body().size = n;
      res.body().more = true;
      auto [ec, wn] = co_await http::async_write(s, sr, nothrow);
      if (ec && ec != http::error::need_buffer) co_return false;
      sent += n;
    }
    res.body().data = nullptr;
    res.body().size = 0;
    res.body().more = false;
    auto [ec, wn] = co_await http::async_write(s, sr, nothrow);
    co_return !ec;
  }

  asio::awaitable<bool> admin(tcp::socket& s, const http::request_parser<http::buffer_body>& p,
                              const std::string& path, const std::string& target, bool keep) {
    if (path == "/_admin/stats") {
      std::ostringstream o;
      o << "{\"requests\":" << stats_.requests << ",\"work_requests\":" << stats_.work_requests
        << ",\"connections\":" << stats_.connections << ",\"max_connections\":" << stats_.max_connections
        << ",\"busy\":" << stats_.busy << ",\"max_busy\":" << stats_.max_busy << ",\"queued\":" << stats_.queued
        << ",\"max_queued\":" << stats_.max_queued << ",\"expired_on_arrival\":" << stats_.expired_on_arrival
        << ",\"retries\":" << stats_.retries << ",\"health_checks\":" << stats_.health_checks
        << ",\"workers\":" << opt_.workers << "}\n";
      std::string text = o.str();
      co_return co_await simple(s, p, 200, std::move(text), keep);
    }
    if (path == "/_admin/seen") {
      std::string id = query(target, "id");
      bool seen;
      {
        std::lock_guard lk(stats_.ids_mu);
        seen = stats_.ids.count(id) > 0;
      }
      std::string text = seen ? "yes\n" : "no\n";
      co_return co_await simple(s, p, 200, std::move(text), keep);
    }
    if (path == "/_admin/reset") {
      stats_.requests = 0;
      stats_.work_requests = 0;
      stats_.max_connections = stats_.connections.load();
      stats_.max_busy = 0;
      stats_.max_queued = 0;
      stats_.expired_on_arrival = 0;
      stats_.retries = 0;
      stats_.health_checks = 0;
      {
        std::lock_guard lk(stats_.ids_mu);
        stats_.ids.clear();
      }
      co_return co_await simple(s, p, 200, "reset\n", keep);
    }
    if (path == "/_admin/fail") {
      auto st = query(target, "status");
      auto rate = query(target, "rate");
      fail_status_ = st.empty() ? 503 : std::stoi(st);
      fail_rate_ = rate.empty() ? 1.0 : std::stod(rate);
      if (fail_rate_ <= 0) fail_status_ = 0;
      co_return co_await simple(s, p, 200, "fail set\n", keep);
    }
    if (path == "/_admin/health") {
      health_ok_ = query(target, "ok") != "0";
      std::string text = health_ok_ ? "health ok\n" : "health failing\n";
      co_return co_await simple(s, p, 200, std::move(text), keep);
    }
    if (path == "/_admin/hang") {
      hang_ = query(target, "on") != "0";
      std::string text = hang_ ? "hanging\n" : "not hanging\n";
      co_return co_await simple(s, p, 200, std::move(text), keep);
    }
    co_return co_await simple(s, p, 404, "unknown admin path\n", keep);
  }

  asio::io_context& ctx_;
  Options opt_;
  Distribution dist_;
  std::mt19937_64 rng_;
  asio::thread_pool pool_;
  unsigned free_workers_ = 0;
  std::deque<asio::steady_timer*> waiting_;
  Stats stats_;
  int fail_status_ = 0;
  double fail_rate_ = 0;
  bool health_ok_ = true;
  bool hang_ = false;
  std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();

 public:
  void init() { free_workers_ = opt_.workers; }
};

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::cerr << a << " needs a value\n";
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--port") o.port = static_cast<unsigned short>(std::stoi(next()));
    else if (a == "--address") o.address = next();
    else if (a == "--workers") o.workers = static_cast<unsigned>(std::stoi(next()));
    else if (a == "--service") o.service = next();
    else if (a == "--burn") o.burn = true;
    else if (a == "--orca") o.orca = next();
    else if (a == "--cost-factor") o.cost_factor = std::stod(next());
    else if (a == "--id") o.id = next();
    else if (a == "--threads") o.threads = static_cast<unsigned>(std::stoi(next()));
    else if (a == "--warmup-seconds") o.warmup_seconds = std::stod(next());
    else if (a == "--warmup-factor") o.warmup_factor = std::stod(next());
    else if (a == "--warmup-mode") o.warmup_mode = next();
    else if (a == "--help") {
      std::cout << "levee-backend [--address A] [--port P] [--workers N] [--service fixed:10ms|exp:10ms|uniform:5ms:15ms|lognormal:10ms:0.5]\n"
                   "              [--burn] [--orca text|json|none|garbage|when-asked] [--cost-factor F] [--id NAME]\n"
                   "              [--warmup-seconds S --warmup-factor F]   (cold start: F x slower, fading over S)\n";
      return 0;
    } else {
      std::cerr << "unknown argument " << a << "\n";
      return 2;
    }
  }
  if (o.id.empty()) o.id = o.address + ":" + std::to_string(o.port);
  asio::io_context ctx(1);
  Backend b(ctx, o);
  b.init();
  asio::signal_set sig(ctx, SIGTERM, SIGINT);
  sig.async_wait([&](error_code, int) { ctx.stop(); });
  asio::co_spawn(ctx, b.listen(), [](std::exception_ptr e) {
    if (e) {
      try {
        std::rethrow_exception(e);
      } catch (const std::exception& ex) {
        std::cerr << "levee-backend: " << ex.what() << "\n";
        std::exit(1);
      }
    }
  });
  ctx.run();
  return 0;
}

// levee-loadgen: an open-loop HTTP/1.1 load generator for overload tests.
//
//   levee-loadgen --target 127.0.0.1:8080 --phases 10s@1000,20s@5000 [--poisson]
//       --class name=cp,weight=1,criticality=CRITICAL_PLUS,tenant=a,deadline=1s
//       [--class ...] [--max-conns 4000] [--threads 1] [--warmup 2s]
//       [--retries N --backoff 50ms --honor-retry-after --honor-no-retry]
//       [--csv series.csv] [--json summary.json]
//
// Each request is sent at its scheduled time (no coordinated omission) and
// its latency is measured from that time. A client gives up at its
// deadline: it resets the connection, as a real client that stopped
// waiting does, and the request counts as timed out. "ok" means a 2xx
// within the deadline: goodput.
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "../lib/arrivals.hpp"
#include "../lib/histogram.hpp"

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using boost::system::error_code;
using namespace levee::loadtest;
using Clock = std::chrono::steady_clock;
constexpr auto nothrow = asio::as_tuple(asio::use_awaitable);

namespace {

struct Options {
  std::string host = "127.0.0.1";
  unsigned short port = 8080;
  std::vector<Phase> phases{{10, 100}};
  bool poisson = false;
  std::vector<RequestClass> classes;
  unsigned max_conns = 4000;
  unsigned threads = 1;
  double warmup = 0;
  unsigned retries = 0;
  double backoff_s = 0.05;
  bool honor_retry_after = false;
  bool honor_no_retry = false;
  std::string csv, json;
};

struct ClassStats {
  std::uint64_t offered = 0, sent = 0, ok = 0, rejected = 0, failed = 0, timeouts = 0, errors = 0,
                dropped = 0, attempts = 0;
  // 2xx answers that completed inside the measured window, whenever they
  // were sent: the rate a front actually delivered during the window. "ok"
  // counts by send time and waits for late answers, which credits a front
  // that queues long with service it gave after the window closed.
  std::uint64_t ok_completed_in_window = 0;
  std::map<std::string, std::uint64_t> reasons;
  Histogram ok_latency;   // microseconds
  Histogram rej_latency;  // microseconds, first rejection of the request
  void merge(const ClassStats& o) {
    offered += o.offered; sent += o.sent; ok += o.ok; rejected += o.rejected; failed += o.failed;
    timeouts += o.timeouts; errors += o.errors; dropped += o.dropped; attempts += o.attempts;
    ok_completed_in_window += o.ok_completed_in_window;
    for (auto& [k, v] : o.reasons) reasons[k] += v;
    ok_latency.merge(o.ok_latency);
    rej_latency.merge(o.rej_latency);
  }
};

struct Second {
  std::uint64_t offered = 0, sent = 0, ok = 0, rejected = 0, failed = 0, timeouts = 0, errors = 0, retries = 0;
  std::vector<std::uint64_t> ok_by_class;
};

struct Conn {
  explicit Conn(asio::io_context& ctx) : stream(ctx) {}
  beast::tcp_stream stream;
  beast::flat_buffer buf;
};

class Gen {
 public:
  Gen(asio::io_context& ctx, const Options& o, std::vector<Phase> phases, std::uint64_t seed)
      : classes_(o.classes.size()), ctx_(ctx), o_(o), arrivals_(std::move(phases), o.poisson), rng_(seed),
        target_(asio::ip::make_address(o.host), o.port) {
    seconds_.resize(static_cast<std::size_t>(arrivals_.total_seconds()) + 2);
    for (auto& s : seconds_) s.ok_by_class.resize(o.classes.size());
  }

  asio::awaitable<void> run(Clock::time_point t0) {
    t0_ = t0;
    asio::steady_timer timer(ctx_);
    std::uniform_real_distribution<double> U(0.0, 1.0);
    for (;;) {
      auto a = arrivals_.next(U(rng_));
      if (!a) break;
      auto when = t0_ + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(*a));
      if (when > Clock::now()) {
        timer.expires_at(when);
        co_await timer.async_wait(nothrow);
      }
      std::size_t ci = pick_class(o_.classes, U(rng_));
      asio::co_spawn(ctx_, request(ci, *a), asio::detached);
    }
    // Let requests in flight finish (each has a deadline).
    double longest = 0;
    for (auto& c : o_.classes) longest = std::max(longest, c.deadline_s);
    const auto give_up = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(longest + 0.5));
    while (in_flight_ > 0 && Clock::now() < give_up) {
      timer.expires_after(std::chrono::milliseconds(5));
      co_await timer.async_wait(nothrow);
    }
    idle_.clear();
  }

  std::vector<ClassStats> classes_;
  std::vector<Second> seconds_;

 private:
  Second& second(double t) {
    std::size_t i = std::min(seconds_.size() - 1, static_cast<std::size_t>(std::max(0.0, t)));
    return seconds_[i];
  }

  asio::awaitable<void> request(std::size_t ci, double arrival) {
    ++in_flight_;
    struct Done {
      unsigned& n;
      ~Done() { --n; }
    } done{in_flight_};
    const RequestClass& rc = o_.classes[ci];
    const bool counted = arrival >= o_.warmup;
    ClassStats& cs = counted ? classes_[ci] : warmup_;  // one shared sink, not one per request
    Second& sec = second(arrival);
    ++cs.offered;
    ++sec.offered;
    const auto start = t0_ + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(arrival));
    const auto deadline = start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(rc.deadline_s));
    bool first_rejection = true;
    for (unsigned attempt = 1;; ++attempt) {
      std::unique_ptr<Conn> c;
      if (!idle_.empty()) {
        c = std::move(idle_.back());
        idle_.pop_back();
      } else if (open_ < o_.max_conns) {
        c = std::make_unique<Conn>(ctx_);
        ++open_;
        c->stream.expires_at(deadline);
        auto [ec] = co_await c->stream.async_connect(target_, nothrow);
        if (ec) {
          --open_;
          if (ec == beast::error::timeout) { ++cs.timeouts; ++sec.timeouts; }
          else { ++cs.errors; ++sec.errors; }
          co_return;
        }
        c->stream.socket().set_option(tcp::no_delay(true));
      } else {
        ++cs.dropped;  // the generator itself ran out of connections
        co_return;
      }
      ++cs.attempts;
      if (attempt == 1) { ++cs.sent; ++sec.sent; }
      else ++sec.retries;
      http::request<http::empty_body> req{http::verb::get, rc.path, 11};
      req.set(http::field::host, rc.host);
      if (!rc.criticality.empty()) req.set("x-criticality", rc.criticality);
      if (!rc.tenant.empty()) req.set("x-tenant-id", rc.tenant);
      auto left_ms = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      if (left_ms <= 0) {
        ++cs.timeouts;
        ++sec.timeouts;
        idle_.push_back(std::move(c));
        co_return;
      }
      req.set("x-request-timeout-ms", std::to_string(left_ms));
      if (attempt > 1) req.set("x-attempt-count", std::to_string(attempt));
      if (rc.service_ms >= 0) req.set("x-test-service-ms", std::to_string(rc.service_ms));
      c->stream.expires_at(deadline);
      auto [wec, wn] = co_await http::async_write(c->stream, req, nothrow);
      http::response<http::string_body> res;
      error_code rec = wec;
      if (!wec) {
        auto [e, n] = co_await http::async_read(c->stream, c->buf, res, nothrow);
        rec = e;
      }
      const auto now = Clock::now();
      if (rec) {
        // Give up on the connection; a reset avoids TIME_WAIT piling up.
        error_code ig;
        c->stream.socket().set_option(asio::socket_base::linger(true, 0), ig);
        c->stream.socket().close(ig);
        --open_;
        if (rec == beast::error::timeout || now >= deadline) {
          ++cs.timeouts;
          ++sec.timeouts;
          co_return;
        }
        if (attempt <= o_.retries && now < deadline) {
          co_await backoff(attempt, 0, deadline);
          continue;
        }
        ++cs.errors;
        ++sec.errors;
        co_return;
      }
      const bool keep = res.keep_alive();
      if (keep) idle_.push_back(std::move(c));
      else --open_;
      const int status = res.result_int();
      const auto lat_us = static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(now - start).count());
      if (status >= 200 && status < 300) {
        ++cs.ok;
        ++sec.ok;
        ++sec.ok_by_class[ci];
        cs.ok_latency.record(lat_us);
        const double done_at = std::chrono::duration<double>(now - t0_).count();
        if (done_at >= o_.warmup && done_at <= arrivals_.total_seconds()) ++classes_[ci].ok_completed_in_window;
        co_return;
      }
      const bool overload = status == 429 || status == 503;
      std::string reason;
      if (auto it = res.find("x-levee-reject"); it != res.end()) reason = std::string(it->value());
      else reason = "status_" + std::to_string(status);
      // Any non-2xx answer turned the request away (levee and HAProxy say
      // 503/429; nginx says 502): time the first one.
      if (first_rejection) {
        cs.rej_latency.record(lat_us);
        first_rejection = false;
      }
      const bool no_retry = res.find("x-levee-no-retry") != res.end();
      double retry_after = 0;
      if (auto it = res.find(http::field::retry_after); it != res.end()) {
        try {
          retry_after = std::stod(std::string(it->value()));
        } catch (...) {
        }
      }
      if (attempt <= o_.retries && !(o_.honor_no_retry && no_retry) && Clock::now() < deadline &&
          (overload || status >= 500)) {
        co_await backoff(attempt, o_.honor_retry_after ? retry_after : 0, deadline);
        if (Clock::now() < deadline) continue;
      }
      ++cs.reasons[reason];
      if (overload) { ++cs.rejected; ++sec.rejected; }
      else { ++cs.failed; ++sec.failed; }
      co_return;
    }
  }

  asio::awaitable<void> backoff(unsigned attempt, double retry_after, Clock::time_point deadline) {
    double wait = retry_after > 0 ? retry_after : o_.backoff_s * static_cast<double>(1u << std::min(attempt - 1, 10u));
    if (o_.backoff_s > 0 || retry_after > 0) wait *= std::uniform_real_distribution<double>(0.5, 1.5)(rng_);
    auto until = std::min(deadline, Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(wait)));
    asio::steady_timer t(ctx_, until);
    co_await t.async_wait(nothrow);
  }

  asio::io_context& ctx_;
  const Options& o_;
  Arrivals arrivals_;
  std::mt19937_64 rng_;
  tcp::endpoint target_;
  Clock::time_point t0_;
  std::vector<std::unique_ptr<Conn>> idle_;
  unsigned open_ = 0;
  unsigned in_flight_ = 0;
  ClassStats warmup_;
};

double parse_seconds(std::string v) {
  double scale = 1;
  if (v.size() > 2 && v.substr(v.size() - 2) == "ms") { scale = 0.001; v.resize(v.size() - 2); }
  else if (!v.empty() && v.back() == 's') v.pop_back();
  return std::stod(v) * scale;
}

void write_json(std::ostream& o, const Options& opt, const std::vector<ClassStats>& cs, double measured_s) {
  auto hist = [&](const Histogram& h) {
    std::ostringstream s;
    s << "{\"count\":" << h.count() << ",\"mean_ms\":" << h.mean() / 1000.0 << ",\"p50_ms\":" << h.quantile(0.5) / 1000.0
      << ",\"p90_ms\":" << h.quantile(0.9) / 1000.0 << ",\"p99_ms\":" << h.quantile(0.99) / 1000.0
      << ",\"p999_ms\":" << h.quantile(0.999) / 1000.0 << ",\"max_ms\":" << h.max() / 1000.0 << "}";
    return s.str();
  };
  ClassStats all;
  for (auto& c : cs) all.merge(c);
  auto one = [&](const std::string& name, const ClassStats& c) {
    std::ostringstream s;
    s << "{\"name\":\"" << name << "\",\"offered\":" << c.offered << ",\"sent\":" << c.sent << ",\"ok\":" << c.ok
      << ",\"rejected\":" << c.rejected << ",\"failed\":" << c.failed << ",\"timeouts\":" << c.timeouts
      << ",\"errors\":" << c.errors << ",\"dropped\":" << c.dropped << ",\"attempts\":" << c.attempts
      << ",\"goodput\":" << (measured_s > 0 ? static_cast<double>(c.ok) / measured_s : 0.0)
      << ",\"ok_completed_in_window\":" << c.ok_completed_in_window
      << ",\"goodput_completed\":" << (measured_s > 0 ? static_cast<double>(c.ok_completed_in_window) / measured_s : 0.0)
      << ",\"success_rate\":" << (c.offered ? static_cast<double>(c.ok) / static_cast<double>(c.offered) : 0.0)
      << ",\"reasons\":{";
    bool first = true;
    for (auto& [k, v] : c.reasons) {
      s << (first ? "" : ",") << "\"" << k << "\":" << v;
      first = false;
    }
    s << "},\"ok_latency\":" << hist(c.ok_latency) << ",\"rejection_latency\":" << hist(c.rej_latency) << "}";
    return s.str();
  };
  o << "{\"target\":\"" << opt.host << ":" << opt.port << "\",\"measured_seconds\":" << measured_s
    << ",\"total\":" << one("total", all) << ",\"classes\":[";
  for (std::size_t i = 0; i < cs.size(); ++i) o << (i ? "," : "") << one(opt.classes[i].name, cs[i]);
  o << "]}\n";
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  try {
    for (int i = 1; i < argc; ++i) {
      std::string a = argv[i];
      auto next = [&]() -> std::string {
        if (i + 1 >= argc) throw std::runtime_error(a + " needs a value");
        return argv[++i];
      };
      if (a == "--target") {
        std::string t = next();
        auto colon = t.rfind(':');
        o.host = t.substr(0, colon);
        o.port = static_cast<unsigned short>(std::stoi(t.substr(colon + 1)));
      } else if (a == "--phases") {
        auto p = parse_phases(next());
        if (!p) throw std::runtime_error("bad --phases (want e.g. 10s@500,20s@5000)");
        o.phases = *p;
      } else if (a == "--rate") {
        o.phases = {{o.phases.front().seconds, std::stod(next())}};
      } else if (a == "--duration") {
        for (auto& p : o.phases) p.seconds = parse_seconds(next());
      } else if (a == "--poisson") o.poisson = true;
      else if (a == "--class") {
        auto c = parse_class(next());
        if (!c) throw std::runtime_error("bad --class");
        o.classes.push_back(*c);
      } else if (a == "--max-conns") o.max_conns = static_cast<unsigned>(std::stoul(next()));
      else if (a == "--threads") o.threads = std::max(1u, static_cast<unsigned>(std::stoul(next())));
      else if (a == "--warmup") o.warmup = parse_seconds(next());
      else if (a == "--retries") o.retries = static_cast<unsigned>(std::stoul(next()));
      else if (a == "--backoff") o.backoff_s = parse_seconds(next());
      else if (a == "--honor-retry-after") o.honor_retry_after = true;
      else if (a == "--honor-no-retry") o.honor_no_retry = true;
      else if (a == "--csv") o.csv = next();
      else if (a == "--json") o.json = next();
      else if (a == "--help") {
        std::cout << "see loadtest/README.md\n";
        return 0;
      } else throw std::runtime_error("unknown argument " + a);
    }
  } catch (const std::exception& e) {
    std::cerr << "levee-loadgen: " << e.what() << "\n";
    return 2;
  }
  if (o.classes.empty()) o.classes.push_back(*parse_class("name=default,weight=1,deadline=1s"));

  // N independent generators, each at rate/N, merged at the end.
  std::vector<std::unique_ptr<asio::io_context>> ctxs;
  std::vector<std::unique_ptr<Gen>> gens;
  for (unsigned t = 0; t < o.threads; ++t) {
    auto phases = o.phases;
    for (auto& p : phases) p.rate /= o.threads;
    ctxs.push_back(std::make_unique<asio::io_context>(1));
    gens.push_back(std::make_unique<Gen>(*ctxs.back(), o, phases, 1234567 + t * 7919));
  }
  const auto t0 = Clock::now() + std::chrono::milliseconds(50);
  for (unsigned t = 0; t < o.threads; ++t) asio::co_spawn(*ctxs[t], gens[t]->run(t0), asio::detached);
  std::vector<std::thread> threads;
  for (unsigned t = 1; t < o.threads; ++t) threads.emplace_back([&, t] { ctxs[t]->run(); });
  ctxs[0]->run();
  for (auto& th : threads) th.join();

  std::vector<ClassStats> cs(o.classes.size());
  std::vector<Second> secs(gens[0]->seconds_.size());
  for (auto& s : secs) s.ok_by_class.resize(o.classes.size());
  for (auto& g : gens) {
    for (std::size_t i = 0; i < cs.size(); ++i) cs[i].merge(g->classes_[i]);
    for (std::size_t i = 0; i < secs.size(); ++i) {
      auto& a = secs[i];
      auto& b = g->seconds_[i];
      a.offered += b.offered; a.sent += b.sent; a.ok += b.ok; a.rejected += b.rejected; a.failed += b.failed;
      a.timeouts += b.timeouts; a.errors += b.errors; a.retries += b.retries;
      for (std::size_t k = 0; k < a.ok_by_class.size(); ++k) a.ok_by_class[k] += b.ok_by_class[k];
    }
  }
  double total_s = 0;
  for (auto& p : o.phases) total_s += p.seconds;
  const double measured = std::max(0.001, total_s - o.warmup);
  if (!o.csv.empty()) {
    std::ofstream f(o.csv);
    f << "second,offered,sent,ok,rejected,failed,timeouts,errors,retries";
    for (auto& c : o.classes) f << ",ok_" << c.name;
    f << "\n";
    for (std::size_t i = 0; i + 1 < secs.size(); ++i) {
      auto& s = secs[i];
      f << i << "," << s.offered << "," << s.sent << "," << s.ok << "," << s.rejected << "," << s.failed << ","
        << s.timeouts << "," << s.errors << "," << s.retries;
      for (auto v : s.ok_by_class) f << "," << v;
      f << "\n";
    }
  }
  if (!o.json.empty()) {
    std::ofstream f(o.json);
    write_json(f, o, cs, measured);
  }
  write_json(std::cout, o, cs, measured);
  return 0;
}

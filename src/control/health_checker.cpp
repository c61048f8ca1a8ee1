#include "control/health_checker.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/connect.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <spdlog/spdlog.h>

#include "core/health.hpp"
#include "http/framing.hpp"
#include "proxy/runtime.hpp"
#include "proxy/stream.hpp"
#include "proxy/tls_context.hpp"

namespace levee::control {

using proxy::now;
using core::Duration;
using core::TimePoint;

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
constexpr auto nothrow = asio::as_tuple(asio::use_awaitable);

struct HealthChecker::Run {
  std::shared_ptr<proxy::Runtime> rt;
  bool stopped = false;
  std::vector<std::weak_ptr<asio::steady_timer>> timers;
  std::vector<std::weak_ptr<proxy::Stream>> streams;
};

HealthChecker::HealthChecker(asio::io_context& ctx, std::size_t shard) : ctx_(ctx), shard_(shard), rng_(0x4ea17c4eull) {}

HealthChecker::~HealthChecker() { stop(); }

void HealthChecker::stop() {
  if (!run_) return;
  run_->stopped = true;
  for (auto& w : run_->timers)
    if (auto t = w.lock()) t->cancel();
  for (auto& w : run_->streams)
    if (auto st = w.lock()) st->cancel();
  run_.reset();
}

void HealthChecker::start(std::shared_ptr<proxy::Runtime> rt) {
  stop();
  run_ = std::make_shared<Run>();
  run_->rt = std::move(rt);
  for (auto& c : run_->rt->clusters) {
    if (!c->cfg.health_check.enabled) continue;
    for (auto& ep : c->endpoints) asio::co_spawn(ctx_, loop(run_, *c, *ep), asio::detached);
  }
}

asio::awaitable<void> HealthChecker::loop(std::shared_ptr<Run> run, proxy::Cluster& c, proxy::Endpoint& ep) {
  const auto& hc = c.cfg.health_check;
  // An endpoint carried over from the previous Runtime starts from the
  // health it had; a new one is decided by its first check.
  const bool adopted = ep.adopted;
  core::HealthState state({hc.healthy, hc.unhealthy}, adopted && ep.healthy.load());
  bool decided = adopted;
  Duration interval = hc.interval;
  // The probe's connection: cleartext, or TLS as the cluster's requests use
  // (its CA, server name and client certificate), kept alive between probes.
  std::shared_ptr<proxy::Stream> stream;
  beast::flat_buffer buf;
  auto sleep = std::make_shared<asio::steady_timer>(ctx_);
  run->timers.push_back(sleep);
  auto deadline = std::make_shared<asio::steady_timer>(ctx_);
  run->timers.push_back(deadline);
  // The authority the endpoint stands for (a hostname's, for virtual hosts).
  const std::string host = hc.host.empty() ? ep.authority : hc.host;
  const std::string request = "GET " + hc.path + " HTTP/1.1\r\nHost: " + host +
                              "\r\nUser-Agent: levee-health-check\r\nAccept: */*\r\n\r\n";
  auto& m = *run->rt->metrics;
  const std::size_t epm = m.endpoint(c.index, ep.index);
  for (bool first = !adopted;; first = false) {
    if (!first) {
      // +-jitter around the interval, so a fleet does not probe in step.
      double j = 1.0 + hc.jitter * (2.0 * rng_.uniform() - 1.0);
      sleep->expires_after(std::chrono::duration_cast<asio::steady_timer::duration>(interval * j));
      co_await sleep->async_wait(nothrow);
      if (run->stopped) co_return;
    }
    // Disabled by an operator: no probes until it is enabled again.
    if (ep.admin.load() == static_cast<std::uint8_t>(core::AdminState::Disabled)) continue;
    const TimePoint t0 = now();
    bool ok = false;
    // The whole probe (connect, handshake, request, answer) within hc.timeout.
    deadline->expires_after(std::chrono::duration_cast<asio::steady_timer::duration>(hc.timeout));
    // Held by the handler as well: a handler that fires as the probe ends
    // (and runs after it) finds nothing to cut.
    auto cut = std::make_shared<std::weak_ptr<proxy::Stream>>();
    deadline->async_wait([cut](boost::system::error_code ec) {
      if (ec) return;
      if (auto st = cut->lock()) st->cancel();
    });
    do {
      if (!stream) {
        const auto& addrs = ep.addresses();
        if (addrs.empty()) break;
        stream = std::make_shared<proxy::Stream>(ctx_.get_executor());
        std::erase_if(run->streams, [](const auto& w) { return w.expired(); });
        run->streams.push_back(stream);
        *cut = stream;
        auto [ec, e] = co_await asio::async_connect(stream->socket(), addrs, nothrow);
        boost::system::error_code ig;
        if (!ec) {
          stream->socket().set_option(asio::ip::tcp::no_delay(true), ig);
          stream->socket().non_blocking(true, ig);
        }
        if (ec || (c.tls && !co_await proxy::connect_tls(*stream, *c.tls, ep.host))) {
          stream.reset();
          break;
        }
        buf.clear();
      }
      *cut = stream;
      levee::http::Buffers out;
      out.push(asio::buffer(request));
      auto [wec, wn] = co_await stream->write_all(out);
      if (wec) {
        stream.reset();
        break;
      }
      http::response_parser<http::string_body> parser;
      parser.body_limit(64 * 1024);
      parser.header_limit(16 * 1024);
      bool broken = false;
      while (!parser.is_done()) {
        if (buf.size() > 0) {
          boost::system::error_code pec;
          const std::size_t n = parser.put(buf.data(), pec);
          buf.consume(n);
          if (parser.is_done()) break;
          if (pec && pec != http::error::need_more) {
            broken = true;
            break;
          }
          if (n > 0 && buf.size() > 0) continue;
        }
        if (buf.size() >= 96 * 1024) {  // no progress within the limits
          broken = true;
          break;
        }
        auto [rec, rn] = co_await stream->read_some(buf.prepare(16 * 1024));
        if (rec) {
          broken = true;
          break;
        }
        buf.commit(rn);
      }
      if (broken) {
        stream.reset();
        buf.clear();
        break;
      }
      auto& res = parser.get();
      const int st = res.result_int();
      ok = st >= hc.status_min && st <= hc.status_max &&
           (hc.body_contains.empty() || res.body().find(hc.body_contains) != std::string::npos);
      if (!res.keep_alive()) {
        stream.reset();
        buf.clear();
      }
    } while (false);
    cut->reset();
    deadline->cancel();
    if (run->stopped) co_return;
    const TimePoint t1 = now();
    m.health_check_latency.observe(shard_, c.index, core::to_seconds(t1 - t0));
    m.health_checks.inc(shard_, m.health_checks.index({epm, ok ? 0u : 1u}));

    bool healthy;
    if (!decided) {
      // No history yet: the first answer decides, then hysteresis applies.
      decided = true;
      state = core::HealthState({hc.healthy, hc.unhealthy}, ok);
      healthy = ok;
    } else {
      auto change = state.on_check(ok);
      healthy = state.healthy();
      if (change == core::HealthState::Change::BecameHealthy)
        spdlog::info("cluster {}: endpoint {} is healthy again", c.cfg.name, ep.label);
      else if (change == core::HealthState::Change::BecameUnhealthy)
        spdlog::warn("cluster {}: endpoint {} failed {} health checks: out", c.cfg.name, ep.label, hc.unhealthy);
    }
    c.set_endpoint_health(ep.index, healthy, t1);
    // Endpoints that stay down are probed less and less often.
    interval = (!healthy && !ok) ? std::min(hc.max_interval, interval * 2) : hc.interval;
  }
}

}  // namespace levee::control

#include "control/health_checker.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http.hpp>
#include <spdlog/spdlog.h>

#include "core/health.hpp"
#include "proxy/runtime.hpp"

namespace levee::control {

using proxy::now;
using core::Duration;
using core::TimePoint;

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
constexpr auto nothrow = asio::as_tuple(asio::use_awaitable);

HealthChecker::HealthChecker(asio::io_context& ctx, std::shared_ptr<proxy::Runtime> rt, std::size_t shard)
    : ctx_(ctx), rt_(std::move(rt)), shard_(shard), rng_(0x4ea17c4eull) {}

void HealthChecker::start() {
  for (auto& c : rt_->clusters) {
    if (!c->cfg.health_check.enabled) continue;
    for (auto& ep : c->endpoints) asio::co_spawn(ctx_, loop(*c, *ep), asio::detached);
  }
}

asio::awaitable<void> HealthChecker::loop(proxy::Cluster& c, proxy::Endpoint& ep) {
  const auto& hc = c.cfg.health_check;
  core::HealthState state({hc.healthy, hc.unhealthy}, false);
  bool decided = false;
  Duration interval = hc.interval;
  std::unique_ptr<beast::tcp_stream> stream;
  beast::flat_buffer buf;
  asio::steady_timer sleep(ctx_);
  const std::string host = hc.host.empty() ? ep.label : hc.host;
  const std::string request = "GET " + hc.path + " HTTP/1.1\r\nHost: " + host +
                              "\r\nUser-Agent: levee-health-check\r\nAccept: */*\r\n\r\n";
  auto& m = *rt_->metrics;
  const std::size_t epm = m.endpoint(c.index, ep.index);
  for (bool first = true;; first = false) {
    if (!first) {
      // +-jitter around the interval, so a fleet does not probe in step.
      double j = 1.0 + hc.jitter * (2.0 * rng_.uniform() - 1.0);
      sleep.expires_after(std::chrono::duration_cast<asio::steady_timer::duration>(interval * j));
      co_await sleep.async_wait(nothrow);
      if (rt_->draining.load()) co_return;
    }
    const TimePoint t0 = now();
    bool ok = false;
    do {
      if (!stream) {
        auto addrs = ep.addresses();
        if (addrs.empty()) break;
        stream = std::make_unique<beast::tcp_stream>(ctx_);
        stream->expires_after(std::chrono::duration_cast<std::chrono::steady_clock::duration>(hc.timeout));
        auto [ec, e] = co_await stream->async_connect(addrs, nothrow);
        if (ec) {
          stream.reset();
          break;
        }
      }
      stream->expires_after(std::chrono::duration_cast<std::chrono::steady_clock::duration>(hc.timeout));
      auto [wec, wn] = co_await asio::async_write(*stream, asio::buffer(request), nothrow);
      if (wec) {
        stream.reset();
        break;
      }
      http::response_parser<http::string_body> parser;
      parser.body_limit(64 * 1024);
      auto [rec, rn] = co_await http::async_read(*stream, buf, parser, nothrow);
      if (rec) {
        stream.reset();
        buf.clear();
        break;
      }
      auto& res = parser.get();
      const int st = res.result_int();
      ok = st >= hc.status_min && st <= hc.status_max &&
           (hc.body_contains.empty() || res.body().find(hc.body_contains) != std::string::npos);
      if (!res.keep_alive()) stream.reset();
    } while (false);
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

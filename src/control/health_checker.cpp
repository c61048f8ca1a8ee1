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
#include "proxy/http2_upstream.hpp"
#include "proxy/runtime.hpp"
#include "proxy/stream.hpp"
#include "proxy/tls_context.hpp"

namespace levee::control {

namespace {

void put_varint(std::string& out, std::uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>(0x80 | (v & 0x7f)));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

bool get_varint(std::string_view& in, std::uint64_t& v) {
  v = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    if (in.empty()) return false;
    const auto b = static_cast<unsigned char>(in.front());
    in.remove_prefix(1);
    v |= static_cast<std::uint64_t>(b & 0x7f) << shift;
    if ((b & 0x80) == 0) return true;
  }
  return false;
}

/// grpc.health.v1.HealthCheckRequest{service} as one gRPC message
/// (uncompressed flag, 4-byte big-endian length, the protobuf).
std::string grpc_health_request(std::string_view service) {
  std::string msg;
  if (!service.empty()) {
    msg.push_back('\x0a');  // field 1, length-delimited
    put_varint(msg, service.size());
    msg += service;
  }
  std::string frame(5, '\0');
  const auto n = static_cast<std::uint32_t>(msg.size());
  for (int i = 0; i < 4; ++i) frame[static_cast<std::size_t>(1 + i)] = static_cast<char>((n >> (24 - 8 * i)) & 0xff);
  return frame + msg;
}

/// HealthCheckResponse.status (1: SERVING) of the first gRPC message in
/// `body`; -1 when it is not one (compressed, cut short, not protobuf).
int grpc_serving_status(std::string_view body) {
  if (body.size() < 5 || body[0] != 0) return -1;
  std::uint32_t n = 0;
  for (int i = 1; i <= 4; ++i) n = (n << 8) | static_cast<unsigned char>(body[static_cast<std::size_t>(i)]);
  if (body.size() - 5 < n) return -1;
  std::string_view m = body.substr(5, n);
  int status = 0;  // absent: UNKNOWN
  while (!m.empty()) {
    std::uint64_t key = 0, v = 0;
    if (!get_varint(m, key)) return -1;
    switch (key & 7) {
      case 0:
        if (!get_varint(m, v)) return -1;
        if ((key >> 3) == 1) status = static_cast<int>(std::min<std::uint64_t>(v, 1000));
        break;
      case 1:
        if (m.size() < 8) return -1;
        m.remove_prefix(8);
        break;
      case 2:
        if (!get_varint(m, v) || v > m.size()) return -1;
        m.remove_prefix(static_cast<std::size_t>(v));
        break;
      case 5:
        if (m.size() < 4) return -1;
        m.remove_prefix(4);
        break;
      default:
        return -1;
    }
  }
  return status;
}

std::string_view field(const levee::http::Head& h, std::string_view name) {
  for (const auto& f : h.fields())
    if (f.name == name) return f.value;
  return {};
}

}  // namespace

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
  std::vector<std::weak_ptr<proxy::H2Upstream>> h2;  ///< HTTP/2 probe connections
  std::vector<std::weak_ptr<proxy::H2Call>> calls;   ///< HTTP/2 probes under way
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
  for (auto& w : run_->calls)
    if (auto call = w.lock()) call->abort();
  for (auto& w : run_->h2)
    if (auto conn = w.lock()) conn->retire();
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
  std::shared_ptr<proxy::H2Upstream> h2conn;  // http2 clusters
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
    if (c.cfg.protocol == config::ClusterConfig::Protocol::Http2) {
      co_await probe_h2(run, c, ep, h2conn, host, ok);
    } else {
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
    }
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

asio::awaitable<void> HealthChecker::probe_h2(std::shared_ptr<Run> run, proxy::Cluster& c, proxy::Endpoint& ep,
                                              std::shared_ptr<proxy::H2Upstream>& conn, const std::string& host,
                                              bool& ok) {
  const auto& hc = c.cfg.health_check;
  const bool grpc = hc.type == config::HealthCheckConfig::Type::Grpc;
  ok = false;
  if (!conn || !conn->usable()) {
    if (conn) conn->retire();
    conn.reset();
    const auto& addrs = ep.addresses();
    if (addrs.empty()) co_return;
    // One connection per endpoint, kept between probes (as the HTTP/1.1
    // probe keeps its keep-alive connection): TLS with ALPN h2 when the
    // cluster has TLS, prior knowledge otherwise.
    proxy::H2Upstream::Options o;
    o.addresses = addrs;
    o.tls = c.tls;
    o.host = ep.host;
    o.connect_timeout = hc.timeout;
    o.max_streams = 1;
    conn = std::make_shared<proxy::H2Upstream>(ctx_.get_executor(), std::move(o));
    std::erase_if(run->h2, [](const auto& w) { return w.expired(); });
    run->h2.push_back(conn);
    conn->start([](bool) {});
  }
  // (Declared before the call, which writes into them: they outlive it.)
  levee::http::Head head(64);
  levee::http::ResponseInfo info;
  const levee::http::ResponseSignals signals;
  auto call = std::make_shared<proxy::H2Call>(ctx_.get_executor());
  std::erase_if(run->calls, [](const auto& w) { return w.expired(); });
  run->calls.push_back(call);
  call->begin(head, info, signals, 16 * 1024);
  std::string text = grpc ? "POST /grpc.health.v1.Health/Check HTTP/1.1\r\nHost: " + host +
                                "\r\nContent-Type: application/grpc\r\nUser-Agent: levee-health-check\r\n\r\n"
                          : "GET " + hc.path + " HTTP/1.1\r\nHost: " + host +
                                "\r\nUser-Agent: levee-health-check\r\nAccept: */*\r\n\r\n";
  // The whole probe (connect, handshake, request, answer) within hc.timeout.
  auto deadline = std::make_shared<asio::steady_timer>(ctx_);
  std::erase_if(run->timers, [](const auto& w) { return w.expired(); });
  run->timers.push_back(deadline);
  deadline->expires_after(std::chrono::duration_cast<asio::steady_timer::duration>(hc.timeout));
  std::weak_ptr<proxy::H2Call> cut = call;
  deadline->async_wait([cut](boost::system::error_code ec) {
    if (ec) return;
    if (auto k = cut.lock()) k->abort();
  });
  std::string body;
  bool opened = call->open(conn, text, c.tls != nullptr, grpc);
  if (opened && grpc) {
    const std::string msg = grpc_health_request(hc.grpc_service);
    opened = co_await call->send_body(msg, true, false);
  }
  bool too_long = false;
  while (opened && !call->ended() && !call->closed() && !call->aborted()) {
    co_await call->wait();
    const std::string_view p = call->pending();
    if (body.size() + p.size() > 64 * 1024) {
      too_long = true;
      break;
    }
    body += p;
    call->take(p.size());
  }
  if (opened && call->ended() && call->head_done() && !too_long) {
    body += call->pending();
    const int st = info.status;
    if (grpc) {
      // grpc-status in the trailers, or on the head itself (Trailers-Only).
      std::string_view gs = field(call->trailers, "grpc-status");
      if (gs.empty()) gs = field(head, "grpc-status");
      ok = st == 200 && gs == "0" && grpc_serving_status(body) == 1;
    } else {
      ok = st >= hc.status_min && st <= hc.status_max &&
           (hc.body_contains.empty() || body.find(hc.body_contains) != std::string::npos);
    }
  }
  // A probe that got no whole answer (its deadline, a reset, a stream that
  // never ended) gives up its connection too, as the HTTP/1.1 probe does:
  // a wedged or black-holed connection must not fail every probe after it.
  const bool whole = opened && call->ended() && call->head_done();
  call->release();
  deadline->cancel();
  if (!whole && conn) {
    conn->retire();
    conn.reset();
  }
}

}  // namespace levee::control

#include "proxy/listener.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>

#include "http/local_reply.hpp"
#include "proxy/asio.hpp"
#include "proxy/clock.hpp"
#include "proxy/http1_connection.hpp"
#include "proxy/io.hpp"
#include "proxy/request_metrics.hpp"
#include "proxy/runtime.hpp"
#include "proxy/worker.hpp"

namespace levee::proxy {

core::Address mapped(const asio::ip::address& a) noexcept {
  if (a.is_v4()) return core::ipv4_mapped(a.to_v4().to_bytes());
  return a.to_v6().to_bytes();
}

std::string slot_key(const config::ListenerConfig& c) {
  const bool v6 = c.address.find(':') != std::string::npos;
  return (v6 ? "[" + c.address + "]" : c.address) + ":" + std::to_string(c.port);
}

Listener::Listener(Runtime& rt, const config::ListenerConfig& c, std::size_t i, core::Classifier cl,
                   std::vector<Route> r, std::shared_ptr<ListenerSlot> s)
    : cfg(c),
      index(i),
      slot(std::move(s)),
      classifier(std::move(cl)),
      routes(std::move(r)),
      connections(slot->connections),
      refusing(slot->refusing),
      fuse_open(slot->fuse_open),
      fuse_in_use(slot->fuse_in_use),
      fuse_waiting(slot->fuse_waiting),
      rt_(rt) {}

bool Listener::uses_fuse() const noexcept {
  return batch() || std::any_of(routes.begin(), routes.end(), [](const Route& r) { return r.fuse; });
}

bool ListenerSlot::take_accept_token(double rate, core::TimePoint t) {
  if (rate <= 0) return true;
  std::lock_guard lk(rate_mu_);
  const double burst = std::max(1.0, rate);  // up to one second's worth at once
  if (tokens_ < 0) {
    tokens_ = burst;
    last_refill_ = t;
  }
  tokens_ = std::min(burst, tokens_ + core::to_seconds(t - last_refill_) * rate);
  last_refill_ = t;
  if (tokens_ < 1.0) return false;
  tokens_ -= 1.0;
  return true;
}

bool ListenerSlot::source_enter(const core::Address& addr, std::uint32_t cap) {
  if (cap == 0) return true;
  std::lock_guard lk(src_mu_);
  return per_source_.enter(addr, cap);
}

void ListenerSlot::source_leave(const core::Address& addr) {
  std::lock_guard lk(src_mu_);
  per_source_.leave(addr);
}

/// Refuses a connection politely: reads what the client sends first, briefly
/// (closing at once would reset the connection before it reads the answer),
/// answers 503 with Retry-After and the reason, closes.
awaitable<void> refuse_connection(Worker& w, Socket s, std::shared_ptr<ListenerSlot> l, core::Reason reason) {
  l->refusing.fetch_add(1, std::memory_order_relaxed);
  Timer t(w.ctx.get_executor(), std::chrono::milliseconds(200));
  t.async_wait([&s](error_code ec) {
    if (!ec) {
      error_code ig;
      s.cancel(ig);
    }
  });
  char buf[2048];
  co_await s.async_read_some(asio::buffer(buf), nothrow);
  t.cancel();
  http::LocalReply r = http::rejection(core::Decision::reject(reason, std::chrono::seconds(1)),
                                       core::retry_after_seconds(std::chrono::seconds(1), w.rng.uniform()));
  r.close = true;
  std::string out;
  http::write_http1(out, r);
  co_await asio::async_write(s, asio::buffer(out), nothrow);
  error_code ec;
  s.shutdown(tcp::socket::shutdown_both, ec);
  s.close(ec);
  l->refusing.fetch_sub(1, std::memory_order_relaxed);
}

awaitable<void> accept_loop(Worker& w, std::shared_ptr<Acceptor> a, std::size_t slot) {
  for (;;) {
    auto [ec, sock] = co_await a->async_accept(nothrow);
    if (ec) {
      if (ec == asio::error::operation_aborted || !a->is_open() || w.draining()) co_return;
      // EMFILE and friends: back off briefly rather than spin.
      spdlog::warn("accept on {}: {}", w.listener_in_slot(slot) ? w.listener_in_slot(slot)->cfg.name : "?", ec.message());
      Timer t(w.ctx.get_executor(), std::chrono::milliseconds(10));
      co_await t.async_wait(nothrow);
      continue;
    }
    // The listener this slot has in the worker's Runtime now (a reload may
    // have replaced the one the loop started with).
    Listener* lp = w.listener_in_slot(slot);
    if (!lp) {
      error_code ig;
      sock.close(ig);
      continue;
    }
    Listener& l = *lp;
    auto& m = *l.runtime().metrics;
    const std::uint32_t conns = l.connections.load(std::memory_order_relaxed);
    const std::uint32_t cap = l.cfg.max_connections;
    core::Address addr{};
    std::uint16_t port = 0;
    {
      error_code aec;
      const auto ep = sock.remote_endpoint(aec);
      if (!aec) {
        addr = mapped(ep.address());
        port = ep.port();
      }
    }
    // Connection guards: the cap, the accept rate, the per-source cap.
    // Behind a balancer that sends PROXY headers the source is known only
    // once the header is read: its per-source cap is taken then.
    const bool proxied = l.cfg.proxy_protocol.enabled && l.cfg.proxy_protocol.from.contains(addr);
    std::optional<RefuseCause> cause;
    if (conns >= cap) cause = RefuseCause::MaxConnections;
    else if (!l.take_accept_token(now())) cause = RefuseCause::AcceptRate;
    else if (!proxied && !l.source_enter(addr)) cause = RefuseCause::PerSource;
    if (cause) {
      m.refuse(w.index, l.index, *cause);
      // Refuse politely while that is cheap (a bounded number at a time,
      // not far beyond the cap); beyond that, close at once.
      const std::uint32_t margin = std::max<std::uint32_t>(16, cap / 10);
      if (l.refusing.load(std::memory_order_relaxed) < 1024 && conns < cap + margin) {
        asio::co_spawn(w.ctx, refuse_connection(w, std::move(sock), l.slot, core::Reason::ConnectionLimit), asio::detached);
      } else {
        error_code ig;
        sock.set_option(asio::socket_base::linger(true, 0), ig);
        sock.close(ig);
      }
      continue;
    }
    // Near the cap, idle keep-alive connections make room first.
    if (conns + 1 > cap - cap / 10) w.close_idle(slot, conns + 1 - (cap - cap / 10));
    l.connections.fetch_add(1, std::memory_order_relaxed);
    w.connections.fetch_add(1, std::memory_order_relaxed);
    m.connections.inc(w.index, l.index);
    // The connection gives its place back when it is destroyed (to the
    // slot, not the listener: it may outlive this Runtime); it may rest
    // between requests with no coroutine running (Http1Connection::rest).
    if (proxied) {
      asio::co_spawn(w.ctx, read_proxy_header(w, slot, l.slot, std::move(sock), addr, port), asio::detached);
      continue;
    }
    Http1Connection::start(std::make_shared<Http1Connection>(w, l, std::move(sock), addr, port));
  }
}

}  // namespace levee::proxy

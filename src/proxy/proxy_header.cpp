// The PROXY protocol on a listener behind an L4 load balancer: the header
// is read before anything else (before TLS), with a deadline and a byte
// bound, by peeking at the socket and consuming only header bytes
// (core::parse_proxy_header says which), so the stream behind it reaches
// the connection untouched. The connection then starts with the client's
// address from the header: trust, per-source caps, X-Forwarded-For and logs
// all see the real client.
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>

#include <array>

#include "core/proxy_protocol.hpp"
#include "proxy/clock.hpp"
#include "proxy/http1_connection.hpp"
#include "proxy/listener.hpp"
#include "proxy/request_metrics.hpp"
#include "proxy/runtime.hpp"
#include "proxy/worker.hpp"

namespace levee::proxy {

awaitable<void> read_proxy_header(Worker& w, std::size_t slot, std::shared_ptr<ListenerSlot> st, Socket s,
                                  core::Address addr, std::uint16_t port) {
  Listener* lp = w.listener_in_slot(slot);
  // The counts the accept loop took, given back if no connection starts.
  const auto give_back = [&] {
    st->connections.fetch_sub(1, std::memory_order_relaxed);
    w.connections.fetch_sub(1, std::memory_order_relaxed);
  };
  if (!lp) {
    give_back();
    co_return;
  }
  const auto pc = lp->cfg.proxy_protocol;
  std::array<char, 2048> buf;
  const std::size_t cap = std::min<std::size_t>(buf.size(), std::max<std::size_t>(core::kProxyV1Max, pc.max_v2_bytes));
  // The deadline's flags outlive this frame: a timer that fired just as the
  // header ended (its handler already queued) must not touch the frame, and
  // one that fired while a read's completion was queued must still end the
  // loop (the cancel found nothing to cancel).
  struct State {
    bool done = false, expired = false;
  };
  auto dl = std::make_shared<State>();
  Timer t(w.ctx.get_executor(), pc.timeout);
  t.async_wait([&s, dl](error_code ec) {
    if (ec || dl->done) return;
    dl->expired = true;
    error_code ig;
    s.cancel(ig);
  });
  error_code ec;
  s.non_blocking(true, ec);
  std::size_t have = 0;
  core::ProxyHeader h;
  bool closed = false;  // the balancer (a TCP health check) or the client left first
  for (;;) {
    if (dl->expired) break;
    auto [wec] = co_await s.async_wait(tcp::socket::wait_read, asio::as_tuple(asio::use_awaitable));
    if (wec || dl->expired) break;
    const std::size_t n = s.receive(asio::buffer(buf.data() + have, cap - have), tcp::socket::message_peek, ec);
    if (ec == asio::error::would_block || ec == asio::error::try_again) continue;
    if (ec || n == 0) {  // closed, or reset, before a whole header
      closed = !dl->expired;
      break;
    }
    h = core::parse_proxy_header({buf.data(), have + n}, pc.max_v2_bytes);
    if (h.status == core::ProxyHeader::Status::Invalid) break;
    // Every peeked byte up to the header's end is header: consume exactly those.
    const std::size_t take = h.status == core::ProxyHeader::Status::Done ? h.length - have : n;
    const std::size_t got = s.receive(asio::buffer(buf.data() + have, take), 0, ec);
    if (ec || got != take) {
      h.status = core::ProxyHeader::Status::Invalid;
      break;
    }
    have += take;
    if (h.status == core::ProxyHeader::Status::Done) break;
    if (have >= cap) {
      h.status = core::ProxyHeader::Status::Invalid;
      break;
    }
  }
  dl->done = true;
  t.cancel();
  const bool timed_out = dl->expired;
  lp = w.listener_in_slot(slot);  // a reload may have replaced it while the header came
  const bool done = h.status == core::ProxyHeader::Status::Done;
  if (lp) {
    const auto r = done ? (!h.has_source ? ProxyHeaderResult::Local
                                         : h.version == 1 ? ProxyHeaderResult::V1 : ProxyHeaderResult::V2)
                        : timed_out ? ProxyHeaderResult::Timeout
                        : closed    ? ProxyHeaderResult::Closed
                                    : ProxyHeaderResult::Invalid;
    auto& m = *lp->runtime().metrics;
    m.proxy_headers.inc(w.index, m.proxy_headers.index({lp->index, static_cast<std::size_t>(r)}));
  }
  if (!done || !lp) {
    // Not a client levee can name: nothing to answer in a protocol it may
    // not speak (the bytes may have been TLS). Close.
    give_back();
    s.close(ec);
    co_return;
  }
  if (h.has_source) {
    addr = h.source;
    port = h.source_port;
  }
  if (!lp->source_enter(addr)) {
    lp->runtime().metrics->refuse(w.index, lp->index, RefuseCause::PerSource);
    give_back();
    co_await refuse_connection(w, std::move(s), lp->slot, core::Reason::ConnectionLimit);
    co_return;
  }
  Http1Connection::start(std::make_shared<Http1Connection>(w, *lp, std::move(s), addr, port));
}

}  // namespace levee::proxy

// The attempt and the relay when the cluster speaks HTTP/2 (protocol:
// http2): the same steps as exchange.cpp's HTTP/1.1 attempt, on a stream of
// a shared connection (proxy/http2_upstream.hpp) instead of a connection of
// the request's own. The retry rule, the reports and the permit are the
// exchange's, whichever protocol carried the attempt.
#include <boost/asio/co_spawn.hpp>

#include <charconv>

#include "proxy/attempt.hpp"
#include "proxy/exchange.hpp"
#include "proxy/http2_upstream.hpp"
#include "proxy/listener.hpp"
#include "proxy/runtime.hpp"
#include "proxy/worker.hpp"

namespace levee::proxy {

using core::Reason;

bool Exchange::call_upstream() const noexcept {
  return cluster_->cfg.protocol == config::ClusterConfig::Protocol::Http2;
}

awaitable<void> Exchange::try_endpoint_h2(Attempt& a) {
  const auto& cc = cluster_->cfg;
  if (!b_.h2) b_.h2 = std::make_unique<H2Call>(w_.ctx.get_executor());
  call_ = b_.h2.get();
  H2Call& call = *call_;
  b_.resp_head.reset();
  b_.resp = http::ResponseInfo{};
  b_.resp_body.clear();
  call.begin(b_.resp_head, b_.resp, rt_.response_signals, 64 * 1024);

  bool fresh = false;
  auto conn = w_.h2pool.get(w_, *cluster_, a.endpoint, fresh);
  if (conn && fresh) {
    // Counted once it is up; the Runtime is kept until then.
    std::shared_ptr<Runtime> rt = w_.rt.get() == &rt_ ? w_.rt : nullptr;
    conn->start([rt, shard = w_.index, ci = cluster_->index](bool ok) {
      if (ok && rt) rt->metrics->upstream_connects.inc(shard, ci);
    });
  }
  a.sent_at = now();  // one reading for the head's time left and the send
  write_head(a, true, a.sent_at);
  if (!conn || !call.open(std::move(conn), b_.out, cluster_->tls != nullptr, d_.has_body())) {
    a.failed = true;
    a.failure = core::AttemptFailure::Connect;
    a.error = UpstreamError::Connect;
    co_return;
  }
  a.reused = call.reused();
  if (continue_due()) {
    if (!co_await d_.send_continue()) {
      a.client = BodyRead::Gone;
      co_return;
    }
    a.sent_at = now();
  }
  arm(std::min(cls_.deadline, a.sent_at + cc.response_timeout), Watchdog::Phase::Upstream);
  if (d_.has_body() && !co_await send_body_h2(a)) co_return;
  a.whole = !d_.has_body() || d_.body_done();

  // The response head. The client is watched meanwhile, as over HTTP/1.1.
  w_.upstream_waits.push(*this, a.sent_at);
  while (!call.head_done() && !call.closed() && !call.aborted()) co_await call.wait();
  unlink();
  d_.unwatch();
  if (!call.head_done()) {
    a.failed = true;
    a.sent = call.sent();
    if (call.connect_failed()) {
      a.failure = core::AttemptFailure::Connect;
      a.error = UpstreamError::Connect;
    } else if (b_.watchdog.expired()) {
      a.failure = core::AttemptFailure::Timeout;
      a.error = UpstreamError::Timeout;
    } else if (call.refused()) {
      // REFUSED_STREAM, a stream past a GOAWAY's last one, or one that never
      // left levee: the backend did not act on it, so any method may go
      // again, as a counted attempt (a backend shedding with REFUSED_STREAM
      // must not be asked again at once, for free). Only a stream that
      // never left levee on a connection that had been up and then died is
      // levee's own artefact, retried once without counting.
      a.sent = false;
      const bool stale = a.reused && !call.sent() && !h2_stale_retried_;
      if (stale) h2_stale_retried_ = true;
      a.failure = stale ? core::AttemptFailure::Stale : core::AttemptFailure::Reset;
      a.error = UpstreamError::Reset;
    } else {
      a.failure = core::AttemptFailure::Reset;
      a.error = call.body_bad() ? UpstreamError::Protocol : UpstreamError::Reset;
    }
    co_return;
  }
  a.sent = true;
  note_response_head(a);
}

awaitable<bool> Exchange::send_body_h2(Attempt& a) {
  // What is already read goes first; the rest streams through the sink,
  // each piece waiting until the session has copied it (so flow control
  // from the backend holds the client back). HTTP/2 is full duplex: an
  // answer that begins first (a gRPC server streaming back, or a 413)
  // interrupts the client's body read only so that the relay can start;
  // the rest of the body then goes up beside it (pump_body_h2).
  H2Call& call = *call_;
  auto& sink = b_.req_body;
  bool done = d_.body_done();
  h2_body_open_ = false;
  h2_sink_unsent_ = false;
  if (!co_await call.send_body(sink.data(), done, true)) {
    h2_body_open_ = call.head_done() && !call.closed();
    co_return true;  // a failure shows in the stream's state
  }
  if (done) co_return true;
  a.body_streamed = true;
  sink.clear();
  for (;;) {
    // The answer may have begun while the last piece was handed over, when
    // no hook was set to interrupt the read: the pump goes on from here.
    if (call.closed()) co_return true;
    if (call.head_done()) {
      h2_body_open_ = true;
      co_return true;
    }
    arm(std::min(cls_.deadline, now() + l_.cfg.body_timeout), Watchdog::Phase::Body);
    call.on_spoke([](void* d) { static_cast<Downstream*>(d)->cancel_io(); }, &d_);
    const BodyRead r = co_await d_.read_body();
    call.on_spoke(nullptr, nullptr);
    if (call.closed()) co_return true;
    if (call.head_done()) {
      // Interrupted by the answer (or read just before it): the pump goes on.
      h2_sink_unsent_ = r == BodyRead::Data && sink.size() > 0;  // the pump sends it first
      h2_body_open_ = true;
      co_return true;
    }
    if (r != BodyRead::Data) {
      a.client = r;
      co_return false;
    }
    done = d_.body_done();
    arm(std::min(cls_.deadline, now() + l_.cfg.body_timeout), Watchdog::Phase::Upstream);
    const bool taken = co_await call.send_body(sink.data(), done, true);
    if (!taken) {
      h2_body_open_ = call.piece_pending() && call.head_done() && !call.closed();
      co_return true;
    }
    sink.clear();
    if (done) break;
  }
  // The response head is next; its wait has the response timeout.
  arm(std::min(cls_.deadline, now() + cluster_->cfg.response_timeout), Watchdog::Phase::Upstream);
  co_return true;
}

awaitable<void> Exchange::pump_body_h2() {
  // The rest of the request body while the answer is relayed. It arms no
  // deadline of its own: the relay's (the response gaps, the request's
  // deadline) bounds the whole exchange, and its end stops this.
  H2Call& call = *call_;
  auto& sink = b_.req_body;
  bool ok = true;
  // Whether the body's end went up: the loop ends on that, not on
  // d_.body_done(), which turns true as soon as the client's END_STREAM
  // arrives, perhaps while a piece that is not the last is still being
  // handed over (the end in a frame of its own). Then the next read
  // returns at once, empty, and the end follows it.
  bool last = false;
  if (call.piece_pending()) {
    last = call.piece_last();
    ok = co_await call.finish_piece();
  } else if (h2_sink_unsent_) {
    last = d_.body_done();
    ok = co_await call.send_body(sink.data(), last, false);
  }
  h2_sink_unsent_ = false;
  sink.clear();
  while (ok && !last && !h2_pump_stop_ && !call.closed()) {
    const BodyRead r = co_await d_.read_body();
    if (h2_pump_stop_ || call.closed()) break;
    if (r != BodyRead::Data) {
      // The client left or broke its body mid-stream: the backend's stream ends.
      client_gone_ = client_gone_ || r == BodyRead::Gone;
      call.abort();
      break;
    }
    last = d_.body_done();
    ok = co_await call.send_body(sink.data(), last, false);
    sink.clear();
  }
  h2_pump_running_ = false;
  b_.wait_timer.cancel();  // the relay may wait for this to end
}

awaitable<bool> Exchange::relay_response_h2(Attempt& a) {
  const auto& cc = cluster_->cfg;
  H2Call& call = *call_;
  auto& sink = b_.resp_body;
  const int status = b_.resp.status;
  const bool no_body = b_.req.method == http::Verb::head || status == 204 || status == 304;
  ResponseStart start{b_.resp_head, b_.resp, no_body, std::nullopt};
  if (b_.resp.content_length) {
    for (const auto& f : b_.resp_head.fields()) {
      if (f.id != http::FieldId::content_length) continue;
      std::uint64_t n = 0;
      auto [p, ec] = std::from_chars(f.value.data(), f.value.data() + f.value.size(), n);
      if (ec == std::errc{} && p == f.value.data() + f.value.size()) start.length = n;
    }
  }
  const bool h2_client = b_.req.version == 20;
  if (call.ended_on_head() && !no_body) {
    // The whole answer was its head (gRPC's Trailers-Only): one HEADERS
    // frame again for an HTTP/2 client, an empty body for HTTP/1.1.
    if (h2_client) start.no_body = true;
    else start.length = 0;
  }
  finish_start(start, a);

  bool settled = false;
  auto settle = [&](TimePoint at, bool upstream_ok) {
    if (settled) return;
    settled = true;
    settle_attempt(a, at, upstream_ok);
    call.release();  // the stream ends; its connection serves others
    fuse_.reset();
  };
  auto fill = [&] {
    sink.clear();
    call.take(sink.put(call.pending()));
  };

  if (h2_body_open_) {
    h2_pump_running_ = true;
    h2_pump_stop_ = false;
    asio::co_spawn(w_.ctx, pump_body_h2(), [](std::exception_ptr) {});
  }
  fill();
  bool whole = call.ended() && call.pending().empty();
  bool trailers = whole && !call.trailers.fields().empty();
  if (whole) settle(a.head_at, true);
  arm(cls_.deadline, Watchdog::Phase::Write);
  Sent sent = d_.send_response(start, sink.data(), (whole && !trailers) || start.no_body);
  bool client_ok = sent == Sent::Done;
  if (sent == Sent::Pending) client_ok = co_await d_.finish_send();
  if (client_ok && trailers && !start.no_body) client_ok = co_await d_.send_trailers(call.trailers, start.strip_inside);
  bool upstream_ok = true;
  bool done = whole || start.no_body;
  while (client_ok && !done) {
    if (call.pending().empty() && !call.ended()) {
      if (call.closed() || call.aborted()) {  // reset, or the deadline passed
        upstream_ok = false;
        break;
      }
      arm(std::min(cls_.deadline, now() + cc.response_timeout), Watchdog::Phase::Response);
      co_await call.wait();
      continue;
    }
    fill();
    whole = call.ended() && call.pending().empty();
    trailers = whole && !call.trailers.fields().empty();
    if (whole && !settled) settle(now(), true);
    arm(cls_.deadline, Watchdog::Phase::Write);
    if (sink.size() > 0 || !trailers) {
      sent = d_.send_body(sink.data(), whole && !trailers);
      client_ok = sent == Sent::Done;
      if (sent == Sent::Pending) client_ok = co_await d_.finish_send();
    }
    if (client_ok && trailers) client_ok = co_await d_.send_trailers(call.trailers, start.strip_inside);
    done = whole;
  }
  sink.clear();
  if (!upstream_ok) note_relay_failure(a);
  if (!settled) settle(now(), upstream_ok);
  if (h2_pump_running_) {
    // The body pump uses this exchange: it ends before the exchange does.
    h2_pump_stop_ = true;
    d_.cancel_io();
    call.abort();
    while (h2_pump_running_) {
      b_.wait_timer.expires_at(Timer::time_point::max());
      co_await b_.wait_timer.async_wait(nothrow);
    }
  }
  // A request body not read to its end leaves the client's connection unusable.
  co_return client_ok && done && upstream_ok && d_.body_done();
}

}  // namespace levee::proxy

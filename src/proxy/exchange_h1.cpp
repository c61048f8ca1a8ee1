// The attempt and the relay when the cluster speaks HTTP/1.1: a pooled or
// new connection of the request's own, the head and body written with
// Beast's framing, the response head read (1xx skipped, a 101 refused), and
// the answer relayed with the connection going back to its pool only when
// its framing ended exactly (exchange_h2.cpp is the same over HTTP/2). The
// retry rule, the reports and the permit are the exchange's (exchange.cpp).
#include "proxy/exchange.hpp"

#include <boost/asio/connect.hpp>
#include <boost/beast/http/error.hpp>

#include "core/admission.hpp"
#include "core/headers.hpp"
#include "core/orca.hpp"
#include "http/h2_reply.hpp"
#include "http/rewrite.hpp"
#include "proxy/attempt.hpp"
#include "proxy/io.hpp"
#include "proxy/listener.hpp"
#include "proxy/runtime.hpp"
#include "proxy/tls_context.hpp"
#include "proxy/worker.hpp"

namespace levee::proxy {

using core::Reason;
namespace beast_http = boost::beast::http;

// --- the backend's early answer, watched while the body goes up -------------

void Exchange::watch_upstream() {
  b_.upstream_spoke = false;
  b_.up_watch_target = &d_;
  watch_upstream_once(++b_.up_watch_gen);
}

void Exchange::watch_upstream_once(std::uint64_t gen) {
  ExchangeBuffers* b = &b_;
  // The scratch may be freed before a wait that completed runs (a stock
  // trim): the watchdog's liveness says so before b is read.
  up_->stream.wait_readable([b, gen, this, alive = b->watchdog.alive()](error_code ec) {
    if (ec || !*alive || gen != b->up_watch_gen || b->up_watch_target == nullptr) return;
    // Still watched, so this exchange and its connection are alive. A TLS
    // record that held no data (a session ticket) is not the backend speaking.
    if (up_->stream.poll(up_->buf) == Stream::Poll::Nothing) return watch_upstream_once(gen);
    b->upstream_spoke = true;
    b->up_watch_target->cancel_io();  // stop waiting for the client's body
  });
}

void Exchange::unwatch_upstream() {
  b_.up_watch_target = nullptr;
  ++b_.up_watch_gen;
  up_->stream.cancel();  // the pending wait, if it has not fired
}

// --- an attempt: a connection, the request, the response head ---------------

awaitable<void> Exchange::try_endpoint(Attempt& a) {
  // No co_await in an if's condition here: GCC 12 then lays this frame out
  // with its condition flags ahead of the resume pointer, and the first
  // resume runs with a wrong 'this' (tests/frame_layout.py checks).
  bool ok = take_pooled(a);
  if (!ok) ok = co_await connect(a);
  if (!ok) co_return;
  ++up_->uses;
  // The usual request goes whole into the socket at once, with no
  // coroutine for the send; send_request() does what that leaves.
  if (!sent_at_once(a)) ok = co_await send_request(a);
  if (!ok) co_return;
  a.whole = true;
  if (!a.head_read) co_await read_response_head(a);
}

bool Exchange::sent_at_once(Attempt& a) {
  if (continue_owed()) return false;
  // One clock reading for the head's time left and the send; none on a
  // pooled connection, taken without waiting since the attempt began.
  const TimePoint t = a.reused ? a.begun : now();
  write_head(a, false, t);
  return first_write(a, t) == Sent::Done && d_.body_done();
}

bool Exchange::take_pooled(Attempt& a) {
  // Trusting the event loop's last look needs a free retry should the
  // backend have closed since: a replayable request whose body is all held
  // (a streamed body cannot be sent again).
  const bool retry_free = replayable() && (!d_.has_body() || d_.body_done());
  Fuse* fuse = fuse_.fuse();
  up_ = fuse ? fuse->take(a.endpoint, a.begun, *cluster_, retry_free)
             : w_.pool.take(*cluster_, a.endpoint, a.begun, retry_free);
  a.reused = up_ != nullptr;
  return a.reused;
}

awaitable<bool> Exchange::connect(Attempt& a) {
  const auto& cc = cluster_->cfg;
  auto& m = *rt_.metrics;
  Endpoint& ep = *cluster_->endpoints[a.endpoint];
  const TimePoint t = a.begun;  // the endpoint was picked without waiting since
  Fuse* fuse = fuse_.fuse();
  up_ = std::make_unique<UpstreamConn>(w_.ctx.get_executor(), *cluster_, a.endpoint,
                                       ep.addr_generation.load(std::memory_order_acquire));
  // Counted before connecting: nothing may open one more while this one connects.
  if (fuse) fuse->note_open(*up_);
  const auto addrs = ep.addresses();
  error_code ec = asio::error::host_not_found;
  if (!addrs.empty()) {
    arm(std::min(cls_.deadline, t + cc.connect_timeout), Watchdog::Phase::Connect);
    auto [cec, connected] = co_await asio::async_connect(up_->sock(), addrs, nothrow);
    (void)connected;
    ec = cec;
  }
  if (ec) {
    a.failed = true;
    a.failure = core::AttemptFailure::Connect;
    a.error = UpstreamError::Connect;
    co_return false;
  }
  error_code ig;
  up_->sock().set_option(tcp::no_delay(true), ig);
  up_->sock().non_blocking(true, ig);
  // TLS to the endpoint, within the same connect deadline (proxy/tls_context.cpp).
  if (cluster_->tls && !co_await connect_tls(up_->stream, *cluster_->tls, ep.host)) {
    a.failed = true;
    a.failure = core::AttemptFailure::Connect;
    a.error = UpstreamError::Connect;
    co_return false;
  }
  up_->stream.watch(w_.readiness);  // cleartext only: responses read when epoll says
  m.upstream_connects.inc(w_.index, cluster_->index);
  co_return true;
}

awaitable<bool> Exchange::early_answer(Attempt& a) {
  // The backend stopped reading the request and closed: it may have
  // answered first (a 413 before the body, say), and its answer is worth
  // more to the client than a 502. It is already in the socket, if at all.
  if (!a.sent || b_.watchdog.expired()) co_return false;
  const auto failure = a.failure;
  const auto error = a.error;
  a.failed = false;
  arm(std::min(cls_.deadline, now() + std::chrono::milliseconds(200)), Watchdog::Phase::Upstream);
  co_await read_response_head(a);
  if (a.failed) {
    a.failure = failure;
    a.error = error;
    co_return false;
  }
  a.head_read = true;
  co_return true;
}

bool Exchange::continue_owed() const noexcept {
  return b_.req.expect_continue && !d_.body_done() && !sent_continue_;
}

void Exchange::request_buffers(http::Buffers& bufs, char (&chunk_head)[24]) const {
  // The head and whatever body is already read, in one write.
  const bool chunked = d_.has_body() && !d_.body_length();
  bufs.push(asio::buffer(b_.out));
  bufs.push_body(asio::buffer(b_.req_body.data()), chunked, chunk_head);
  if (chunked && d_.body_done()) bufs.push_last_chunk();
}

Sent Exchange::first_write(Attempt& a, TimePoint t) {
  a.sent_at = t;
  arm(std::min(cls_.deadline, t + cluster_->cfg.response_timeout), Watchdog::Phase::Upstream);
  http::Buffers bufs;
  char chunk_head[24];
  request_buffers(bufs, chunk_head);
  error_code ec;
  a.put = true;
  a.taken = up_->stream.write_now(bufs, ec);
  a.sent = a.taken > 0;
  if (ec) {
    fail_first_write(a);
    return Sent::Failed;
  }
  return a.taken == asio::buffer_size(bufs) ? Sent::Done : Sent::Pending;
}

void Exchange::fail_first_write(Attempt& a) {
  a.failed = true;
  // A pooled connection the peer had closed, and nothing of this request
  // went out: levee's artefact, not the backend's failure.
  a.failure = a.reused && !a.sent ? core::AttemptFailure::Stale : core::AttemptFailure::Reset;
  a.error = b_.watchdog.expired() ? UpstreamError::Timeout : UpstreamError::Reset;
  if (b_.watchdog.expired()) a.failure = core::AttemptFailure::Timeout;
}

awaitable<bool> Exchange::send_request(Attempt& a) {
  if (!a.put) {
    // One reading for the head's time left and the send; none on a pooled
    // connection, taken without waiting since the attempt began.
    TimePoint t = a.reused ? a.begun : now();
    write_head(a, false, t);
    if (continue_due()) {
      if (!co_await d_.send_continue()) {
        a.client = BodyRead::Gone;
        co_return false;
      }
      t = now();
    }
    first_write(a, t);
  }
  if (a.failed) co_return co_await early_answer(a);
  {
    // What the socket did not take at once (the same pieces again).
    http::Buffers bufs;
    char chunk_head[24];
    request_buffers(bufs, chunk_head);
    if (a.taken < asio::buffer_size(bufs)) {
      auto [ec, n] = co_await up_->stream.write_rest(bufs, a.taken);
      a.sent = n > 0;
      if (ec) {
        fail_first_write(a);
        co_return co_await early_answer(a);
      }
    }
  }
  if (d_.body_done()) co_return true;

  // The rest of the body, streamed through the fixed sink: from here on it
  // cannot be replayed. While levee waits for more of it, the upstream is
  // watched: a backend that answers early (a 413) and stops reading must
  // not wait for a body the client may never finish.
  a.body_streamed = true;
  auto& sink = b_.req_body;
  const bool chunked = !d_.body_length();
  sink.clear();
  for (;;) {
    arm(std::min(cls_.deadline, now() + l_.cfg.body_timeout), Watchdog::Phase::Body);
    watch_upstream();
    const BodyRead r = co_await d_.read_body();
    const bool spoke = b_.upstream_spoke;
    unwatch_upstream();
    if (spoke) {
      a.failed = true;
      a.failure = core::AttemptFailure::Reset;
      a.error = UpstreamError::Reset;
      co_return co_await early_answer(a);
    }
    if (r != BodyRead::Data) {
      a.client = r;
      co_return false;
    }
    const bool done = d_.body_done();
    http::Buffers bufs;
    char chunk_head[24];
    bufs.push_body(asio::buffer(sink.data()), chunked, chunk_head);
    if (chunked && done) bufs.push_last_chunk();
    if (!bufs.empty()) {
      arm(std::min(cls_.deadline, now() + l_.cfg.body_timeout), Watchdog::Phase::Upstream);
      auto [ec, n] = co_await up_->stream.write_all(bufs);
      sink.clear();
      if (ec) {
        a.failed = true;
        a.failure = b_.watchdog.expired() ? core::AttemptFailure::Timeout : core::AttemptFailure::Reset;
        a.error = b_.watchdog.expired() ? UpstreamError::Timeout : UpstreamError::Reset;
        co_return co_await early_answer(a);
      }
    }
    if (done) co_return true;
  }
}

awaitable<void> Exchange::read_response_head(Attempt& a) {
  const auto& cc = cluster_->cfg;
  arm(std::min(cls_.deadline, a.sent_at + cc.response_timeout), Watchdog::Phase::Upstream);
  // Watch the client while the backend works: one that leaves ends the
  // exchange at once (its permit waits for the backend: abandoned.hpp).
  // Watching costs a reactor re-arm, so the worker's sweep starts it only
  // for waits past 10 ms.
  w_.upstream_waits.push(*this, a.sent_at);
  bool got_bytes = false;
  for (;;) {
    b_.resp_head.reset();
    b_.resp = http::ResponseInfo{};
    b_.resp_body.clear();
    b_.resp_parser.emplace(b_.resp_head, b_.resp, b_.resp_body, rt_.response_signals);
    auto& rp = *b_.resp_parser;
    rp.header_limit(64 * 1024);
    if (b_.req.method == http::Verb::head) rp.skip(true);
    while (!rp.is_header_done()) {
      if (!up_->buf.empty()) {
        error_code ec;
        const std::size_t n = rp.put(up_->buf.cbuf(), ec);
        up_->buf.consume(n);
        if (rp.is_header_done()) break;
        if (ec && ec != beast_http::error::need_more) {
          a.failed = true;
          a.failure = core::AttemptFailure::Reset;
          a.error = UpstreamError::Protocol;
          break;
        }
      }
      auto buf = up_->buf.prepare();
      if (buf.size() == 0) {  // a head larger than the buffer: the parser's limit stops it first
        a.failed = true;
        a.failure = core::AttemptFailure::Reset;
        a.error = UpstreamError::Protocol;
        break;
      }
      // The first read waits for the backend to work on the request just
      // written (Stream::read_later); later ones take a head in pieces.
      Stream::ReadResult r;
      if (got_bytes) r = co_await up_->stream.read_some(buf);
      else r = co_await up_->stream.read_later(Stream::BufferSource::of(buf));
      auto [ec, n] = r;
      if (ec) {
        a.failed = true;
        if (b_.watchdog.expired()) {
          a.failure = core::AttemptFailure::Timeout;
          a.error = UpstreamError::Timeout;
        } else {
          a.failure = a.reused && !got_bytes ? core::AttemptFailure::Stale : core::AttemptFailure::Reset;
          a.error = UpstreamError::Reset;
        }
        break;
      }
      got_bytes = true;
      up_->buf.commit(n);
    }
    if (a.failed) break;
    // 1xx (other than 101) are informational: skip them, the final answer
    // follows. A 101 answers an upgrade nobody asked for (levee forwards
    // none): the connection now speaks something else.
    const int status = b_.resp.status;
    if (status == 101) {
      a.failed = true;
      a.failure = core::AttemptFailure::Reset;
      a.error = UpstreamError::Protocol;
      break;
    }
    if (status >= 100 && status < 200) continue;
    break;
  }
  unlink();  // out of the worker's list of upstream waits
  d_.unwatch();
  if (a.failed) co_return;
  note_response_head(a);
}

awaitable<bool> Exchange::relay_response(Attempt& a) {
  const auto& cc = cluster_->cfg;
  auto& rp = *b_.resp_parser;
  auto& sink = b_.resp_body;
  const int status = b_.resp.status;
  const bool no_body = b_.req.method == http::Verb::head || status == 204 || status == 304 ||
                       (status >= 100 && status < 200);
  ResponseStart start{b_.resp_head, b_.resp, no_body, std::nullopt};
  if (!rp.chunked()) {
    if (auto len = rp.content_length()) start.length = *len;
  }
  // levee gave up below because of overload: tell the caller not to retry either.
  finish_start(start, a);

  // The backend is done once its response is whole: the permit, the
  // connection and the fuse slot go back before the client is written to,
  // so the next request is on its way sooner. Streamed responses settle at
  // their end.
  bool settled = false;
  auto settle = [&](TimePoint at, bool upstream_ok) {
    if (settled) return;
    settled = true;
    settle_attempt(a, at, upstream_ok);
    // Back to the pool only if the response ended exactly where its framing
    // said and nothing more arrived after it.
    if (upstream_ok && rp.is_done() && rp.keep_alive() && up_->buf.empty()) {
      if (Fuse* f = up_->fuse) f->put(std::move(up_), at);
      else w_.pool.put(std::move(up_), at);
    } else {
      up_.reset();
    }
    fuse_.reset();
  };
  if (rp.is_done()) settle(a.head_at, true);

  bool last_sent = rp.is_done();
  // Writing the answer counts against the request's deadline too (the
  // connection adds its own gap and minimum-rate limits).
  arm(cls_.deadline, Watchdog::Phase::Write);
  // A send the socket takes whole needs no coroutine (Downstream::Sent).
  Sent sent = d_.send_response(start, sink.data(), last_sent);
  bool client_ok = sent == Sent::Done;
  if (sent == Sent::Pending) client_ok = co_await d_.finish_send();
  sink.clear();
  bool upstream_ok = true;
  while (client_ok && !rp.is_done()) {
    if (!up_->buf.empty()) {
      error_code ec;
      const std::size_t n = rp.put(up_->buf.cbuf(), ec);
      up_->buf.consume(n);
      const bool more = ec == beast_http::error::need_more;  // e.g. half a chunk header
      if (ec && !more && ec != beast_http::error::need_buffer) {
        upstream_ok = false;
        break;
      }
      if (sink.size() > 0) {
        if (rp.is_done() && !settled) settle(now(), true);
        last_sent = rp.is_done();
        arm(cls_.deadline, Watchdog::Phase::Write);
        sent = d_.send_body(sink.data(), last_sent);
        client_ok = sent == Sent::Done;
        if (sent == Sent::Pending) client_ok = co_await d_.finish_send();
        sink.clear();
        continue;
      }
      if (rp.is_done()) break;
      if (n > 0 && !more && !up_->buf.empty()) continue;  // progress was made: parse on
    }
    auto buf = up_->buf.prepare();
    if (buf.size() == 0) {  // no progress possible: a framing element larger than the buffer
      upstream_ok = false;
      break;
    }
    arm(std::min(cls_.deadline, now() + cc.response_timeout), Watchdog::Phase::Response);
    auto [ec, n] = co_await up_->stream.read_some(buf);
    if (ec) {
      if (ec == asio::error::eof && rp.need_eof()) {
        error_code pec;
        rp.put_eof(pec);
        break;
      }
      upstream_ok = false;
      break;
    }
    up_->buf.commit(n);
  }
  const bool complete = upstream_ok && rp.is_done();
  if (complete && !settled) settle(now(), true);
  if (client_ok && complete && !last_sent) {
    arm(cls_.deadline, Watchdog::Phase::Write);
    sent = d_.send_body({}, true);
    client_ok = sent == Sent::Done;
    if (sent == Sent::Pending) client_ok = co_await d_.finish_send();
  }
  if (!upstream_ok) note_relay_failure(a);
  if (!settled) settle(now(), upstream_ok);
  co_return client_ok && complete;
}

}  // namespace levee::proxy

#include "proxy/http1_connection.hpp"

#include <arpa/inet.h>
#include <boost/asio/co_spawn.hpp>
#include <boost/beast/http/error.hpp>
#include <spdlog/spdlog.h>
#include <sys/socket.h>

#include <cerrno>
#include <charconv>

#include "http/rewrite.hpp"
#include "proxy/exchange.hpp"
#include "proxy/io.hpp"
#include "proxy/listener.hpp"
#include "proxy/runtime.hpp"
#include "proxy/tls_context.hpp"

namespace levee::proxy {

namespace {
/// The largest first piece of a response body copied in behind its head
/// (Http1Connection::send_response): copying it costs less than the
/// sendmsg() that two buffers would take instead of a send().
constexpr std::size_t kJoinBody = 2048;
}  // namespace

using core::Reason;
namespace beast_http = boost::beast::http;

Http1Connection::Http1Connection(Worker& w, Listener& l, Socket s, const core::Address& addr, std::uint16_t port)
    : w_(w), l_(&l), slot_(l.slot->id), slot_state_(l.slot), stream_(std::move(s)) {
  peer_.address = addr;
  peer_.port = port;
  error_code ec;
  stream_.socket().set_option(tcp::no_delay(true), ec);
  stream_.socket().non_blocking(true, ec);
}

Http1Connection::~Http1Connection() {
  w_.put_read_buffer(std::move(in_));
  if (handed_) return;  // the HTTP/2 connection gives them back
  // The slot's counts: l_ may be of a Runtime already gone.
  slot_state_->connections.fetch_sub(1, std::memory_order_relaxed);
  w_.connections.fetch_sub(1, std::memory_order_relaxed);
  slot_state_->source_leave(peer_.address);
}

void Http1Connection::start(std::shared_ptr<Http1Connection> c) {
  auto& ctx = c->w_.ctx;
  asio::co_spawn(ctx, c->run(), [c](std::exception_ptr e) {
    if (!e) return;
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& ex) {
      spdlog::error("connection: {}", ex.what());
    }
  });
}

void Http1Connection::rest() {
  // Readable, or (TLS) decrypted bytes already held: the handler runs then.
  stream_.wait_readable([self = shared_from_this()](error_code ec) {
    if (ec || self->expiring_) {  // expired, drained, or the socket failed: close
      self->unlink();
      self->stream_.close();
      return;
    }
    self->resumed_ = true;
    start(self);
  });
}

void Http1Connection::park() noexcept {
  parking_ = true;
  stream_.cancel();
}

void Http1Connection::expire() noexcept {
  expiring_ = true;
  stream_.cancel();
}

void Http1Connection::on_deadline(Watchdog::Phase) noexcept { cancel_io(); }

void Http1Connection::cancel_io() noexcept { stream_.cancel(); }

std::pair<std::uint64_t, std::uint64_t> Http1Connection::take_bytes() noexcept {
  return {std::exchange(rx_, 0), std::exchange(tx_, 0)};
}

// --- the connection loop ----------------------------------------------------

awaitable<void> Http1Connection::run() {
  auto self = shared_from_this();
  // The handshake, once: run() starts again each time a rested connection
  // becomes readable (rest()).
  if (l_->tls && !stream_.tls()) {  // proxy/tls_context.cpp
    peer_.tls = true;
    // The handshake may outlast a reload (handshake_timeout): hold the
    // listener's Runtime, whose ServerTls the OpenSSL callbacks point into
    // and whose metrics count the result, until it is done.
    const auto keep = l_->runtime().shared_from_this();
    if (!co_await accept_tls(stream_, *l_->tls, *keep->metrics, w_.index, l_->index)) {
      stream_.close();
      co_return;
    }
    if (l_->tls->client_certificates()) {  // mTLS: the verified certificate's names
      identity_ = peer_identity(stream_.ssl());
      if (!identity_.empty()) peer_.identity = &identity_;
    }
    if (stream_.alpn() == "h2" && co_await try_http2()) co_return;
  }
  for (;;) {
    // Between requests: wait for the first bytes of the next one. A hot
    // connection waits in its coroutine; once parked (idle past 100 ms,
    // kParkAfter) it waits for readability alone, with no coroutine frame.
    // Either borrows a read buffer only when bytes come (a hot TLS
    // connection holds one while it waits: the TLS read needs it).
    if (!in_ || in_->empty()) {
      // A new connection waits for its first request without a buffer
      // (most send at once; one that sends nothing costs nothing).
      if (!resumed_) {
        const bool fresh = served_ == 0;
        if (fresh) parked_ = true;
        w_.idle(*this, slot_, now(), fresh);
      }
      bool got = false;
      for (;;) {
        if (!parked_) {
          // The client is reading the answer just sent: its next request
          // is not here yet (Stream::read_later). The empty buffer goes
          // back to the worker's stock meanwhile, and one (the same, under
          // steady load) is borrowed when bytes come: a burst of requests
          // on many connections that then go quiet leaves no buffers held.
          return_buffer();
          auto [ec, n] = co_await stream_.read_later(Stream::BufferSource{
              this, [](void* p) { return static_cast<Http1Connection*>(p)->lend_buffer(); },
              [](void* p) { static_cast<Http1Connection*>(p)->return_buffer(); }});
          if (!ec) {
            in_->commit(n);
            rx_ += n;
            got = true;
            break;
          }
          if (ec == asio::error::operation_aborted && parking_ && !expiring_) {
            parking_ = false;
            parked_ = true;
            return_buffer();
            stream_.release_buffers();
            continue;
          }
          break;  // closed, reset, idle timeout or drain
        }
        if (!std::exchange(resumed_, false)) {
          rest();  // until readable, with no coroutine frame
          co_return;
        }
        error_code rec;
        const std::size_t n = stream_.read_now(lend_buffer(), rec);
        if (rec == asio::error::would_block || rec == asio::error::try_again) {
          return_buffer();
          continue;
        }
        if (rec) break;  // the client closed
        in_->commit(n);
        rx_ += n;
        got = true;
        break;
      }
      unlink();
      parked_ = parking_ = false;
      if (!got || expiring_) break;
      if (served_ == 0 && !peer_.tls && l_->cfg.http2.enabled && co_await try_http2()) co_return;
    }
    const bool keep = co_await serve();
    ++served_;
    if (!keep) break;
    if (w_.draining() || w_.rt->draining.load(std::memory_order_relaxed)) break;
    returning_.mark(w_.rt->process);  // served, and open for more
    // Kept open: from now on the next request is read when the worker's
    // readiness set says it came (Stream::read_later), with no receive that
    // finds nothing and no epoll re-arm per request. One epoll_ctl, paid
    // only by a connection that lives past its first answer (a TLS stream
    // is not watched).
    if (served_ == 1) stream_.watch(w_.readiness);
    // The listener of the worker's Runtime now (l_ belongs to the request
    // just served, whose Runtime a reload may have retired meanwhile).
    const Listener* now_l = w_.listener_in_slot(slot_);
    if (!now_l) break;
    if (shed_run_ >= 2 && now_l->cfg.shed_backoff > core::Duration::zero()) {
      // Refused again and again: read this one less often, so that a flood
      // of requests that are shed cannot take the worker from the ones
      // being served (its answers already went out, with Retry-After).
      const auto wait = std::min<core::Duration>(std::chrono::milliseconds(1L << std::min(shed_run_ - 2, 16u)),
                                                 now_l->cfg.shed_backoff);
      Timer t(w_.ctx.get_executor(), wait);
      co_await t.async_wait(nothrow);
      if (w_.draining() || w_.rt->draining.load(std::memory_order_relaxed)) break;
    }
  }
  if (linger_) co_await lingering_close();
  stream_.close();
}

asio::mutable_buffer Http1Connection::lend_buffer() {
  if (!in_) in_ = w_.take_read_buffer();
  return in_->prepare();
}

void Http1Connection::return_buffer() {
  if (in_) w_.put_read_buffer(std::move(in_));
}

awaitable<void> Http1Connection::lingering_close() {
  // We answered before reading the whole request (a rejection, an error).
  if (!in_) in_ = w_.take_read_buffer();
  in_->clear();
  co_await stream_.linger(in_->prepare());
  in_->clear();
}

void Http1Connection::format_client() { b_->set_client(peer_.address, peer_.port); }

awaitable<bool> Http1Connection::serve() {
  // Each request runs under the worker's Runtime of the moment (a reload
  // applies from the next request on), which it keeps alive to its end.
  const Worker::Pin hold(w_);
  l_ = w_.listener_in_slot(slot_);
  if (!l_) co_return false;  // a reload removed the listener
  b_ = w_.take_buffers();
  // The scratch goes back to the pool when this request is done, after the
  // exchange (declared below) has settled its record.
  struct Return {
    Worker& w;
    std::unique_ptr<ExchangeBuffers>& b;
    ~Return() { w.put_buffers(std::move(b)); }
  } give_back{w_, b_};
  format_client();
  keep_alive_ = true;
  head_ = false;
  chunked_out_ = false;
  close_after_ = false;

  // The head is usually whole in what the connection read already: parsed
  // here, with no coroutine; read_head() waits for the rest of it.
  Reason why = Reason::None;
  start_head();
  HeadResult head;
  if (const auto parsed = parse_head(why)) head = *parsed;
  else head = co_await read_head(why);
  if (head == HeadResult::Closed) co_return false;
  const core::TimePoint start = now();  // the exchange's, and the upload rate's
  Exchange ex(w_, *l_, *this, *b_, start);
  body_start_ = start;
  body_bytes_ = 0;
  if (head == HeadResult::Failed) {
    close_after_ = true;
    co_await ex.refuse(why);
    co_return false;
  }
  b_->watchdog.disarm();
  const auto& info = b_->req;
  const auto& p = *b_->req_parser;
  keep_alive_ = p.keep_alive();
  head_ = info.method == http::Verb::head;
  // What HTTP/1.1 itself rules out, before anything else looks at the request.
  if (info.method_str.size() + info.target.size() + 10 > l_->cfg.max_request_line) {
    close_after_ = true;
    co_await ex.refuse(Reason::UriTooLong);
    co_return false;
  }
  if (p.upgrade() || info.method == http::Verb::connect) {
    close_after_ = true;
    co_await ex.refuse(Reason::NotImplemented, "upgrades and CONNECT are not supported");
    co_return false;
  }
  if (info.unsupported_coding) {
    close_after_ = true;
    co_await ex.refuse(Reason::NotImplemented, "transfer codings other than chunked are not supported");
    co_return false;
  }
  if (info.bad_expect) {
    close_after_ = true;
    co_await ex.refuse(Reason::BadRequest, "unsupported Expect");
    co_return false;
  }
  if (info.version >= 11 && info.host < 0) {
    close_after_ = true;
    co_await ex.refuse(Reason::BadRequest, "missing Host");
    co_return false;
  }
  const bool ok = co_await ex.run();
  shed_run_ = ex.shed_for_own_load() ? shed_run_ + 1 : 0;
  co_return ok && keep_alive_ && !close_after_ && b_->req_parser->is_done();
}

void Http1Connection::start_head() {
  auto& b = *b_;
  b.req_head.set_max_fields(l_->cfg.max_headers);
  b.req_parser.emplace(b.req_head, b.req, b.req_body, w_.rt->rewrite_names.request_id);
  b.req_parser->header_limit(l_->cfg.max_header_bytes);
  b.watchdog.arm(now() + l_->cfg.header_timeout, Watchdog::Phase::Header, *this);
}

std::optional<Http1Connection::HeadResult> Http1Connection::parse_head(Reason& why) {
  if (in_->empty()) return std::nullopt;
  auto& b = *b_;
  auto& p = *b.req_parser;
  error_code ec;
  const std::size_t n = p.put(in_->cbuf(), ec);
  in_->consume(n);
  if (p.is_header_done()) {
    if (ec && ec != beast_http::error::need_buffer && ec != beast_http::error::need_more) {
      why = Reason::BadRequest;
      return HeadResult::Failed;
    }
    return HeadResult::Ok;
  }
  if (ec == beast_http::error::header_limit) {
    // Which limit: a request line longer than its own limit is a 414;
    // anything else (a large field, too many fields) is a 431.
    const auto v = in_->view();
    const auto eol = v.find("\r\n");
    const bool long_line = b.req.method_str.empty() && !b.req.too_many_fields &&
                           (eol == std::string_view::npos ? v.size() : eol) > l_->cfg.max_request_line;
    why = long_line ? Reason::UriTooLong : Reason::HeaderTooLarge;
    return HeadResult::Failed;
  }
  if (ec && ec != beast_http::error::need_more) {
    why = Reason::BadRequest;
    return HeadResult::Failed;
  }
  return std::nullopt;
}

awaitable<Http1Connection::HeadResult> Http1Connection::read_head(Reason& why) {
  for (;;) {
    auto buf = in_->prepare();
    if (buf.size() == 0) {
      why = Reason::HeaderTooLarge;
      co_return HeadResult::Failed;
    }
    auto [ec, n] = co_await stream_.read_some(buf);
    if (ec) {
      if (b_->watchdog.expired()) {
        why = Reason::RequestTimeout;
        co_return HeadResult::Failed;
      }
      co_return HeadResult::Closed;  // the client left
    }
    in_->commit(n);
    rx_ += n;
    if (const auto head = parse_head(why)) co_return *head;
  }
}

// --- the request body ----------------------------------------------------------

bool Http1Connection::has_body() const noexcept {
  const auto& p = *b_->req_parser;
  return p.chunked() || p.content_length().value_or(0) > 0;
}

std::optional<std::uint64_t> Http1Connection::body_length() const noexcept {
  const auto& p = *b_->req_parser;
  if (p.chunked()) return std::nullopt;
  if (auto len = p.content_length()) return *len;
  return std::nullopt;
}

bool Http1Connection::body_done() const noexcept { return b_->req_parser->is_done(); }

core::TimePoint Http1Connection::rate_deadline(core::TimePoint start, std::uint64_t bytes) const noexcept {
  if (l_->cfg.min_rate == 0) return core::TimePoint::max();
  return start + l_->cfg.min_rate_grace +
         core::from_seconds(static_cast<double>(bytes) / static_cast<double>(l_->cfg.min_rate));
}

awaitable<BodyRead> Http1Connection::read_body() {
  // Data means progress: new bytes in the sink (or the body's end, or a
  // full sink for the caller to flush). Parsing that moves nothing reads
  // the socket, so no path loops without making progress.
  auto& p = *b_->req_parser;
  auto& sink = b_->req_body;
  const std::size_t before = sink.size();
  for (;;) {
    if (p.is_done() || sink.full()) co_return BodyRead::Data;
    if (!in_->empty()) {
      error_code ec;
      const std::size_t n = p.put(in_->cbuf(), ec);
      in_->consume(n);
      const bool more = ec == beast_http::error::need_more || (n == 0 && !ec);  // e.g. half a chunk header
      if (ec && !more && ec != beast_http::error::need_buffer) co_return BodyRead::Malformed;
      if (p.is_done() || sink.full()) co_return BodyRead::Data;
      if (!more && !in_->empty()) continue;  // progress was made: parse on
      if (sink.size() > before) co_return BodyRead::Data;
    }
    auto buf = in_->prepare();
    // A framing element (a chunk header with its extensions, a trailer)
    // larger than the buffer: no progress is possible.
    if (buf.size() == 0) co_return BodyRead::Malformed;
    // The next byte is due by the minimum rate (on top of the gap the
    // exchange allows, and its deadline).
    b_->watchdog.arm_at_most(rate_deadline(body_start_, body_bytes_ + 1), Watchdog::Phase::Body, *this);
    auto [ec, n] = co_await stream_.read_some(buf);
    if (ec) co_return b_->watchdog.expired() ? BodyRead::Timeout : BodyRead::Gone;
    in_->commit(n);
    rx_ += n;
    body_bytes_ += n;
  }
}

// --- the answer ------------------------------------------------------------------

Sent Http1Connection::put() {
  // Most writes go whole into the socket at once: nothing to wait for, so
  // no coroutine, no clock read and no deadline.
  error_code ec;
  const std::size_t taken = stream_.write_now(b_->out_bufs, ec);
  tx_ += taken;
  b_->out_taken = taken;
  if (ec) return Sent::Failed;
  return taken == asio::buffer_size(b_->out_bufs) ? Sent::Done : Sent::Pending;
}

awaitable<bool> Http1Connection::finish_send() {
  // Within the gap the listener allows, the minimum rate for this write
  // (what the kernel already took does not count as the client reading:
  // each write must drain at the rate), and whatever the exchange armed
  // (its deadline).
  const auto t = now();
  const std::size_t size = asio::buffer_size(b_->out_bufs);
  b_->watchdog.arm_at_most(std::min(t + l_->cfg.body_timeout, rate_deadline(t, size)), Watchdog::Phase::Write, *this);
  auto [ec, n] = co_await stream_.write_rest(b_->out_bufs, b_->out_taken);
  tx_ += n - b_->out_taken;
  co_return !ec;
}

awaitable<bool> Http1Connection::write() {
  const Sent s = put();
  if (s != Sent::Pending) co_return s == Sent::Done;
  co_return co_await finish_send();
}

awaitable<bool> Http1Connection::send_continue() {
  static constexpr std::string_view cont = "HTTP/1.1 100 Continue\r\n\r\n";
  b_->out_bufs.clear();
  b_->out_bufs.push(asio::buffer(cont));
  co_return co_await write();
}

Sent Http1Connection::send_response(const ResponseStart& r, std::string_view first, bool last) {
  const auto& info = b_->req;
  const bool ver10 = info.version == 10;
  const auto& rt = *w_.rt;
  http::DownstreamHead d{r.head, r.info, rt.rewrite_names};
  d.strip_inside = r.strip_inside;
  d.no_body = r.no_body;
  if (!r.no_body) {
    if (r.length) {
      d.framing = http::BodyFraming::Length;
      d.length = *r.length;
    } else if (!ver10) {
      d.framing = http::BodyFraming::Chunked;
    } else {
      close_after_ = true;  // HTTP/1.0: the end of the body is the close
    }
  }
  if (!b_->req_parser->is_done()) {
    // The backend answered before the whole request arrived: the rest of it
    // cannot be told from a next request.
    close_after_ = true;
    linger_ = true;
  }
  close_after_ = close_after_ || !keep_alive_ || rt.draining.load(std::memory_order_relaxed) ||
                 rt.close_connections.load(std::memory_order_relaxed);
  chunked_out_ = d.framing == http::BodyFraming::Chunked;
  d.close = close_after_;
  d.keep_alive_10 = ver10 && !close_after_;
  d.no_retry = r.no_retry;
  if (rt.cfg->headers.return_request_id) d.request_id = b_->request_id_out;
  auto& out = b_->out;
  out.clear();
  http::write_downstream_head(out, d);
  b_->out_bufs.clear();
  // A small first piece joins the head in its buffer: one send(), where
  // two pieces would take a sendmsg() whose header and iovec the kernel
  // copies in first. The copy is cheaper (HAProxy sends one buffer too).
  // Only into room the buffer has: the join never allocates.
  if (!r.no_body && first.size() <= kJoinBody && out.size() + first.size() + 32 <= out.capacity()) {
    if (chunked_out_ && !first.empty()) {
      char head[24];
      out.append(head, http::chunk_header(head, first.size()));
      out.append(first);
      out.append("\r\n");
    } else {
      out.append(first);
    }
    if (last && chunked_out_) out.append("0\r\n\r\n");
    b_->out_bufs.push(asio::buffer(out));
    return put();
  }
  b_->out_bufs.push(asio::buffer(out));
  if (!r.no_body) {
    b_->out_bufs.push_body(asio::buffer(first), chunked_out_, b_->chunk_head);
    if (last && chunked_out_) b_->out_bufs.push_last_chunk();
  }
  return put();
}

Sent Http1Connection::send_body(std::string_view piece, bool last) {
  b_->out_bufs.clear();
  b_->out_bufs.push_body(asio::buffer(piece), chunked_out_, b_->chunk_head);
  if (last && chunked_out_) b_->out_bufs.push_last_chunk();
  if (b_->out_bufs.empty()) return Sent::Done;
  return put();
}

awaitable<bool> Http1Connection::send_local(http::LocalReply& r) {
  const auto& rt = *w_.rt;
  auto& p = b_->req_parser;
  if (p && !p->is_done()) {
    // Answered before the whole request was read: what follows cannot be
    // told from a next request.
    close_after_ = true;
    if (p->is_header_done()) linger_ = true;
  }
  r.close = r.close || close_after_ || !keep_alive_ || rt.draining.load(std::memory_order_relaxed);
  close_after_ = r.close;
  r.keep_alive_10 = !r.close && b_->req.version == 10;
  r.head = head_;
  if (rt.cfg->headers.return_request_id && !b_->request_id_out.empty()) {
    b_->extra.assign(r.extra);
    b_->extra.append(rt.rewrite_names.request_id).append(": ").append(b_->request_id_out).append("\r\n");
    r.extra = b_->extra;
  }
  auto& out = b_->out;
  out.clear();
  http::write_http1(out, r);
  b_->out_bufs.clear();
  b_->out_bufs.push(asio::buffer(out));
  const bool ok = co_await write();
  co_return ok && !r.close;
}

// --- the client's presence ------------------------------------------------------

void Http1Connection::watch(ClientWatch& w) {
  // Readable while nothing is read means EOF (the client left) or pipelined
  // data; with pipelined bytes already buffered there is nothing to watch.
  if (in_ && !in_->empty()) return;
  // TLS: decrypted bytes already inside the stream are pipelined data too,
  // and telling a close from data means reading into the buffer.
  if (stream_.tls() && (!in_ || stream_.buffered())) return;
  watcher_ = &w;
  watch_for_close(++watch_gen_);
}

void Http1Connection::watch_for_close(std::uint64_t gen) {
  stream_.wait_readable([self = shared_from_this(), gen](error_code ec) {
    if (ec || gen != self->watch_gen_ || !self->watcher_) return;
    switch (self->stream_.poll(*self->in_)) {
      case Stream::Poll::End:
        std::exchange(self->watcher_, nullptr)->on_client_gone();
        break;
      case Stream::Poll::Nothing:  // a spurious wake-up, or a TLS record that held no data
        self->watch_for_close(gen);
        break;
      case Stream::Poll::Data:  // pipelined data: it waits for after this request
        break;
    }
  });
}

void Http1Connection::unwatch() noexcept {
  if (!watcher_) return;
  watcher_ = nullptr;
  ++watch_gen_;
  cancel_io();  // the readiness wait
}

}  // namespace levee::proxy

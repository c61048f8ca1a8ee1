#include "proxy/http2_stream.hpp"

#include <arpa/inet.h>
#include <nghttp2/nghttp2.h>
#include <sys/socket.h>

#include <charconv>
#include <cstring>
#include <span>

#include "core/text.hpp"
#include "http/framing.hpp"
#include "http/rewrite.hpp"
#include "proxy/clock.hpp"
#include "proxy/exchange.hpp"
#include "proxy/http2_connection.hpp"
#include "proxy/listener.hpp"
#include "proxy/runtime.hpp"

namespace levee::proxy {

using core::iequals;

namespace {

/// nghttp2's view of a header block, valid until the next call on this
/// thread (nghttp2 copies a block when it is submitted).
std::span<const nghttp2_nv> name_values(const http::H2Fields& f) {
  thread_local std::vector<nghttp2_nv> nv;
  nv.clear();
  for (std::size_t i = 0; i < f.size(); ++i) {
    const auto n = f.name(i), v = f.value(i);
    nv.push_back(nghttp2_nv{reinterpret_cast<std::uint8_t*>(const_cast<char*>(n.data())),
                            reinterpret_cast<std::uint8_t*>(const_cast<char*>(v.data())), n.size(), v.size(),
                            NGHTTP2_NV_FLAG_NONE});
  }
  return nv;
}

}  // namespace

H2Stream::H2Stream(Http2Connection& c, std::int32_t id, std::unique_ptr<ExchangeBuffers> b)
    : c_(c),
      id_(id),
      b_(std::move(b)),
      waits_{Wait{Timer(c.w_.ctx.get_executor())}, Wait{Timer(c.w_.ctx.get_executor())}},
      start_(now()),
      req_(b_->req_head, b_->req, c.max_header_bytes_, c.w_.rt->rewrite_names.request_id) {}

H2Stream::~H2Stream() {
  queued(false);
  c_.w_.put_buffers(std::move(b_));
}

const Peer& H2Stream::peer() const noexcept { return c_.peer_; }

// --- the request, as nghttp2 decodes it ------------------------------------------

bool H2Stream::on_header(std::string_view name, std::string_view value) { return req_.field(name, value); }

void H2Stream::on_headers_done(bool end_stream) {
  req_.done(end_stream);
  end_in_ = end_stream;
}

void H2Stream::on_data(const char* data, std::size_t n) {
  // Bounded by the stream's window: the client may send no more than was
  // given back, which is what the exchange took.
  in_.append(data, n);
  rx_ += n;
  notify();
}

void H2Stream::on_end_stream() {
  end_in_ = true;
  notify();
}

void H2Stream::on_close(std::uint32_t) {
  if (closed_) return;
  closed_ = true;
  if (!response_done_ && watcher_) {
    // Reset before its answer while the exchange is not reading (queued):
    // it leaves the queue now, and nothing goes upstream.
    std::exchange(watcher_, nullptr)->on_client_gone();
  }
  for (auto& w : waits_)
    if (w.waiting) w.aborted = true;
  notify();
}

// --- the request body ------------------------------------------------------------

awaitable<void> H2Stream::wait(Wait& w) {
  // The body read and the answer's writes wait apart: an exchange may do
  // both at once (a request body still streaming up while the answer
  // comes down), and re-arming one timer would cancel the other's wait.
  w.timer.expires_at(Timer::time_point::max());
  w.waiting = true;
  w.aborted = false;
  co_await w.timer.async_wait(nothrow);
  w.waiting = false;
}

void H2Stream::cancel_io() noexcept {
  bool any = false;
  for (auto& w : waits_)
    if (w.waiting) any = w.aborted = true;
  if (any) notify();
}

core::TimePoint H2Stream::rate_deadline(core::TimePoint start, std::uint64_t bytes) const noexcept {
  // The listener's minimum data rate, as over HTTP/1.1: the n-th byte is
  // due by start + grace + n / min_rate. Not for gRPC, whose streaming
  // calls are quiet for as long as the conversation wants.
  if (c_.min_rate_ == 0 || req_.grpc()) return core::TimePoint::max();
  return start + c_.min_rate_grace_ +
         core::from_seconds(static_cast<double>(bytes) / static_cast<double>(c_.min_rate_));
}

awaitable<BodyRead> H2Stream::read_body() {
  auto& sink = b_->req_body;
  if (body_start_ == core::TimePoint{}) body_start_ = now();
  for (;;) {
    if (!in_.empty()) {
      const std::size_t n = sink.put(in_.view());
      in_.take(n);
      body_taken_ += n;
      if (n > 0 && !closed_ && !c_.closed_) {
        // Taken: the client may send as much again.
        nghttp2_session_consume_stream(c_.s_, id_, n);
        c_.kick();
      }
      if (n > 0 || sink.full()) co_return BodyRead::Data;
    }
    if (body_done() || sink.full()) co_return BodyRead::Data;
    if (closed_) co_return BodyRead::Gone;
    // The next byte is due by the minimum rate (within the exchange's gap and deadline).
    b_->watchdog.arm_at_most(rate_deadline(body_start_, body_taken_ + 1), Watchdog::Phase::Body, *this);
    co_await wait(waits_[kRead]);
    if (waits_[kRead].aborted) co_return b_->watchdog.expired() ? BodyRead::Timeout : BodyRead::Gone;
  }
}

// --- the answer ------------------------------------------------------------------

long H2Stream::read_answer(std::uint8_t* buf, std::size_t length, std::uint32_t* flags) {
  c_.earn_control(2);  // a DATA frame: a stream and a connection WINDOW_UPDATE may answer it
  const std::size_t n = std::min(length, piece_.size() - piece_off_);
  if (n > 0) std::memcpy(buf, piece_.data() + piece_off_, n);
  piece_off_ += n;
  tx_ += n;
  if (piece_off_ == piece_.size()) {
    if (piece_last_) {
      *flags |= NGHTTP2_DATA_FLAG_EOF;
      response_done_ = true;
      if (trailers_pending_) {
        // The stream ends with the trailers' HEADERS frame, not this DATA.
        trailers_pending_ = false;
        *flags |= NGHTTP2_DATA_FLAG_NO_END_STREAM;
        const auto nv = name_values(b_->h2_trailers);
        nghttp2_submit_trailer(c_.s_, id_, nv.data(), nv.size());
      }
    }
    if (!piece_written_) c_.copied_.push_back(id_);  // done once this write is in the socket
    if (n == 0 && !piece_last_) return NGHTTP2_ERR_DEFERRED;
  }
  return static_cast<long>(n);
}

void H2Stream::on_piece_written() {
  if (piece_off_ != piece_.size()) return;
  piece_written_ = true;
  notify();
}

awaitable<bool> H2Stream::send_piece() {
  const core::Duration gap = c_.body_timeout_;
  // Each piece drains within the gap and at the minimum rate (a client
  // that holds its window shut is as slow as one that does not read).
  const auto t = now();
  const auto due = std::min(t + gap, rate_deadline(t, piece_.size()));
  for (;;) {
    if (piece_written_) co_return true;
    if (closed_ || c_.closed_) co_return false;
    b_->watchdog.arm_at_most(due, Watchdog::Phase::Write, *this);
    co_await wait(waits_[kWrite]);
    if (waits_[kWrite].aborted && !piece_written_) co_return false;
  }
}

Sent H2Stream::submit(const http::H2Fields& fields, bool with_body) {
  if (closed_ || c_.closed_) return Sent::Failed;
  const auto nv = name_values(fields);
  response_started_ = true;
  nghttp2_data_provider prd{};
  prd.source.ptr = this;
  prd.read_callback = [](nghttp2_session*, std::int32_t, std::uint8_t* buf, std::size_t length,
                         std::uint32_t* flags, nghttp2_data_source* src, void*) -> ssize_t {
    return static_cast<H2Stream*>(src->ptr)->read_answer(buf, length, flags);
  };
  if (!with_body) response_done_ = true;
  const int rv = nghttp2_submit_response(c_.s_, id_, nv.data(), nv.size(), with_body ? &prd : nullptr);
  c_.kick();
  if (rv != 0) return Sent::Failed;
  return with_body ? Sent::Pending : Sent::Done;
}

Sent H2Stream::send_response(const ResponseStart& r, std::string_view first, bool last) {
  const auto& names = c_.w_.rt->rewrite_names;
  const auto& fields = r.head.fields();
  auto& out = b_->h2_fields;
  out.clear();
  auto add = [&out](std::string_view n, std::string_view v) { out.add(n, v); };
  out.add(":status", static_cast<std::uint64_t>(r.info.status));
  const bool return_id = c_.w_.rt->cfg->headers.return_request_id && !b_->request_id_out.empty();
  for (std::size_t i = 0; i < fields.size(); ++i) {
    const auto& f = fields[i];
    if (r.strip_inside && http::is_inside_field(r.info, f, i)) continue;
    // Connection-specific fields never go out on HTTP/2 (RFC 9113 8.2.2).
    if (f.id == http::FieldId::content_length) {
      if (r.no_body) add(f.name, f.value);  // HEAD and 304 describe the real body
      continue;
    }
    if (http::is_hop_by_hop(f) || http::named_in_connection(fields, f.name)) continue;
    if (return_id && iequals(f.name, names.request_id)) continue;
    add(f.name, f.value);
  }
  if (!r.no_body && r.length) out.add("content-length", std::uint64_t{*r.length});
  if (return_id) add(names.request_id, b_->request_id_out);
  if (r.no_retry) add(names.no_retry, "1");
  piece_ = first;
  piece_off_ = 0;
  piece_last_ = last;
  piece_written_ = false;
  return submit(out, !r.no_body);
}

Sent H2Stream::send_body(std::string_view piece, bool last) {
  if (closed_ || c_.closed_) return Sent::Failed;
  if (piece.empty() && !last) return Sent::Done;
  piece_ = piece;
  piece_off_ = 0;
  piece_last_ = last;
  piece_written_ = false;
  nghttp2_session_resume_data(c_.s_, id_);
  c_.kick();
  return Sent::Pending;
}

awaitable<bool> H2Stream::finish_send() { return send_piece(); }

awaitable<bool> H2Stream::send_continue() {
  // An informational HEADERS frame: the client may send its body now.
  if (closed_ || c_.closed_) co_return false;
  const nghttp2_nv nv[] = {{reinterpret_cast<std::uint8_t*>(const_cast<char*>(":status")),
                            reinterpret_cast<std::uint8_t*>(const_cast<char*>("100")), 7, 3, NGHTTP2_NV_FLAG_NONE}};
  const int rv = nghttp2_submit_headers(c_.s_, NGHTTP2_FLAG_NONE, id_, nullptr, nv, 1, nullptr);
  c_.kick();
  co_return rv == 0;
}

awaitable<bool> H2Stream::send_trailers(const http::Head& t, bool strip_inside) {
  if (closed_ || c_.closed_) co_return false;
  const auto& sig = c_.w_.rt->response_signals;
  auto& out = b_->h2_trailers;
  out.clear();
  for (const auto& f : t.fields()) {
    if (f.name.empty() || f.name[0] == ':' || http::is_hop_by_hop(f)) continue;
    if (strip_inside && (iequals(f.name, sig.load_report) || iequals(f.name, sig.load_report_bin))) continue;
    out.add(f.name, f.value);
  }
  trailers_pending_ = !out.empty();
  piece_ = {};
  piece_off_ = 0;
  piece_last_ = true;
  piece_written_ = false;
  nghttp2_session_resume_data(c_.s_, id_);
  c_.kick();
  co_return co_await send_piece();
}

awaitable<bool> H2Stream::send_local(http::LocalReply& r) {
  r.head = b_->req.method == http::Verb::head;
  const auto& rt = *c_.w_.rt;
  const std::string_view id = rt.cfg->headers.return_request_id ? b_->request_id_out : std::string_view{};
  http::h2_local_reply(r, req_.grpc(), rt.rewrite_names.request_id, id, b_->h2_fields, b_->local_body);
  piece_ = b_->local_body;
  piece_off_ = 0;
  piece_last_ = true;
  piece_written_ = false;
  const Sent sent = submit(b_->h2_fields, !b_->local_body.empty());
  if (sent != Sent::Pending) co_return sent == Sent::Done;
  co_return co_await send_piece();
}

// --- the client's presence ------------------------------------------------------

void H2Stream::queued(bool q) noexcept {
  if (q == queued_) return;
  queued_ = q;
  if (q) ++c_.queued_;
  else --c_.queued_;
}

void H2Stream::watch(ClientWatch& w) {
  watcher_ = &w;
  if (!closed_) return;
  // Reset already: tell the watcher once its wait has begun (this stream
  // lives while its exchange runs; the lookup finds it only then).
  asio::post(c_.w_.ctx, [&w, keep = c_.shared_from_this(), id = id_] {
    auto it = keep->streams_.find(id);
    if (it == keep->streams_.end() || it->second->watcher_ != &w) return;
    it->second->unwatch();
    w.on_client_gone();
  });
}

void H2Stream::unwatch() noexcept { watcher_ = nullptr; }

// --- the exchange -------------------------------------------------------------------

void H2Stream::format_client() { b_->set_client(c_.peer_.address, c_.peer_.port); }

awaitable<void> H2Stream::run(std::shared_ptr<Http2Connection> keep) {
  (void)keep;  // the connection outlives this exchange
  {
    const Worker::Pin hold(c_.w_);
    Listener* l = c_.w_.listener_in_slot(c_.slot_);
    if (l) {
      format_client();
      auto& info = b_->req;
      Exchange ex(c_.w_, *l, *this, *b_, start_);
      if (req_.too_large() || req_.too_many()) {
        if (req_.too_large()) c_.count(H2Limit::HeaderList);
        co_await ex.refuse(core::Reason::HeaderTooLarge);
      } else if (req_.bad() || info.method_str.empty() || info.target.empty() ||
                 (info.authority.empty() && info.host < 0)) {
        co_await ex.refuse(core::Reason::BadRequest);
      } else if (info.method == http::Verb::connect) {
        co_await ex.refuse(core::Reason::NotImplemented, "CONNECT is not supported");
      } else {
        co_await ex.run();
      }
    }
  }
  exchange_done = true;
  if (watcher_) unwatch();
  if (response_done_ && !c_.closed_) c_.returning_.mark(c_.w_.rt->process);  // a client served, open for more
  if (!closed_ && !c_.closed_) {
    if (!response_done_) {
      // No whole answer (the client left, an upstream broke mid-body): reset.
      nghttp2_submit_rst_stream(c_.s_, NGHTTP2_FLAG_NONE, id_,
                                response_started_ ? NGHTTP2_INTERNAL_ERROR : NGHTTP2_CANCEL);
    } else {
      // Answered before the body was read: give its window back.
      if (!in_.empty()) nghttp2_session_consume_stream(c_.s_, id_, in_.size());
      // And before the client finished sending: it may stop (RFC 9113
      // section 8.1), and its half-open stream no longer holds the
      // connection open.
      if (!end_in_) nghttp2_submit_rst_stream(c_.s_, NGHTTP2_FLAG_NONE, id_, NGHTTP2_NO_ERROR);
    }
    reset_accounted = true;  // whatever reset follows is levee's own
    in_.clear();
    c_.kick();
    co_return;  // the session closes it (stream_close erases it)
  }
  c_.stream_ended(id_);  // destroys this
}

}  // namespace levee::proxy

#include "proxy/http2_connection.hpp"

#include <nghttp2/nghttp2.h>
#include <boost/asio/co_spawn.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>

#include "proxy/clock.hpp"
#include "proxy/h2_memory.hpp"
#include "http/h2_reply.hpp"
#include "proxy/http1_connection.hpp"
#include "proxy/http2_stream.hpp"
#include "proxy/listener.hpp"
#include "proxy/runtime.hpp"

namespace levee::proxy {

namespace {

constexpr std::size_t kWriteBatch = 64 * 1024;
constexpr std::int32_t kConnectionWindow = 1 << 24;

H2Stream* stream_of(nghttp2_session* s, std::int32_t id) {
  return static_cast<H2Stream*>(nghttp2_session_get_stream_user_data(s, id));
}

}  // namespace

/// The session's callbacks: each finds its connection in user_data and its
/// stream in the stream's user data (null for a stream levee refused).
struct H2Callbacks {
  static int begin_headers(nghttp2_session* s, const nghttp2_frame* f, void* u) {
    auto& c = *static_cast<Http2Connection*>(u);
    if (f->hd.type != NGHTTP2_HEADERS || f->headers.cat != NGHTTP2_HCAT_REQUEST) return 0;
    ++c.streams_seen_;
    // A cap on what one connection may have waiting in admission: past
    // it, new streams are refused (REFUSED_STREAM: safe to retry).
    if (c.queued_ >= c.h2cfg_.max_queued_streams) {
      c.count(H2Limit::QueuedStreams);
      nghttp2_submit_rst_stream(s, NGHTTP2_FLAG_NONE, f->hd.stream_id, NGHTTP2_REFUSED_STREAM);
      return 0;
    }
    auto b = c.w_.take_buffers();
    b->req_head.set_max_fields(c.max_headers_);
    auto st = std::make_unique<H2Stream>(c, f->hd.stream_id, std::move(b));
    nghttp2_session_set_stream_user_data(s, f->hd.stream_id, st.get());
    c.streams_[f->hd.stream_id] = std::move(st);
    return 0;
  }

  static int header(nghttp2_session* s, const nghttp2_frame* f, const std::uint8_t* name, std::size_t namelen,
                    const std::uint8_t* value, std::size_t valuelen, std::uint8_t, void* u) {
    auto& c = *static_cast<Http2Connection*>(u);
    H2Stream* st = stream_of(s, f->hd.stream_id);
    // Refused streams, and trailers (not kept).
    if (!st || f->hd.type != NGHTTP2_HEADERS || f->headers.cat != NGHTTP2_HCAT_REQUEST) return 0;
    const bool ok = st->on_header({reinterpret_cast<const char*>(name), namelen},
                                  {reinterpret_cast<const char*>(value), valuelen});
    if (!ok) {
      // An HPACK bomb: the block decodes to far more than the limit.
      c.count(H2Limit::HeaderList);
      return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;  // RST_STREAM
    }
    return 0;
  }

  // Control frames are counted as they begin, not as nghttp2 hands them
  // over: nghttp2 drops some without a frame_recv call (a WINDOW_UPDATE or
  // PRIORITY for a closed stream, an unsolicited PING ACK, any frame of a
  // type it does not know), and each still costs a parse.
  static int begin_frame(nghttp2_session*, const nghttp2_frame_hd* hd, void* u) {
    auto& c = *static_cast<Http2Connection*>(u);
    switch (hd->type) {
      case NGHTTP2_DATA:
      case NGHTTP2_HEADERS:
      case NGHTTP2_RST_STREAM:   // counted as resets
      case NGHTTP2_PUSH_PROMISE:  // a connection error from a client
      case NGHTTP2_GOAWAY:
      case NGHTTP2_CONTINUATION:  // bounded per header block
        return 0;
      default:  // SETTINGS, PING, PRIORITY, WINDOW_UPDATE, extensions
        c.control_frame();
        return 0;
    }
  }

  // Frames of every type nghttp2 does not know are read through these two
  // (registered for types 10-255) only so that begin_frame sees them; their
  // payload is skipped and the frame discarded, as RFC 9113 section 4.1 says.
  static int extension_chunk(nghttp2_session*, const nghttp2_frame_hd*, const std::uint8_t*, std::size_t, void*) {
    return 0;
  }
  static int unpack_extension(nghttp2_session*, void**, const nghttp2_frame_hd*, void*) {
    return NGHTTP2_ERR_CANCEL;
  }

  static int frame_recv(nghttp2_session* s, const nghttp2_frame* f, void* u) {
    auto& c = *static_cast<Http2Connection*>(u);
    switch (f->hd.type) {
      case NGHTTP2_HEADERS: {
        H2Stream* st = stream_of(s, f->hd.stream_id);
        if (!st) return 0;
        const bool end = (f->hd.flags & NGHTTP2_FLAG_END_STREAM) != 0;
        if (f->headers.cat == NGHTTP2_HCAT_REQUEST) {
          // A request whose header block was valid earns the control
          // frames its work may bring (a stream nghttp2 reset at once for a
          // bad field earns nothing).
          c.earn_control(4);
          st->on_headers_done(end);
          c.to_start_.push_back(f->hd.stream_id);
        } else if (end) {
          st->on_end_stream();  // trailers end the request
        }
        return 0;
      }
      case NGHTTP2_DATA: {
        // Empty DATA is work for nothing, padded or not (padlen counts the
        // Pad Length byte too).
        const bool empty = f->hd.length <= f->data.padlen;
        if (empty && (f->hd.flags & NGHTTP2_FLAG_END_STREAM) == 0 && !c.control_frame()) return 0;
        if (f->hd.flags & NGHTTP2_FLAG_END_STREAM)
          if (H2Stream* st = stream_of(s, f->hd.stream_id)) st->on_end_stream();
        return 0;
      }
      case NGHTTP2_RST_STREAM: {
        H2Stream* st = stream_of(s, f->hd.stream_id);
        if (!st) return 0;
        st->reset_accounted = true;
        if (!st->answered()) c.client_reset();
        return 0;
      }
      case NGHTTP2_GOAWAY:
        c.goaway_ = true;  // the client leaves: open streams finish
        return 0;
      default:
        return 0;
    }
  }

  static int data_chunk(nghttp2_session* s, std::uint8_t, std::int32_t id, const std::uint8_t* data, std::size_t n,
                        void* u) {
    auto& c = *static_cast<Http2Connection*>(u);
    // The connection window comes back at once: a stream that is not
    // read (queued in admission) holds only its own window.
    c.consume_conn_ += n;
    H2Stream* st = stream_of(s, id);
    if (!st || st->exchange_done) {
      nghttp2_session_consume_stream(s, id, n);  // nobody reads it: discarded
      return 0;
    }
    st->on_data(reinterpret_cast<const char*>(data), n);
    return 0;
  }

  static int stream_close(nghttp2_session* s, std::int32_t id, std::uint32_t error_code, void* u) {
    auto& c = *static_cast<Http2Connection*>(u);
    H2Stream* st = stream_of(s, id);
    if (!st) return 0;
    nghttp2_session_set_stream_user_data(s, id, nullptr);
    // A reset nghttp2 sent for a broken frame of the client's (a body longer
    // than its content-length, DATA after its end, a window overflow) frees
    // the stream as a reset the client sent would, and the exchange may
    // have reached the backend: it counts against the same limit
    // (CVE-2025-8671, "MadeYouReset").
    if (error_code != NGHTTP2_NO_ERROR && !st->reset_accounted && !st->answered()) {
      st->reset_accounted = true;
      c.client_reset();
    }
    st->on_close(error_code);
    if (!st->started || st->exchange_done) {
      std::erase(c.to_start_, id);
      c.streams_.erase(id);
      c.idle_check();
    }
    return 0;
  }
};

Http2Connection::Http2Connection(Worker& w, Listener& l, Stream s, const Peer& peer,
                                 const core::PeerIdentity& identity, std::string first)
    : w_(w),
      slot_(l.slot->id),
      slot_state_(l.slot),
      h2cfg_(l.cfg.http2),
      max_header_bytes_(l.cfg.max_header_bytes),
      max_headers_(l.cfg.max_headers),
      body_timeout_(l.cfg.body_timeout),
      min_rate_(l.cfg.min_rate),
      min_rate_grace_(l.cfg.min_rate_grace),
      idle_timeout_(l.cfg.idle_timeout),
      stream_(std::move(s)),
      peer_(peer),
      identity_(identity),
      first_(std::move(first)),
      rbuf_(16 * 1024),
      wake_(w.ctx.get_executor()),
      write_timer_(w.ctx.get_executor()) {
  if (peer_.identity) peer_.identity = &identity_;
  nghttp2_session_callbacks* cb = nullptr;
  nghttp2_session_callbacks_new(&cb);
  nghttp2_session_callbacks_set_on_begin_headers_callback(cb, H2Callbacks::begin_headers);
  nghttp2_session_callbacks_set_on_header_callback(cb, H2Callbacks::header);
  nghttp2_session_callbacks_set_on_begin_frame_callback(cb, H2Callbacks::begin_frame);
  nghttp2_session_callbacks_set_on_frame_recv_callback(cb, H2Callbacks::frame_recv);
  nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb, H2Callbacks::data_chunk);
  nghttp2_session_callbacks_set_on_extension_chunk_recv_callback(cb, H2Callbacks::extension_chunk);
  nghttp2_session_callbacks_set_unpack_extension_callback(cb, H2Callbacks::unpack_extension);
  nghttp2_session_callbacks_set_on_stream_close_callback(cb, H2Callbacks::stream_close);
  nghttp2_option* opt = nullptr;
  nghttp2_option_new(&opt);
  // Windows follow what the exchanges took, not what arrived.
  nghttp2_option_set_no_auto_window_update(opt, 1);
  // nghttp2's own flood guards, explicit (docs/http2.md, docs/security.md).
  nghttp2_option_set_max_settings(opt, 32);          // entries in one SETTINGS frame
  nghttp2_option_set_max_outbound_ack(opt, 1000);    // unsent SETTINGS/PING ACKs
  nghttp2_option_set_max_deflate_dynamic_table_size(opt, 4096);
  nghttp2_option_set_max_continuations(opt, 8);      // CONTINUATION frames per header block
  for (int type = 10; type <= 255; ++type)  // so that begin_frame counts them
    nghttp2_option_set_user_recv_extension_type(opt, static_cast<std::uint8_t>(type));
  // Its reset-rate limit, looser than levee's own (which counts first).
  nghttp2_option_set_stream_reset_rate_limit(opt, 4ull * h2cfg_.max_resets_per_second,
                                             4ull * h2cfg_.max_resets_per_second);
  nghttp2_session_server_new3(&s_, cb, this, opt, h2_memory());
  nghttp2_option_del(opt);
  nghttp2_session_callbacks_del(cb);
  const nghttp2_settings_entry iv[] = {
      {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, h2cfg_.max_concurrent_streams},
      {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, h2cfg_.initial_window},
      {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, max_header_bytes_},
      {NGHTTP2_SETTINGS_ENABLE_PUSH, 0},
  };
  nghttp2_submit_settings(s_, NGHTTP2_FLAG_NONE, iv, std::size(iv));
  nghttp2_session_set_local_window_size(s_, NGHTTP2_FLAG_NONE, 0, kConnectionWindow);
}

Http2Connection::~Http2Connection() {
  unlink();
  streams_.clear();  // before the session their data providers point into
  nghttp2_session_del(s_);
  slot_state_->connections.fetch_sub(1, std::memory_order_relaxed);
  w_.connections.fetch_sub(1, std::memory_order_relaxed);
  slot_state_->source_leave(peer_.address);
}

void Http2Connection::start(std::shared_ptr<Http2Connection> c) {
  if (const Listener* l = c->w_.listener_in_slot(c->slot_)) {
    auto& m = *l->runtime().metrics;
    m.http2_connections.inc(c->w_.index, l->index);
  }
  auto report = [](std::exception_ptr e) {
    if (!e) return;
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& ex) {
      spdlog::error("http2 connection: {}", ex.what());
    }
  };
  asio::co_spawn(c->w_.ctx, c->writer(), report);
  asio::co_spawn(c->w_.ctx, c->reader(), report);
}

void Http2Connection::expire() noexcept {
  // The connection stays in the worker's idle list while it lives, so
  // that a drain, a reload that removed its listener, or the connection
  // cap finds it: GOAWAY now, open streams finish, then it closes. Only
  // the idle timeout passing while streams are open is not idleness: it
  // goes back to the list (posted: the caller may be walking it).
  const bool drain = w_.draining() || w_.rt->draining.load(std::memory_order_relaxed);
  const bool timed_out = now() - since() >= idle_timeout_;
  // A stream whose header block never ended (no exchange runs) is not
  // work, nor is one whose exchange is over (the client's half still open).
  const bool busy = std::any_of(streams_.begin(), streams_.end(),
                                [](const auto& kv) { return kv.second->started && !kv.second->exchange_done; });
  if (busy && !drain && !closed_ && timed_out && w_.listener_in_slot(slot_)) {
    asio::post(w_.ctx, [self = shared_from_this()] {
      if (!self->closed_ && !self->linked()) self->w_.idle(*self, self->slot_, now(), false);
    });
    return;
  }
  go_away();
  kick();
}

void Http2Connection::kick() noexcept { wake_.cancel(); }

void Http2Connection::go_away() noexcept {
  if (goaway_ || dead_) return;
  goaway_ = true;
  nghttp2_submit_goaway(s_, NGHTTP2_FLAG_NONE, nghttp2_session_get_last_proc_stream_id(s_), NGHTTP2_NO_ERROR,
                        nullptr, 0);
}

void Http2Connection::count(H2Limit which) noexcept {
  if (const Listener* l = w_.listener_in_slot(slot_)) l->runtime().metrics->h2_limit(w_.index, l->index, which);
}

void Http2Connection::calm(H2Limit which) noexcept {
  if (dead_) return;
  count(which);
  spdlog::debug("http2: closing a connection from a client past a limit ({})", static_cast<int>(which));
  nghttp2_session_terminate_session(s_, NGHTTP2_ENHANCE_YOUR_CALM);
  goaway_ = true;
  dead_ = true;  // read no more; the writer sends the GOAWAY and closes
  linger_ = true;
  kick();
}

bool Http2Connection::control_frame() noexcept {
  const auto t = now();
  if (t - control_window_ >= std::chrono::seconds(1)) {
    control_window_ = t;
    control_in_window_ = 0;
    control_earned_ = 0;
  }
  // A busy, honest client sends control frames in step with its work:
  // WINDOW_UPDATEs for the DATA levee sent, PINGs (gRPC's bandwidth probe)
  // as answers arrive. Each stream it opens and each DATA frame levee sends
  // earns that much more; a flood is control frames beyond the work.
  if (++control_in_window_ <= h2cfg_.max_control_per_second + control_earned_) return true;
  calm(H2Limit::ControlFlood);
  return false;
}

bool Http2Connection::client_reset() noexcept {
  // A token bucket holding one second's worth; and a connection whose
  // streams are mostly reset before they are answered.
  const auto t = now();
  const double rate = h2cfg_.max_resets_per_second;
  if (reset_tokens_ < 0) {
    reset_tokens_ = rate;
    reset_refill_ = t;
  }
  reset_tokens_ = std::min(rate, reset_tokens_ + core::to_seconds(t - reset_refill_) * rate);
  reset_refill_ = t;
  ++resets_seen_;
  const bool mostly = streams_seen_ >= 2 * h2cfg_.max_resets_per_second && resets_seen_ * 4 > streams_seen_ * 3;
  if (reset_tokens_ >= 1.0 && !mostly) {
    reset_tokens_ -= 1.0;
    return true;
  }
  calm(H2Limit::RapidReset);
  return false;
}

void Http2Connection::idle_check() {
  if (!streams_.empty() || dead_ || closed_) return;
  if (goaway_ || w_.draining() || w_.rt->draining.load(std::memory_order_relaxed)) {
    go_away();
    kick();
    return;
  }
  unlink();  // idle from now
  w_.idle(*this, slot_, now(), false);
}

void Http2Connection::stream_ended(std::int32_t id) {
  streams_.erase(id);
  idle_check();
}

void Http2Connection::start_streams() {
  const bool draining = w_.draining() || w_.rt->draining.load(std::memory_order_relaxed);
  for (const std::int32_t id : to_start_) {
    auto it = streams_.find(id);
    if (it == streams_.end()) continue;
    it->second->started = true;
    asio::co_spawn(w_.ctx, it->second->run(shared_from_this()), [](std::exception_ptr e) {
      if (!e) return;
      try {
        std::rethrow_exception(e);
      } catch (const std::exception& ex) {
        spdlog::error("http2 stream: {}", ex.what());
      }
    });
  }
  to_start_.clear();
  // Draining: the streams already sent are served, no new ones are taken.
  if (draining) go_away();
}

bool Http2Connection::feed(const char* data, std::size_t n) {
  const auto rv = nghttp2_session_mem_recv(s_, reinterpret_cast<const std::uint8_t*>(data), n);
  if (consume_conn_ > 0) {
    nghttp2_session_consume_connection(s_, consume_conn_);
    consume_conn_ = 0;
  }
  if (rv < 0) {
    // A protocol error or one of nghttp2's own guards (a flood, too many
    // CONTINUATION frames): say so in a GOAWAY, which the writer sends
    // before it closes.
    if (!dead_) {
      count(H2Limit::Protocol);
      const bool flood = rv == NGHTTP2_ERR_FLOODED || rv == NGHTTP2_ERR_TOO_MANY_CONTINUATIONS;
      nghttp2_session_terminate_session(s_, flood ? NGHTTP2_ENHANCE_YOUR_CALM : NGHTTP2_PROTOCOL_ERROR);
    }
    dead_ = true;
    goaway_ = true;
    linger_ = true;
  }
  if (!dead_) start_streams();
  else to_start_.clear();
  kick();
  return !dead_;
}

awaitable<void> Http2Connection::reader() {
  auto self = shared_from_this();
  w_.idle(*this, slot_, now(), false);
  bool ok = first_.empty() || feed(first_.data(), first_.size());
  first_.clear();
  first_.shrink_to_fit();
  while (ok && !dead_ && !closed_) {
    auto [ec, n] = co_await stream_.read_some(asio::buffer(rbuf_));
    if (ec) break;
    ok = feed(rbuf_.data(), n);
  }
  reading_done_ = true;
  if (!dead_ && !closed_) {
    // The client closed its side (or the socket failed): every stream ends.
    dead_ = true;
  }
  kick();
}

awaitable<void> Http2Connection::writer() {
  auto self = shared_from_this();
  for (;;) {
    out_.clear();
    for (;;) {
      const std::uint8_t* data = nullptr;
      const auto n = nghttp2_session_mem_send(s_, &data);
      if (n < 0) {
        dead_ = true;
        break;
      }
      if (n == 0) break;
      out_.append(reinterpret_cast<const char*>(data), static_cast<std::size_t>(n));
      if (out_.size() >= kWriteBatch) break;
    }
    if (!out_.empty()) {
      http::Buffers bufs;
      bufs.push(asio::buffer(out_));
      write_timer_.expires_after(std::chrono::duration_cast<Timer::duration>(body_timeout_));
      write_timer_.async_wait([this, self](error_code ec) {
        if (!ec) stream_.cancel();  // the client does not read
      });
      auto [ec, n] = co_await stream_.write_all(bufs);
      write_timer_.cancel();
      (void)n;
      if (ec) {
        dead_ = true;
        linger_ = false;  // nothing more reaches the client
        break;
      }
      // Swapped, not moved out: both lists keep their memory from write to write.
      written_.swap(copied_);
      for (const std::int32_t id : written_)
        if (auto it = streams_.find(id); it != streams_.end()) it->second->on_piece_written();
      written_.clear();
      continue;
    }
    if (dead_) break;
    const bool open = nghttp2_session_want_read(s_) || nghttp2_session_want_write(s_);
    // After a GOAWAY, the connection ends once its streams are done.
    if (!open || (goaway_ && streams_.empty())) break;
    wake_.expires_at(Timer::time_point::max());
    co_await wake_.async_wait(nothrow);
  }
  // The end: every stream still open is gone, its exchange told.
  closed_ = true;
  dead_ = true;
  unlink();
  for (auto& [id, st] : streams_) st->on_close(NGHTTP2_CANCEL);
  std::erase_if(streams_, [](const auto& kv) { return !kv.second->started || kv.second->exchange_done; });
  // Closed for a limit or a protocol error while the client may still be
  // sending (a flood is sending): the GOAWAY must not be lost to a reset.
  // The reader has stopped (it set the limit), so this is the only read.
  if (linger_ && reading_done_) co_await stream_.linger(asio::buffer(rbuf_));
  stream_.close();
}

// --- the hand-over from HTTP/1.1 -------------------------------------------------

awaitable<bool> Http1Connection::try_http2() {
  // TLS: ALPN chose h2. Cleartext: the client preface, perhaps in pieces.
  if (!stream_.tls()) {
    // The rest of a preface that came in pieces is due within header_timeout.
    Timer t(w_.ctx.get_executor(), std::chrono::duration_cast<Timer::duration>(l_->cfg.header_timeout));
    t.async_wait([this, self = shared_from_this()](error_code ec) {
      if (!ec && !handed_) stream_.cancel();
    });
    for (;;) {
      const auto p = http::detect_preface(in_->view());
      if (p == http::Preface::No) co_return false;
      if (p == http::Preface::Yes) break;
      auto buf = in_->prepare();
      auto [ec, n] = co_await stream_.read_some(buf);
      if (ec) co_return false;  // HTTP/1.1 then finds the close
      in_->commit(n);
      rx_ += n;
    }
  }
  std::string first = in_ ? std::string(in_->view()) : std::string{};
  if (in_) in_->clear();
  handed_ = true;  // the connection's counts go with it
  Http2Connection::start(
      std::make_shared<Http2Connection>(w_, *l_, std::move(stream_), peer_, identity_, std::move(first)));
  co_return true;
}

}  // namespace levee::proxy

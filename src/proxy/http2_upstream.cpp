#include "proxy/http2_upstream.hpp"

#include <nghttp2/nghttp2.h>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/connect.hpp>
#include <boost/asio/detached.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <charconv>
#include <cstring>

#include "core/text.hpp"
#include "http/framing.hpp"
#include "http/parser.hpp"
#include "proxy/clock.hpp"
#include "proxy/h2_memory.hpp"
#include "proxy/cluster.hpp"
#include "proxy/endpoint.hpp"
#include "proxy/runtime.hpp"
#include "proxy/tls_context.hpp"
#include "proxy/worker.hpp"

namespace levee::proxy {

namespace {

constexpr std::size_t kWriteBatch = 64 * 1024;
constexpr std::int32_t kConnectionWindow = 1 << 24;
// A pooled call keeps the buffer of an answer up to four default windows;
// a bigger one (a larger initial_window) goes back to the heap.
constexpr std::size_t kKeepUnread = 256 * 1024;

H2Call* call_of(nghttp2_session* s, std::int32_t id) {
  return static_cast<H2Call*>(nghttp2_session_get_stream_user_data(s, id));
}

/// Fields that never travel on HTTP/2 (RFC 9113 8.2.2), and Host, which
/// becomes :authority.
bool connection_specific(std::string_view lower) noexcept {
  return lower == "connection" || lower == "keep-alive" || lower == "proxy-connection" ||
         lower == "transfer-encoding" || lower == "upgrade" || lower == "te" || lower == "host";
}

nghttp2_nv nv(std::string_view n, std::string_view v) {
  return nghttp2_nv{reinterpret_cast<std::uint8_t*>(const_cast<char*>(n.data())),
                    reinterpret_cast<std::uint8_t*>(const_cast<char*>(v.data())), n.size(), v.size(),
                    NGHTTP2_NV_FLAG_NONE};
}

}  // namespace

// --- the session's callbacks --------------------------------------------------------

struct H2UpCallbacks {
  static int header(nghttp2_session* s, const nghttp2_frame* f, const std::uint8_t* name, std::size_t namelen,
                    const std::uint8_t* value, std::size_t valuelen, std::uint8_t, void*) {
    H2Call* c = call_of(s, f->hd.stream_id);
    if (!c || f->hd.type != NGHTTP2_HEADERS) return 0;
    const std::string_view n(reinterpret_cast<const char*>(name), namelen);
    const std::string_view v(reinterpret_cast<const char*>(value), valuelen);
    c->header_bytes_ += namelen + valuelen + 32;
    if (c->header_bytes_ > c->max_bytes_) {
      c->bad_ = true;
      return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;  // RST_STREAM: a head past the limit
    }
    if (c->head_done_) {  // trailers (nghttp2 has checked they hold no pseudo-header)
      if (!c->trailers.add(boost::beast::http::string_to_field(n), n, v)) {
        c->bad_ = true;
        return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
      }
      http::note_response_trailer(*c->info_, *c->signals_, n, v);
      return 0;
    }
    auto& info = *c->info_;
    if (n == ":status") {
      int st = 0;
      std::from_chars(v.data(), v.data() + v.size(), st);
      info.status = st;
      return 0;
    }
    if (!n.empty() && n[0] == ':') return 0;
    const auto id = boost::beast::http::string_to_field(n);
    const int at = static_cast<int>(c->head_->fields().size());
    if (!c->head_->add(id, n, v)) {
      info.too_many_fields = true;
      c->bad_ = true;
      return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
    }
    if (id == http::FieldId::content_length) info.content_length = true;
    else http::note_response_field(info, *c->signals_, n, v, at);
    return 0;
  }

  static int frame_recv(nghttp2_session* s, const nghttp2_frame* f, void* u) {
    auto& up = *static_cast<H2Upstream*>(u);
    if (f->hd.type == NGHTTP2_GOAWAY) {
      up.goaway_ = true;  // streams past its last one are closed REFUSED_STREAM by nghttp2
      return 0;
    }
    H2Call* c = call_of(s, f->hd.stream_id);
    if (!c) return 0;
    const bool end = (f->hd.flags & NGHTTP2_FLAG_END_STREAM) != 0;
    if (f->hd.type == NGHTTP2_HEADERS) {
      if (!c->head_done_) {
        const int st = c->info_->status;
        if (st >= 100 && st < 200) {
          // Informational (100, 103): the final head follows. A 101 has no
          // meaning in HTTP/2 and nghttp2 refuses it before this.
          c->head_->reset();
          *c->info_ = http::ResponseInfo{};
          c->header_bytes_ = 0;
          return 0;
        }
        c->head_done_ = true;
        c->end_on_head_ = end;  // Trailers-Only: the whole answer in one HEADERS frame
      }
      if (end) c->end_ = true;
      c->notify();
      return 0;
    }
    if (f->hd.type == NGHTTP2_DATA && end) {
      c->end_ = true;
      c->notify();
    }
    return 0;
  }

  static int data_chunk(nghttp2_session* s, std::uint8_t, std::int32_t id, const std::uint8_t* data, std::size_t n,
                        void* u) {
    auto& up = *static_cast<H2Upstream*>(u);
    up.consume_conn_ += n;  // the connection's window comes back at once
    H2Call* c = call_of(s, id);
    if (!c) {
      nghttp2_session_consume_stream(s, id, n);
      return 0;
    }
    // Bounded by the stream's window: only what the exchange took is given back.
    c->in_.append(reinterpret_cast<const char*>(data), n);
    c->notify();
    return 0;
  }

  static int frame_send(nghttp2_session* s, const nghttp2_frame* f, void*) {
    if (f->hd.type != NGHTTP2_HEADERS) return 0;
    if (H2Call* c = call_of(s, f->hd.stream_id)) c->sent_ = true;
    return 0;
  }

  static int stream_close(nghttp2_session* s, std::int32_t id, std::uint32_t error_code, void* u) {
    auto& up = *static_cast<H2Upstream*>(u);
    H2Call* c = call_of(s, id);
    if (!c) return 0;
    nghttp2_session_set_stream_user_data(s, id, nullptr);
    c->closed_ = true;
    c->error_ = error_code;
    if (error_code == NGHTTP2_REFUSED_STREAM) c->refused_ = true;
    c->id_ = -1;
    up.detach(*c);
    c->notify();
    return 0;
  }
};

// --- a stream -----------------------------------------------------------------------

H2Call::~H2Call() { release(); }

void H2Call::begin(http::Head& head, http::ResponseInfo& info, const http::ResponseSignals& signals,
                   std::size_t max_bytes) {
  release();
  head_ = &head;
  info_ = &info;
  signals_ = &signals;
  max_bytes_ = max_bytes;
  header_bytes_ = 0;
  trailers.reset();
  in_.trim(kKeepUnread);  // a pooled call does not keep a big answer's buffer
  piece_ = {};
  piece_off_ = 0;
  piece_last_ = false;
  piece_taken_ = true;
  has_body_ = head_done_ = end_on_head_ = end_ = closed_ = refused_ = sent_ = reused_ = bad_ = false;
  aborted_ = false;
  error_ = 0;
  spoke_ = nullptr;
}

bool H2Call::connect_failed() const noexcept { return conn_ && conn_->connect_failed_; }

bool H2Call::open(std::shared_ptr<H2Upstream> c, std::string& text, bool tls, bool body) {
  // The head levee's HTTP/1.1 writer made (http::write_upstream_head, so
  // both protocols send the same fields), spelled as HTTP/2: the request
  // line becomes pseudo-headers, names are lower-cased in place, and what
  // is connection-specific stays behind. The session copies the fields.
  thread_local std::vector<nghttp2_nv> nva;
  nva.clear();
  std::string_view method, path, authority;
  std::size_t pos = 0;
  bool first = true;
  while (pos < text.size()) {
    const std::size_t eol = text.find("\r\n", pos);
    if (eol == std::string::npos || eol == pos) break;
    const std::string_view line(text.data() + pos, eol - pos);
    if (first) {
      first = false;
      const std::size_t sp1 = line.find(' ');
      const std::size_t sp2 = line.rfind(' ');
      if (sp1 == std::string_view::npos || sp2 <= sp1) return false;
      method = line.substr(0, sp1);
      path = line.substr(sp1 + 1, sp2 - sp1 - 1);
    } else {
      const std::size_t colon = line.find(':');
      if (colon == std::string_view::npos) return false;
      for (std::size_t i = pos; i < pos + colon; ++i) text[i] = core::ascii_lower(text[i]);
      const std::string_view name(text.data() + pos, colon);
      std::string_view value = line.substr(colon + 1);
      while (!value.empty() && value.front() == ' ') value.remove_prefix(1);
      if (name == "host") authority = value;
      if (!connection_specific(name)) nva.push_back(nv(name, value));
    }
    pos = eol + 2;
  }
  // Pseudo-headers first (RFC 9113 8.3); te: trailers, which gRPC servers require.
  const nghttp2_nv pseudo[] = {nv(":method", method), nv(":scheme", tls ? "https" : "http"),
                               nv(":authority", authority), nv(":path", path), nv("te", "trailers")};
  nva.insert(nva.begin(), std::begin(pseudo), std::end(pseudo));

  has_body_ = body;
  nghttp2_data_provider prd{};
  prd.source.ptr = this;
  prd.read_callback = [](nghttp2_session*, std::int32_t, std::uint8_t* buf, std::size_t length, std::uint32_t* flags,
                         nghttp2_data_source* src, void*) -> ssize_t {
    return static_cast<H2Call*>(src->ptr)->read_body(buf, length, flags);
  };
  const std::int32_t id = nghttp2_submit_request(c->s_, nullptr, nva.data(), nva.size(), body ? &prd : nullptr, this);
  if (id < 0) {
    c->retire();  // out of stream ids (or going away): new streams go to another connection
    return false;
  }
  // Stream ids run out at 2^31: well before, the connection retires and
  // a fresh one takes new streams.
  if (id > (1 << 30)) c->retire();
  reused_ = c->connected_;
  conn_ = std::move(c);
  id_ = id;
  conn_->calls_.push_back(this);
  conn_->kick();
  return true;
}

long H2Call::read_body(std::uint8_t* buf, std::size_t length, std::uint32_t* flags) {
  const std::size_t n = std::min(length, piece_.size() - piece_off_);
  if (n > 0) std::memcpy(buf, piece_.data() + piece_off_, n);
  piece_off_ += n;
  if (piece_off_ == piece_.size()) {
    if (piece_last_) *flags |= NGHTTP2_DATA_FLAG_EOF;
    if (!piece_taken_) {
      piece_taken_ = true;  // copied into the session's frame: the caller's buffer is free
      notify();
    }
    if (n == 0 && !piece_last_) return NGHTTP2_ERR_DEFERRED;
  }
  return static_cast<long>(n);
}

awaitable<bool> H2Call::send_body(std::string_view piece, bool last, bool stop_on_head) {
  if (closed_ || !conn_) co_return false;
  piece_ = piece;
  piece_off_ = 0;
  piece_last_ = last;
  piece_taken_ = false;
  nghttp2_session_resume_data(conn_->s_, id_);
  conn_->kick();
  while (!piece_taken_ && !closed_ && !aborted_) {
    // The answer began before the body ended: the caller relays it and
    // finishes this piece (finish_piece) beside it. The piece stays as it is.
    if (stop_on_head && head_done_) co_return false;
    co_await wait_on(body_ev_);
  }
  co_return settle_piece();
}

awaitable<bool> H2Call::finish_piece() {
  while (!piece_taken_ && !closed_ && !aborted_) co_await wait_on(body_ev_);
  co_return settle_piece();
}

bool H2Call::settle_piece() noexcept {
  const bool ok = piece_taken_;
  piece_ = {};
  piece_off_ = 0;
  piece_last_ = false;
  piece_taken_ = true;
  return ok;
}

awaitable<void> H2Call::wait() { co_await wait_on(ev_); }

awaitable<void> H2Call::wait_on(Timer& t) {
  // The relay (the answer) and the body pump wait apart: re-arming one
  // timer cancels whoever else waits on it, and two waiters on one would
  // wake each other in turn, for ever.
  if (aborted_) co_return;
  t.expires_at(Timer::time_point::max());
  co_await t.async_wait(nothrow);
}

void H2Call::notify() noexcept {
  ev_.cancel();
  body_ev_.cancel();
  if (spoke_ && (head_done_ || closed_)) spoke_(spoke_arg_);
}

void H2Call::abort() noexcept {
  aborted_ = true;
  ev_.cancel();
  body_ev_.cancel();
}

void H2Call::take(std::size_t n) noexcept {
  in_.take(n);
  if (conn_ && id_ >= 0) {
    nghttp2_session_consume_stream(conn_->s_, id_, n);
    conn_->kick();
  }
}

void H2Call::release() noexcept {
  if (!conn_) return;
  if (id_ >= 0) {
    // Whatever state the connection is in, its session must not reach
    // this call again (it goes back to the pool of buffers).
    nghttp2_session_set_stream_user_data(conn_->s_, id_, nullptr);
    // Done before its end (the client left, a deadline): the backend stops.
    if (!closed_) nghttp2_submit_rst_stream(conn_->s_, NGHTTP2_FLAG_NONE, id_, NGHTTP2_CANCEL);
    else if (!in_.empty()) nghttp2_session_consume_stream(conn_->s_, id_, in_.size());
    conn_->kick();
  }
  conn_->detach(*this);
  id_ = -1;
  conn_.reset();
}

// --- a connection ---------------------------------------------------------------------

H2Upstream::H2Upstream(Executor ex, Options o)
    : o_(std::move(o)), stream_(ex), wake_(ex), connect_timer_(ex), write_timer_(ex), rbuf_(16 * 1024), idle_since_(now()) {
  nghttp2_session_callbacks* cb = nullptr;
  nghttp2_session_callbacks_new(&cb);
  nghttp2_session_callbacks_set_on_header_callback(cb, H2UpCallbacks::header);
  nghttp2_session_callbacks_set_on_frame_recv_callback(cb, H2UpCallbacks::frame_recv);
  nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb, H2UpCallbacks::data_chunk);
  nghttp2_session_callbacks_set_on_frame_send_callback(cb, H2UpCallbacks::frame_send);
  nghttp2_session_callbacks_set_on_stream_close_callback(cb, H2UpCallbacks::stream_close);
  nghttp2_option* opt = nullptr;
  nghttp2_option_new(&opt);
  nghttp2_option_set_no_auto_window_update(opt, 1);
  nghttp2_option_set_peer_max_concurrent_streams(opt, o_.max_streams);  // until the backend's SETTINGS say
  nghttp2_option_set_max_settings(opt, 32);
  nghttp2_option_set_max_outbound_ack(opt, 1000);
  nghttp2_option_set_max_continuations(opt, 8);
  nghttp2_session_client_new3(&s_, cb, this, opt, h2_memory());
  nghttp2_option_del(opt);
  nghttp2_session_callbacks_del(cb);
  const nghttp2_settings_entry iv[] = {
      {NGHTTP2_SETTINGS_ENABLE_PUSH, 0},
      {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, o_.initial_window},
      {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, 64 * 1024},
  };
  nghttp2_submit_settings(s_, NGHTTP2_FLAG_NONE, iv, std::size(iv));
  nghttp2_session_set_local_window_size(s_, NGHTTP2_FLAG_NONE, 0, kConnectionWindow);
}

H2Upstream::~H2Upstream() { nghttp2_session_del(s_); }

bool H2Upstream::has_room() const noexcept {
  const std::uint32_t peer = nghttp2_session_get_remote_settings(s_, NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS);
  return calls_.size() < std::min(peer, o_.max_streams);
}

void H2Upstream::detach(H2Call& c) noexcept {
  const auto it = std::find(calls_.begin(), calls_.end(), &c);
  if (it == calls_.end()) return;
  *it = calls_.back();
  calls_.pop_back();
  if (calls_.empty()) {
    idle_since_ = now();
    if (one_shot_) retire();
    if (goaway_) kick();  // retired, or the backend said GOAWAY: close once empty
  }
}

void H2Upstream::retire_when_idle() noexcept { one_shot_ = true; }

void H2Upstream::retire() noexcept {
  if (goaway_ || dead_) return;
  goaway_ = true;
  if (connected_) nghttp2_submit_goaway(s_, NGHTTP2_FLAG_NONE, 0, NGHTTP2_NO_ERROR, nullptr, 0);
  kick();
}

void H2Upstream::start(std::function<void(bool)> connected) {
  asio::co_spawn(stream_.socket().get_executor(), run(shared_from_this(), std::move(connected)),
                 [](std::exception_ptr e) {
                   if (!e) return;
                   try {
                     std::rethrow_exception(e);
                   } catch (const std::exception& ex) {
                     spdlog::error("http2 upstream: {}", ex.what());
                   }
                 });
}

awaitable<void> H2Upstream::run(std::shared_ptr<H2Upstream> self, std::function<void(bool)> connected) {
  // Connect within connect_timeout: TCP, then TLS offering only h2.
  connect_timer_.expires_after(std::chrono::duration_cast<Timer::duration>(o_.connect_timeout));
  connect_timer_.async_wait([this, self](error_code ec) {
    if (!ec && !connected_) stream_.cancel();
  });
  bool ok = false;
  if (!o_.addresses.empty()) {
    auto [ec, ep] = co_await asio::async_connect(stream_.socket(), o_.addresses, nothrow);
    (void)ep;
    ok = !ec;
  }
  if (ok) {
    error_code ig;
    stream_.socket().set_option(tcp::no_delay(true), ig);
    stream_.socket().non_blocking(true, ig);
    if (o_.tls && !co_await connect_tls(stream_, *o_.tls, o_.host)) {
      spdlog::debug("http2 upstream {}: TLS handshake failed", o_.host);
      ok = false;
    } else if (o_.tls && stream_.alpn() != "h2") {
      spdlog::debug("http2 upstream {}: the server did not choose h2 by ALPN ('{}')", o_.host, stream_.alpn());
      ok = false;
    }
  }
  connect_timer_.cancel();
  connected(ok);
  connected = nullptr;  // it may hold the Runtime that opened this
  if (!ok || dead_) {
    connect_failed_ = true;
  } else {
    connected_ = true;
    asio::co_spawn(stream_.socket().get_executor(), reader(), asio::detached);
    co_await writer();
  }
  // The end: streams still open are closed (nothing more arrives for them).
  dead_ = true;
  finished_ = true;
  stream_.close();
  for (H2Call* c : std::vector<H2Call*>(calls_)) {
    nghttp2_session_set_stream_user_data(s_, c->id_, nullptr);
    c->closed_ = true;
    c->error_ = NGHTTP2_CANCEL;
    c->id_ = -1;
    detach(*c);
    c->notify();
  }
}

awaitable<void> H2Upstream::reader() {
  auto self = shared_from_this();
  while (!dead_) {
    auto [ec, n] = co_await stream_.read_some(asio::buffer(rbuf_));
    if (ec) break;
    const auto rv = nghttp2_session_mem_recv(s_, reinterpret_cast<const std::uint8_t*>(rbuf_.data()), n);
    if (consume_conn_ > 0) {
      nghttp2_session_consume_connection(s_, consume_conn_);
      consume_conn_ = 0;
    }
    if (rv < 0) {
      // The backend broke the protocol: GOAWAY and close; its streams fail.
      spdlog::debug("http2 upstream: {}", nghttp2_strerror(static_cast<int>(rv)));
      // The writer sends the GOAWAY, then ends the connection (nghttp2
      // wants neither to read nor to write once it is out).
      nghttp2_session_terminate_session(s_, NGHTTP2_PROTOCOL_ERROR);
      goaway_ = true;
      kick();
      co_return;
    }
    kick();
  }
  dead_ = true;
  kick();
}

awaitable<void> H2Upstream::writer() {
  auto self = shared_from_this();
  for (;;) {
    out_.clear();
    while (!dead_) {
      const std::uint8_t* data = nullptr;
      const auto n = nghttp2_session_mem_send(s_, &data);
      if (n <= 0) break;
      out_.append(reinterpret_cast<const char*>(data), static_cast<std::size_t>(n));
      if (out_.size() >= kWriteBatch) break;
    }
    if (!out_.empty()) {
      http::Buffers bufs;
      bufs.push(asio::buffer(out_));
      write_timer_.expires_after(std::chrono::duration_cast<Timer::duration>(o_.write_timeout));
      write_timer_.async_wait([this, self](error_code ec) {
        if (!ec) stream_.cancel();  // the backend does not read
      });
      auto [ec, n] = co_await stream_.write_all(bufs);
      write_timer_.cancel();
      (void)n;
      if (ec) break;
      continue;
    }
    if (dead_) break;
    if (!nghttp2_session_want_read(s_) && !nghttp2_session_want_write(s_)) break;
    if (goaway_ && calls_.empty()) break;
    wake_.expires_at(Timer::time_point::max());
    co_await wake_.async_wait(nothrow);
  }
  dead_ = true;
  stream_.cancel();  // the reader ends too
}

// --- the pool ------------------------------------------------------------------------

std::shared_ptr<H2Upstream> H2UpstreamPool::get(Worker& w, const Cluster& c, std::size_t endpoint, bool& fresh) {
  const Endpoint& ep = *c.endpoints[endpoint];
  auto make = [&](std::uint64_t gen) {
    H2Upstream::Options o;
    o.addresses = ep.addresses();
    o.tls = c.tls;
    o.host = ep.host;
    o.connect_timeout = c.cfg.connect_timeout;
    o.idle_timeout = c.cfg.idle_timeout;
    o.write_timeout = c.cfg.response_timeout;
    o.max_streams = c.cfg.http2.max_concurrent_streams;
    o.initial_window = c.cfg.http2.initial_window;
    o.generation = gen;
    fresh = true;
    return std::make_shared<H2Upstream>(w.ctx.get_executor(), std::move(o));
  };
  // A request of a Runtime a reload replaced (still finishing) gets a
  // connection of its own: the pool is keyed by the current Runtime's
  // clusters, and an old Cluster's address may be reused by a new one.
  const auto& current = w.rt->clusters;
  if (c.index >= current.size() || current[c.index].get() != &c) {
    auto u = make(0);
    u->retire_when_idle();
    return u;
  }
  auto& list = conns_[{&c, endpoint}];
  const std::uint64_t gen = ep.addr_generation.load(std::memory_order_acquire);
  std::erase_if(list, [&](const std::shared_ptr<H2Upstream>& u) {
    if (u->generation() != gen) u->retire();  // the name resolves elsewhere now
    return !u->usable();
  });
  fresh = false;
  H2Upstream* best = nullptr;
  for (const auto& u : list)
    if (!best || u->streams() < best->streams()) best = u.get();
  if (best && best->has_room()) {
    for (auto& u : list)
      if (u.get() == best) return u;
  }
  if (list.size() < c.cfg.http2.max_connections) {
    auto u = make(gen);
    list.push_back(u);
    return u;
  }
  for (auto& u : list)
    if (u.get() == best) return u;
  return nullptr;
}

void H2UpstreamPool::sweep(core::TimePoint t) {
  for (auto it = conns_.begin(); it != conns_.end();) {
    std::erase_if(it->second, [&](const std::shared_ptr<H2Upstream>& u) {
      if (u->streams() == 0 && t - u->idle_since() >= u->idle_timeout()) u->retire();
      return !u->usable();
    });
    it = it->second.empty() ? conns_.erase(it) : std::next(it);
  }
}

void H2UpstreamPool::retire_all() noexcept {
  for (auto& [key, list] : conns_)
    for (auto& u : list) u->retire();
  conns_.clear();
}

}  // namespace levee::proxy

#include "proxy/stream.hpp"

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <boost/asio/post.hpp>
#include <boost/asio/ssl/error.hpp>

#include <cerrno>
#include <cstring>
#include <memory>

namespace levee::proxy {

namespace {

/// The largest TLS record's payload: what one SSL_write turns into one record.
constexpr std::size_t kRecord = 16384;

/// Small pieces of a response (a head, a chunk header, a short body) are
/// copied together here so that they leave as one record and one send.
/// Used only between the copy and the SSL_write that encrypts it: a write
/// that must wait has its record already encrypted inside OpenSSL, which
/// never reads the scratch again (SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER).
thread_local char tls_scratch[kRecord];

/// What OpenSSL reported, as an error code; clears the thread's error queue
/// so that the next operation's SSL_get_error is not misled.
error_code ssl_error(int err) noexcept {
  const unsigned long e = ERR_peek_last_error();
  ERR_clear_error();
  if (err == SSL_ERROR_SYSCALL && e == 0) {
    if (errno != 0) return error_code(errno, boost::system::system_category());
    return asio::error::eof;
  }
  if (e == 0) return asio::error::fault;
  return error_code(static_cast<int>(e), asio::error::get_ssl_category());
}

/// Nothing to read (no stray bytes, no FIN) and no error: one non-blocking peek.
bool socket_quiet(int fd) noexcept {
  char b;
  const ssize_t n = ::recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
  return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
}

}  // namespace

Stream::~Stream() {
  unwatch();
  if (fd_ >= 0) ::close(fd_);
  if (ssl_) SSL_free(ssl_);
}

void Stream::watch(Readiness& r) noexcept {
  if (ssl_ || rd_ || !sock_.is_open()) return;
  // Out of Asio's socket first (its epoll_ctl DEL; the descriptor stays
  // open): the set registers it in the same epoll, its own way.
  error_code ec;
  const int fd = sock_.release(ec);
  if (ec || fd < 0) return;
  fd_ = fd;
  if (r.watch(fd, this)) {
    rd_ = &r;
    return;
  }
  to_asio();  // not watched: Asio's socket as before
}

void Stream::to_asio() noexcept {
  if (fd_ < 0) return;
  // Out of the set now (not at close): Asio's reactor takes it back.
  if (rd_) rd_->release(fd_, this);
  rd_ = nullptr;
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  const bool v6 = ::getsockname(fd_, reinterpret_cast<sockaddr*>(&ss), &len) == 0 && ss.ss_family == AF_INET6;
  error_code ec;
  sock_.assign(v6 ? tcp::v6() : tcp::v4(), fd_, ec);
  if (ec) ::close(fd_);  // the stream ends closed rather than leak
  fd_ = -1;
  // As every connected socket here is: a would-block ends a write or a
  // read at once (Asio's synchronous calls would otherwise poll and wait).
  if (!ec) sock_.non_blocking(true, ec);
}

void Stream::attach(ssl_st* ssl) noexcept {
  ssl_ = ssl;
  // OpenSSL reads and writes the descriptor itself (BIO_NOCLOSE: the
  // socket stays Asio's). Read-ahead takes whatever the kernel holds in one
  // recv instead of a header read and a body read per record.
  SSL_set_fd(ssl_, sock_.native_handle());
  SSL_set_mode(ssl_, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  SSL_set_read_ahead(ssl_, 1);
}

awaitable<error_code> Stream::handshake() {
  for (;;) {
    const int r = SSL_do_handshake(ssl_);
    if (r == 1) co_return error_code{};
    const int err = SSL_get_error(ssl_, r);
    if (err != SSL_ERROR_WANT_READ && err != SSL_ERROR_WANT_WRITE) {
      closed_ = true;  // no close_notify after a failed handshake
      co_return ssl_error(err);
    }
    auto [ec] = co_await sock_.async_wait(err == SSL_ERROR_WANT_WRITE ? tcp::socket::wait_write : tcp::socket::wait_read,
                                          nothrow);
    if (ec) co_return ec;
  }
}

std::size_t Stream::tls_read_now(asio::mutable_buffer b, error_code& ec) {
  ec = {};
  if (b.size() == 0) return 0;
  std::size_t n = 0;
  const int r = SSL_read_ex(ssl_, b.data(), b.size(), &n);
  if (r == 1) return n;
  const int err = SSL_get_error(ssl_, r);
  switch (err) {
    case SSL_ERROR_WANT_READ:
      want_write_ = false;
      ec = asio::error::would_block;
      return 0;
    case SSL_ERROR_WANT_WRITE:
      want_write_ = true;
      ec = asio::error::would_block;
      return 0;
    case SSL_ERROR_ZERO_RETURN:  // close_notify (or a bare FIN: SSL_OP_IGNORE_UNEXPECTED_EOF)
      ec = asio::error::eof;
      return 0;
    default:
      closed_ = true;
      ec = ssl_error(err);
      return 0;
  }
}

awaitable<Stream::ReadResult> Stream::tls_read_some(asio::mutable_buffer b) {
  for (;;) {
    error_code ec;
    const std::size_t n = tls_read_now(b, ec);
    if (ec != asio::error::would_block) co_return ReadResult{ec, n};
    auto [wec] = co_await sock_.async_wait(want(), nothrow);
    if (wec) co_return ReadResult{wec, 0};
  }
}

awaitable<Stream::ReadResult> Stream::read_unwatched(BufferSource into, std::uint32_t cancels) {
  co_await asio::post(sock_.get_executor(), asio::use_awaitable);
  if (cancels_ != cancels) co_return ReadResult{asio::error::operation_aborted, 0};
  if (ssl_) co_return co_await tls_read_some(into());  // holds the buffer while it waits
  for (;;) {
    error_code ec;
    const std::size_t n = sock_.read_some(into(), ec);
    if (ec != asio::error::would_block && ec != asio::error::try_again) co_return ReadResult{ec, n};
    into.empty_read();
    auto [wec] = co_await sock_.async_wait(tcp::socket::wait_read, nothrow);
    if (wec) co_return ReadResult{wec, 0};
    // Readable, yet cancelled before this resumed: the cancel found no
    // wait to abort, and the next one must not outlive it.
    if (cancels_ != cancels) co_return ReadResult{asio::error::operation_aborted, 0};
  }
}

awaitable<Stream::ReadResult> Stream::read_watched(BufferSource into, std::uint32_t cancels) {
  const int fd = fd_;
  for (;;) {
    if (!rd_->readable(fd)) {
      auto [ec] = co_await rd_->async_wait(fd, nothrow);
      if (ec) co_return ReadResult{ec, 0};
    }
    // Woken, yet cancelled before this resumed: as in read_unwatched.
    if (cancels_ != cancels) co_return ReadResult{asio::error::operation_aborted, 0};
    const asio::mutable_buffer b = into();
    error_code ec;
    const std::size_t n = proxy::read_now(fd, b, ec);
    if (noted(n, b.size(), ec)) {
      into.empty_read();
      continue;
    }
    co_return ReadResult{ec, n};
  }
}

awaitable<Stream::ReadResult> Stream::read_watched_some(asio::mutable_buffer b) {
  // A cancel before this read began is not for it (as with Asio's reads).
  co_return co_await read_watched(BufferSource::of(b), cancels_);  // b lives in this frame
}

awaitable<Stream::WriteResult> Stream::watched_write_all(const http::Buffers& bufs) {
  error_code ec;
  const std::size_t n = proxy::write_now(fd_, bufs, ec);
  if (ec || n == asio::buffer_size(bufs)) co_return WriteResult{ec, n};
  co_return co_await watched_write_rest(bufs, n);
}

awaitable<Stream::WriteResult> Stream::watched_write_rest(const http::Buffers& bufs, std::size_t done) {
  const std::size_t total = asio::buffer_size(bufs);
  const std::uint32_t cancels = cancels_;  // a cancel before this began is not for it
  while (done < total) {
    // The last send found the socket full: wait for room (the set reports
    // it as a new edge, or an error, which the send then names).
    auto [wec] = co_await rd_->async_wait(fd_, Readiness::Want::Write, nothrow);
    if (wec) co_return WriteResult{wec, done};
    // Woken, yet cancelled before this resumed (a wake that was posted).
    if (cancels_ != cancels) co_return WriteResult{asio::error::operation_aborted, done};
    boost::beast::buffers_suffix<http::Buffers> rest(bufs);
    rest.consume(done);
    error_code ec;
    const std::size_t n = proxy::write_now(fd_, rest, ec);
    if (ec) co_return WriteResult{ec, done + n};
    if (n == 0) rd_->full(fd_);  // woken for nothing: wait for the next edge
    done += n;
  }
  co_return WriteResult{error_code{}, done};
}

bool Stream::tls_buffered() const noexcept { return SSL_has_pending(ssl_) == 1; }

awaitable<std::tuple<error_code>> Stream::tls_wait_readable() {
  if (tls_buffered()) co_return std::tuple<error_code>{};
  co_return co_await sock_.async_wait(want(), nothrow);
}

awaitable<Stream::WriteResult> Stream::tls_write_all(http::Buffers bufs) {
  std::size_t done = 0;
  auto it = bufs.begin();
  std::size_t off = 0;  // into *it
  while (it != bufs.end()) {
    // The next record: a piece of at least a record's size goes straight
    // from its buffer; smaller ones are gathered into the scratch.
    const char* p;
    std::size_t len;
    if (it->size() - off >= kRecord) {
      p = static_cast<const char*>(it->data()) + off;
      len = kRecord;
      off += kRecord;
      if (off == it->size()) ++it, off = 0;
    } else {
      len = 0;
      while (it != bufs.end() && len < kRecord) {
        const std::size_t take = std::min(kRecord - len, it->size() - off);
        std::memcpy(tls_scratch + len, static_cast<const char*>(it->data()) + off, take);
        len += take;
        off += take;
        if (off == it->size()) ++it, off = 0;
      }
      p = tls_scratch;
    }
    while (len > 0) {
      std::size_t n = 0;
      const int r = SSL_write_ex(ssl_, p, len, &n);
      if (r == 1) {
        p += n;
        len -= n;
        done += n;
        continue;
      }
      const int err = SSL_get_error(ssl_, r);
      if (err != SSL_ERROR_WANT_WRITE && err != SSL_ERROR_WANT_READ) {
        closed_ = true;
        co_return WriteResult{ssl_error(err), done};
      }
      auto [ec] = co_await sock_.async_wait(err == SSL_ERROR_WANT_WRITE ? tcp::socket::wait_write : tcp::socket::wait_read,
                                            nothrow);
      if (ec) co_return WriteResult{ec, done};
    }
  }
  co_return WriteResult{error_code{}, done};
}

Stream::Poll Stream::poll(IoBuffer& into) noexcept {
  if (!ssl_) {
    char c;
    const ssize_t n = ::recv(native_handle(), &c, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n > 0) return Poll::Data;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      // Empty and open: a watched mark goes, or the next wait ends at once.
      if (rd_) rd_->empty_and_open(fd_);
      return Poll::Nothing;
    }
    return Poll::End;
  }
  auto buf = into.prepare();
  if (buf.size() == 0) return Poll::Data;  // full: what is there waits for the reader
  error_code ec;
  const std::size_t n = tls_read_now(buf, ec);
  if (!ec) {
    into.commit(n);
    return Poll::Data;
  }
  return ec == asio::error::would_block ? Poll::Nothing : Poll::End;
}

bool Stream::quiet() noexcept {
  if (!ssl_) {
    if (!socket_quiet(native_handle())) return false;
    if (rd_) rd_->empty_and_open(fd_);  // as a receive's EAGAIN says
    return true;
  }
  if (closed_ || tls_buffered()) return false;
  char c;
  error_code ec;
  tls_read_now(asio::buffer(&c, 1), ec);  // processes tickets; data or a close is not quiet
  if (ec != asio::error::would_block) return false;
  return socket_quiet(sock_.native_handle());
}

void Stream::release_buffers() noexcept {
  if (ssl_) SSL_free_buffers(ssl_);
}

void Stream::shutdown_send() noexcept {
  if (ssl_ && !closed_ && SSL_is_init_finished(ssl_)) {
    SSL_shutdown(ssl_);  // queues close_notify and tries to send it; never waits
    ERR_clear_error();
  }
  closed_ = true;
  if (fd_ >= 0) {
    ::shutdown(fd_, SHUT_WR);
    return;
  }
  error_code ec;
  sock_.shutdown(tcp::socket::shutdown_send, ec);
}

void Stream::close() noexcept {
  unwatch();
  if (!closed_ && ssl_ && SSL_is_init_finished(ssl_)) {
    SSL_shutdown(ssl_);
    ERR_clear_error();
  }
  closed_ = true;
  if (fd_ >= 0) {
    ::shutdown(fd_, SHUT_RDWR);
    ::close(fd_);
    fd_ = -1;
    return;
  }
  error_code ec;
  sock_.shutdown(tcp::socket::shutdown_both, ec);
  sock_.close(ec);
}

awaitable<void> Stream::linger(asio::mutable_buffer scratch) {
  shutdown_send();
  // The deadline is checked after every read as well: a read that finds
  // data waiting completes at once, so a cancel at the deadline may find
  // no read to cancel. The timer reaches this Stream only while linger
  // runs (its handler may run after linger has returned and the Stream
  // is gone).
  const auto deadline = Timer::clock_type::now() + std::chrono::seconds(2);
  auto self = std::make_shared<Stream*>(this);
  Timer t(sock_.get_executor(), deadline);
  t.async_wait([self](error_code ec) {
    if (!ec && *self) (*self)->cancel();
  });
  std::size_t drained = 0;
  while (drained < 4 * 1024 * 1024 && Timer::clock_type::now() < deadline) {
    auto [ec, n] = co_await read_some(scratch);
    if (ec) break;
    drained += n;
  }
  *self = nullptr;
  t.cancel();
}

std::string_view Stream::alpn() const noexcept {
  if (!ssl_) return {};
  const unsigned char* p = nullptr;
  unsigned int n = 0;
  SSL_get0_alpn_selected(ssl_, &p, &n);
  return p ? std::string_view(reinterpret_cast<const char*>(p), n) : std::string_view{};
}

bool Stream::resumed() const noexcept { return ssl_ && SSL_session_reused(ssl_) == 1; }

}  // namespace levee::proxy

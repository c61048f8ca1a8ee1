// The byte stream of one connection, either direction: a TCP socket in
// cleartext, or TLS through OpenSSL on the same socket. Chosen per
// listener (or per cluster) when the connection is made; the HTTP/1.1 code
// (and the HTTP/2 code to come) is written against this type alone.
//
// Cleartext costs what the bare socket costs: each operation is one
// predictable branch and then the very call the socket would get (the
// returned awaitable is the socket's own, no extra coroutine frame), so
// nothing per byte and nothing per request is added.
//
// TLS drives OpenSSL directly on the socket's descriptor (a socket BIO):
// OpenSSL reads and writes the kernel's buffers itself, with read-ahead, so
// a request costs one recv and a response one send, as in cleartext, and no
// ciphertext is copied through an intermediate buffer. (Asio's ssl::stream
// runs OpenSSL over a memory BIO pair and moves every record through it,
// and writes one buffer of a sequence per record; docs/benchmarks.md has
// the measurement that chose this design.) Reads and writes are attempted
// at once and wait for readiness only when OpenSSL wants more; responses
// are coalesced into records of up to 16 KiB from a per-thread scratch.
#pragma once

#include <cassert>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <tuple>
#include <utility>

#include "http/framing.hpp"
#include "proxy/asio.hpp"
#include "proxy/io.hpp"
#include "proxy/io_buffer.hpp"
#include "proxy/readiness.hpp"

// OpenSSL's SSL, without its headers here.
struct ssl_st;

namespace levee::proxy {

class Stream {
 public:
  using ReadResult = std::tuple<error_code, std::size_t>;
  /// Where a read's bytes go, asked for only when there are bytes to read:
  /// an idle connection waits without holding a buffer.
  struct BufferSource {
    void* ctx;
    asio::mutable_buffer (*get)(void* ctx);
    /// Called when a read found nothing after all, before waiting again:
    /// the buffer may go back (null: it stays).
    void (*unused)(void* ctx) = nullptr;
    asio::mutable_buffer operator()() const { return get(ctx); }
    void empty_read() const {
      if (unused) unused(ctx);
    }
    /// A buffer the caller already has (it must outlive the read).
    static BufferSource of(asio::mutable_buffer& b) noexcept {
      return {&b, [](void* p) { return *static_cast<asio::mutable_buffer*>(p); }};
    }
  };
  using WriteResult = std::pair<error_code, std::size_t>;

  explicit Stream(Socket s) noexcept : sock_(std::move(s)) {}
  explicit Stream(Executor ex) : sock_(ex) {}
  ~Stream();
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  /// Hands the connection on (an HTTP/1.1 connection that turned out to be
  /// HTTP/2); the TLS session stays bound to the same descriptor.
  Stream(Stream&& o) noexcept
      : sock_((o.to_asio(), std::move(o.sock_))),
        ssl_(std::exchange(o.ssl_, nullptr)),
        want_write_(o.want_write_),
        closed_(std::exchange(o.closed_, true)) {}

  /// Keeps this cleartext socket's readiness in the worker's set
  /// (proxy/readiness.hpp): read_later() then reads only when epoll said
  /// so, and seen_quiet() answers without a syscall. The descriptor leaves
  /// Asio's reactor for good (one epoll set per socket, not two): from then
  /// on every wait, a write's included, is the set's, and socket() is a
  /// closed socket that only lends its executor. Once connected, in
  /// non-blocking mode; a TLS stream is not watched.
  void watch(Readiness& r) noexcept;

  /// Asio's socket, until the stream is watched (then closed: see watch()).
  Socket& socket() noexcept { return sock_; }
  const Socket& socket() const noexcept { return sock_; }
  /// The descriptor, watched or not.
  int native_handle() noexcept { return fd_ >= 0 ? fd_ : sock_.native_handle(); }
  bool tls() const noexcept { return ssl_ != nullptr; }
  ssl_st* ssl() const noexcept { return ssl_; }
  /// Takes ownership of a TLS session bound to this socket (the caller made
  /// it with SSL_new and chose server or client side); the handshake is next.
  void attach(ssl_st* ssl) noexcept;

  /// The TLS handshake; an error names what failed. Cancel the socket to
  /// give up (a timeout): the wait ends with operation_aborted.
  awaitable<error_code> handshake();

  /// Reads some bytes, waiting for them if none are there.
  awaitable<ReadResult> read_some(asio::mutable_buffer b) {
    if (fd_ >= 0) return read_watched_some(b);
    if (!ssl_) [[likely]] return sock_.async_read_some(b, nothrow);
    return tls_read_some(b);
  }
  /// Reads some bytes that are not expected yet: the peer is still busy
  /// with what was just written to it (the backend with a request, the
  /// client with a response). read_some would try the socket at once, get
  /// EAGAIN and try again when epoll says so: two receives. This first
  /// lets the worker run what is ready, one pass of its event loop (epoll
  /// included, no syscall of its own); under load the bytes have arrived
  /// by then and one receive takes them. Otherwise it waits for
  /// readability, asked for in the same handler as the receive that found
  /// nothing, so no readiness can be missed between the two. A cancel()
  /// during the pass ends it with operation_aborted, as it would a read.
  /// A watched stream (watch()) instead reads when the worker's readiness
  /// set says the socket is readable, and not before. The buffer is asked
  /// of `into` only then (a TLS stream asks at once).
  awaitable<ReadResult> read_later(BufferSource into) {
    // A cancel before this read began is not for it (as with Asio's reads).
    const std::uint32_t cancels = cancels_;
    // The watched case is the other coroutine itself: no frame between.
    if (rd_) [[likely]] return read_watched(into, cancels);
    return read_unwatched(into, cancels);
  }
  /// Reads what is there without waiting: would_block when nothing is.
  /// A watched socket's mark follows the receive (Readiness' rules).
  std::size_t read_now(asio::mutable_buffer b, error_code& ec) {
    if (ssl_) return tls_read_now(b, ec);
    if (fd_ < 0) return sock_.read_some(b, ec);
    const std::size_t n = proxy::read_now(fd_, b, ec);
    noted(n, b.size(), ec);
    return n;
  }
  /// Bytes held inside the stream that a read returns although the socket
  /// may not be readable (TLS read-ahead). A reader checks this before it
  /// waits for the socket.
  bool buffered() const noexcept { return ssl_ && tls_buffered(); }
  /// Writes all of bufs: inline when the socket takes it, waiting for what
  /// it does not. The socket must be in non-blocking mode.
  awaitable<WriteResult> write_all(const http::Buffers& bufs) {
    if (fd_ >= 0) return watched_write_all(bufs);
    if (!ssl_) [[likely]] return proxy::write_all(sock_, bufs);
    return tls_write_all(bufs);
  }
  /// What write_all() does without waiting: the bytes the socket takes now
  /// (a TLS stream takes none here: its records go out in write_rest()).
  /// When that is all of bufs, the write needs no coroutine.
  std::size_t write_now(const http::Buffers& bufs, error_code& ec) {
    if (fd_ >= 0) [[likely]] return proxy::write_now(fd_, bufs, ec);
    if (!ssl_) return proxy::write_now(sock_, bufs, ec);
    return 0;
  }
  /// The rest of a write after write_now() took `done` bytes of it.
  awaitable<WriteResult> write_rest(const http::Buffers& bufs, std::size_t done) {
    if (fd_ >= 0) [[likely]] return watched_write_rest(bufs, done);
    if (!ssl_) return proxy::write_rest(sock_, bufs, done);
    assert(done == 0);
    return tls_write_all(bufs);
  }

  /// Waits until the socket is readable (or returns at once when the
  /// stream already holds bytes); then read_now().
  awaitable<std::tuple<error_code>> wait_readable() {
    if (fd_ >= 0) return rd_->async_wait(fd_, Readiness::Want::Peek, nothrow);
    if (!ssl_) [[likely]] return sock_.async_wait(tcp::socket::wait_read, nothrow);
    return tls_wait_readable();
  }
  /// Calls h(error_code) when the socket is readable, or at once when
  /// the stream already holds bytes. Readable is not data: the caller
  /// then asks poll(), and waits again on Poll::Nothing.
  template <typename Handler>
  void wait_readable(Handler&& h) {
    if (fd_ >= 0) {
      rd_->async_wait(fd_, Readiness::Want::Peek, std::forward<Handler>(h));
      return;
    }
    if (ssl_ && tls_buffered()) {
      asio::post(sock_.get_executor(), [h = std::forward<Handler>(h)]() mutable { h(error_code{}); });
      return;
    }
    sock_.async_wait(ssl_ ? want() : tcp::socket::wait_read, std::forward<Handler>(h));
  }
  enum class Poll : std::uint8_t { Nothing, Data, End };
  /// What a readiness meant, without waiting. Cleartext peeks (the data
  /// stays in the socket); TLS reads what arrived into `into` (handshake
  /// messages such as session tickets are consumed and are Nothing). End:
  /// the peer closed, or the stream broke.
  Poll poll(IoBuffer& into) noexcept;

  /// No idle-connection surprises: nothing to read, no close, no error (one
  /// non-blocking look; a TLS stream processes tickets that arrived).
  bool quiet() noexcept;
  /// A watched stream on which nothing (bytes, a close, an error) arrived
  /// since it was last emptied, as of the event loop's last look: what
  /// HAProxy and nginx know of an idle connection, for no syscall. False
  /// when not watched, or when something did arrive (ask quiet()).
  bool seen_quiet() noexcept { return rd_ && !rd_->readable(fd_); }
  /// Frees what an idle TLS session holds (its record buffers); none is
  /// held by a cleartext stream.
  void release_buffers() noexcept;

  void cancel() noexcept {
    ++cancels_;  // seen by a read or a write woken before the cancel, resumed after it
    if (rd_) {
      rd_->cancel(fd_);
      return;
    }
    error_code ec;
    sock_.cancel(ec);
  }
  /// Stops sending: TLS sends close_notify first (never waiting for it).
  void shutdown_send() noexcept;
  /// close_notify (TLS), then the TCP shutdown and close.
  void close() noexcept;
  /// A lingering close, for a connection answered (a rejection, a GOAWAY
  /// with an error) while the client may still be sending: closing at once
  /// would make the kernel reset the connection when more arrives, and a
  /// reset can destroy the answer before the client reads it. So: stop
  /// sending, then read into scratch and discard, for at most 2 s and
  /// 4 MiB. The caller closes afterwards.
  awaitable<void> linger(asio::mutable_buffer scratch);

  /// The protocol ALPN chose ("" when none).
  std::string_view alpn() const noexcept;
  /// Whether the TLS handshake resumed a session.
  bool resumed() const noexcept;

 private:
  awaitable<ReadResult> tls_read_some(asio::mutable_buffer b);
  /// `cancels`: cancels_ when the read began (a later cancel ends it).
  awaitable<ReadResult> read_watched(BufferSource into, std::uint32_t cancels);
  awaitable<ReadResult> read_watched_some(asio::mutable_buffer b);
  awaitable<ReadResult> read_unwatched(BufferSource into, std::uint32_t cancels);
  awaitable<WriteResult> watched_write_all(const http::Buffers& bufs);
  awaitable<WriteResult> watched_write_rest(const http::Buffers& bufs, std::size_t done);
  /// What a receive of `asked` bytes that returned n (or ec) tells a
  /// watched socket's mark. True: it found nothing (EAGAIN).
  bool noted(std::size_t n, std::size_t asked, const error_code& ec) noexcept {
    const int fd = fd_;
    if (ec == asio::error::would_block || ec == asio::error::try_again) {
      // An edge that came before the bytes did, and no close is pending
      // (a closed socket reads 0).
      rd_->empty_and_open(fd);
      return true;
    }
    // Less than asked: the socket is empty now; what comes next is a new edge.
    if (!ec && n < asked) rd_->emptied(fd);
    return false;
  }
  /// Leaves the readiness set (the descriptor stays open, ours).
  void unwatch() noexcept {
    if (rd_) rd_->forget(fd_, this);
    rd_ = nullptr;
  }
  /// Gives a watched descriptor back to an Asio socket (a hand-over).
  void to_asio() noexcept;
  std::size_t tls_read_now(asio::mutable_buffer b, error_code& ec);
  bool tls_buffered() const noexcept;
  awaitable<std::tuple<error_code>> tls_wait_readable();
  awaitable<WriteResult> tls_write_all(http::Buffers bufs);
  /// The readiness the last TLS operation waits for.
  tcp::socket::wait_type want() const noexcept { return want_write_ ? tcp::socket::wait_write : tcp::socket::wait_read; }

  Socket sock_;  ///< closed while watched: fd_ is the descriptor then
  int fd_ = -1;  ///< a watched stream's descriptor, out of Asio's reactor
  ssl_st* ssl_ = nullptr;
  bool want_write_ = false;
  bool closed_ = false;
  std::uint32_t cancels_ = 0;
  Readiness* rd_ = nullptr;  ///< the worker's set, when watched (then fd_ >= 0)
};

}  // namespace levee::proxy

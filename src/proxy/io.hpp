// Socket I/O helpers shared by both hops.
#pragma once

#include <sys/socket.h>
#include <sys/uio.h>

#include <boost/asio/write.hpp>
#include <boost/beast/core/buffers_suffix.hpp>

#include <cerrno>
#include <utility>

#include "http/framing.hpp"
#include "proxy/asio.hpp"

namespace levee::proxy {

/// Writes what the socket takes now, without waiting: a full socket is no
/// error, it takes fewer bytes. An asynchronous write that completes at
/// once still goes to the back of the handler queue, behind every other
/// connection's work; writing inline first skips that trip, and when the
/// socket takes everything (the usual case) the caller needs no coroutine
/// frame for the write at all. The socket must be in non-blocking mode.
inline std::size_t write_now(Socket& s, const http::Buffers& bufs, error_code& ec) {
  // One buffer (a request head with no body, most of the time) goes as a
  // plain send(): Asio sends a buffer sequence with sendmsg(), whose
  // message header and iovec the kernel must copy in first.
  const std::size_t n = bufs.begin() + 1 == bufs.end() ? s.write_some(*bufs.begin(), ec) : s.write_some(bufs, ec);
  if (ec == asio::error::would_block || ec == asio::error::try_again) ec = {};
  return n;
}

/// Writes bufs past their first `done` bytes (what write_now() took),
/// waiting for the socket. Returns the bytes of bufs written in all.
inline awaitable<std::pair<error_code, std::size_t>> write_rest(Socket& s, const http::Buffers& bufs, std::size_t done) {
  boost::beast::buffers_suffix<http::Buffers> rest(bufs);
  rest.consume(done);
  auto [ec, n] = co_await asio::async_write(s, rest, nothrow);
  co_return std::pair{ec, done + n};
}

/// Writes all of bufs: inline when the socket takes it, waiting for what
/// it does not.
inline awaitable<std::pair<error_code, std::size_t>> write_all(Socket& s, const http::Buffers& bufs) {
  error_code ec;
  const std::size_t n = write_now(s, bufs, ec);
  if (ec || n == asio::buffer_size(bufs)) co_return std::pair{ec, n};
  co_return co_await write_rest(s, bufs, n);
}

/// A read that does not wait: what the socket holds now. would_block when
/// nothing is there.
inline std::size_t read_now(Socket& s, asio::mutable_buffer b, error_code& ec) {
  return s.read_some(b, ec);
}

// The same on a bare descriptor (a watched stream's, out of Asio's
// reactor), with Asio's results: would_block when nothing is there, eof for
// a closed peer, and no SIGPIPE.

/// Writes what the socket takes now (as write_now above). Any number of
/// pieces: a short send means the socket is full, never that pieces were
/// left out.
template <typename Buffers>
std::size_t write_now(int fd, const Buffers& bufs, error_code& ec) {
  ec = {};
  constexpr std::size_t kIov = 8;
  std::size_t total = 0;
  auto it = asio::buffer_sequence_begin(bufs);
  const auto end = asio::buffer_sequence_end(bufs);
  while (it != end) {
    iovec iov[kIov];
    std::size_t n = 0;
    std::size_t offered = 0;
    for (; it != end && n < kIov; ++it) {
      const asio::const_buffer piece = *it;
      if (piece.size() == 0) continue;
      iov[n++] = iovec{const_cast<void*>(piece.data()), piece.size()};
      offered += piece.size();
    }
    if (n == 0) break;
    ssize_t r;
    do {
      if (n == 1) {
        r = ::send(fd, iov[0].iov_base, iov[0].iov_len, MSG_NOSIGNAL | MSG_DONTWAIT);
      } else {
        msghdr m{};
        m.msg_iov = iov;
        m.msg_iovlen = n;
        r = ::sendmsg(fd, &m, MSG_NOSIGNAL | MSG_DONTWAIT);
      }
    } while (r < 0 && errno == EINTR);
    if (r < 0) {
      if (errno != EAGAIN && errno != EWOULDBLOCK) ec = error_code(errno, boost::system::system_category());
      return total;
    }
    total += static_cast<std::size_t>(r);
    if (static_cast<std::size_t>(r) < offered) return total;  // full
  }
  return total;
}

/// Reads what the socket holds now (as read_now above).
inline std::size_t read_now(int fd, asio::mutable_buffer b, error_code& ec) {
  ec = {};
  if (b.size() == 0) return 0;
  for (;;) {
    const ssize_t r = ::recv(fd, b.data(), b.size(), MSG_DONTWAIT);
    if (r > 0) return static_cast<std::size_t>(r);
    if (r == 0) {
      ec = asio::error::eof;
      return 0;
    }
    if (errno == EINTR) continue;
    ec = (errno == EAGAIN || errno == EWOULDBLOCK) ? error_code(asio::error::would_block)
                                                     : error_code(errno, boost::system::system_category());
    return 0;
  }
}

}  // namespace levee::proxy

// Socket I/O helpers shared by both hops.
#pragma once

#include <boost/asio/write.hpp>
#include <boost/beast/core/buffers_suffix.hpp>

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

}  // namespace levee::proxy

// Socket I/O helpers shared by both hops.
#pragma once

#include <boost/asio/write.hpp>
#include <boost/beast/core/buffers_suffix.hpp>

#include <utility>

#include "http/framing.hpp"
#include "proxy/asio.hpp"

namespace levee::proxy {

/// Writes all of bufs: inline when the socket takes it (the usual case),
/// asynchronously for what it does not. An asynchronous write that
/// completes at once still goes to the back of the handler queue, behind
/// every other connection's work; the inline attempt skips that trip. The
/// socket must be in non-blocking mode.
inline awaitable<std::pair<error_code, std::size_t>> write_all(Socket& s, const http::Buffers& bufs) {
  const std::size_t total = asio::buffer_size(bufs);
  error_code ec;
  const std::size_t n = s.write_some(bufs, ec);
  if (ec == asio::error::would_block || ec == asio::error::try_again) ec = {};
  if (ec || n == total) co_return std::pair{ec, n};
  boost::beast::buffers_suffix<http::Buffers> rest(bufs);
  rest.consume(n);
  auto [aec, an] = co_await asio::async_write(s, rest, nothrow);
  co_return std::pair{aec, n + an};
}

/// A read that does not wait: what the socket holds now. would_block when
/// nothing is there.
inline std::size_t read_now(Socket& s, asio::mutable_buffer b, error_code& ec) {
  return s.read_some(b, ec);
}

}  // namespace levee::proxy

// The Asio types the data plane uses. Sockets and timers are bound to their
// worker's io_context executor rather than the type-erased any_io_executor:
// smaller objects (an idle connection costs less), and no indirection on
// every operation.
#pragma once

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

namespace levee::proxy {

namespace asio = boost::asio;
using boost::system::error_code;
using tcp = asio::ip::tcp;
using Executor = asio::io_context::executor_type;
using Socket = asio::basic_stream_socket<tcp, Executor>;
using Acceptor = asio::basic_socket_acceptor<tcp, Executor>;
using Timer = asio::basic_waitable_timer<std::chrono::steady_clock, asio::wait_traits<std::chrono::steady_clock>, Executor>;
template <typename T>
using awaitable = asio::awaitable<T>;

/// Completion token for coroutines: results as a tuple, never an exception.
inline constexpr auto nothrow = asio::as_tuple(asio::use_awaitable);

}  // namespace levee::proxy

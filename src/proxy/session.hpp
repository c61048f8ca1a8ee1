// One downstream connection: a coroutine that reads requests, runs them
// through the admission gates, relays admitted ones upstream and answers
// the rest itself. See docs/concepts.md for the request path.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>

#include <memory>

#include "proxy/runtime.hpp"
#include "proxy/worker.hpp"

namespace levee::proxy {

class Session final : public std::enable_shared_from_this<Session>, public Waiter {
 public:
  Session(Worker& w, Listener& l, tcp::socket s);
  ~Session();

  boost::asio::awaitable<void> run();
  /// Drain: close the connection now if it is between requests.
  void close_if_idle();
  void on_wake(const core::QueueGate::Wake& w) override;

  Session* prev = nullptr;
  Session* next = nullptr;
  const Listener& listener() const noexcept { return l_; }
  /// Between requests on a kept-alive connection (not a new one that has
  /// yet to send its first request).
  bool idle() const noexcept { return idle_ && !closed_ && served_ > 0; }

 private:
  enum class Phase : std::uint8_t { Idle, Header, Body, Queue, Connect, Upstream, Response, Write };
  enum class HeadResult : std::uint8_t { Ok, Closed, Failed };
  struct Request;  // per-request state (session.cpp)

  boost::asio::awaitable<HeadResult> read_head(Request& rq);
  boost::asio::awaitable<bool> handle(Request& rq);
  boost::asio::awaitable<bool> reject(Request& rq, const Decision& d);
  boost::asio::awaitable<bool> local_reply(Request& rq, core::Reason r, std::string_view detail = {},
                                           bool close = false);
  boost::asio::awaitable<int> wait_in_queue(Request& rq, Cluster& c, core::QueueGate::Ticket t);
  boost::asio::awaitable<bool> proxy(Request& rq, Cluster& c);
  boost::asio::awaitable<bool> write_down(const Buffers& bufs, Request& rq);
  /// Writes all of bufs: inline when the socket takes it (the usual case),
  /// asynchronously for what it does not. An async write that completes at
  /// once still goes to the back of the handler queue, behind every other
  /// connection's work; the inline attempt skips that trip.
  static boost::asio::awaitable<std::pair<boost::system::error_code, std::size_t>> write_all(
      tcp::socket& s, const Buffers& bufs);
  void finish(Request& rq);
  boost::asio::awaitable<void> lingering_close();

  void set_deadline(TimePoint d, Phase p);
  void on_watchdog(std::uint64_t gen);
  void watch_client();

  Worker& w_;
  std::shared_ptr<Runtime> rt_;  // keeps the config the connection started with
  Listener& l_;
  tcp::socket down_;
  IoBuffer in_;
  std::unique_ptr<Exchange> ex_;
  std::unique_ptr<UpstreamConn> up_;
  std::string client_;  // "ip:port"
  std::string client_ip_;
  std::array<std::uint8_t, 16> client_addr_{};

  boost::asio::steady_timer watchdog_;
  TimePoint deadline_ = TimePoint::max();
  TimePoint watch_at_ = TimePoint::max();
  std::uint64_t watch_gen_ = 0;
  bool watch_active_ = false;
  bool timed_out_ = false;
  Phase phase_ = Phase::Idle;
  Phase timed_out_phase_ = Phase::Idle;

  boost::asio::steady_timer wait_timer_;
  core::QueueGate::Wake wake_{};
  bool have_wake_ = false;
  bool client_gone_ = false;
  std::uint64_t watch_client_gen_ = 0;
  bool watching_client_ = false;

  bool closed_ = false;
  bool idle_ = true;
  bool linger_ = false;  ///< the client may still be sending: drain before closing
  std::uint32_t served_ = 0;  ///< requests answered on this connection
};

}  // namespace levee::proxy

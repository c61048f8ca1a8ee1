// Readiness of a worker's cleartext sockets (its upstream connections, and
// its client connections from their first answer on), kept as HAProxy's fd
// cache and nginx's event flags keep it, so that neither a read (a
// response, a kept-alive client's next request) nor the reuse of an idle
// pooled connection needs a receive to learn what epoll already said.
//
// Asio's reactor keeps no readiness a caller can read: every read is tried
// at once (a receive that often finds nothing), and an idle connection can
// only be checked with a syscall of its own (a one-byte MSG_PEEK) or by a
// wait that re-arms epoll (another). Here each watched socket is registered,
// until it is closed, in the epoll set of the worker's own Asio reactor,
// with levee's own event mask (EPOLLIN | EPOLLOUT | EPOLLRDHUP, edge
// triggered) and levee's own operation as its epoll data. When Asio's
// epoll_wait reports the socket, Asio queues that operation with the events
// as it queues its own sockets' (it reads nothing of it but the completion
// function and the events field they share), and its completion marks the
// socket and wakes whoever waits for it, in the same pass. The costs: one
// epoll_ctl per connection (when it is made, or a client's kept open), and
// no system call of its own per pass: Asio's one epoll_wait serves both.
// Without it a kept-alive request costs a receive that finds nothing or an
// epoll re-arm (Asio's readiness wait) on each side
// (tests/integration/test_syscalls.py).
//
// An earlier version kept the sockets in an epoll set of its own, nested in
// Asio's: every arrival then ran two wake-up callbacks in the sender's time,
// and each pass of the event loop made a second epoll_wait (the set's).
// This uses Asio's reactor internals (boost/asio/detail): its epoll
// descriptor, its scheduler's operation type and its work count. The Asio
// versions whose reactor this was checked against are asserted in
// readiness.cpp; another fails to compile rather than misbehave.
//
// The rules the marks follow (Stream applies them):
//   - A socket is marked readable when epoll reports it, and when it is
//     first watched (nothing is known yet).
//   - A close or an error (EPOLLRDHUP, EPOLLHUP, EPOLLERR) keeps the mark
//     for good.
//   - Only a receive that emptied the socket (it returned less than asked,
//     or EAGAIN), or a peek that found it empty, clears the mark. Bytes that
//     arrive afterwards make a new edge, which epoll reports.
//   - So "not readable" means: nothing arrived since the socket was last
//     emptied, as of the event loop's last look at epoll. What arrived
//     since that look is not known (HAProxy and nginx know no more); a
//     caller that needs the present (a request that must not be sent into a
//     closed connection) still peeks.
//
// A watched socket is the set's alone: Stream takes it out of Asio's socket
// (which removes Asio's own registration) before watching it. So the set
// also says when a socket that was full can take more (EPOLLOUT, which
// the kernel reports only after a send found it full), and waits for a
// peer's close as well as for data.
// Everything runs on the worker's thread; no lock.
#pragma once

#include <boost/asio/any_completion_handler.hpp>
#include <boost/asio/async_result.hpp>

#include <cstdint>
#include <deque>
#include <utility>
#include <vector>

#include "proxy/asio.hpp"

namespace boost::asio::detail {
class scheduler;
}

namespace levee::proxy {

class Readiness {
 public:
  explicit Readiness(Executor ex);
  ~Readiness();
  Readiness(const Readiness&) = delete;
  Readiness& operator=(const Readiness&) = delete;

  /// Starts watching fd for `owner` (marked readable). fd must not be in
  /// Asio's reactor (an Asio socket's descriptor is: release it first).
  /// False when it cannot be watched (epoll refused): the caller then does
  /// without.
  bool watch(int fd, const void* owner) noexcept;
  /// Stops: a waiter is woken with operation_aborted. Only `owner`'s
  /// watch ends (false: fd was not owner's: the descriptor may have been
  /// closed and reused). Only just before the descriptor is closed, in the
  /// same handler (the kernel drops it from epoll on close); one that stays
  /// open is release()d, or a later event could reach another socket.
  bool forget(int fd, const void* owner) noexcept;
  /// forget(), and the descriptor leaves the set now: it stays open and
  /// goes elsewhere (back to Asio's reactor).
  void release(int fd, const void* owner) noexcept;
  /// Whether something may have arrived since fd was last emptied, or the
  /// peer closed (a close stays readable: a FIN that came with the last
  /// bytes makes no edge of its own once those bytes are read).
  bool readable(int fd) const noexcept {
    const Slot& s = slots_[static_cast<std::size_t>(fd)];
    return s.readable || s.hup;
  }
  /// A receive (or a peek) found fd empty.
  void emptied(int fd) noexcept { slots_[static_cast<std::size_t>(fd)].readable = false; }
  /// A receive or a peek found fd empty and not closed (EAGAIN): emptied,
  /// and a close mark was not for this socket's stream (an error-queue
  /// event), so it goes too.
  void empty_and_open(int fd) noexcept {
    Slot& s = slots_[static_cast<std::size_t>(fd)];
    s.readable = s.hup = s.failed = false;
  }
  /// A send found fd full (EAGAIN): no error is pending and the sending
  /// side is open, so a failed mark was not for it (an error-queue event).
  void full(int fd) noexcept { slots_[static_cast<std::size_t>(fd)].failed = false; }
  /// What a wait is for. One waiter of each kind per descriptor.
  enum class Want : std::uint8_t {
    Read,   ///< the reader: marked readable (at once, posted, when it is)
    Peek,   ///< a watch for a close or for stray bytes: the same condition
    Write,  ///< room to send, after a send found the socket full
  };
  /// Calls the handler when fd is ready for `want`, or with an error (the
  /// watch ended: operation_aborted; never watched: bad_descriptor). A
  /// reset or an error on the socket (EPOLLHUP, EPOLLERR) ends a Write wait
  /// too, and the next send says what; a peer that only stopped sending
  /// (EPOLLRDHUP) may still read, so it does not. cancel() ends every
  /// wait with operation_aborted.
  template <typename Token>
  auto async_wait(int fd, Want want, Token&& token) {
    return asio::async_initiate<Token, void(error_code)>(
        [this, fd, want](auto handler) {
          start_wait(fd, want, asio::any_completion_handler<void(error_code)>(std::move(handler)));
        },
        token);
  }
  template <typename Token>
  auto async_wait(int fd, Token&& token) {
    return async_wait(fd, Want::Read, std::forward<Token>(token));
  }
  void cancel(int fd) noexcept;
  /// Before the io_context goes: takes every watched socket out of epoll
  /// and releases what waits (the coroutines are then destroyed with the
  /// io_context's queue), while everything they reference is alive.
  void shutdown() noexcept;

  std::size_t watched() const noexcept { return watched_; }

 private:
  struct Watch;  ///< a watched socket's operation in Asio's reactor (readiness.cpp)
  struct Pool;   ///< where an io_context's Watches live (readiness.cpp)
  struct Slot {
    const void* owner = nullptr;
    Watch* watch = nullptr;  ///< while watched: its registration's epoll data
    bool readable = false;
    bool hup = false;     ///< the peer closed, or the socket failed: for good
    bool failed = false;  ///< reset or failed (no EPOLLRDHUP): sends fail too
    asio::any_completion_handler<void(error_code)> waiter[3];  ///< by Want
  };
  using Handler = asio::any_completion_handler<void(error_code)>;

  void start_wait(int fd, Want want, Handler h);
  void wake(Handler& w, error_code ec);
  void wake_all(Slot& s, error_code ec);
  /// Marks fd and wakes its waiters for the events epoll reported to w.
  void deliver(Watch* w, std::uint32_t events) noexcept;
  /// Ends fd's watch: its Watch waits for any completion Asio queued.
  void retire(Slot& s) noexcept;

  Executor ex_;
  int epfd_ = -1;  ///< Asio's reactor's epoll descriptor; -1 once shut down
  asio::detail::scheduler* sched_ = nullptr;  ///< its work count: held while anything is watched
  Pool* pool_ = nullptr;
  /// By descriptor number. A deque: growing it never moves a Slot (Asio
  /// 1.81's any_completion_handler may be move-constructed, but its
  /// assignment and its copy wrap the handler in itself, without end).
  std::deque<Slot> slots_;
  std::size_t watched_ = 0;
};

}  // namespace levee::proxy

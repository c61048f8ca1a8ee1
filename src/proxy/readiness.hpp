// Readiness of a worker's cleartext sockets (its upstream connections, and
// its client connections from their first answer on), kept as HAProxy's fd
// cache and nginx's event flags keep it, so that neither a read (a
// response, a kept-alive client's next request) nor the reuse of an idle
// pooled connection needs a receive to learn what epoll already said.
//
// Asio's reactor keeps no readiness a caller can read: every read is tried
// at once (a receive that often finds nothing), and an idle connection can
// only be checked with a syscall of its own (a one-byte MSG_PEEK) or by a
// wait that re-arms epoll (another). Here each watched socket sits, until it
// is closed, in an edge-triggered epoll set of the worker's own; that set's
// descriptor is one more socket-like thing in Asio's reactor. When Asio's
// epoll says the set is readable, the set is drained: which sockets had
// bytes, a close or an error since they were last emptied is collected,
// marked, and whoever waits for one is woken. The costs: one epoll_ctl per
// connection (when it is made, or a client's kept open), and one
// epoll_wait per pass of the event loop that found anything, shared by
// every socket that pass. Without it a kept-alive request costs a receive
// that finds nothing or an epoll re-arm (Asio's readiness wait) on each
// side (tests/integration/test_syscalls.py).
//
// The set waits in Asio's reactor as a receive does, not as async_wait()
// does: the drain is the operation's "receive", tried at once only when
// Asio has seen the set become ready since it was last found empty, and
// otherwise left queued until epoll says so. Asio's readiness wait would
// re-register the set (EPOLL_CTL_MOD) on every pass instead. This uses
// Asio's reactor interface (boost/asio/detail), as its own sockets do.
//
// The rules the marks follow (Stream applies them):
//   - A socket is marked readable when a drain reports it, and when it is
//     first watched (nothing is known yet).
//   - A close or an error (EPOLLRDHUP, EPOLLHUP, EPOLLERR) keeps the mark
//     for good.
//   - Only a receive that emptied the socket (it returned less than asked,
//     or EAGAIN), or a peek that found it empty, clears the mark. Bytes that
//     arrive afterwards make a new edge, which a later drain reports.
//   - So "not readable" means: nothing arrived since the socket was last
//     emptied, as of the event loop's last look at the set. What arrived
//     since that look is not known (HAProxy and nginx know no more); a
//     caller that needs the present (a request that must not be sent into a
//     closed connection) still peeks.
//
// A watched socket is the set's alone: Stream hands it out of Asio's reactor
// (Asio registers every socket it opens in its own epoll, so each arrival
// would otherwise wake two sets: a second wake-up callback, run in the
// sender's time, and a second event for Asio's loop to sort). So the set
// also says when a socket that was full can take more (EPOLLOUT, which
// the kernel reports only after a send found it full), and waits for a
// peer's close as well as for data.
// Everything runs on the worker's thread; no lock.
#pragma once

#include <boost/asio/any_completion_handler.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/detail/reactor.hpp>

#include <cstdint>
#include <deque>
#include <utility>

#include "proxy/asio.hpp"

struct epoll_event;

namespace levee::proxy {

class Readiness {
 public:
  explicit Readiness(Executor ex);
  ~Readiness();
  Readiness(const Readiness&) = delete;
  Readiness& operator=(const Readiness&) = delete;

  /// Starts watching fd for `owner` (marked readable). False when it
  /// cannot be watched (the set could not be made, or epoll refused):
  /// the caller then does without.
  bool watch(int fd, const void* owner) noexcept;
  /// Stops: a waiter is woken with operation_aborted. Only `owner`'s
  /// watch ends (false: fd was not owner's) (the descriptor may have been closed and reused). Before
  /// the descriptor is closed; the kernel drops it from the set on close.
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
  /// Before the io_context goes (the set's descriptor is registered with
  /// its reactor): stops draining and releases what waits
  /// (the coroutines are then destroyed with the io_context's queue), while
  /// everything they reference is alive.
  void shutdown() noexcept;

  std::size_t watched() const noexcept { return watched_; }

 private:
  struct Slot {
    const void* owner = nullptr;
    bool readable = false;
    bool hup = false;     ///< the peer closed, or the socket failed: for good
    bool failed = false;  ///< reset or failed (no EPOLLRDHUP): sends fail too
    asio::any_completion_handler<void(error_code)> waiter[3];  ///< by Want
  };
  using Handler = asio::any_completion_handler<void(error_code)>;
  struct Drain;  ///< the set's standing operation in Asio's reactor (readiness.cpp)

  void start_wait(int fd, Want want, Handler h);
  void wake(Handler& w, error_code ec);
  void wake_all(Slot& s, error_code ec);
  void arm();
  /// Marks and wakes for n events a drain collected.
  void deliver(const epoll_event* events, int n) noexcept;

  Executor ex_;
  int epfd_ = -1;
  asio::detail::reactor* reactor_ = nullptr;
  asio::detail::reactor::per_descriptor_data set_{};  ///< epfd_ as Asio's reactor knows it
  /// Allocated once. While armed_, Asio's reactor holds it (a shutdown
  /// then leaves it to free itself when Asio completes or destroys it);
  /// while its completion runs, delivering_ is set and it is still ours.
  Drain* drain_ = nullptr;
  bool armed_ = false;
  bool delivering_ = false;
  /// By descriptor number. A deque: growing it never moves a Slot (Asio
  /// 1.81's any_completion_handler may be move-constructed, but its
  /// assignment and its copy wrap the handler in itself, without end).
  std::deque<Slot> slots_;
  std::size_t watched_ = 0;
};

}  // namespace levee::proxy

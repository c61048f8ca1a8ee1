#include "proxy/readiness.hpp"

#include <sys/epoll.h>

#include <boost/asio/append.hpp>
#include <boost/asio/detail/epoll_reactor.hpp>
#include <boost/asio/detail/reactor.hpp>
#include <boost/asio/detail/scheduler.hpp>
#include <boost/asio/detail/scheduler_operation.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/version.hpp>

#include <cassert>
#include <type_traits>
#include <utility>

// What this file relies on in Asio's epoll reactor (boost/asio/detail/impl/
// epoll_reactor.ipp, epoll_reactor::run(), and detail/impl/scheduler.ipp).
// run() is the same text in Asio 1.26.0 (Boost 1.81, Debian 12), 1.28.1
// (Boost 1.83, Debian 13, Ubuntu 24.04), 1.30.2 and 1.34.2, and the
// scheduler's is the same in 1.26.0 to 1.30.2 (read in Asio's repository);
// the assertion below admits 1.26 to 1.30:
//   - for every event whose data.ptr is neither its interrupter nor its
//     timerfd, it casts the pointer to its descriptor_state, stores the
//     events in the operation's task_result_ (set_ready_events, or
//     add_ready_events if that operation is already queued in this pass)
//     and queues it as a scheduler operation; descriptor_state's only base
//     is that operation, at offset 0, as it is Watch's. Nothing else of
//     the object is read.
//   - the scheduler then calls the operation's completion function with
//     itself as owner and the events as bytes_transferred, and counts the
//     completion as one unit of work finished: a completion that did not
//     start one compensates (as descriptor_state's does when no I/O
//     operation completed), or the io_context would run out of work.
//   - it queues the reactor's next pass behind every operation of this one,
//     and a handler posted from a handler behind that, so a Watch is never
//     queued twice, and a handler posted while a completion is queued runs
//     after it.
//   - an io_context that goes with operations queued destroys them: the
//     completion function is called with a null owner.
static_assert(BOOST_ASIO_VERSION >= 102600 && BOOST_ASIO_VERSION < 103100,
              "proxy/readiness.cpp relies on Asio's epoll reactor as of 1.26-1.30: check it against this version");
static_assert(std::is_same_v<boost::asio::detail::reactor, boost::asio::detail::epoll_reactor>,
              "the readiness set needs Asio's epoll reactor");

namespace levee::proxy {

namespace {

// The reactor's epoll descriptor is private to it. An explicit template
// instantiation may name a private member ([temp.spec.general]); the
// friend function it defines hands the member pointer out.
struct EpollFd {
  using type = int asio::detail::epoll_reactor::*;
  friend type member(EpollFd);
};
template <typename Tag, typename Tag::type M>
struct Expose {
  friend typename Tag::type member(Tag) { return M; }
};
template struct Expose<EpollFd, &asio::detail::epoll_reactor::epoll_fd_>;

}  // namespace

/// A watched socket's registration in Asio's epoll: its epoll data points
/// here, and Asio queues it, with the events, as it queues its own
/// descriptors. Made once per socket slot at most and reused.
struct Readiness::Watch : asio::detail::operation {
  Readiness* set = nullptr;  ///< null while not watching (a late completion is ignored)
  int fd = -1;
  std::uint32_t retired_in = 0;  ///< the Pool's flush round that frees it, while retired

  Watch() : asio::detail::operation(&complete) {}

  static void complete(void* owner, asio::detail::operation* base, const error_code&, std::size_t events) {
    if (!owner) return;  // destroyed with the io_context: the Pool frees the memory
    // The scheduler counts this completion as work finished; it started none.
    static_cast<asio::detail::scheduler*>(owner)->compensating_work_started();
    auto* w = static_cast<Watch*>(base);
    if (w->set) w->set->deliver(w, static_cast<std::uint32_t>(events));
  }
};

/// Every Watch made for an io_context, kept until the io_context goes (an
/// io_context's services are destroyed after the operations still queued
/// in it). A Watch whose socket was closed may still be queued in this
/// pass; it is reused only after a handler posted behind that completion
/// has run.
struct Readiness::Pool : asio::execution_context::service {
  using key_type = Pool;
  static inline asio::execution_context::id id;

  explicit Pool(asio::execution_context& c) : service(c) {}
  void shutdown() override {}

  Watch* take() {
    if (free.empty()) return &all.emplace_back();
    Watch* w = free.back();
    free.pop_back();
    return w;
  }
  /// w's socket is closed (or out of epoll) before the event loop's next
  /// pass, so only a completion queued already can still reach it.
  void retire(Watch* w, Executor ex) {
    w->set = nullptr;
    w->fd = -1;
    retired.push_back(w);
    if (!flush_posted) post_flush(ex);
  }
  void post_flush(Executor ex) {
    flush_posted = true;
    // Behind every completion queued now, so behind those of the Watches
    // retired so far; the ones retired later wait for the next flush.
    asio::post(ex, [this, ex, n = retired.size()] { flush(n, ex); });
  }
  void flush(std::size_t n, Executor ex) {
    flush_posted = false;
    free.insert(free.end(), retired.begin(), retired.begin() + static_cast<std::ptrdiff_t>(n));
    retired.erase(retired.begin(), retired.begin() + static_cast<std::ptrdiff_t>(n));
    if (!retired.empty()) post_flush(ex);
  }

  std::deque<Watch> all;  ///< a deque: a Watch never moves
  std::vector<Watch*> free;
  std::vector<Watch*> retired;  ///< in the order retired
  bool flush_posted = false;
};

Readiness::Readiness(Executor ex) : ex_(ex) {
  auto& ctx = static_cast<asio::execution_context&>(ex_.context());
  auto& reactor = asio::use_service<asio::detail::epoll_reactor>(ctx);
  reactor.init_task();  // as Asio's own services do: the event loop then runs the reactor
  epfd_ = reactor.*member(EpollFd{});
  sched_ = &asio::use_service<asio::detail::scheduler>(ctx);
  pool_ = &asio::use_service<Pool>(ctx);
}

Readiness::~Readiness() { shutdown(); }

void Readiness::shutdown() noexcept {
  if (epfd_ >= 0) {
    for (std::size_t i = 0; i < slots_.size(); ++i) {
      Slot& s = slots_[i];
      if (!s.owner) continue;
      // Its descriptor stays open (its stream's): no later pass may report it.
      epoll_event ev{};
      ::epoll_ctl(epfd_, EPOLL_CTL_DEL, static_cast<int>(i), &ev);
      retire(s);
    }
    epfd_ = -1;
  }
  // Waiters are destroyed, not called: the event loop is going away.
  for (auto& s : slots_)
    for (auto& w : s.waiter) auto gone = std::exchange(w, nullptr);
}

bool Readiness::watch(int fd, const void* owner) noexcept {
  if (epfd_ < 0 || fd < 0) return false;
  const auto i = static_cast<std::size_t>(fd);
  if (i >= slots_.size()) slots_.resize(i + 1);
  Slot& s = slots_[i];
  if (s.owner) {
    // A watch that was never ended: its descriptor was closed without
    // forget() (its number is reused), or this one is watched twice. Out
    // of epoll first, if it is still there, so no event reaches the Watch
    // after it is retired. Whoever waited is told the watch ended.
    epoll_event none{};
    ::epoll_ctl(epfd_, EPOLL_CTL_DEL, fd, &none);
    wake_all(s, asio::error::operation_aborted);
    retire(s);
  }
  Watch* w = pool_->take();
  w->set = this;
  w->fd = fd;
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET;
  ev.data.ptr = w;
  if (::epoll_ctl(epfd_, EPOLL_CTL_ADD, fd, &ev) != 0) {
    w->set = nullptr;
    w->fd = -1;
    pool_->free.push_back(w);  // never registered: nothing can be queued for it
    return false;
  }
  s.owner = owner;
  s.watch = w;
  s.readable = true;
  s.hup = s.failed = false;
  // While anything is watched the io_context has work (a waiter's wake-up
  // comes from the reactor, which counts none).
  if (watched_++ == 0) sched_->work_started();
  return true;
}

void Readiness::retire(Slot& s) noexcept {
  s.owner = nullptr;
  s.readable = s.hup = s.failed = false;
  if (Watch* w = std::exchange(s.watch, nullptr)) pool_->retire(w, ex_);
  if (--watched_ == 0) {
    // The set's unit of work ends behind what is queued now. Not at once:
    // inside a Watch's completion (a waiter closing the last socket) the
    // scheduler does not count that completion as work until it returns,
    // so the count would reach zero and stop the io_context with the
    // wake-ups just posted, and the completions queued behind, unrun.
    asio::post(ex_, [sched = sched_] { sched->work_finished(); });
  }
}

bool Readiness::forget(int fd, const void* owner) noexcept {
  const auto i = static_cast<std::size_t>(fd);
  if (fd < 0 || i >= slots_.size() || slots_[i].owner != owner || owner == nullptr) return false;
  Slot& s = slots_[i];
  wake_all(s, asio::error::operation_aborted);
  retire(s);
  return true;
}

void Readiness::release(int fd, const void* owner) noexcept {
  if (!forget(fd, owner)) return;
  epoll_event ev{};
  ::epoll_ctl(epfd_, EPOLL_CTL_DEL, fd, &ev);
}

void Readiness::start_wait(int fd, Want want, Handler h) {
  const auto i = static_cast<std::size_t>(fd);
  if (fd < 0 || i >= slots_.size()) {
    asio::post(ex_, asio::append(std::move(h), error_code(asio::error::bad_descriptor)));
    return;
  }
  Slot& s = slots_[i];
  Handler& w = s.waiter[static_cast<std::size_t>(want)];
  assert(!w);  // one waiter of each kind per socket
  w.swap(h);  // not operator=: Asio 1.81's wraps the handler in itself, without end
  if (!s.owner) return wake(w, asio::error::bad_descriptor);
  // A Write wait begins after a send found the socket full: the room that
  // frees later is a new edge, which epoll reports. Only a failed socket
  // ends it at once (its next send fails): one whose peer stopped sending
  // but not reading must wait, or the writer would spin on EAGAIN.
  if (want == Want::Write ? s.failed : (s.readable || s.hup)) wake(w, error_code{});
}

void Readiness::cancel(int fd) noexcept {
  const auto i = static_cast<std::size_t>(fd);
  if (fd < 0 || i >= slots_.size()) return;
  wake_all(slots_[i], asio::error::operation_aborted);
}

void Readiness::wake(Handler& w, error_code ec) {
  if (w) asio::post(ex_, asio::append(std::exchange(w, nullptr), ec));
}

void Readiness::wake_all(Slot& s, error_code ec) {
  for (auto& w : s.waiter) wake(w, ec);
}

void Readiness::deliver(Watch* w, std::uint32_t e) noexcept {
  // w->set is this: w is the Watch of the slot of its descriptor.
  Slot& s = slots_[static_cast<std::size_t>(w->fd)];
  // EPOLLOUT alone (room freed, a connect done) says nothing of reading.
  const bool in = e & (EPOLLIN | EPOLLPRI | EPOLLRDHUP | EPOLLHUP | EPOLLERR);
  if (in) s.readable = true;
  if (e & (EPOLLRDHUP | EPOLLHUP | EPOLLERR)) s.hup = true;
  if (e & (EPOLLHUP | EPOLLERR)) s.failed = true;
  // The waiters resume here, in this pass: a post would run them only
  // after the event loop's next epoll_wait. One may close this socket
  // (another may then take its number, with another Watch) or shut the
  // set down: either retires w, and the rest are not woken.
  const auto run = [&](Want want) {
    if (w->set != this) return;
    Handler& h = s.waiter[static_cast<std::size_t>(want)];
    if (h) asio::dispatch(asio::append(std::exchange(h, nullptr), error_code{}));
  };
  if (in) {
    run(Want::Read);
    run(Want::Peek);
  }
  if (e & (EPOLLOUT | EPOLLHUP | EPOLLERR)) run(Want::Write);
}

}  // namespace levee::proxy

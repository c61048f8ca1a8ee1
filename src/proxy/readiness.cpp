#include "proxy/readiness.hpp"

#include <sys/epoll.h>
#include <unistd.h>

#include <boost/asio/append.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/detail/reactor_op.hpp>
#include <boost/asio/execution/context.hpp>
#include <boost/asio/query.hpp>

#include <cassert>
#include <cerrno>
#include <utility>

namespace levee::proxy {

/// The set's wait in Asio's reactor, written as Asio writes a receive: its
/// perform() is the drain's epoll_wait, run by the reactor when epoll says
/// the set is readable, or at once when armed if the reactor saw it become
/// readable since a drain last found it empty (Asio's try_speculative_). A
/// drain that returned fewer events than it had room for emptied the set
/// (done_and_exhausted), so the next arm waits for epoll without a system
/// call of its own. One is allocated per set and re-armed from its own
/// completion: nothing is allocated per pass.
struct Readiness::Drain : asio::detail::reactor_op {
  static constexpr int kBatch = 64;
  Readiness* set;  ///< null once the set is shut down: the operation then frees itself
  int got = 0;
  epoll_event ev[kBatch];

  explicit Drain(Readiness* s) : reactor_op(error_code{}, &perform, &complete), set(s) {}

  // Run only by the reactor, which a shutdown takes the operation out of
  // in the same call that detaches it: set is never null here.
  static status perform(reactor_op* base) {
    auto* d = static_cast<Drain*>(base);
    const int n = ::epoll_wait(d->set->epfd_, d->ev, kBatch, 0);
    if (n < 0) {
      d->got = 0;
      if (errno == EINTR) return done;  // completes empty; the next arm tries again
      d->ec_ = error_code(errno, asio::error::get_system_category());
      return done;
    }
    d->got = n;
    if (n == 0) return not_done;  // stays queued until epoll says the set is readable
    return n < kBatch ? done_and_exhausted : done;
  }

  // owner is null when Asio destroys the operation instead of completing it
  // (its io_context is going away).
  static void complete(void* owner, asio::detail::operation* base, const error_code&, std::size_t) {
    auto* d = static_cast<Drain*>(base);
    Readiness* r = d->set;
    if (!owner || !r) {
      // Destroyed with an io_context that went before shutdown(): the set
      // is left with nothing to arm.
      if (r) {
        r->drain_ = nullptr;
        r->armed_ = false;
      }
      delete d;
      return;
    }
    r->armed_ = false;
    if (d->ec_) return;  // the set failed (its descriptor is gone): not re-armed until the next watch()
    // The waiters resume here, in this pass. One may watch() a socket
    // (arm() waits for this to end: the events are still being read) or
    // shut the set down (then this operation is no longer the set's).
    r->delivering_ = true;
    r->deliver(d->ev, d->got);
    if (!d->set) {
      delete d;
      return;
    }
    r->delivering_ = false;
    r->arm();
  }
};

Readiness::Readiness(Executor ex) : ex_(ex) {
  epfd_ = ::epoll_create1(EPOLL_CLOEXEC);
  if (epfd_ < 0) return;  // watch() says no; streams peek instead
  reactor_ = &asio::use_service<asio::detail::reactor>(asio::query(ex_, asio::execution::context));
  reactor_->init_task();  // as Asio's own services do: the event loop then runs the reactor
  if (reactor_->register_descriptor(epfd_, set_) != 0) {
    reactor_->cleanup_descriptor_data(set_);
    ::close(epfd_);
    epfd_ = -1;
    return;
  }
  drain_ = new Drain(this);
}

Readiness::~Readiness() { shutdown(); }

void Readiness::shutdown() noexcept {
  if (epfd_ >= 0) {
    // A queued drain is completed as aborted (or destroyed with the
    // io_context) and frees itself then; one whose completion is running
    // frees itself when that returns.
    if (drain_ && (armed_ || delivering_))
      drain_->set = nullptr;
    else
      delete drain_;
    drain_ = nullptr;
    armed_ = false;
    reactor_->deregister_descriptor(epfd_, set_, true);
    ::close(epfd_);
    reactor_->cleanup_descriptor_data(set_);
    epfd_ = -1;
  }
  // Waiters are destroyed, not called: the event loop is going away.
  for (auto& s : slots_)
    for (auto& w : s.waiter) auto gone = std::exchange(w, nullptr);
}

bool Readiness::watch(int fd, const void* owner) noexcept {
  if (epfd_ < 0 || fd < 0) return false;
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET;
  ev.data.fd = fd;
  if (::epoll_ctl(epfd_, EPOLL_CTL_ADD, fd, &ev) != 0) return false;
  const auto i = static_cast<std::size_t>(fd);
  if (i >= slots_.size()) slots_.resize(i + 1);
  Slot& s = slots_[i];
  s.owner = owner;
  s.readable = true;
  s.hup = s.failed = false;
  ++watched_;
  if (!armed_) arm();
  return true;
}

bool Readiness::forget(int fd, const void* owner) noexcept {
  const auto i = static_cast<std::size_t>(fd);
  if (fd < 0 || i >= slots_.size() || slots_[i].owner != owner || owner == nullptr) return false;
  Slot& s = slots_[i];
  s.owner = nullptr;
  s.readable = s.hup = s.failed = false;
  --watched_;
  wake_all(s, asio::error::operation_aborted);
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
  // frees later is a new edge, which a drain reports. Only a failed socket
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

void Readiness::arm() {
  if (!drain_ || armed_ || delivering_) return;
  armed_ = true;
  drain_->ec_ = error_code{};  // a drain that failed before must not discard this one's events
  // A continuation of the last drain; speculative: the drain is tried at
  // once only if the reactor saw the set become readable since it was last
  // found empty, and otherwise queued with no epoll_ctl.
  reactor_->start_op(asio::detail::reactor::read_op, epfd_, set_, drain_, true, true);
}

void Readiness::deliver(const epoll_event* ev, int n) noexcept {
  for (int k = 0; k < n && epfd_ >= 0; ++k) {  // a waiter may shut the set down
    const auto i = static_cast<std::size_t>(ev[k].data.fd);
    if (i >= slots_.size() || !slots_[i].owner) continue;
    Slot& s = slots_[i];
    const std::uint32_t e = ev[k].events;
    // EPOLLOUT alone (room freed, a connect done) says nothing of reading.
    const bool in = e & (EPOLLIN | EPOLLPRI | EPOLLRDHUP | EPOLLHUP | EPOLLERR);
    if (in) s.readable = true;
    if (e & (EPOLLRDHUP | EPOLLHUP | EPOLLERR)) s.hup = true;
    if (e & (EPOLLHUP | EPOLLERR)) s.failed = true;
    // The waiters resume here, in this pass: a post would run them only
    // after the event loop's next epoll_wait. One may close this socket
    // (and a new one take its number): each is looked up afresh.
    const auto run = [&](Want want) {
      Handler& w = slots_[i].waiter[static_cast<std::size_t>(want)];
      if (w) asio::dispatch(asio::append(std::exchange(w, nullptr), error_code{}));
    };
    if (in) {
      run(Want::Read);
      run(Want::Peek);
    }
    if (e & (EPOLLOUT | EPOLLHUP | EPOLLERR)) run(Want::Write);
  }
}

}  // namespace levee::proxy

#include "proxy/readiness.hpp"

#include <sys/epoll.h>
#include <unistd.h>

#include <boost/asio/append.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/post.hpp>

#include <cassert>
#include <utility>

namespace levee::proxy {

Readiness::Readiness(Executor ex) : ex_(ex) {
  epfd_ = ::epoll_create1(EPOLL_CLOEXEC);
  if (epfd_ < 0) return;  // watch() says no; streams peek instead
  error_code ec;
  set_.emplace(ex_);
  set_->assign(epfd_, ec);
  if (ec) {
    set_.reset();
    ::close(epfd_);
    epfd_ = -1;
  }
}

Readiness::~Readiness() { shutdown(); }

void Readiness::shutdown() noexcept {
  if (set_) {
    error_code ec;
    set_->close(ec);  // closes epfd_; the pending wait is aborted
    set_.reset();
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
  if (!set_) return;
  armed_ = true;
  set_->async_wait(Descriptor::wait_read, [this](error_code ec) {
    if (ec) {
      armed_ = false;  // closed (shutdown)
      return;
    }
    drain();  // a reader resumed here may watch() a socket: still armed
    armed_ = false;
    arm();
  });
}

void Readiness::drain() noexcept {
  if (epfd_ < 0) return;
  constexpr int kBatch = 64;
  epoll_event ev[kBatch];
  for (;;) {
    const int n = ::epoll_wait(epfd_, ev, kBatch, 0);
    for (int k = 0; k < n; ++k) {
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
    if (n < kBatch) return;
  }
}

}  // namespace levee::proxy

// Waiting for admission: for a place in a cluster's queue, or for a slot of
// a fuse. One mechanism for both: a timer set to the give-up time, a watch
// on the client (from 10 ms on: most waits are shorter, and watching costs a
// reactor re-arm), and a wake from whoever grants or drops the request,
// delivered on the waiter's own thread.
#pragma once

#include <chrono>
#include <cstdint>

#include "core/time.hpp"
#include "proxy/asio.hpp"
#include "proxy/clock.hpp"
#include "proxy/downstream.hpp"

namespace levee::proxy {

class AdmissionWait final : public ClientWatch {
 public:
  enum class End : std::uint8_t { Woken, TimedOut, ClientGone };

  AdmissionWait(Timer& timer, Downstream& down) noexcept : timer_(timer), down_(down) {}
  AdmissionWait(const AdmissionWait&) = delete;
  AdmissionWait& operator=(const AdmissionWait&) = delete;

  /// Waits until woken, the client leaves, or give_up passes.
  awaitable<End> wait(core::TimePoint start, core::TimePoint give_up) {
    woken_ = gone_ = false;
    const core::TimePoint watch_from = start + std::chrono::milliseconds(10);
    bool watching = false;
    timer_.expires_at(to_steady(std::min(give_up, watch_from)));
    End end = End::TimedOut;
    for (;;) {
      co_await timer_.async_wait(nothrow);
      if (woken_) {
        end = End::Woken;
        break;
      }
      if (gone_) {
        end = End::ClientGone;
        break;
      }
      if (!watching && now() < give_up) {
        watching = true;
        down_.watch(*this);
        timer_.expires_at(to_steady(give_up));
        continue;
      }
      break;
    }
    if (watching) down_.unwatch();
    co_return end;
  }

  /// After a timeout or a client gone, the request may have been granted or
  /// dropped at the same moment: its wake is on the way. Waits for it.
  awaitable<void> wait_for_wake() {
    while (!woken_) {
      timer_.expires_at(Timer::time_point::max());
      co_await timer_.async_wait(nothrow);
    }
  }

  /// Runs on the waiter's thread.
  void wake() noexcept {
    woken_ = true;
    timer_.cancel();
  }
  bool woken() const noexcept { return woken_; }
  void on_client_gone() noexcept override {
    gone_ = true;
    timer_.cancel();
  }

 private:
  Timer& timer_;
  Downstream& down_;
  bool woken_ = false;
  bool gone_ = false;
};

}  // namespace levee::proxy

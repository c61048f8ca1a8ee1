// One timer per exchange for every deadline it meets: header, body, queue,
// connect, response, write. Arming is a store when the new deadline is not
// earlier than the one the timer already waits for (the timer fires early
// and re-arms itself); only an earlier deadline re-arms the timer. When a
// deadline passes, the watchdog cancels the I/O of the phase it guards
// through the Target it was given, and the operation that was waiting sees
// `operation_aborted` and asks expired().
#pragma once

#include <cstdint>
#include <memory>

#include "core/time.hpp"
#include "proxy/asio.hpp"
#include "proxy/clock.hpp"

namespace levee::proxy {

class Watchdog {
 public:
  enum class Phase : std::uint8_t { None, Header, Body, Queue, Connect, Upstream, Response, Write, Linger };

  /// What to cancel when a deadline passes.
  class Target {
   public:
    virtual void on_deadline(Phase p) noexcept = 0;

   protected:
    ~Target() = default;
  };

  explicit Watchdog(asio::io_context& ctx) : timer_(ctx.get_executor()) {}
  /// A wait whose time had come already is not cancelled by the timer's
  /// destruction: its handler is queued and runs with success after this
  /// is gone (the worker's sweep may free pooled scratch in the same pass
  /// of the event loop). Handlers hold `alive` and look at it first.
  ~Watchdog() { *alive_ = false; }
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  /// False once this watchdog (and the exchange scratch it lives in) is
  /// gone: for other handlers that may outlive the scratch.
  const std::shared_ptr<bool>& alive() const noexcept { return alive_; }

  void arm(core::TimePoint deadline, Phase p, Target& t);
  /// Arms deadline d unless an earlier one is already armed (which keeps
  /// its phase and target); arms d with p and t when nothing is armed.
  void arm_at_most(core::TimePoint d, Phase p, Target& t) {
    if (deadline_ == core::TimePoint::max() || target_ == nullptr) arm(d, p, t);
    else if (d < deadline_) arm(d, phase_, *target_);
  }
  void disarm() noexcept {
    deadline_ = core::TimePoint::max();
    phase_ = Phase::None;
  }
  /// Forgets the exchange (its scratch is back in the pool). A wait still
  /// pending stays: the next exchange's first deadline is usually later,
  /// so arming it is a store, and the old wait, when it fires, finds no
  /// target or re-arms for the new deadline. Re-arming the timer here
  /// instead cost a cancel, an aborted handler and a new queue entry per
  /// request.
  void reset() noexcept {
    disarm();
    expired_ = false;
    target_ = nullptr;
  }
  bool expired() const noexcept { return expired_; }
  Phase expired_phase() const noexcept { return expired_phase_; }
  core::TimePoint deadline() const noexcept { return deadline_; }
  /// How many times the timer itself was set (each one a cancel and a new
  /// entry in the reactor's timer queue); what the lazy arming saves.
  std::uint64_t timer_sets() const noexcept { return timer_sets_; }

 private:
  void fire(std::uint64_t gen);
  /// Sets the timer for d: the one place a wait is started.
  void set_timer(core::TimePoint d);

  Timer timer_;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
  Target* target_ = nullptr;
  core::TimePoint deadline_ = core::TimePoint::max();
  core::TimePoint armed_at_ = core::TimePoint::max();  ///< what the timer waits for
  std::uint64_t gen_ = 0;
  std::uint64_t timer_sets_ = 0;
  bool armed_ = false;
  bool expired_ = false;
  Phase phase_ = Phase::None;
  Phase expired_phase_ = Phase::None;
};

inline void Watchdog::arm(core::TimePoint d, Phase p, Target& t) {
  target_ = &t;
  deadline_ = d;
  phase_ = p;
  expired_ = false;
  if (d == core::TimePoint::max()) return;
  if (armed_ && d >= armed_at_) return;  // fires early, then re-arms
  set_timer(d);
}

inline void Watchdog::set_timer(core::TimePoint d) {
  armed_at_ = d;
  armed_ = true;
  ++timer_sets_;
  timer_.expires_at(to_steady(d));
  timer_.async_wait([this, g = ++gen_, alive = alive_](error_code ec) {
    // Aborted: superseded by expires_at, or the timer (and this watchdog,
    // with the exchange scratch it lives in) was destroyed. Not alive:
    // destroyed after the wait had completed. Either way `this` must not
    // be touched.
    if (ec != asio::error::operation_aborted && *alive) fire(g);
  });
}

inline void Watchdog::fire(std::uint64_t gen) {
  if (gen != gen_) return;  // superseded by an earlier deadline
  armed_ = false;
  if (deadline_ == core::TimePoint::max() || target_ == nullptr) return;
  if (now() < deadline_) {  // woken early: the deadline moved later
    set_timer(deadline_);
    return;
  }
  expired_ = true;
  expired_phase_ = phase_;
  target_->on_deadline(phase_);
}

}  // namespace levee::proxy

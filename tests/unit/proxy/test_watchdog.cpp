// The exchange watchdog's timer outliving the watchdog: the scratch an
// exchange lives in is freed when the worker's pool is full, with a wait
// still pending (the watchdog re-arms lazily and never cancels on disarm).
// The cancelled wait's handler then runs after the memory is gone; it must
// not touch it. Under ASan (scripts/sanitize.sh, and so CI) a handler that
// did is a heap-use-after-free report; found by test_batch's 2000 clients.
#include <catch2/catch_test_macros.hpp>

#include <memory>

#include "proxy/watchdog.hpp"

using namespace levee::proxy;
using namespace std::chrono_literals;

namespace {
struct Counting final : Watchdog::Target {
  int fired = 0;
  void on_deadline(Watchdog::Phase) noexcept override { ++fired; }
};
}  // namespace

TEST_CASE("a watchdog destroyed with its wait pending is never touched again", "[watchdog]") {
  asio::io_context ctx;
  Counting target;
  auto dog = std::make_unique<Watchdog>(ctx);
  dog->arm(now() + 1h, Watchdog::Phase::Body, target);
  dog->disarm();  // as an exchange ends: the wait stays pending
  dog.reset();    // the scratch is freed, the timer with it: its wait is cancelled
  CHECK(ctx.poll() >= 1);  // the cancelled handler is ready at once, and runs here
  CHECK(target.fired == 0);
}

// The same with the wait already complete: the timer's time has come and
// its handler is queued when the scratch is freed (the worker's sweep, on
// a timer of the same moment, trims its stock first). Destroying the timer
// cannot cancel it then; it runs with success, and must not touch the
// watchdog. Found by ASan in test_soak.
TEST_CASE("a watchdog destroyed after its wait completed is never touched again", "[watchdog]") {
  asio::io_context ctx;
  Counting target;
  auto dog = std::make_unique<Watchdog>(ctx);
  // Both times have passed when the loop first looks: one pass of the
  // reactor takes both timers, the earlier first, and queues their handlers.
  Timer sweep(ctx.get_executor());
  sweep.expires_at(to_steady(now() - 2ms));
  sweep.async_wait([&](error_code) { dog.reset(); });
  dog->arm(now() - 1ms, Watchdog::Phase::Body, target);
  ctx.run_one();  // the sweep's handler: the scratch goes
  REQUIRE(!dog);
  ctx.poll();  // the watchdog's handler, queued in the same pass
  CHECK(target.fired == 0);
}

TEST_CASE("a watchdog whose deadline passes cancels its target once", "[watchdog]") {
  asio::io_context ctx;
  Counting target;
  Watchdog dog(ctx);
  dog.arm(now() + 5ms, Watchdog::Phase::Body, target);
  // A later deadline is a store: the timer fires at 5 ms and re-arms for it.
  dog.arm_at_most(now() + 20ms, Watchdog::Phase::Body, target);
  const auto give_up = now() + 10s;
  while (target.fired == 0 && now() < give_up) ctx.run_one_for(100ms);
  ctx.poll();  // nothing else is due: no second firing
  CHECK(target.fired == 1);
  CHECK(dog.expired());
  CHECK(dog.expired_phase() == Watchdog::Phase::Body);
}

TEST_CASE("a pooled watchdog keeps its pending wait for the next exchange", "[watchdog]") {
  asio::io_context ctx;
  Counting first, second;
  Watchdog dog(ctx);
  dog.arm(now() + 5ms, Watchdog::Phase::Header, first);
  REQUIRE(dog.timer_sets() == 1);
  dog.reset();  // the exchange is over; its scratch goes back to the pool
  // The next exchange's later deadline is a store, not a new timer entry.
  dog.arm(now() + 30ms, Watchdog::Phase::Header, second);
  CHECK(dog.timer_sets() == 1);
  // The old wait fires at 5 ms, finds the new deadline and re-arms for it;
  // only the new target is told, once, and only once it is due.
  const auto armed = now();
  const auto give_up = armed + 10s;
  while (second.fired == 0 && now() < give_up) ctx.run_one_for(100ms);
  CHECK(now() - armed >= 29ms);
  ctx.poll();
  CHECK(second.fired == 1);
  CHECK(first.fired == 0);
  CHECK(dog.timer_sets() == 2);
  CHECK(dog.expired_phase() == Watchdog::Phase::Header);
}

TEST_CASE("a pooled watchdog whose old wait fires with no exchange does nothing", "[watchdog]") {
  asio::io_context ctx;
  Counting first;
  Watchdog dog(ctx);
  dog.arm(now() + 2ms, Watchdog::Phase::Body, first);
  dog.reset();
  const auto give_up = now() + 10s;
  // The wait completes (one handler run) and, with no target, stays quiet.
  while (ctx.run_one_for(100ms) == 0 && now() < give_up) {
  }
  ctx.poll();
  CHECK(first.fired == 0);
  CHECK_FALSE(dog.expired());
  // The next arm has no pending wait to reuse: it sets the timer.
  dog.arm(now() + 1h, Watchdog::Phase::Body, first);
  CHECK(dog.timer_sets() == 2);
}

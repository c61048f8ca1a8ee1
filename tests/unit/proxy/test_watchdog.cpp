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

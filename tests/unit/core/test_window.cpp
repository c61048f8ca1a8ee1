#include <catch2/catch_test_macros.hpp>

#include <cmath>
#include <catch2/matchers/catch_matchers_floating_point.hpp>
#include <deque>

#include "core/window.hpp"
#include "sim_time.hpp"

using namespace levee::core;
using namespace levee::test;
using Catch::Matchers::WithinAbs;

TEST_CASE("window sums what was added inside it", "[window]") {
  SlidingWindow<2> w(10s, 10);
  SimClock clk;
  w.add(clk.now, 0, 1);
  w.add(clk.now, 1, 5);
  clk.advance(3s);
  w.add(clk.now, 0, 2);
  CHECK(w.sum(clk.now, 0) == 3);
  CHECK(w.sum(clk.now, 1) == 5);
  CHECK(w.sum(clk.now, 0, 1) == 8);
}

TEST_CASE("a window advanced by a day is empty", "[window]") {
  SlidingWindow<1> w(2min, 60);
  SimClock clk;
  for (int i = 0; i < 1000; ++i) {
    w.add(clk.now, 0, 1);
    clk.advance(100ms);
  }
  CHECK(w.sum(clk.now, 0) > 0);
  clk.advance(24h);
  CHECK(w.sum(clk.now, 0) == 0);
}

TEST_CASE("old buckets expire one by one", "[window]") {
  SlidingWindow<1> w(10s, 10);  // 1 s buckets
  SimClock clk;
  for (int s = 0; s < 10; ++s) {
    w.add(clk.now, 0, 1);
    clk.advance(1s);
  }
  // now = 10 s: the bucket [0,1) has expired, [1..10) hold 9, current holds 0
  CHECK(w.sum(clk.now, 0) == 9);
  clk.advance(5s);
  CHECK(w.sum(clk.now, 0) == 4);
}

TEST_CASE("time until below walks buckets oldest first", "[window]") {
  SlidingWindow<1> w(10s, 10);
  SimClock clk;
  w.add(clk.now, 0, 5);      // bucket 0, expires at 10 s
  clk.advance(4s);
  w.add(clk.now, 0, 5);      // bucket 4, expires at 14 s
  // sum 10; to get below 6 the first bucket must go: at 10 s, 6 s from now
  CHECK(w.time_until_below(clk.now, 0, 0, 6) == 6s);
  // to get below 1 both must go: at 14 s
  CHECK(w.time_until_below(clk.now, 0, 0, 1) == 10s);
  CHECK(w.time_until_below(clk.now, 0, 0, 100) == 0s);
}

TEST_CASE("window matches a brute-force model on random sequences", "[window][property]") {
  for (std::uint64_t seed = 1; seed <= 20; ++seed) {
    Rng rng(seed);
    const Duration width = 100ms;
    SlidingWindow<1> w(width * 20, 20);
    std::deque<std::pair<TimePoint, double>> model;
    SimClock clk;
    for (int step = 0; step < 2000; ++step) {
      // Mostly small steps, sometimes a long jump.
      clk.advance(rng.u() < 0.02 ? Duration(std::chrono::seconds(rng.below(5))) : Duration(std::chrono::milliseconds(rng.below(40))));
      double v = std::floor(rng.u() * 10);
      w.add(clk.now, 0, v);
      model.emplace_back(clk.now, v);
      // The window holds buckets with epoch > current epoch - 20.
      std::int64_t head = clk.now.time_since_epoch() / width;
      double expect = 0;
      for (auto& [t, x] : model)
        if (t.time_since_epoch() / width > head - 20) expect += x;
      REQUIRE_THAT(w.sum(clk.now, 0), WithinAbs(expect, 1e-6));
    }
  }
}

TEST_CASE("span grows to the window and not beyond", "[window]") {
  SlidingWindow<1> w(10s, 10);
  SimClock clk;
  clk.advance(100s);
  w.add(clk.now, 0, 1);
  CHECK(w.span(clk.now) == 1s);  // never less than one bucket
  clk.advance(3s);
  CHECK(w.span(clk.now) == 3s);
  clk.advance(1h);
  // A full window's sum covers the buckets behind the current one and the
  // part of the current one that has passed: 9 s at a bucket's start...
  CHECK(w.span(clk.now) == 9s);
  // ... 9.5 s half way through it, never the whole 10 s of the window.
  clk.advance(500ms);
  CHECK(w.span(clk.now) == 9500ms);
  // So a steady rate reads as itself at every moment, not 10% low.
  SlidingWindow<1> r(1s, 10);
  SimClock c2;
  for (int i = 0; i < 2000; ++i) {
    c2.advance(1ms);
    r.add(c2.now, 0, 1.0);
  }
  for (int k = 0; k < 10; ++k) {
    c2.advance(37ms);
    for (int i = 0; i < 37; ++i) r.add(c2.now, 0, 1.0);
    const double rate = r.sum(c2.now, 0) / to_seconds(r.span(c2.now));
    CHECK(std::abs(rate - 1000.0) < 40.0);
  }
}

// A worker's stock of read buffers and request scratch (proxy/stock.hpp):
// what steady traffic cycles through stays, what a burst left behind is
// freed by the trims that follow it, and nothing is kept beyond the cap.
#include <catch2/catch_test_macros.hpp>

#include <memory>
#include <vector>

#include "proxy/stock.hpp"

using levee::proxy::Stock;

namespace {
/// Counts the objects alive, so that a test sees what a trim freed.
struct Item {
  static inline int alive = 0;
  Item() { ++alive; }
  ~Item() { --alive; }
};

std::unique_ptr<Item> take_or_make(Stock<Item>& s) {
  if (auto p = s.take()) return p;
  return std::make_unique<Item>();
}

/// n in use at once (taken from the stock, or made when it has none), then
/// all given back.
void use_at_once(Stock<Item>& s, int n) {
  std::vector<std::unique_ptr<Item>> in_use;
  for (int i = 0; i < n; ++i) in_use.push_back(take_or_make(s));
  for (auto& p : in_use) s.put(std::move(p));
}
}  // namespace

TEST_CASE("a burst's leftovers are freed by the trims after it; steady use keeps its own", "[stock]") {
  Item::alive = 0;
  Stock<Item> s(4096);
  // A burst: 1,000 in use at once, all given back.
  use_at_once(s, 1000);
  REQUIRE(s.size() == 1000);
  // The interval of the burst: the stock was empty at its low point.
  CHECK(s.trim() == 0);
  // Then steady traffic: 10 at a time, for the whole next interval.
  for (int round = 0; round < 50; ++round) use_at_once(s, 10);
  // The 990 no one took go; the 10 the traffic cycles through stay.
  CHECK(s.trim() == 990);
  CHECK(s.size() == 10);
  CHECK(Item::alive == 10);
  // Steady traffic goes on: nothing more is freed, nothing is made anew.
  for (int interval = 0; interval < 3; ++interval) {
    for (int round = 0; round < 50; ++round) use_at_once(s, 10);
    CHECK(s.trim() == 0);
    CHECK(Item::alive == 10);
  }
  // The traffic stops: what it kept goes one interval later.
  CHECK(s.trim() == 10);
  CHECK(Item::alive == 0);
}

TEST_CASE("the stock keeps no more than its cap; the rest is freed when given back", "[stock]") {
  Item::alive = 0;
  Stock<Item> s(3);
  use_at_once(s, 5);
  CHECK(s.size() == 3);
  CHECK(Item::alive == 3);
  s.put(nullptr);  // nothing to keep
  CHECK(s.size() == 3);
  s.clear();
  CHECK(Item::alive == 0);
}

// The metrics tables are written by every worker at once (one shard each)
// and read by the admin thread while they do. These tests run that shape
// for real, so ThreadSanitizer (scripts/sanitize.sh tsan) sees it, and
// check what a scrape may promise meanwhile: counters never go backwards,
// nothing is lost, and a histogram's buckets, count and sum agree.
#include <catch2/catch_test_macros.hpp>

#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

#include "metrics/metrics.hpp"

using namespace levee::metrics;

namespace {

constexpr std::size_t kWriters = 4;
constexpr std::uint64_t kPerWriter = 200000;

}  // namespace

TEST_CASE("counters written by every worker and scraped meanwhile lose nothing", "[metrics]") {
  CounterTable t("levee_test_total", "test", {Dimension("reason", {"a", "b", "c"})}, kWriters);
  std::atomic<bool> done{false};
  // The writers start once the scraper runs, and it scrapes at least once
  // more after they finish: on a busy machine the writers could otherwise
  // be done before the scraper thread is scheduled at all.
  std::atomic<bool> scraping{false};
  std::vector<std::thread> writers;
  for (std::size_t w = 0; w < kWriters; ++w) {
    writers.emplace_back([&t, &scraping, w] {
      while (!scraping.load(std::memory_order_acquire)) std::this_thread::yield();
      for (std::uint64_t i = 0; i < kPerWriter; ++i) t.inc(w, t.index({i % 3}));
    });
  }
  std::uint64_t scrapes = 0;
  std::thread scraper([&] {
    std::uint64_t last[3] = {0, 0, 0};
    bool monotonic = true;
    scraping.store(true, std::memory_order_release);
    for (bool last_round = false; !last_round;) {
      last_round = done.load(std::memory_order_acquire);
      for (std::size_t c = 0; c < 3; ++c) {
        const std::uint64_t v = t.value(c);
        monotonic = monotonic && v >= last[c];
        last[c] = v;
      }
      (void)t.collect();  // the exposition path, concurrently with the writers
      ++scrapes;
    }
    CHECK(monotonic);
  });
  for (auto& th : writers) th.join();
  done.store(true, std::memory_order_release);
  scraper.join();
  std::uint64_t total = 0;
  for (std::size_t c = 0; c < 3; ++c) total += t.value(c);
  CHECK(total == kWriters * kPerWriter);
  CHECK(t.value(t.index({0})) == kWriters * ((kPerWriter + 2) / 3));
  CHECK(scrapes > 0);
}

TEST_CASE("a histogram scraped while observed adds up once the writers stop", "[metrics]") {
  HistogramTable h("levee_test_seconds", "test", {}, {0.001, 0.01, 0.1}, kWriters);
  std::atomic<bool> done{false};
  std::vector<std::thread> writers;
  for (std::size_t w = 0; w < kWriters; ++w) {
    writers.emplace_back([&h, w] {
      const double vs[] = {0.0005, 0.005, 0.05, 0.5};
      for (std::uint64_t i = 0; i < kPerWriter / 4; ++i) h.observe(w, 0, vs[i % 4]);
    });
  }
  std::thread scraper([&] {
    while (!done.load(std::memory_order_acquire)) (void)h.collect();
  });
  for (auto& th : writers) th.join();
  done.store(true, std::memory_order_release);
  scraper.join();
  const auto f = h.collect();
  REQUIRE(f.metric.size() == 1);
  const auto& m = f.metric[0].histogram;
  const std::uint64_t n = kWriters * (kPerWriter / 4);
  CHECK(m.sample_count == n);
  CHECK(h.count(0) == n);
  REQUIRE(m.bucket.size() == 4);
  CHECK(m.bucket[0].cumulative_count == n / 4);
  CHECK(m.bucket[2].cumulative_count == 3 * n / 4);
  CHECK(m.bucket[3].cumulative_count == n);  // +Inf holds everything
  // Sums are kept in whole microseconds: exact for these values.
  CHECK(m.sample_sum * 1e6 == static_cast<double>(n / 4 * (500 + 5000 + 50000 + 500000)));
}

#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_floating_point.hpp>
#include <set>

#include "core/criticality.hpp"
#include "core/decision.hpp"
#include "core/ewma.hpp"
#include "sim_time.hpp"

using namespace levee::core;
using namespace levee::test;

TEST_CASE("criticality parses the four names case-insensitively", "[criticality]") {
  CHECK(parse_criticality("CRITICAL_PLUS") == Criticality::CriticalPlus);
  CHECK(parse_criticality("critical") == Criticality::Critical);
  CHECK(parse_criticality(" Sheddable_Plus\t") == Criticality::SheddablePlus);
  CHECK(parse_criticality("sheddable") == Criticality::Sheddable);
  CHECK_FALSE(parse_criticality(""));
  CHECK_FALSE(parse_criticality("CRITICAL-PLUS"));
  CHECK_FALSE(parse_criticality("URGENT"));
  CHECK_FALSE(parse_criticality("CRITICAL_PLUSX"));
}

TEST_CASE("criticality orders and formats round-trip", "[criticality]") {
  CHECK(Criticality::CriticalPlus > Criticality::Critical);
  CHECK(Criticality::Critical > Criticality::SheddablePlus);
  CHECK(Criticality::SheddablePlus > Criticality::Sheddable);
  for (auto c : kAllCriticalities) CHECK(parse_criticality(to_string(c)) == c);
  CHECK(kAllCriticalities.front() == Criticality::CriticalPlus);
}

TEST_CASE("every reason has a distinct stable name and a status", "[decision]") {
  std::set<std::string_view> names;
  for (std::size_t i = 0; i < kReasonCount; ++i) {
    const auto& ri = info(static_cast<Reason>(i));
    CHECK_FALSE(ri.name.empty());
    CHECK(names.insert(ri.name).second);
    CHECK(ri.status >= 200);
  }
  CHECK(info(Reason::TenantQuota).status == 429);
  CHECK(info(Reason::QueueWait).status == 503);
  CHECK(is_shed(Reason::Throttle));
  CHECK_FALSE(is_shed(Reason::NoRoute));
  auto d = Decision::reject(Reason::Throttle, 2s, true);
  CHECK_FALSE(d.admitted());
  CHECK(d.status == 503);
  CHECK(d.no_retry);
  CHECK(Decision::admit().admitted());
}

TEST_CASE("Retry-After is jittered and never synchronises clients", "[decision]") {
  // Sweep the injected draw: for a sub-second estimate values spread over 1..3.
  std::set<std::uint32_t> seen;
  for (int i = 0; i < 100; ++i) seen.insert(retry_after_seconds(50ms, i / 100.0));
  CHECK(seen.size() >= 2);
  CHECK(*seen.begin() == 1);
  CHECK(*seen.rbegin() <= 3);
  // A long drain estimate is never undercut and spreads by half of itself.
  for (int i = 0; i < 100; ++i) {
    auto v = retry_after_seconds(20s, i / 100.0);
    CHECK(v >= 20);
    CHECK(v <= 31);
  }
  CHECK(retry_after_seconds(20s, 0.0) != retry_after_seconds(20s, 0.99));
  CHECK(retry_after_seconds(-5s, 0.5) >= 1);
}

TEST_CASE("EWMA decays by real time, not by sample count", "[ewma]") {
  Ewma e(1s);
  SimClock clk;
  e.update(clk.now, 0.0);
  // 1000 samples of 1.0 in the same instant do not move it.
  for (int i = 0; i < 1000; ++i) e.update(clk.now, 1.0);
  CHECK(e.value() == 0.0);
  // One time constant later it has moved 1 - 1/e of the way.
  clk.advance(1s);
  e.update(clk.now, 1.0);
  CHECK_THAT(e.value(), Catch::Matchers::WithinAbs(1.0 - std::exp(-1.0), 1e-9));
}

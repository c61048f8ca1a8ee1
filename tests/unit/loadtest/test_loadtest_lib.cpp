#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_floating_point.hpp>
#include <random>

#include "../../../loadtest/lib/arrivals.hpp"
#include "../../../loadtest/lib/histogram.hpp"

using namespace levee::loadtest;
using Catch::Matchers::WithinAbs;
using Catch::Matchers::WithinRel;

TEST_CASE("histogram is exact below 1024 and within 0.2% above", "[histogram]") {
  for (std::uint64_t v = 0; v < 1024; ++v) REQUIRE(Histogram::upper_of(Histogram::index_of(v)) == v);
  std::mt19937_64 g(5);
  for (int i = 0; i < 100000; ++i) {
    std::uint64_t v = g() >> (g() % 40);
    auto up = Histogram::upper_of(Histogram::index_of(v));
    REQUIRE(up >= v);
    REQUIRE(static_cast<double>(up - v) <= 0.002 * static_cast<double>(v) + 1);
  }
  // Indexes are monotone in the value.
  std::size_t prev = 0;
  for (std::uint64_t v = 0; v < (1u << 24); v += 997) {
    auto i = Histogram::index_of(v);
    REQUIRE(i >= prev);
    prev = i;
  }
}

TEST_CASE("histogram quantiles", "[histogram]") {
  Histogram h;
  for (std::uint64_t v = 1; v <= 10000; ++v) h.record(v);
  CHECK(h.count() == 10000);
  CHECK_THAT(static_cast<double>(h.quantile(0.5)), WithinRel(5000.0, 0.003));
  CHECK_THAT(static_cast<double>(h.quantile(0.99)), WithinRel(9900.0, 0.003));
  CHECK(h.quantile(1.0) == 10000);
  CHECK(h.max() == 10000);
  CHECK_THAT(h.mean(), WithinAbs(5000.5, 1e-9));
  Histogram other;
  other.record(1000000);
  h.merge(other);
  CHECK(h.max() == 1000000);
  CHECK(h.count() == 10001);
  CHECK(Histogram().quantile(0.99) == 0);
}

TEST_CASE("constant-rate arrivals are evenly spaced per phase", "[arrivals]") {
  auto phases = parse_phases("1s@10,500ms@100");
  REQUIRE(phases);
  REQUIRE(phases->size() == 2);
  Arrivals a(*phases, false);
  std::vector<double> ts;
  while (auto t = a.next(0.5)) ts.push_back(*t);
  REQUIRE(ts.size() == 10 + 50);
  CHECK_THAT(ts[1] - ts[0], WithinAbs(0.1, 1e-9));
  CHECK_THAT(ts[10], WithinAbs(1.0, 1e-9));
  CHECK_THAT(ts[11] - ts[10], WithinAbs(0.01, 1e-9));
  CHECK(ts.back() < 1.5);
}

TEST_CASE("poisson arrivals have the right mean rate and exponential gaps", "[arrivals]") {
  Arrivals a({{100.0, 200.0}}, true);
  std::mt19937_64 g(9);
  std::uniform_real_distribution<double> U(0, 1);
  std::vector<double> gaps;
  double prev = 0;
  while (auto t = a.next(U(g))) {
    gaps.push_back(*t - prev);
    prev = *t;
  }
  CHECK_THAT(static_cast<double>(gaps.size()), WithinRel(20000.0, 0.03));
  // Exponential: the share of gaps longer than the mean is e^-1.
  double mean = 1.0 / 200;
  double longer = 0;
  for (double x : gaps) longer += x > mean;
  CHECK_THAT(longer / static_cast<double>(gaps.size()), WithinAbs(std::exp(-1.0), 0.01));
  // The injected draw decides: a fixed u gives fixed gaps.
  Arrivals b({{1.0, 10.0}}, true);
  auto t1 = b.next(0.5), t2 = b.next(0.5);
  CHECK_THAT(*t2 - *t1, WithinAbs(std::log(2.0) / 10.0, 1e-12));
}

TEST_CASE("phase and class specs are validated", "[arrivals]") {
  CHECK_FALSE(parse_phases(""));
  CHECK_FALSE(parse_phases("10s"));
  CHECK_FALSE(parse_phases("10x@5"));
  CHECK_FALSE(parse_phases("10s@-1"));
  auto c = parse_class("name=cp,weight=2,criticality=CRITICAL_PLUS,tenant=t,deadline=250ms,path=/x");
  REQUIRE(c);
  CHECK(c->name == "cp");
  CHECK(c->weight == 2);
  CHECK_THAT(c->deadline_s, WithinAbs(0.25, 1e-12));
  CHECK(c->path == "/x");
  CHECK_FALSE(parse_class("weight=1"));
  CHECK_FALSE(parse_class("name=a,bogus=1"));
  CHECK_FALSE(parse_class("name=a,deadline=soon"));
  std::vector<RequestClass> cls = {*parse_class("name=a,weight=1"), *parse_class("name=b,weight=3")};
  int b = 0;
  for (int i = 0; i < 1000; ++i) b += pick_class(cls, i / 1000.0) == 1;
  CHECK(b == 750);
}

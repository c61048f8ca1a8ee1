#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_floating_point.hpp>

#include "core/headers.hpp"
#include "sim_time.hpp"

using namespace levee::core;
using namespace levee::test;
using Catch::Matchers::WithinAbs;

TEST_CASE("grpc-timeout parses every unit and rejects junk", "[headers]") {
  CHECK(parse_grpc_timeout("100m") == Duration(100ms));
  CHECK(parse_grpc_timeout("2S") == Duration(2s));
  CHECK(parse_grpc_timeout("1H") == Duration(1h));
  CHECK(parse_grpc_timeout("3M") == Duration(3min));
  CHECK(parse_grpc_timeout("5u") == Duration(5us));
  CHECK(parse_grpc_timeout("7n") == Duration(7ns));
  CHECK_FALSE(parse_grpc_timeout("100"));
  CHECK_FALSE(parse_grpc_timeout("m"));
  CHECK_FALSE(parse_grpc_timeout("123456789S"));  // more than 8 digits
  CHECK_FALSE(parse_grpc_timeout("-1S"));
  CHECK_FALSE(parse_grpc_timeout("1x"));
}

TEST_CASE("grpc-timeout formatting round-trips within 8 digits", "[headers]") {
  char buf[16];
  for (Duration d : {Duration(1500ms), Duration(250us), Duration(3h), Duration(0ns), Duration(99999999ns), Duration(123456789ms)}) {
    auto n = format_grpc_timeout(d, buf);
    auto back = parse_grpc_timeout(std::string_view(buf, n));
    REQUIRE(back);
    CHECK(*back <= d);                 // never promises more time than there is
    CHECK(d - *back < d / 1000 + 1us);  // and loses at most a unit's rounding
  }
}

TEST_CASE("grpc-timeout beyond a year reads as a year instead of overflowing", "[headers]") {
  // 99999999H is a valid grpc-timeout and ~3.6e20 ns: more than int64 holds.
  CHECK(parse_grpc_timeout("99999999H") == kMaxHeaderTimeout);
  CHECK(parse_grpc_timeout("99999999M") == kMaxHeaderTimeout);
  CHECK(parse_grpc_timeout("2562048H") == kMaxHeaderTimeout);  // just past INT64_MAX ns
  CHECK(parse_grpc_timeout("8760H") == kMaxHeaderTimeout);      // exactly the cap
  CHECK(parse_grpc_timeout("8759H") == Duration(8759h));
  CHECK(parse_grpc_timeout("99999999S") == kMaxHeaderTimeout);  // ~3.2 years
  CHECK(parse_grpc_timeout("99999999m") == Duration(99999999ms));
}

TEST_CASE("grpc-retry-pushback-ms: negative or unparseable means don't retry (gRFC A6)", "[headers]") {
  CHECK_FALSE(pushback_says_no_retry("0"));
  CHECK_FALSE(pushback_says_no_retry("250"));
  CHECK_FALSE(pushback_says_no_retry("2147483647"));
  CHECK(pushback_says_no_retry("-1"));
  CHECK(pushback_says_no_retry("-2147483648"));
  CHECK(pushback_says_no_retry(""));
  CHECK(pushback_says_no_retry("soon"));
  CHECK(pushback_says_no_retry("1.5"));
  CHECK(pushback_says_no_retry("+5"));
  CHECK(pushback_says_no_retry("2147483648"));  // not a 32-bit value
  CHECK(pushback_says_no_retry("12ms"));
}

TEST_CASE("timeout and attempt headers", "[headers]") {
  CHECK(parse_timeout_ms("1500") == Duration(1500ms));
  CHECK(parse_timeout_ms(" 0 ") == Duration(0ms));
  CHECK_FALSE(parse_timeout_ms("1.5"));
  CHECK_FALSE(parse_timeout_ms("-3"));
  CHECK_FALSE(parse_timeout_ms("99999999999999999999"));
  CHECK(parse_attempt("3") == 3u);
  CHECK_FALSE(parse_attempt("three"));
  CHECK(pushback_says_no_retry("-1"));
  CHECK_FALSE(pushback_says_no_retry("100"));
}

TEST_CASE("ORCA TEXT form", "[headers][orca]") {
  LoadReport r;
  REQUIRE(parse_orca("TEXT cpu_utilization=0.3, mem_utilization=0.8, request_cost.cpu=0.012, named_metrics.x=5", r) == OrcaStatus::Ok);
  CHECK_THAT(*r.cpu_utilization, WithinAbs(0.3, 1e-12));
  CHECK_THAT(*r.cost_cpu, WithinAbs(0.012, 1e-12));
  CHECK_FALSE(r.application_utilization);
  CHECK_THAT(*r.utilization(), WithinAbs(0.3, 1e-12));
  LoadReport r2;
  REQUIRE(parse_orca("TEXT application_utilization=0.9,cpu_utilization=0.2", r2) == OrcaStatus::Ok);
  CHECK_THAT(*r2.utilization(), WithinAbs(0.9, 1e-12));
}

TEST_CASE("ORCA JSON form, snake and camel case", "[headers][orca]") {
  LoadReport r;
  REQUIRE(parse_orca(R"(JSON {"cpu_utilization": 0.5, "request_cost": {"cpu": 0.02, "db": 3}, "named_metrics": {"cpu": 99}, "tags": [1, "a", {"b": 2}], "ok": true})", r) == OrcaStatus::Ok);
  CHECK_THAT(*r.cpu_utilization, WithinAbs(0.5, 1e-12));
  CHECK_THAT(*r.cost_cpu, WithinAbs(0.02, 1e-12));  // not named_metrics.cpu
  LoadReport c;
  REQUIRE(parse_orca(R"(JSON {"applicationUtilization":0.7,"requestCost":{"cpu":1e-3}})", c) == OrcaStatus::Ok);
  CHECK_THAT(*c.application_utilization, WithinAbs(0.7, 1e-12));
  CHECK_THAT(*c.cost_cpu, WithinAbs(0.001, 1e-12));
}

TEST_CASE("ORCA garbage is reported, never half-used", "[headers][orca]") {
  LoadReport r;
  r.cost_cpu = 9.0;
  CHECK(parse_orca("TEXT cpu_utilization=abc", r) == OrcaStatus::Malformed);
  CHECK(parse_orca("TEXT request_cost.cpu=-1", r) == OrcaStatus::Malformed);
  CHECK(parse_orca("TEXT request_cost.cpu=nan", r) == OrcaStatus::Malformed);
  CHECK(parse_orca("TEXT noequals", r) == OrcaStatus::Malformed);
  CHECK(parse_orca("JSON {\"cpu_utilization\": }", r) == OrcaStatus::Malformed);
  CHECK(parse_orca("JSON {\"a\": 1", r) == OrcaStatus::Malformed);
  CHECK(parse_orca("JSON [[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]", r) == OrcaStatus::Malformed);
  CHECK(parse_orca("BIN AAAA", r) == OrcaStatus::Unsupported);
  CHECK(parse_orca("", r) == OrcaStatus::Malformed);
  CHECK(*r.cost_cpu == 9.0);  // untouched
}

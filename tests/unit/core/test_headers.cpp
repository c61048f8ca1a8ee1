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


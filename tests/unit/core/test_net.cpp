#include <catch2/catch_test_macros.hpp>

#include "core/net.hpp"

using namespace levee::core;

TEST_CASE("networks parse in both families, IPv4 stored IPv4-mapped", "[net]") {
  auto v4 = parse_network("10.0.0.0/8");
  REQUIRE(v4);
  CHECK(v4->contains(*parse_address("10.200.3.4")));
  CHECK_FALSE(v4->contains(*parse_address("11.0.0.1")));
  auto v6 = parse_network("fd00::/8");
  REQUIRE(v6);
  CHECK(v6->contains(*parse_address("fd12:3456::1")));
  CHECK_FALSE(v6->contains(*parse_address("::1")));
  CHECK(*parse_address("::ffff:10.1.2.3") == *parse_address("10.1.2.3"));
  CHECK(parse_network("127.0.0.1")->prefix == 128);  // a host
  CHECK(ipv4_mapped({192, 168, 0, 1}) == *parse_address("192.168.0.1"));
  CHECK_FALSE(parse_network("10.0.0.0/33"));
  CHECK_FALSE(parse_network("1:2:3"));
  CHECK_FALSE(parse_network("300.1.1.1"));
  CHECK_FALSE(parse_network("1::2::3"));
  CHECK_FALSE(parse_network("10.0.0.0/x"));
}

TEST_CASE("trusted sources: none by default, any when asked", "[net]") {
  TrustedSources none;
  CHECK_FALSE(none.contains(*parse_address("127.0.0.1")));
  TrustedSources lo{{*parse_network("127.0.0.0/8"), *parse_network("::1/128")}, false, {}};
  CHECK(lo.contains(*parse_address("127.9.9.9")));
  CHECK(lo.contains(*parse_address("::1")));
  CHECK_FALSE(lo.contains(*parse_address("10.0.0.1")));
  TrustedSources any{{}, true, {}};
  CHECK(any.contains(*parse_address("203.0.113.7")));
}

TEST_CASE("connections per source: a cap per address, freed as they end", "[net]") {
  SourceCounts c;
  const Address a = *parse_address("10.0.0.1"), b = *parse_address("2001:db8::1");
  CHECK(c.enter(a, 2));
  CHECK(c.enter(a, 2));
  CHECK_FALSE(c.enter(a, 2));  // a's share is full
  CHECK(c.enter(b, 2));        // b has its own
  CHECK(c.sources() == 2);
  c.leave(a);
  CHECK(c.enter(a, 2));  // one ended: one more fits
  CHECK_FALSE(c.enter(a, 2));
  c.leave(a);
  c.leave(a);
  c.leave(b);
  CHECK(c.sources() == 0);  // nothing left behind for addresses gone
  c.leave(a);               // a leave with nothing counted changes nothing
  CHECK(c.sources() == 0);
  // No cap: nothing is counted, and a later leave (the cap lifted by a
  // reload meanwhile) is harmless.
  CHECK(c.enter(a, 0));
  CHECK(c.sources() == 0);
  c.leave(a);
  CHECK(c.sources() == 0);
}

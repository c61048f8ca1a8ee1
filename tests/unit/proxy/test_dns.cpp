// The DNS wire format levee's resolver speaks (src/control/dns.hpp).
#include <catch2/catch_test_macros.hpp>

#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include "control/dns.hpp"

using namespace levee::control;

namespace {

using Bytes = std::vector<std::uint8_t>;

void put16(Bytes& b, std::uint16_t v) {
  b.push_back(static_cast<std::uint8_t>(v >> 8));
  b.push_back(static_cast<std::uint8_t>(v));
}
void put32(Bytes& b, std::uint32_t v) {
  put16(b, static_cast<std::uint16_t>(v >> 16));
  put16(b, static_cast<std::uint16_t>(v));
}

/// A response to `id`: the question for svc.test, then `records`, each
/// (type, ttl, rdata) with a pointer to the question's name.
Bytes response(std::uint16_t id, std::uint16_t flags, const std::vector<std::tuple<std::uint16_t, std::uint32_t, Bytes>>& records) {
  Bytes b;
  put16(b, id);
  put16(b, flags);
  put16(b, 1);
  put16(b, static_cast<std::uint16_t>(records.size()));
  put16(b, 0);
  put16(b, 0);
  for (const char* label : {"svc", "test"}) {
    b.push_back(static_cast<std::uint8_t>(std::string(label).size()));
    for (const char* c = label; *c; ++c) b.push_back(static_cast<std::uint8_t>(*c));
  }
  b.push_back(0);
  put16(b, dns::kA);
  put16(b, 1);
  for (const auto& [type, ttl, rdata] : records) {
    put16(b, 0xC00C);
    put16(b, type);
    put16(b, 1);
    put32(b, ttl);
    put16(b, static_cast<std::uint16_t>(rdata.size()));
    b.insert(b.end(), rdata.begin(), rdata.end());
  }
  return b;
}

}  // namespace

TEST_CASE("a query asks recursively for one name and type, with EDNS0", "[dns]") {
  const auto q = dns::build_query(0x1234, "svc.test", dns::kAAAA);
  REQUIRE(q.size() == 12 + 10 + 4 + 11);
  CHECK(q[0] == 0x12);
  CHECK(q[1] == 0x34);
  CHECK(q[2] == 0x01);  // RD
  CHECK(q[5] == 1);     // one question
  CHECK(q[11] == 1);    // one additional record (OPT)
  const Bytes name = {3, 's', 'v', 'c', 4, 't', 'e', 's', 't', 0};
  CHECK(Bytes(q.begin() + 12, q.begin() + 22) == name);
  CHECK(q[22] == 0);
  CHECK(q[23] == 28);  // AAAA
  CHECK(q[26] == 0);   // OPT: root name
  CHECK(q[28] == 41);  // type OPT
}

TEST_CASE("names that are not DNS names give no query", "[dns]") {
  CHECK(dns::build_query(1, "a..b", dns::kA).empty());
  CHECK(dns::build_query(1, "", dns::kA).empty());
  CHECK(dns::build_query(1, std::string(64, 'x') + ".test", dns::kA).empty());
  CHECK_FALSE(dns::build_query(1, std::string(63, 'x') + ".test", dns::kA).empty());
}

TEST_CASE("a response gives its addresses, sorted and unique, and the shortest TTL", "[dns]") {
  const auto r = response(7, 0x8180,
                          {{dns::kA, 30, {127, 0, 0, 3}},
                           {dns::kA, 10, {127, 0, 0, 2}},
                           {dns::kA, 20, {127, 0, 0, 3}},
                           // A CNAME in the chain is skipped: only address records count.
                           {5, 5, {0xC0, 0x0C}}});
  auto a = dns::parse_response(r, 7, dns::kA);
  REQUIRE(a);
  CHECK(a->rcode == 0);
  CHECK(a->addresses == std::vector<std::string>{"127.0.0.2", "127.0.0.3"});
  CHECK(a->ttl == 10);
}

TEST_CASE("what is not the answer to the query is not taken", "[dns]") {
  const auto r = response(7, 0x8180, {{dns::kA, 30, {127, 0, 0, 2}}});
  CHECK_FALSE(dns::parse_response(r, 8, dns::kA));  // another id
  auto query_flags = r;
  query_flags[2] = 0x01;  // QR clear: a query, not a response
  CHECK_FALSE(dns::parse_response(query_flags, 7, dns::kA));
  const Bytes cut(r.begin(), r.end() - 2);  // rdata runs past the end
  CHECK_FALSE(dns::parse_response(cut, 7, dns::kA));
  CHECK_FALSE(dns::parse_response(Bytes{0, 7}, 7, dns::kA));
  // Records of another type than asked for are not addresses.
  auto other = dns::parse_response(r, 7, dns::kAAAA);
  REQUIRE(other);
  CHECK(other->addresses.empty());
}

TEST_CASE("NXDOMAIN and SERVFAIL are answers without addresses", "[dns]") {
  auto nx = dns::parse_response(response(9, 0x8183, {}), 9, dns::kA);
  REQUIRE(nx);
  CHECK(nx->rcode == 3);
  CHECK(nx->addresses.empty());
  auto sf = dns::parse_response(response(9, 0x8182, {}), 9, dns::kA);
  REQUIRE(sf);
  CHECK(sf->rcode == 2);
  auto tc = dns::parse_response(response(9, 0x8380, {}), 9, dns::kA);
  REQUIRE(tc);
  CHECK(tc->truncated);
}

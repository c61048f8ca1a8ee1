// ORCA load reports with the header strings real servers send: vLLM's
// create_orca_header, the ORCA specification's examples (spaces after the
// commas), and the protobuf form grpc-go sends in trailers.
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_floating_point.hpp>

#include <cstring>
#include <string>

#include "core/orca.hpp"

using namespace levee::core;
using Catch::Matchers::WithinAbs;
using Kind = OrcaMetric::Kind;

namespace {

OrcaSelection select(std::string_view utilization, std::string_view cost = "request_cost.cpu") {
  OrcaSelection s;
  if (!utilization.empty()) s.utilization = *parse_orca_metric(utilization);
  s.cost = *parse_orca_metric(cost);
  return s;
}

// An encoder for the test only, written from the protobuf wire format, so
// that the decoder is checked against something it does not share code with.
struct Pb {
  std::string out;
  void varint(std::uint64_t v) {
    do {
      unsigned char b = v & 0x7f;
      v >>= 7;
      if (v) b |= 0x80;
      out.push_back(static_cast<char>(b));
    } while (v);
  }
  void tag(int field, int wt) { varint(static_cast<std::uint64_t>(field << 3 | wt)); }
  void dbl(int field, double d) {
    tag(field, 1);
    std::uint64_t bits;
    std::memcpy(&bits, &d, 8);
    for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>(bits >> (8 * i)));
  }
  void entry(int field, std::string_view key, double v) {
    Pb e;
    e.tag(1, 2);
    e.varint(key.size());
    e.out += key;
    e.dbl(2, v);
    tag(field, 2);
    varint(e.out.size());
    out += e.out;
  }
};

std::string base64(std::string_view bytes, bool pad) {
  static constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string s;
  std::size_t i = 0;
  for (; i + 2 < bytes.size(); i += 3) {
    const auto n = static_cast<unsigned char>(bytes[i]) << 16 | static_cast<unsigned char>(bytes[i + 1]) << 8 |
                   static_cast<unsigned char>(bytes[i + 2]);
    for (int k = 18; k >= 0; k -= 6) s.push_back(kAlphabet[(n >> k) & 63]);
  }
  const std::size_t rest = bytes.size() - i;
  if (rest > 0) {
    unsigned n = static_cast<unsigned char>(bytes[i]) << 16;
    if (rest == 2) n |= static_cast<unsigned char>(bytes[i + 1]) << 8;
    s.push_back(kAlphabet[(n >> 18) & 63]);
    s.push_back(kAlphabet[(n >> 12) & 63]);
    if (rest == 2) s.push_back(kAlphabet[(n >> 6) & 63]);
    if (pad) s.append(rest == 1 ? "==" : "=");
  }
  return s;
}

}  // namespace

TEST_CASE("ORCA metric names for the configuration", "[orca]") {
  CHECK(parse_orca_metric("cpu_utilization") == OrcaMetric{Kind::Cpu, ""});
  CHECK(parse_orca_metric("application_utilization") == OrcaMetric{Kind::Application, ""});
  CHECK(parse_orca_metric("named_metrics.kv_cache_usage_perc") == OrcaMetric{Kind::Named, "kv_cache_usage_perc"});
  CHECK(parse_orca_metric("request_cost.cpu") == OrcaMetric{Kind::RequestCost, "cpu"});
  CHECK(parse_orca_metric("utilization.gpu") == OrcaMetric{Kind::Utilization, "gpu"});
  CHECK_FALSE(parse_orca_metric("named_metrics."));
  CHECK_FALSE(parse_orca_metric("kv_cache_usage_perc"));
  CHECK_FALSE(parse_orca_metric("rps"));  // deprecated: known, but nothing to select
  CHECK_FALSE(parse_orca_metric(""));
}

TEST_CASE("vLLM's TEXT and JSON reports, KV-cache usage as the utilization", "[orca]") {
  const auto sel = select("named_metrics.kv_cache_usage_perc");
  LoadReport t;
  REQUIRE(parse_orca("TEXT named_metrics.kv_cache_usage_perc=0.4, named_metrics.num_requests_waiting=2.0", t, sel) ==
          OrcaStatus::Ok);
  CHECK_THAT(*t.utilization(), WithinAbs(0.4, 1e-12));
  CHECK_FALSE(t.cpu_utilization);
  CHECK_FALSE(t.cost);
  CHECK(t.unknown == 0);
  CHECK(t.malformed == 0);
  LoadReport j;
  REQUIRE(parse_orca(R"(JSON {"named_metrics": {"kv_cache_usage_perc": 0.4, "num_requests_waiting": 2.0}})", j, sel) ==
          OrcaStatus::Ok);
  CHECK_THAT(*j.utilization(), WithinAbs(0.4, 1e-12));
  CHECK(j.unknown == 0);
  // The queue length as the utilization instead: any named metric will do.
  LoadReport q;
  REQUIRE(parse_orca("TEXT named_metrics.kv_cache_usage_perc=0.4, named_metrics.num_requests_waiting=2.0", q,
                     select("named_metrics.num_requests_waiting")) == OrcaStatus::Ok);
  CHECK_THAT(*q.utilization(), WithinAbs(2.0, 1e-12));
}

TEST_CASE("the ORCA specification's examples", "[orca]") {
  const auto sel = select("named_metrics.custom_metric_util");
  LoadReport t;
  REQUIRE(parse_orca("TEXT cpu_utilization=0.3, mem_utilization=0.8, rps_fractional=10.0, eps=1, "
                     "named_metrics.custom_metric_util=0.4",
                     t, sel) == OrcaStatus::Ok);
  CHECK_THAT(*t.cpu_utilization, WithinAbs(0.3, 1e-12));
  CHECK_THAT(*t.mem_utilization, WithinAbs(0.8, 1e-12));
  CHECK_THAT(*t.utilization(), WithinAbs(0.4, 1e-12));
  CHECK(t.unknown == 0);
  CHECK(t.malformed == 0);

  LoadReport j;
  REQUIRE(parse_orca(R"(JSON {"cpu_utilization": 0.3, "mem_utilization": 0.8, "rps_fractional": 10.0, "eps": 1, )"
                     R"("named_metrics": {"custom-metric-util": 0.4}})",
                     j, select("named_metrics.custom-metric-util")) == OrcaStatus::Ok);
  CHECK_THAT(*j.cpu_utilization, WithinAbs(0.3, 1e-12));
  CHECK_THAT(*j.utilization(), WithinAbs(0.4, 1e-12));
  CHECK(j.unknown == 0);

  // BIN: cpu_utilization 0.1, rps_fractional 2, named_metrics {foo: 0.1, bar: 0.2}.
  LoadReport b;
  REQUIRE(parse_orca("BIN CZqZmZmZmbk/MQAAAAAAAABAQg4KA2ZvbxGamZmZmZm5P0IOCgNiYXIRmpmZmZmZyT8=", b,
                     select("named_metrics.bar")) == OrcaStatus::Ok);
  CHECK_THAT(*b.cpu_utilization, WithinAbs(0.1, 1e-12));
  CHECK_THAT(*b.utilization(), WithinAbs(0.2, 1e-12));
  CHECK(b.unknown == 0);
  // Without a selection: application_utilization, else cpu_utilization.
  LoadReport d;
  REQUIRE(parse_orca("BIN CZqZmZmZmbk/MQAAAAAAAABAQg4KA2ZvbxGamZmZmZm5P0IOCgNiYXIRmpmZmZmZyT8=", d) == OrcaStatus::Ok);
  CHECK_THAT(*d.utilization(), WithinAbs(0.1, 1e-12));
}

TEST_CASE("the binary form as grpc-go sends it: endpoint-load-metrics-bin, unpadded", "[orca]") {
  Pb pb;
  pb.dbl(1, 0.5);                    // cpu_utilization
  pb.entry(4, "cpu", 0.002);         // request_cost
  pb.entry(5, "gpu", 0.75);          // utilization
  pb.dbl(9, 0.7);                    // application_utilization
  pb.entry(8, "queue", 3.0);         // named_metrics
  pb.tag(3, 0);                      // rps, deprecated
  pb.varint(12);
  pb.tag(15, 2);                     // a field this reader does not know
  pb.varint(2);
  pb.out += "xy";
  for (bool pad : {false, true}) {
    const std::string b64 = base64(pb.out, pad);
    INFO(b64);
    LoadReport r;
    REQUIRE(parse_orca_bin(b64, r) == OrcaStatus::Ok);
    CHECK_THAT(*r.cpu_utilization, WithinAbs(0.5, 1e-12));
    CHECK_THAT(*r.utilization(), WithinAbs(0.7, 1e-12));  // application_utilization wins
    CHECK_THAT(*r.cost, WithinAbs(0.002, 1e-12));
    CHECK(r.unknown == 1);
    LoadReport g;
    REQUIRE(parse_orca_bin(b64, g, select("utilization.gpu", "named_metrics.queue")) == OrcaStatus::Ok);
    CHECK_THAT(*g.utilization(), WithinAbs(0.75, 1e-12));
    CHECK_THAT(*g.cost, WithinAbs(3.0, 1e-12));
  }
  // Map entries in either order, the value before the key.
  Pb rev;
  Pb e;
  e.dbl(2, 0.25);
  e.tag(1, 2);
  e.varint(3);
  e.out += "cpu";
  rev.tag(4, 2);
  rev.varint(e.out.size());
  rev.out += e.out;
  LoadReport r;
  REQUIRE(parse_orca_bin(base64(rev.out, true), r) == OrcaStatus::Ok);
  CHECK_THAT(*r.cost, WithinAbs(0.25, 1e-12));
}

TEST_CASE("unknown and malformed metrics are ignored and counted; the rest is used", "[orca]") {
  LoadReport r;
  REQUIRE(parse_orca("TEXT cpu_utilization=0.3, foo=1, request_cost.cpu=-1, mem_utilization=abc, noequals, "
                     "application_utilization=nan, named_metrics.x=1e999, rps=-1, rps_fractional=2.5",
                     r) == OrcaStatus::Ok);
  CHECK_THAT(*r.cpu_utilization, WithinAbs(0.3, 1e-12));
  CHECK_FALSE(r.cost);
  CHECK_FALSE(r.mem_utilization);
  CHECK_FALSE(r.application_utilization);
  CHECK(r.unknown == 1);
  CHECK(r.malformed == 6);  // rps is known and unused, and still checked (fuzz_orca: regress-negative-rps)
  LoadReport j;
  REQUIRE(parse_orca(R"(JSON {"cpuUtilization": 0.5, "requestCost": {"cpu": 1e-3, "db": "x"}, "tags": [1, "a", {"b": 2}], "ok": true, "eps": -2})",
                     j) == OrcaStatus::Ok);
  CHECK_THAT(*j.cpu_utilization, WithinAbs(0.5, 1e-12));
  CHECK_THAT(*j.cost, WithinAbs(0.001, 1e-12));
  CHECK(j.unknown == 2);    // tags, ok
  CHECK(j.malformed == 2);  // db as a string, a negative eps
  // An empty report is a report.
  LoadReport e;
  CHECK(parse_orca("TEXT", e) == OrcaStatus::Ok);
  CHECK(e.empty());
}

TEST_CASE("a report whose framing cannot be read is malformed and leaves the old one", "[orca]") {
  LoadReport r;
  r.cost = 9.0;
  for (std::string_view bad : {"", "XML <load/>", "TEXTcpu_utilization=1", "JSON {\"cpu_utilization\": }",
                               "JSON {\"a\": 1", "JSON [[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]",
                               "JSON {\"cpu_utilization\": 0.5} trailing", "BIN ***", "BIN A"}) {
    INFO(bad);
    CHECK(parse_orca(bad, r) == OrcaStatus::Malformed);
  }
  Pb truncated;
  truncated.dbl(1, 0.5);
  truncated.out.pop_back();
  CHECK(parse_orca_bin(base64(truncated.out, true), r) == OrcaStatus::Malformed);
  Pb group;
  group.tag(10, 3);  // a group: not proto3
  CHECK(parse_orca_bin(base64(group.out, true), r) == OrcaStatus::Malformed);
  Pb overlong;
  overlong.tag(8, 2);
  overlong.varint(100);  // an entry longer than what follows
  overlong.out += "ab";
  CHECK(parse_orca_bin(base64(overlong.out, true), r) == OrcaStatus::Malformed);
  CHECK(parse_orca_bin(std::string(9000, 'A'), r) == OrcaStatus::Malformed);  // longer than a report can be
  CHECK(*r.cost == 9.0);  // untouched
}

TEST_CASE("a known field with the wrong wire type is a malformed metric, not a broken report", "[orca]") {
  Pb pb;
  pb.tag(1, 0);  // cpu_utilization as a varint
  pb.varint(1);
  pb.dbl(2, 0.6);
  LoadReport r;
  REQUIRE(parse_orca_bin(base64(pb.out, false), r) == OrcaStatus::Ok);
  CHECK_FALSE(r.cpu_utilization);
  CHECK_THAT(*r.mem_utilization, WithinAbs(0.6, 1e-12));
  CHECK(r.malformed == 1);
}

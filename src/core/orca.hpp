// ORCA load reports (xds.data.orca.v3.OrcaLoadReport) as backends send
// them in a response header or trailer:
//
//   endpoint-load-metrics: TEXT cpu_utilization=0.3, named_metrics.kv_cache_usage_perc=0.4
//   endpoint-load-metrics: JSON {"named_metrics": {"kv_cache_usage_perc": 0.4}}
//   endpoint-load-metrics: BIN <base64 of the protobuf>
//   endpoint-load-metrics-bin: <base64 of the protobuf>      (gRPC servers, often in trailers)
//
// vLLM and Triton send the header only when the request asked for it with
// `endpoint-load-metrics-format: text` (or json); grpc-go sends the binary
// form in trailers.
//
// The reader picks out what levee uses and nothing else, without
// allocating: the standard utilizations, plus the two metrics a cluster
// chose (which one is the endpoint's utilization, e.g. KV-cache usage on an
// inference backend, and which one is the request's cost). A metric that is
// not in the schema, or whose value is not a finite non-negative number, is
// ignored and counted; only a report whose framing cannot be read (an
// unknown prefix, broken JSON, bad base64 or protobuf) is Malformed.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace levee::core {

/// One metric of a report: a standard field or an entry of one of its maps.
struct OrcaMetric {
  enum class Kind : std::uint8_t {
    None,
    Cpu,             ///< cpu_utilization
    Mem,             ///< mem_utilization
    Application,     ///< application_utilization
    RpsFractional,   ///< rps_fractional
    Eps,             ///< eps
    RequestCost,     ///< request_cost.<name>
    Utilization,     ///< utilization.<name>
    Named,           ///< named_metrics.<name>
  };
  Kind kind = Kind::None;
  std::string name;  ///< the map key, for the three maps

  bool operator==(const OrcaMetric&) const = default;
};

/// "cpu_utilization", "named_metrics.kv_cache_usage_perc", "request_cost.cpu", ...
std::optional<OrcaMetric> parse_orca_metric(std::string_view s);

/// What a cluster reads from its backends' reports.
struct OrcaSelection {
  /// The endpoint's utilization; None: application_utilization when the
  /// backend gives it (it knows best), else cpu_utilization.
  OrcaMetric utilization;
  /// The request's cost in CPU-seconds (tenant quotas).
  OrcaMetric cost{OrcaMetric::Kind::RequestCost, "cpu"};
};

struct LoadReport {
  std::optional<double> cpu_utilization;
  std::optional<double> mem_utilization;
  std::optional<double> application_utilization;
  std::optional<double> selected_utilization;  ///< the selection's utilization metric
  std::optional<double> cost;                  ///< the selection's cost metric
  std::uint16_t unknown = 0;    ///< metrics not in the schema, ignored
  std::uint16_t malformed = 0;  ///< metrics whose value was not a finite number >= 0, ignored

  /// The utilization levee balances on and reads overload from.
  std::optional<double> utilization() const noexcept {
    if (selected_utilization) return selected_utilization;
    return application_utilization ? application_utilization : cpu_utilization;
  }
  bool empty() const noexcept { return !cpu_utilization && !mem_utilization && !application_utilization && !cost; }
};

enum class OrcaStatus : std::uint8_t { Ok, Malformed };

/// `endpoint-load-metrics`: TEXT, JSON or BIN, by its prefix (any case).
/// `out` is written only when the report is Ok.
OrcaStatus parse_orca(std::string_view value, LoadReport& out, const OrcaSelection& sel = {}) noexcept;

/// `endpoint-load-metrics-bin`: base64 (padded or not) of the protobuf.
OrcaStatus parse_orca_bin(std::string_view base64, LoadReport& out, const OrcaSelection& sel = {}) noexcept;

}  // namespace levee::core

// Section parsers and schema helpers shared by the loader's files:
// loader.cpp (the top level, listeners, routes, tenants, fleet quotas) and
// clusters.cpp (clusters, endpoints, load reports). Internal to src/config.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "config/reader.hpp"

namespace levee::config::detail {

/// Text levee writes into a request head itself (a path, a host): no
/// spaces or control characters, so it cannot split the line it is in.
bool fits_request_head(std::string_view s);
/// "host:port" or "[v6]:port".
bool split_host_port(std::string_view s, std::string& host, std::uint16_t& port);
/// `quotas`: tenant name -> CPU-seconds per second.
void read_quota_map(Ctx& ctx, const YAML::Node& n, const std::string& path,
                    std::vector<std::pair<std::string, double>>& out);
/// One entry of `clusters` (clusters.cpp).
void read_cluster(Ctx& ctx, const YAML::Node& n, const std::string& path, ClusterConfig& c);

}  // namespace levee::config::detail

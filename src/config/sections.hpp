// Section parsers and schema helpers shared by the loader's files:
// loader.cpp (the top level, tenants, fleet quotas), listeners.cpp
// (listeners, routes, the admin listener) and clusters.cpp (clusters,
// endpoints, load reports). Internal to src/config.
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
/// A header name levee reads or writes: an HTTP token.
void check_header_name(Ctx& ctx, const YAML::Node& n, const std::string& path, const std::string& name);
/// Where a tenant is taken from (a listener's, a route's, `tenants`').
void read_tenant_source(Ctx& ctx, const YAML::Node& n, const std::string& path, TenantSource& out);
/// One entry of `listeners`, with its routes (listeners.cpp).
void read_listener(Ctx& ctx, const YAML::Node& n, const std::string& path, ListenerConfig& l);
/// `admin` (listeners.cpp); nothing when n is undefined.
void read_admin(Ctx& ctx, const YAML::Node& n, AdminConfig& a);
/// One entry of `clusters` (clusters.cpp).
void read_cluster(Ctx& ctx, const YAML::Node& n, const std::string& path, ClusterConfig& c);

}  // namespace levee::config::detail

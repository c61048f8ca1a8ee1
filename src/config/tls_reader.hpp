// The edge's section parsers (src/config/tls.cpp), called from loader.cpp:
// each reads its own keys from a mapping the loader is walking, so the
// loader names them once and unknown-key detection stays whole.
#pragma once

#include "config/reader.hpp"

namespace levee::config::detail {

/// Listener keys `tls`, `trust`.
void read_listener_edge(Ctx& ctx, Map& m, ListenerConfig& l);
/// Route key `untrusted_criticality`.
void read_route_edge(Ctx& ctx, Map& m, RouteConfig& r);
/// Tenant-source keys `certificate_tenants`, `from_certificate`.
void read_tenant_edge(Ctx& ctx, Map& m, TenantSource& t);
/// Cluster key `tls`.
void read_cluster_edge(Ctx& ctx, Map& m, ClusterConfig& c);
/// What only the whole file tells: each listener's default trust (by its
/// address), and that certificate identities need client certificates.
void validate_edge(Ctx& ctx, const YAML::Node& root, Config& cfg);

}  // namespace levee::config::detail

// The listeners' sections: each proxy listener with its routes, and the
// admin listener. Part of the loader (loader.cpp has the top level); the
// edge settings of both (tls, trust) are in tls.cpp.
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <string>

#include "config/config.hpp"
#include "config/reader.hpp"
#include "config/sections.hpp"
#include "config/tls_reader.hpp"
#include "core/text.hpp"

namespace levee::config::detail {

namespace {

void read_route(Ctx& ctx, const YAML::Node& n, const std::string& path, RouteConfig& r) {
  Map m(ctx, n, path);
  if (!m.valid()) {
    // An empty item (`- ` alone, or one whose keys are commented out) is a
    // route with no cluster, not a route to skip.
    if (n.IsNull()) ctx.error(n, path, "must be a route (at least `cluster`)");
    return;
  }
  read(ctx, m.take("name"), m.sub("name"), r.name);
  if (auto mt = m.take("match"); mt.IsDefined()) {
    Map mm(ctx, mt, m.sub("match"));
    read(ctx, mm.take("host"), mm.sub("host"), r.host);
    auto pn = mm.take("prefix");
    read(ctx, pn, mm.sub("prefix"), r.prefix);
    if (pn.IsDefined() && (r.prefix.empty() || r.prefix.front() != '/'))
      ctx.error(pn, mm.sub("prefix"), "must start with '/'");
    for (auto& c : r.host) c = core::ascii_lower(c);
  }
  auto cn = m.take("cluster");
  if (!cn.IsDefined()) ctx.error(n, m.sub("cluster"), "is required");
  read(ctx, cn, m.sub("cluster"), r.cluster);
  if (cn.IsDefined() && cn.IsScalar() && r.cluster.empty()) ctx.error(cn, m.sub("cluster"), "must not be empty");
  if (auto c = m.take("criticality"); c.IsDefined()) {
    Criticality v{};
    read_criticality(ctx, c, m.sub("criticality"), v);
    r.criticality = v;
  }
  read_duration(ctx, m.take("timeout"), m.sub("timeout"), r.timeout, std::chrono::milliseconds(1),
                std::chrono::hours(24));
  if (auto t = m.take("tenant"); t.IsDefined()) {
    r.tenant.emplace();
    read_tenant_source(ctx, t, m.sub("tenant"), *r.tenant);
  }
  read_bool(ctx, m.take("fuse"), m.sub("fuse"), r.fuse);
  read_route_edge(ctx, m, r);  // config/tls.cpp
}

}  // namespace

void read_listener(Ctx& ctx, const YAML::Node& n, const std::string& path, ListenerConfig& l) {
  Map m(ctx, n, path);
  read(ctx, m.take("name"), m.sub("name"), l.name);
  read(ctx, m.take("address"), m.sub("address"), l.address);
  auto pn = m.take("port");
  if (!pn.IsDefined()) ctx.error(n, m.sub("port"), "is required");
  read_uint(ctx, pn, m.sub("port"), l.port, 1, 65535);
  if (auto md = m.take("mode"); md.IsDefined() && scalar(ctx, md, m.sub("mode"), "normal or batch")) {
    if (md.Scalar() == "normal") l.mode = ListenerConfig::Mode::Normal;
    else if (md.Scalar() == "batch") {
      l.mode = ListenerConfig::Mode::Batch;
      l.default_criticality = Criticality::SheddablePlus;
    } else ctx.error(md, m.sub("mode"), "must be normal or batch, not '" + md.Scalar() + "'");
  }
  read_uint(ctx, m.take("max_connections"), m.sub("max_connections"), l.max_connections, 1, 10000000);
  read_uint(ctx, m.take("max_connections_per_source"), m.sub("max_connections_per_source"),
            l.max_connections_per_source, 0, 10000000);
  read_double(ctx, m.take("accept_rate"), m.sub("accept_rate"), l.accept_rate, 0.0, 1e9);
  read_duration(ctx, m.take("header_timeout"), m.sub("header_timeout"), l.header_timeout,
                std::chrono::milliseconds(1), std::chrono::hours(1));
  read_duration(ctx, m.take("idle_timeout"), m.sub("idle_timeout"), l.idle_timeout,
                std::chrono::milliseconds(1), std::chrono::hours(24));
  read_duration(ctx, m.take("body_timeout"), m.sub("body_timeout"), l.body_timeout,
                std::chrono::milliseconds(1), std::chrono::hours(24));
  read_uint(ctx, m.take("min_rate"), m.sub("min_rate"), l.min_rate, 0, 1u << 30);
  read_duration(ctx, m.take("min_rate_grace"), m.sub("min_rate_grace"), l.min_rate_grace, Duration::zero(),
                std::chrono::hours(1));
  read_uint(ctx, m.take("max_header_bytes"), m.sub("max_header_bytes"), l.max_header_bytes, 1024, 1u << 20);
  read_duration(ctx, m.take("shed_backoff"), m.sub("shed_backoff"), l.shed_backoff, Duration::zero(),
                std::chrono::seconds(10));
  read_uint(ctx, m.take("max_request_line"), m.sub("max_request_line"), l.max_request_line, 64, 1u << 20);
  read_uint(ctx, m.take("max_headers"), m.sub("max_headers"), l.max_headers, 8, 1000);
  read_criticality(ctx, m.take("criticality"), m.sub("criticality"), l.default_criticality);
  if (auto t = m.take("tenant"); t.IsDefined()) {
    l.tenant.emplace();
    read_tenant_source(ctx, t, m.sub("tenant"), *l.tenant);
  }
  if (auto f = m.take("fuse"); f.IsDefined()) {
    Map fm(ctx, f, m.sub("fuse"));
    read_uint(ctx, fm.take("connections_per_endpoint"), fm.sub("connections_per_endpoint"),
              l.fuse.connections_per_endpoint, 1, 10000);
    read_uint(ctx, fm.take("queue"), fm.sub("queue"), l.fuse.queue, 0, 1000000);
    read_duration(ctx, fm.take("queue_timeout"), fm.sub("queue_timeout"), l.fuse.queue_timeout,
                  std::chrono::milliseconds(1), std::chrono::hours(1));
  }
  if (auto h = m.take("http2"); h.IsDefined()) {
    Map hm(ctx, h, m.sub("http2"));
    auto& c = l.http2;
    read_bool(ctx, hm.take("enabled"), hm.sub("enabled"), c.enabled);
    read_uint(ctx, hm.take("max_concurrent_streams"), hm.sub("max_concurrent_streams"), c.max_concurrent_streams, 1,
              10000);
    read_uint(ctx, hm.take("initial_window"), hm.sub("initial_window"), c.initial_window, 1024, (1u << 31) - 1);
    read_uint(ctx, hm.take("max_queued_streams"), hm.sub("max_queued_streams"), c.max_queued_streams, 1, 10000);
    read_uint(ctx, hm.take("max_resets_per_second"), hm.sub("max_resets_per_second"), c.max_resets_per_second, 1,
              1000000);
    read_uint(ctx, hm.take("max_control_per_second"), hm.sub("max_control_per_second"), c.max_control_per_second, 1,
              1000000);
  }
  read_listener_edge(ctx, m, l);  // tls, trust: config/tls.cpp
  auto rn = m.take("routes");
  if (!rn.IsDefined()) {
    ctx.error(n, m.sub("routes"), "is required (at least one route)");
  } else if (!rn.IsSequence() || rn.size() == 0) {
    ctx.error(rn, m.sub("routes"), "must be a non-empty list of routes");
  } else {
    for (std::size_t i = 0; i < rn.size(); ++i) {
      RouteConfig r;
      read_route(ctx, rn[i], at(m.sub("routes"), i), r);
      l.routes.push_back(std::move(r));
    }
  }
  if (l.max_request_line > l.max_header_bytes)
    ctx.error(n, m.sub("max_request_line"), "must not exceed max_header_bytes");
  // HTTP/2 over TLS is chosen by ALPN: "h2" is offered first when enabled.
  auto& alpn = l.tls.alpn;
  const bool h2 = std::find(alpn.begin(), alpn.end(), "h2") != alpn.end();
  if (h2 && !l.http2.enabled) ctx.error(n, m.sub("tls.alpn"), "h2 needs http2.enabled: true");
  if (!h2 && l.http2.enabled) alpn.insert(alpn.begin(), "h2");
}

void read_admin(Ctx& ctx, const YAML::Node& n, AdminConfig& a) {
  if (!n.IsDefined()) return;
  Map am(ctx, n, "admin");
  read(ctx, am.take("address"), am.sub("address"), a.address);
  read_uint(ctx, am.take("port"), am.sub("port"), a.port, 1, 65535);
  read_bool(ctx, am.take("ready_requires_endpoints"), am.sub("ready_requires_endpoints"), a.ready_requires_endpoints);
  read_duration(ctx, am.take("header_timeout"), am.sub("header_timeout"), a.header_timeout,
                std::chrono::milliseconds(1), std::chrono::hours(1));
  read_duration(ctx, am.take("idle_timeout"), am.sub("idle_timeout"), a.idle_timeout,
                std::chrono::milliseconds(1), std::chrono::hours(24));
  read_uint(ctx, am.take("max_connections"), am.sub("max_connections"), a.max_connections, 1, 100000);
  read_uint(ctx, am.take("max_connections_per_source"), am.sub("max_connections_per_source"),
            a.max_connections_per_source, 0, 100000);
  auto tf = am.take("token_file");
  read(ctx, tf, am.sub("token_file"), a.token_file);
  if (!a.token_file.empty()) {
    std::ifstream f(a.token_file, std::ios::binary);
    if (!f || !std::getline(f, a.token)) ctx.error(tf, am.sub("token_file"), "cannot read '" + a.token_file + "'");
    while (!a.token.empty() && (a.token.back() == '\r' || a.token.back() == ' ')) a.token.pop_back();
    if (f && a.token.size() < 16) ctx.error(tf, am.sub("token_file"), "the token must be at least 16 characters");
  }
  if (auto ah = am.take("allowed_hosts"); ah.IsDefined()) {
    if (!ah.IsSequence()) ctx.error(ah, am.sub("allowed_hosts"), "must be a list of host names");
    else
      for (std::size_t i = 0; i < ah.size(); ++i) {
        std::string h;
        read(ctx, ah[i], at(am.sub("allowed_hosts"), i), h);
        const bool name = !h.empty() && std::all_of(h.begin(), h.end(), [](unsigned char c) {
          return std::isalnum(c) || c == '-' || c == '.' || c == '_';
        });
        if (!name)
          ctx.error(ah[i], at(am.sub("allowed_hosts"), i),
                    "'" + h + "' is not a host name (letters, digits, '-', '_' and '.'; no port)");
        else {
          std::transform(h.begin(), h.end(), h.begin(), [](unsigned char c) { return std::tolower(c); });
          a.allowed_hosts.push_back(std::move(h));
        }
      }
  }
  if (auto op = am.take("open_paths"); op.IsDefined()) {
    a.open_paths.clear();
    if (!op.IsSequence()) ctx.error(op, am.sub("open_paths"), "must be a list of admin paths (may be empty)");
    else
      for (std::size_t i = 0; i < op.size(); ++i) {
        std::string p;
        read(ctx, op[i], at(am.sub("open_paths"), i), p);
        if (std::find(std::begin(kAdminPages), std::end(kAdminPages), p) == std::end(kAdminPages)) {
          std::string pages;
          for (const std::string_view page : kAdminPages) pages += (pages.empty() ? "" : ", ") + std::string(page);
          ctx.error(op[i], at(am.sub("open_paths"), i),
                    "'" + p + "' is not a page the admin listener serves (" + pages + ")");
        } else {
          a.open_paths.push_back(p);
        }
      }
  }
}

}  // namespace levee::config::detail

// YAML -> Config. The loader walks the document with the schema in code:
// every mapping records which keys it consumed, so unknown (and duplicate)
// keys are reported with their place; every scalar parser reports wrong
// types and out-of-range values with the key's path. Nothing stops at the
// first problem: all errors are collected, then validated references
// (routes to clusters, tenants) are checked on the result.
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <set>
#include <sstream>

#include "config/config.hpp"
#include "config/reader.hpp"
#include "config/sections.hpp"
#include "config/tls_reader.hpp"
#include "core/text.hpp"

namespace levee::config {

std::string Error::format() const {
  std::ostringstream o;
  o << file;
  if (line > 0) o << ':' << line << ':' << column;
  o << ": ";
  if (!path.empty()) o << path << ": ";
  o << message;
  return o.str();
}

std::optional<Duration> parse_duration(std::string_view s) noexcept {
  s = core::trim(s);
  std::size_t i = 0;
  while (i < s.size() && ((s[i] >= '0' && s[i] <= '9') || s[i] == '.')) ++i;
  if (i == 0 || i == s.size()) return std::nullopt;
  double v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + i, v);
  if (ec != std::errc{} || p != s.data() + i || !std::isfinite(v)) return std::nullopt;
  std::string_view unit = s.substr(i);
  double ns;
  if (unit == "ns") ns = 1;
  else if (unit == "us") ns = 1e3;
  else if (unit == "ms") ns = 1e6;
  else if (unit == "s") ns = 1e9;
  else if (unit == "m") ns = 60e9;
  else if (unit == "h") ns = 3600e9;
  else return std::nullopt;
  double total = v * ns;
  if (total > 1e18) return std::nullopt;
  return Duration(static_cast<std::int64_t>(std::llround(total)));
}

namespace detail {

/// Text levee writes into a request head itself (a path, a host): no
/// spaces or control characters, so it cannot split the line it is in.
bool fits_request_head(std::string_view s) {
  return std::none_of(s.begin(), s.end(), [](char c) {
    auto u = static_cast<unsigned char>(c);
    return u <= 0x20 || u == 0x7f;
  });
}

/// "host:port" or "[v6]:port".
bool split_host_port(std::string_view s, std::string& host, std::uint16_t& port) {
  std::size_t colon;
  if (!s.empty() && s.front() == '[') {
    auto close = s.find(']');
    if (close == std::string_view::npos || close + 1 >= s.size() || s[close + 1] != ':') return false;
    host = std::string(s.substr(1, close - 1));
    colon = close + 1;
  } else {
    colon = s.rfind(':');
    if (colon == std::string_view::npos || colon == 0) return false;
    host = std::string(s.substr(0, colon));
    if (host.find(':') != std::string::npos) return false;
  }
  if (host.empty() || !fits_request_head(host)) return false;
  auto p = core::parse_u64(s.substr(colon + 1));
  if (!p || *p == 0 || *p > 65535) return false;
  port = static_cast<std::uint16_t>(*p);
  return true;
}

// ---- sections -------------------------------------------------------------

void read_quota_map(Ctx& ctx, const YAML::Node& n, const std::string& path,
                    std::vector<std::pair<std::string, double>>& out) {
  if (!n.IsDefined()) return;
  if (!n.IsMap()) {
    ctx.error(n, path, "must map tenant names to CPU-seconds per second");
    return;
  }
  std::set<std::string> seen;
  for (auto it = n.begin(); it != n.end(); ++it) {
    auto name = it->first.Scalar();
    auto p = join(path, name);
    if (!core::valid_utf8(name)) {
      ctx.error_at(it->first.Mark(), path, "tenant names must be valid UTF-8");
      continue;
    }
    if (!seen.insert(name).second) {
      ctx.error_at(it->first.Mark(), p, "duplicate key");
      continue;
    }
    double q = 0;
    read_double(ctx, it->second, p, q, 0.0, 1e6);
    out.emplace_back(name, q);
  }
}

/// A header name: an HTTP token (levee writes some of them upstream).
void check_header_name(Ctx& ctx, const YAML::Node& n, const std::string& path, const std::string& name) {
  if (!name.empty() && !core::is_token(name))
    ctx.error(n, path, "must be a header name (letters, digits and !#$%&'*+-.^_`|~), not '" + name + "'");
}

void read_tenant_source(Ctx& ctx, const YAML::Node& n, const std::string& path, TenantSource& out) {
  Map m(ctx, n, path);
  auto hn = m.take("header");
  read(ctx, hn, m.sub("header"), out.header);
  check_header_name(ctx, hn, m.sub("header"), out.header);
  if (auto tn = m.take("trusted_networks"); tn.IsDefined()) {
    if (!tn.IsSequence()) {
      ctx.error(tn, m.sub("trusted_networks"), "must be a list of networks like 10.0.0.0/8");
    } else {
      for (std::size_t i = 0; i < tn.size(); ++i) {
        auto p = at(m.sub("trusted_networks"), i);
        if (!scalar(ctx, tn[i], p, "a network like 10.0.0.0/8")) continue;
        if (tn[i].Scalar() == "any") {
          out.trusted.any = true;
          continue;
        }
        auto c = core::parse_network(tn[i].Scalar());
        if (!c) ctx.error(tn[i], p, "must be a network like 10.0.0.0/8 or ::1/128, not '" + tn[i].Scalar() + "'");
        else out.trusted.networks.push_back(*c);
      }
    }
  }
  if (auto ak = m.take("api_keys"); ak.IsDefined()) {
    Map km(ctx, ak, m.sub("api_keys"));
    auto khn = km.take("header");
    read(ctx, khn, km.sub("header"), out.api_key_header);
    check_header_name(ctx, khn, km.sub("header"), out.api_key_header);
    if (auto keys = km.take("keys"); keys.IsDefined()) {
      if (!keys.IsMap()) ctx.error(keys, km.sub("keys"), "must map API keys to tenant names");
      else
        for (auto it = keys.begin(); it != keys.end(); ++it)
          if (scalar(ctx, it->second, join(km.sub("keys"), it->first.Scalar()), "a tenant name"))
            out.api_keys.emplace_back(it->first.Scalar(), it->second.Scalar());
    }
    if (out.api_key_header.empty()) ctx.error(ak, km.sub("header"), "is required with api_keys");
  }
  read_tenant_edge(ctx, m, out);  // config/tls.cpp
}

}  // namespace detail

namespace {

using namespace detail;



void read_thresholds(Ctx& ctx, const YAML::Node& n, const std::string& path,
                     std::array<double, core::kCriticalityCount>& out) {
  Map m(ctx, n, path);
  for (auto c : core::kAllCriticalities) {
    std::string key(core::to_string(c));
    read_double(ctx, m.take(key), m.sub(key), out[core::index(c)], 0.0, 100.0);
  }
  for (std::size_t i = 0; i + 1 < core::kCriticalityCount; ++i) {
    if (out[i] > out[i + 1]) {
      ctx.error(n, path,
                "must not shed a more critical level before a less critical one (" +
                    std::string(core::to_string(core::criticality_from_index(i))) + " > " +
                    std::string(core::to_string(core::criticality_from_index(i + 1))) + ")");
      break;
    }
  }
}


void read_tenants(Ctx& ctx, const YAML::Node& n, TenantsConfig& t) {
  Map m(ctx, n, "tenants");
  if (auto s = m.take("source"); s.IsDefined()) read_tenant_source(ctx, s, m.sub("source"), t.source);
  std::vector<std::pair<std::string, double>> quotas;
  auto qn = m.take("quotas");
  read_quota_map(ctx, qn, m.sub("quotas"), quotas);
  if (!quotas.empty()) {
    auto def = std::find_if(quotas.begin(), quotas.end(), [](auto& p) { return p.first == "default"; });
    if (def == quotas.end()) {
      ctx.error(qn, m.sub("quotas"), "needs a 'default' quota for tenants not listed");
    } else {
      t.quotas.push_back(*def);
      for (auto& q : quotas)
        if (q.first != "default") t.quotas.push_back(q);
    }
  }
  if (auto e = m.take("enforce"); e.IsDefined() && scalar(ctx, e, m.sub("enforce"), "a mode")) {
    const auto& s = e.Scalar();
    if (s == "overload") t.enforce = QuotaEnforcement::Overload;
    else if (s == "always") t.enforce = QuotaEnforcement::Always;
    else if (s == "off") t.enforce = QuotaEnforcement::Off;
    else ctx.error(e, m.sub("enforce"), "must be overload, always or off, not '" + s + "'");
  }
  read_bool(ctx, m.take("dry_run"), m.sub("dry_run"), t.dry_run);
  read_duration(ctx, m.take("window"), m.sub("window"), t.window, std::chrono::seconds(1), std::chrono::hours(1));
}

void read_addresses(Ctx& ctx, const YAML::Node& n, const std::string& path, std::vector<EndpointConfig>& out) {
  if (!n.IsSequence() || n.size() == 0) {
    ctx.error(n, path, "must be a non-empty list of host:port");
    return;
  }
  for (std::size_t i = 0; i < n.size(); ++i) {
    EndpointConfig e;
    auto p = at(path, i);
    if (!scalar(ctx, n[i], p, "host:port")) continue;
    if (!split_host_port(n[i].Scalar(), e.host, e.port))
      ctx.error(n[i], p, "must be host:port with port 1..65535, not '" + n[i].Scalar() + "'");
    else out.push_back(std::move(e));
  }
}

void read_redis(Ctx& ctx, const YAML::Node& n, const std::string& path, RedisConfig& r) {
  using std::chrono::milliseconds;
  using std::chrono::seconds;
  Map m(ctx, n, path);
  if (auto mode = m.take("mode"); mode.IsDefined() && scalar(ctx, mode, m.sub("mode"), "a mode")) {
    const auto& s = mode.Scalar();
    if (s == "standalone") r.mode = RedisConfig::Mode::Standalone;
    else if (s == "sentinel") r.mode = RedisConfig::Mode::Sentinel;
    else if (s == "cluster") r.mode = RedisConfig::Mode::Cluster;
    else ctx.error(mode, m.sub("mode"), "must be standalone, sentinel or cluster, not '" + s + "'");
  }
  // One key per mode names its servers, so a config says what it means.
  const char* key = r.mode == RedisConfig::Mode::Sentinel ? "sentinels"
                    : r.mode == RedisConfig::Mode::Cluster ? "nodes" : "address";
  for (const char* k : {"address", "sentinels", "nodes"}) {
    auto v = m.take(k);
    if (!v.IsDefined()) continue;
    if (std::string_view(k) != key) {
      ctx.error(v, m.sub(k), std::string("is not used in this mode (") + key + " is)");
      continue;
    }
    if (r.mode == RedisConfig::Mode::Standalone) {
      EndpointConfig e;
      if (scalar(ctx, v, m.sub(k), "host:port") && split_host_port(v.Scalar(), e.host, e.port))
        r.addresses.push_back(std::move(e));
      else if (v.IsScalar())
        ctx.error(v, m.sub(k), "must be host:port with port 1..65535, not '" + v.Scalar() + "'");
    } else {
      read_addresses(ctx, v, m.sub(k), r.addresses);
    }
  }
  if (r.addresses.empty() && !m.has(key)) ctx.error(n, m.sub(key), "is required");
  read(ctx, m.take("master_name"), m.sub("master_name"), r.master_name);
  if (r.mode == RedisConfig::Mode::Sentinel && r.master_name.empty())
    ctx.error(n, m.sub("master_name"), "is required in sentinel mode");
  read(ctx, m.take("sentinel_username"), m.sub("sentinel_username"), r.sentinel_username);
  read(ctx, m.take("sentinel_password"), m.sub("sentinel_password"), r.sentinel_password);
  read(ctx, m.take("username"), m.sub("username"), r.username);
  auto pw = m.take("password");
  auto pwf = m.take("password_file");
  read(ctx, pw, m.sub("password"), r.password);
  if (pwf.IsDefined() && scalar(ctx, pwf, m.sub("password_file"), "a file name")) {
    if (pw.IsDefined()) {
      ctx.error(pwf, m.sub("password_file"), "cannot be given with password");
    } else {
      std::ifstream f(pwf.Scalar(), std::ios::binary);
      if (!f || !std::getline(f, r.password)) ctx.error(pwf, m.sub("password_file"), "cannot read '" + pwf.Scalar() + "'");
      while (!r.password.empty() && (r.password.back() == '\r' || r.password.back() == ' ')) r.password.pop_back();
    }
  }
  if (!r.username.empty() && r.password.empty())
    ctx.error(n, m.sub("password"), "is required with username");
  auto db = m.take("database");
  read_uint(ctx, db, m.sub("database"), r.database, 0, 65535);
  if (db.IsDefined() && r.database != 0 && r.mode == RedisConfig::Mode::Cluster)
    ctx.error(db, m.sub("database"), "must be 0 with Redis Cluster (it has no SELECT)");
  if (auto t = m.take("tls"); t.IsDefined()) {
    Map tm(ctx, t, m.sub("tls"));
    read_bool(ctx, tm.take("enabled"), tm.sub("enabled"), r.tls.enabled);
    read(ctx, tm.take("ca_file"), tm.sub("ca_file"), r.tls.ca_file);
    read(ctx, tm.take("cert_file"), tm.sub("cert_file"), r.tls.cert_file);
    auto kf = tm.take("key_file");
    read(ctx, kf, tm.sub("key_file"), r.tls.key_file);
    read(ctx, tm.take("server_name"), tm.sub("server_name"), r.tls.server_name);
    read_bool(ctx, tm.take("verify"), tm.sub("verify"), r.tls.verify);
    if (r.tls.cert_file.empty() != r.tls.key_file.empty())
      ctx.error(t, tm.sub(r.tls.cert_file.empty() ? "cert_file" : "key_file"), "cert_file and key_file go together");
  }
  read_duration(ctx, m.take("connect_timeout"), m.sub("connect_timeout"), r.connect_timeout, milliseconds(1), seconds(60));
  read_duration(ctx, m.take("timeout"), m.sub("timeout"), r.timeout, milliseconds(1), seconds(60));
}

void read_quota_sync(Ctx& ctx, const YAML::Node& n, QuotaSyncConfig& q, const TenantsConfig& tenants) {
  using std::chrono::milliseconds;
  using std::chrono::seconds;
  Map m(ctx, n, "quota_sync");
  read_bool(ctx, m.take("enabled"), m.sub("enabled"), q.enabled);
  auto rn = m.take("redis");
  if (rn.IsDefined()) read_redis(ctx, rn, m.sub("redis"), q.redis);
  else if (q.enabled) ctx.error(n, m.sub("redis"), "is required when quota_sync is enabled");
  read(ctx, m.take("key_prefix"), m.sub("key_prefix"), q.key_prefix);
  auto fn = m.take("fleet");
  read(ctx, fn, m.sub("fleet"), q.fleet);
  if (q.fleet.empty() || q.fleet.find_first_of("{}") != std::string::npos)
    ctx.error(fn.IsDefined() ? fn : n, m.sub("fleet"), "must be a non-empty name without braces (it is the hash tag)");
  read(ctx, m.take("instance_id"), m.sub("instance_id"), q.instance_id);
  auto in = m.take("interval");
  read_duration(ctx, in, m.sub("interval"), q.interval, milliseconds(10), seconds(60));
  auto bn = m.take("bucket");
  read_duration(ctx, bn, m.sub("bucket"), q.bucket, milliseconds(10), std::chrono::minutes(10));
  if (q.bucket > tenants.window) ctx.error(bn.IsDefined() ? bn : n, m.sub("bucket"), "must not exceed tenants.window");
  auto tn = m.take("member_ttl");
  read_duration(ctx, tn, m.sub("member_ttl"), q.member_ttl, milliseconds(10), std::chrono::hours(1));
  read_uint(ctx, m.take("max_instances"), m.sub("max_instances"), q.max_instances, 0, 100000);
  // A registration must outlive a few syncs, or a slow sync drops the
  // instance from the fleet size; a sync must end before the next is due.
  if (q.member_ttl < 3 * q.interval)
    ctx.error(tn.IsDefined() ? tn : n, m.sub("member_ttl"), "must be at least 3 x interval");
  if (q.redis.timeout > q.interval)
    ctx.error(rn.IsDefined() ? rn : n, m.sub("redis.timeout"), "must not exceed interval");
}

void read_self_protection(Ctx& ctx, const YAML::Node& n, SelfProtectionConfig& s) {
  Map m(ctx, n, "self_protection");
  read_bool(ctx, m.take("enabled"), m.sub("enabled"), s.enabled);
  read_bool(ctx, m.take("dry_run"), m.sub("dry_run"), s.dry_run);
  read_duration(ctx, m.take("sample_interval"), m.sub("sample_interval"), s.sample_interval,
                std::chrono::milliseconds(1), std::chrono::seconds(10));
  read_duration(ctx, m.take("time_constant"), m.sub("time_constant"), s.time_constant,
                std::chrono::milliseconds(10), std::chrono::minutes(10));
  if (auto t = m.take("thresholds"); t.IsDefined()) read_thresholds(ctx, t, m.sub("thresholds"), s.thresholds);
  read_double(ctx, m.take("close_connections_above"), m.sub("close_connections_above"),
              s.close_connections_above, 0.0, 100.0);
  if (auto h = m.take("host_cpu"); h.IsDefined()) {
    Map hm(ctx, h, m.sub("host_cpu"));
    read_bool(ctx, hm.take("enabled"), hm.sub("enabled"), s.host_cpu.enabled);
    read_duration(ctx, hm.take("interval"), hm.sub("interval"), s.host_cpu.interval,
                  std::chrono::milliseconds(10), std::chrono::minutes(1));
    read_duration(ctx, hm.take("time_constant"), hm.sub("time_constant"), s.host_cpu.time_constant,
                  std::chrono::milliseconds(10), std::chrono::minutes(10));
    if (auto t = hm.take("thresholds"); t.IsDefined())
      read_thresholds(ctx, t, hm.sub("thresholds"), s.host_cpu.thresholds);
  }
}

void read_access_log(Ctx& ctx, const YAML::Node& n, AccessLogConfig& a) {
  Map m(ctx, n, "access_log");
  read_bool(ctx, m.take("enabled"), m.sub("enabled"), a.enabled);
  read(ctx, m.take("path"), m.sub("path"), a.path);
  if (auto f = m.take("format"); f.IsDefined() && scalar(ctx, f, m.sub("format"), "text or json")) {
    if (f.Scalar() == "text") a.format = AccessLogConfig::Format::Text;
    else if (f.Scalar() == "json") a.format = AccessLogConfig::Format::Json;
    else ctx.error(f, m.sub("format"), "must be text or json, not '" + f.Scalar() + "'");
  }
  read_double(ctx, m.take("sample"), m.sub("sample"), a.sample, 0.0, 1.0);
  read_double(ctx, m.take("reject_sample"), m.sub("reject_sample"), a.reject_sample, 0.0, 1.0);
  read_uint(ctx, m.take("buffer"), m.sub("buffer"), a.buffer, 4096, 64u << 20);
  read_duration(ctx, m.take("flush_interval"), m.sub("flush_interval"), a.flush_interval,
                std::chrono::milliseconds(1), std::chrono::minutes(1));
  if (auto fl = m.take("fields"); fl.IsDefined()) {
    if (!fl.IsSequence() || fl.size() == 0) ctx.error(fl, m.sub("fields"), "must be a non-empty list of field names");
    else
      for (std::size_t i = 0; i < fl.size(); ++i) {
        std::string name;
        read(ctx, fl[i], at(m.sub("fields"), i), name);
        if (!name.empty() && !access_log_field_known(name))
          ctx.error(fl[i], at(m.sub("fields"), i), "unknown access log field '" + name + "'");
        else if (!name.empty()) a.fields.push_back(name);
      }
  }
}

void read_headers(Ctx& ctx, const YAML::Node& n, HeaderNames& h) {
  Map m(ctx, n, "headers");
  auto name = [&](const char* key, std::string& out) {
    auto node = m.take(key);
    read(ctx, node, m.sub(key), out);
    if (node.IsDefined() && out.empty()) ctx.error(node, m.sub(key), "must not be empty");
    check_header_name(ctx, node, m.sub(key), out);
    for (auto& c : out) c = core::ascii_lower(c);
  };
  name("criticality", h.criticality);
  name("timeout_ms", h.timeout_ms);
  name("attempt", h.attempt);
  name("request_id", h.request_id);
  name("load_report", h.load_report);
  name("no_retry", h.no_retry);
  read_bool(ctx, m.take("return_request_id"), m.sub("return_request_id"), h.return_request_id);
}

template <typename T, typename F>
void read_list(Ctx& ctx, const YAML::Node& n, const std::string& path, std::vector<T>& out, F&& f) {
  if (!n.IsDefined()) return;
  if (!n.IsSequence()) {
    ctx.error(n, path, "must be a list");
    return;
  }
  for (std::size_t i = 0; i < n.size(); ++i) {
    T item;
    f(ctx, n[i], at(path, i), item);
    out.push_back(std::move(item));
  }
}

void validate(Ctx& ctx, const YAML::Node& root, Config& cfg) {
  // Names, references and clashes that only the whole file can tell.
  auto node_at = [&](std::initializer_list<std::string_view> keys, std::initializer_list<std::size_t> idx) {
    // Best-effort lookup of a node for its line/column.
    YAML::Node n = root;
    auto k = keys.begin();
    auto i = idx.begin();
    for (; k != keys.end(); ++k) {
      if (!n.IsMap()) return YAML::Node(YAML::NodeType::Undefined);
      n = n[std::string(*k)];
      if (i != idx.end() && n.IsSequence()) {
        if (*i >= n.size()) return YAML::Node(YAML::NodeType::Undefined);
        n = n[*i];
        ++i;
      }
    }
    return n;
  };
  std::set<std::string> names;
  for (std::size_t i = 0; i < cfg.clusters.size(); ++i) {
    auto& c = cfg.clusters[i];
    if (!c.name.empty() && !names.insert(c.name).second)
      ctx.error(node_at({"clusters", "name"}, {i}), at("clusters", i) + ".name", "duplicate cluster name '" + c.name + "'");
  }
  std::set<std::string> lnames;
  std::set<std::string> route_names;
  std::set<std::pair<std::string, int>> binds;
  for (std::size_t li = 0; li < cfg.listeners.size(); ++li) {
    auto& l = cfg.listeners[li];
    if (l.name.empty()) l.name = "listener" + std::to_string(li);
    if (!lnames.insert(l.name).second)
      ctx.error(node_at({"listeners", "name"}, {li}), at("listeners", li) + ".name", "duplicate listener name '" + l.name + "'");
    if (l.port != 0 && !binds.insert({l.address, l.port}).second)
      ctx.error(node_at({"listeners", "port"}, {li}), at("listeners", li) + ".port",
                "another listener already uses " + l.address + ":" + std::to_string(l.port));
    for (std::size_t ri = 0; ri < l.routes.size(); ++ri) {
      auto& r = l.routes[ri];
      if (r.name.empty()) r.name = l.name + "/" + std::to_string(ri);
      if (!route_names.insert(r.name).second)
        ctx.error(node_at({"listeners", "routes", "name"}, {li, ri}), at(at("listeners", li) + ".routes", ri) + ".name",
                  "duplicate route name '" + r.name + "'");
      if (r.cluster.empty()) continue;
      auto it = std::find_if(cfg.clusters.begin(), cfg.clusters.end(), [&](auto& c) { return c.name == r.cluster; });
      if (it == cfg.clusters.end()) {
        ctx.error(node_at({"listeners", "routes", "cluster"}, {li, ri}),
                  at(at("listeners", li) + ".routes", ri) + ".cluster", "no cluster named '" + r.cluster + "'");
      } else {
        r.cluster_index = static_cast<std::size_t>(it - cfg.clusters.begin());
      }
    }
  }
  // The admin port clashes with a listener on the same port at the same
  // address, or where either is a wildcard (0.0.0.0 or :: covers them all).
  auto wildcard = [](const std::string& a) { return a == "0.0.0.0" || a == "::" || a == "[::]"; };
  for (const auto& [addr, port] : binds)
    if (port == cfg.admin.port && (addr == cfg.admin.address || wildcard(addr) || wildcard(cfg.admin.address))) {
      ctx.error(node_at({"admin", "port"}, {}), "admin.port",
                "clashes with a listener on " + addr + ":" + std::to_string(port));
      break;
    }
  // Cluster quota overrides must name tenants the tenants section knows,
  // so that per-tenant metrics keep a bounded label set.
  for (std::size_t ci = 0; ci < cfg.clusters.size(); ++ci) {
    for (const auto& quota : cfg.clusters[ci].quotas) {
      const std::string& name = quota.first;  // a named reference: clang 14 cannot capture a binding
      bool known = std::any_of(cfg.tenants.quotas.begin(), cfg.tenants.quotas.end(), [&](auto& p) { return p.first == name; });
      if (!known)
        ctx.error(node_at({"clusters", "quotas"}, {ci}), at("clusters", ci) + ".quotas." + name,
                  "tenant '" + name + "' is not listed in tenants.quotas");
    }
  }
  if (cfg.quota_sync.enabled && cfg.tenants.quotas.empty())
    ctx.error(node_at({"quota_sync", "enabled"}, {}), "quota_sync.enabled", "needs tenants.quotas: there is nothing to share");
  if (cfg.listeners.empty()) ctx.error(root, "listeners", "at least one listener is required");
}

LoadResult load_node(Ctx& ctx, const YAML::Node& root) {
  Config cfg;
  cfg.source = ctx.file;
  Map m(ctx, root, "");
  if (!m.valid()) {
    if (ctx.errors.empty()) ctx.errors.push_back({ctx.file, 0, 0, "", "the file is empty: it must be a mapping"});
    return {std::nullopt, std::move(ctx.errors)};
  }
  read_admin(ctx, m.take("admin"), cfg.admin);  // config/listeners.cpp
  if (auto w = m.take("workers"); w.IsDefined()) {
    if (w.IsScalar() && w.Scalar() == "auto") cfg.workers = 0;
    else if (w.IsScalar() && core::parse_u64(w.Scalar())) read_uint(ctx, w, "workers", cfg.workers, 1, 1024);
    else ctx.error(w, "workers", "must be auto or a number 1..1024");
  }
  read_duration(ctx, m.take("drain_timeout"), "drain_timeout", cfg.drain_timeout, Duration::zero(), std::chrono::hours(1));
  read_duration(ctx, m.take("drain_delay"), "drain_delay", cfg.drain_delay, Duration::zero(), std::chrono::hours(1));
  read_bool(ctx, m.take("tls_watch"), "tls_watch", cfg.tls_watch);
  if (auto r = m.take("resolver"); r.IsDefined()) {
    Map rm(ctx, r, "resolver");
    if (auto sv = rm.take("servers"); sv.IsDefined()) read_addresses(ctx, sv, rm.sub("servers"), cfg.resolver.servers);
    read_duration(ctx, rm.take("timeout"), rm.sub("timeout"), cfg.resolver.timeout, std::chrono::milliseconds(1), std::chrono::minutes(1));
    read_uint(ctx, rm.take("attempts"), rm.sub("attempts"), cfg.resolver.attempts, 1, 10);
    read_duration(ctx, rm.take("min_ttl"), rm.sub("min_ttl"), cfg.resolver.min_ttl, std::chrono::milliseconds(100), std::chrono::hours(1));
  }
  if (auto a = m.take("access_log"); a.IsDefined()) read_access_log(ctx, a, cfg.access_log);
  if (auto h = m.take("headers"); h.IsDefined()) read_headers(ctx, h, cfg.headers);
  if (auto s = m.take("self_protection"); s.IsDefined()) read_self_protection(ctx, s, cfg.self_protection);
  if (auto t = m.take("tenants"); t.IsDefined()) read_tenants(ctx, t, cfg.tenants);
  if (auto q = m.take("quota_sync"); q.IsDefined()) read_quota_sync(ctx, q, cfg.quota_sync, cfg.tenants);
  read_list(ctx, m.take("listeners"), "listeners", cfg.listeners, read_listener);
  read_list(ctx, m.take("clusters"), "clusters", cfg.clusters, read_cluster);
  m.finish();
  validate(ctx, root, cfg);
  validate_edge(ctx, root, cfg);
  if (!ctx.errors.empty()) return {std::nullopt, std::move(ctx.errors)};
  return {std::move(cfg), {}};
}

}  // namespace

LoadResult load_string(const std::string& text, const std::string& name) {
  Ctx ctx{name, {}};
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    ctx.errors.push_back({name, e.mark.line + 1, e.mark.column + 1, "", "YAML syntax: " + e.msg});
    return {std::nullopt, std::move(ctx.errors)};
  }
  try {
    return load_node(ctx, root);
  } catch (const YAML::Exception& e) {
    // Defensive: yaml-cpp can throw on odd documents (e.g. complex keys).
    ctx.errors.push_back({name, e.mark.line + 1, e.mark.column + 1, "", e.msg});
    return {std::nullopt, std::move(ctx.errors)};
  }
}

LoadResult load_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return {std::nullopt, {Error{path, 0, 0, "", "cannot read the file"}}};
  std::ostringstream ss;
  ss << in.rdbuf();
  return load_string(ss.str(), path);
}

}  // namespace levee::config

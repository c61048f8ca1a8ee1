// The admin API: routing, authorisation and the runtime actions.
//
//   GET  /metrics /healthz /ready /admin/clusters /admin/config /admin/info /admin/stats
//   POST /admin/reload                      the file again (as SIGHUP), errors in the answer
//   POST /admin/drain, /admin/undrain       a drain without exiting, and its undoing
//   POST /admin/endpoint/{drain,disable,enable}?cluster=C&endpoint=ADDR:PORT
//   POST /admin/endpoint/weight?cluster=C&endpoint=ADDR:PORT&weight=W   (weight=reset: configured)
//   POST /admin/dry_run?cluster=C&gate=throttle|quota|queue&dry_run=true|false|reset
//   POST /admin/dry_run?gate=self_protection&dry_run=true|false|reset
//   POST /admin/log_level?level=trace|debug|info|warn|error|critical|off
//
// Actions are allowed from loopback clients, or from anywhere with
// `Authorization: Bearer <admin.token_file's token>`. Each is logged and
// counted (levee_admin_actions_total{action,result}).
//
// A loopback client may be a browser running another site's page: its
// POST would act (CSRF), and a page whose name is rebound to 127.0.0.1
// (DNS rebinding) could read every page. So loopback counts only when
// the Host is loopback's (an IP literal, localhost, or admin.allowed_hosts)
// and an Origin, when sent, is that same host.
#include <boost/asio/use_awaitable.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <sstream>

#include "control/server.hpp"
#include "proxy/cluster.hpp"

namespace levee::control {

namespace asio = boost::asio;

namespace {

AdminReply text(int status, std::string body) {
  AdminReply r;
  r.status = status;
  r.body = std::move(body);
  return r;
}

AdminReply json(int status, std::string body) {
  AdminReply r;
  r.status = status;
  r.content_type = "application/json";
  r.body = std::move(body);
  return r;
}

std::string json_quoted(std::string_view s) {
  std::string o = "\"";
  for (char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      o += '\\';
      o += c;
    } else if (u < 0x20) {
      static constexpr char hex[] = "0123456789abcdef";
      o += "\\u00";
      o += hex[u >> 4];
      o += hex[u & 0xf];
    } else {
      o += c;
    }
  }
  return o + '"';
}

bool loopback(const boost::asio::ip::address& a) {
  if (a.is_loopback()) return true;
  if (a.is_v6() && a.to_v6().is_v4_mapped())
    return boost::asio::ip::make_address_v4(boost::asio::ip::v4_mapped, a.to_v6()).is_loopback();
  return false;
}

bool iequal(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
         });
}

/// A Host header no web page elsewhere can make a browser send to this
/// port: none (HTTP/1.0), an IP literal, localhost or *.localhost (which
/// browsers resolve to loopback themselves), or a name the config allows.
bool loopback_host(std::string_view host, const std::vector<std::string>& allowed) {
  if (host.empty()) return true;
  std::string_view name = host;
  if (name.front() == '[') {
    const auto end = name.find(']');
    if (end == std::string_view::npos) return false;
    name = name.substr(1, end - 1);
  } else if (const auto colon = name.rfind(':'); colon != std::string_view::npos) {
    name = name.substr(0, colon);
  }
  if (!name.empty() && name.back() == '.') name.remove_suffix(1);
  if (name.empty()) return false;
  boost::system::error_code ec;
  (void)boost::asio::ip::make_address(std::string(name), ec);
  if (!ec) return true;
  constexpr std::string_view local = "localhost", dot_local = ".localhost";
  if (iequal(name, local)) return true;
  if (name.size() > dot_local.size() && iequal(name.substr(name.size() - dot_local.size()), dot_local)) return true;
  return std::any_of(allowed.begin(), allowed.end(), [&](const std::string& a) { return iequal(name, a); });
}

/// An Origin naming the same host and port as the Host header: the
/// admin page's own requests, never another site's.
bool same_origin(std::string_view origin, std::string_view host) {
  for (std::string_view scheme : {std::string_view("http://"), std::string_view("https://")})
    if (origin.size() > scheme.size() && iequal(origin.substr(0, scheme.size()), scheme))
      return !host.empty() && iequal(origin.substr(scheme.size()), host);
  return false;  // "null" (a sandboxed frame, a file) or something else
}

constexpr std::string_view kNotLoopback = "not loopback and no valid token";
constexpr std::string_view kRebound =
    "loopback, but the Host names neither loopback nor admin.allowed_hosts (a page whose name points at "
    "127.0.0.1?), and no valid token";
constexpr std::string_view kCrossOrigin =
    "loopback, but sent by a page of another origin (Origin differs from Host), and no valid token";

/// Comparison in time independent of where the strings differ.
bool same_secret(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned char d = 0;
  for (std::size_t i = 0; i < a.size(); ++i) d |= static_cast<unsigned char>(a[i] ^ b[i]);
  return d == 0;
}

std::optional<bool> parse_bool(std::string_view s) {
  if (s == "true" || s == "1" || s == "on") return true;
  if (s == "false" || s == "0" || s == "off") return false;
  return std::nullopt;
}

constexpr std::string_view kEndpoints =
    "GET /metrics /healthz /ready /admin/ /admin/clusters /admin/config /admin/info /admin/stats; "
    "POST /admin/reload /admin/drain /admin/undrain /admin/endpoint/{drain,disable,enable,weight} "
    "/admin/dry_run /admin/log_level\n";

}  // namespace

std::string_view Server::unauthorized(const AdminRequest& r) const {
  const auto& token = cfg_->admin.token;
  constexpr std::string_view bearer = "Bearer ";
  if (!token.empty() && r.authorization.size() > bearer.size() &&
      r.authorization.compare(0, bearer.size(), bearer) == 0 &&
      same_secret(std::string_view(r.authorization).substr(bearer.size()), token))
    return {};
  if (!loopback(r.peer)) return kNotLoopback;
  if (!loopback_host(r.host, cfg_->admin.allowed_hosts)) return kRebound;
  if (r.has_origin && !same_origin(r.origin, r.host)) return kCrossOrigin;
  return {};
}

std::string_view Server::unreadable(const AdminRequest& r, std::string_view path) const {
  const auto& open = cfg_->admin.open_paths;
  if (std::find(open.begin(), open.end(), path) != open.end()) return {};
  const auto why = unauthorized(r);
  return why == kNotLoopback ? std::string_view("not loopback, not in admin.open_paths, and no valid token") : why;
}

void Server::refused(const std::string& what, const AdminRequest& r, std::string_view why) {
  // At most one line a second: a client off loopback could otherwise fill
  // the process log with refusals. Those skipped are counted in the next
  // line, or in a line of their own once their second is over (a burst
  // that stops is accounted for too).
  const auto t = std::chrono::steady_clock::now();
  if (t - refusal_logged_ < std::chrono::seconds(1)) {
    ++refusals_unlogged_;
    if (!refusal_flush_armed_) arm_refusal_flush();
    return;
  }
  refusal_logged_ = t;
  const auto skipped = std::exchange(refusals_unlogged_, 0);
  if (skipped > 0)
    spdlog::warn("admin: {} from {} refused: {} ({} more refused since the last such line)", what, r.peer.to_string(),
                 why, skipped);
  else
    spdlog::warn("admin: {} from {} refused: {}", what, r.peer.to_string(), why);
}

void Server::arm_refusal_flush() {
  refusal_flush_armed_ = true;
  refusal_timer_.expires_at(refusal_logged_ + std::chrono::seconds(1));
  refusal_timer_.async_wait([this](boost::system::error_code ec) {
    if (ec) {
      refusal_flush_armed_ = false;
      return;
    }
    // A refusal may have been logged after the timer expired and before
    // this ran: its second is not over yet.
    if (refusals_unlogged_ > 0 && std::chrono::steady_clock::now() - refusal_logged_ < std::chrono::seconds(1)) {
      arm_refusal_flush();
      return;
    }
    refusal_flush_armed_ = false;
    flush_refusals();
  });
}

void Server::flush_refusals() {
  const auto skipped = std::exchange(refusals_unlogged_, 0);
  if (skipped == 0) return;  // a refusal since has logged them
  refusal_logged_ = std::chrono::steady_clock::now();
  spdlog::warn("admin: {} more refused since the last such line (none since)", skipped);
}

void Server::count_action(std::string_view action, bool ok) {
  for (std::size_t i = 0; i < kAdminActions.size(); ++i)
    if (kAdminActions[i] == action) actions_.inc(0, actions_.index({i, ok ? 0u : 1u}));
}

asio::awaitable<AdminReply> Server::admin_request(const AdminRequest& r) {
  const std::string& p = r.path;
  const bool read = r.method == "GET" || r.method == "HEAD";
  const bool page = p == "/admin/" || p == "/admin";
  const bool known_get =
      !page && std::find(std::begin(config::kAdminPages), std::end(config::kAdminPages), p) != std::end(config::kAdminPages);
  if (read && (known_get || page)) {
    if (const auto why = unreadable(r, page ? std::string_view("/admin/") : std::string_view(p)); !why.empty()) {
      refused("GET " + p, r, why);
      if (why.starts_with("not loopback"))
        co_return text(403, "forbidden: off loopback this page needs a bearer token (admin.token_file) "
                            "unless admin.open_paths lists it\n");
      co_return text(403, "forbidden: " + std::string(why) + "\n");
    }
  }
  if (page && read) {
    AdminReply out{200, "text/html; charset=utf-8", std::string(admin_page_html()), {}};
    // The page runs no script but its own and loads nothing from elsewhere.
    out.extra = "content-security-policy: default-src 'self'; script-src 'unsafe-inline'; "
                "style-src 'unsafe-inline'\r\nx-content-type-options: nosniff\r\n";
    co_return out;
  }
  if (known_get) {
    if (!read) {
      auto out = text(405, "method not allowed: this endpoint answers GET and HEAD\n");
      out.extra = "allow: GET, HEAD\r\n";
      co_return out;
    }
    if (p == "/metrics") {
      AdminReply out = text(200, serialize_metrics());
      out.content_type = "text/plain; version=0.0.4; charset=utf-8";
      co_return out;
    }
    if (p == "/healthz") co_return text(200, "ok\n");
    if (p == "/ready") {
      auto [ok, why] = ready();
      co_return text(ok ? 200 : 503, std::move(why));
    }
    if (p == "/admin/clusters") co_return json(200, clusters_json());
    if (p == "/admin/config") co_return json(200, config_json());
    if (p == "/admin/info") co_return json(200, info_json());
    co_return json(200, stats_json());
  }
  static const std::vector<std::string> actions = {"/admin/reload",          "/admin/drain",
                                                   "/admin/undrain",         "/admin/endpoint/drain",
                                                   "/admin/endpoint/disable", "/admin/endpoint/enable",
                                                   "/admin/endpoint/weight", "/admin/dry_run",
                                                   "/admin/log_level"};
  if (std::find(actions.begin(), actions.end(), p) == actions.end())
    co_return text(404, "not found: " + std::string(kEndpoints));
  if (r.method != "POST") {
    auto out = text(405, "method not allowed: admin actions are POST\n");
    out.extra = "allow: POST\r\n";
    co_return out;
  }
  if (const auto why = unauthorized(r); !why.empty()) {
    refused(p, r, why);
    if (why == kNotLoopback)
      co_return text(403, "forbidden: admin actions are for loopback clients or a bearer token (admin.token_file)\n");
    co_return text(403, "forbidden: " + std::string(why) + "\n");
  }
  if (p == "/admin/reload") {
    auto res = reload("POST /admin/reload");
    count_action("reload", res.ok);
    std::ostringstream o;
    if (res.ok) {
      // Answer once every worker runs it: the next request sees it.
      const bool applied_all = co_await applied(res.generation);
      o << "{\"ok\":true,\"generation\":" << res.generation << ",\"applied\":" << (applied_all ? "true" : "false")
        << ",\"changed\":" << json_quoted(res.summary) << "}\n";
      co_return json(200, o.str());
    }
    o << "{\"ok\":false,\"generation\":" << res.generation << ",\"errors\":[";
    for (std::size_t i = 0; i < res.errors.size(); ++i) o << (i ? "," : "") << json_quoted(res.errors[i]);
    o << "]}\n";
    co_return json(400, o.str());
  }
  if (p == "/admin/drain") {
    spdlog::info("admin: drain requested from {}", r.peer.to_string());
    begin_drain(false);
    count_action("drain", true);
    co_return text(200, "draining: /ready answers 503; listeners stay open\n");
  }
  if (p == "/admin/undrain") {
    const bool ok = undrain();
    count_action("undrain", ok);
    if (!ok) co_return text(409, exiting_ ? "cannot undo: levee is exiting\n" : "not draining\n");
    co_return text(200, "ready again\n");
  }
  if (p.starts_with("/admin/endpoint/")) {
    const std::string action = p.substr(std::string_view("/admin/endpoint/").size());
    auto out = endpoint_action(r, action);
    count_action("endpoint_" + action, out.status == 200);
    co_return out;
  }
  if (p == "/admin/dry_run") {
    auto out = dry_run_action(r);
    count_action("dry_run", out.status == 200);
    if (out.status == 200) co_await applied(rt_->generation);
    co_return out;
  }
  auto out = log_level_action(r);
  count_action("log_level", out.status == 200);
  co_return out;
}

AdminReply Server::endpoint_action(const AdminRequest& r, std::string_view action) {
  const std::string cname = r.param("cluster"), ename = r.param("endpoint");
  proxy::Cluster* c = rt_->cluster(cname);
  if (!c) return text(404, "no cluster '" + cname + "' (the cluster parameter)\n");
  // An endpoint by its address ("10.0.0.1:8080"), or every endpoint a
  // configured host:port stands for (a hostname's addresses).
  std::vector<std::size_t> which;
  for (std::size_t i = 0; i < c->endpoints.size(); ++i)
    if (c->endpoints[i]->label == ename || c->endpoints[i]->authority == ename) which.push_back(i);
  if (which.empty()) return text(404, "cluster " + cname + " has no endpoint '" + ename + "' (the endpoint parameter)\n");
  const auto t = proxy::now();
  std::string done;
  if (action == "weight") {
    const std::string w = r.param("weight");
    std::optional<double> weight;
    if (w != "reset") {
      double v = 0;
      const auto [ptr, ec] = std::from_chars(w.data(), w.data() + w.size(), v);
      if (ec != std::errc() || ptr != w.data() + w.size() || !std::isfinite(v) || v < 0 || v > 1e6)
        return text(400, "weight must be a number from 0 to 1000000, or reset\n");
      weight = v;
    }
    for (auto i : which) c->set_endpoint_weight(i, weight);
    done = weight ? "weight " + w : "weight reset to the configured one";
  } else {
    core::AdminState st = core::AdminState::Enabled;
    if (action == "drain") st = core::AdminState::Draining;
    else if (action == "disable") st = core::AdminState::Disabled;
    std::size_t changed = 0;
    for (auto i : which) changed += c->set_endpoint_admin(i, st, t) ? 1 : 0;
    done = std::string(action == "drain" ? "draining" : action == "disable" ? "disabled" : "enabled") +
           (changed ? "" : " (it already was)");
  }
  spdlog::info("admin: cluster {} endpoint {}: {} (from {})", cname, ename, done, r.peer.to_string());
  return text(200, "cluster " + cname + " endpoint " + ename + ": " + done + "\n");
}

AdminReply Server::dry_run_action(const AdminRequest& r) {
  const std::string gate = r.param("gate"), value = r.param("dry_run");
  std::optional<bool> want;
  if (value != "reset") {
    want = parse_bool(value);
    if (!want) return text(400, "dry_run must be true, false or reset\n");
  }
  std::string what;
  if (gate == "self_protection") {
    overrides_.self_protection = want;
    what = "self_protection";
  } else {
    if (gate != "throttle" && gate != "quota" && gate != "queue")
      return text(400, "gate must be throttle, quota, queue or self_protection\n");
    const std::string cname = r.param("cluster");
    proxy::Cluster* c = rt_->cluster(cname);
    if (!c) return text(404, "no cluster '" + cname + "' (the cluster parameter)\n");
    const auto modes = c->modes();
    const std::size_t gi = gate == "throttle" ? 0 : gate == "quota" ? 1 : 2;
    if (want && modes[gi] == core::GateMode::Off)
      return text(409, "cluster " + cname + ": the " + gate + " gate is off in the configuration\n");
    auto& o = overrides_.clusters[cname];
    (gi == 0 ? o.throttle : gi == 1 ? o.quota : o.queue) = want;
    if (!o.throttle && !o.quota && !o.queue) overrides_.clusters.erase(cname);
    what = "cluster " + cname + " " + gate;
  }
  rebuild_why_ = "dry run of " + what;
  rebuild();
  const std::string state = want ? (*want ? "dry run" : "enforced") : "as configured";
  spdlog::info("admin: {}: {} (from {}); until the next reload", what, state, r.peer.to_string());
  return text(200, what + ": " + state + " (generation " + std::to_string(rt_->generation) + ")\n");
}

AdminReply Server::log_level_action(const AdminRequest& r) {
  const std::string name = r.param("level");
  const auto level = spdlog::level::from_str(name);
  if (level == spdlog::level::off && name != "off")
    return text(400, "level must be trace, debug, info, warn, error, critical or off\n");
  spdlog::set_level(level);
  spdlog::warn("admin: log level set to {} (from {})", name, r.peer.to_string());
  return text(200, "log level " + name + "\n");
}

}  // namespace levee::control

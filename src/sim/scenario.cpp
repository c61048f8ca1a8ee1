#include "sim/scenario.hpp"

#include <yaml-cpp/yaml.h>

#include <fstream>
#include <set>
#include <sstream>

#include "config/config.hpp"

namespace levee::sim {

namespace {

// Walks a mapping, remembers which keys were read, and reports the rest as
// unknown: a typo fails the load, not a long run.
struct Ctx {
  std::vector<std::string>& errors;
  std::string dir;
  void error(const std::string& path, const std::string& msg) { errors.push_back(path + ": " + msg); }
};

class Map {
 public:
  Map(Ctx& c, const YAML::Node& n, std::string path) : c_(c), n_(n), path_(std::move(path)) {
    if (n_.IsDefined() && !n_.IsNull() && !n_.IsMap()) c_.error(path_, "must be a mapping");
  }
  ~Map() {
    if (!n_.IsMap()) return;
    for (const auto& kv : n_) {
      const auto k = kv.first.as<std::string>();
      if (!seen_.count(k)) c_.error(sub(k), "unknown key");
    }
  }
  YAML::Node take(const std::string& k) {
    seen_.insert(k);
    return n_.IsMap() ? n_[k] : YAML::Node();
  }
  std::string sub(const std::string& k) const { return path_.empty() ? k : path_ + "." + k; }

  std::string str(const std::string& k, std::string def = {}) {
    auto v = take(k);
    if (!v.IsDefined() || v.IsNull()) return def;
    if (!v.IsScalar()) {
      c_.error(sub(k), "must be a scalar");
      return def;
    }
    return v.as<std::string>();
  }
  double num(const std::string& k, double def, double lo = -1e300, double hi = 1e300) {
    auto v = take(k);
    if (!v.IsDefined() || v.IsNull()) return def;
    try {
      const double d = v.as<double>();
      if (d < lo || d > hi) {
        c_.error(sub(k), "out of range");
        return def;
      }
      return d;
    } catch (const YAML::Exception&) {
      c_.error(sub(k), "must be a number");
      return def;
    }
  }
  bool flag(const std::string& k, bool def) {
    auto v = take(k);
    if (!v.IsDefined() || v.IsNull()) return def;
    try {
      return v.as<bool>();
    } catch (const YAML::Exception&) {
      c_.error(sub(k), "must be true or false");
      return def;
    }
  }
  Duration dur(const std::string& k, Duration def) {
    auto v = take(k);
    if (!v.IsDefined() || v.IsNull()) return def;
    const auto s = v.as<std::string>();
    if (auto d = config::parse_duration(s)) return *d;
    try {
      return core::from_seconds(v.as<double>());  // a bare number: seconds
    } catch (const YAML::Exception&) {
    }
    c_.error(sub(k), "'" + s + "' is not a duration (like 250ms, 2s, 1m)");
    return def;
  }

 private:
  Ctx& c_;
  YAML::Node n_;
  std::string path_;
  std::set<std::string> seen_;
};

std::string at(const std::string& p, std::size_t i) { return p + "[" + std::to_string(i) + "]"; }

std::optional<std::vector<Phase>> parse_phases(std::string_view s) {
  std::vector<Phase> out;
  while (!s.empty()) {
    const auto comma = s.find(',');
    const auto tok = s.substr(0, comma);
    const auto a = tok.find('@');
    if (a == std::string_view::npos) return std::nullopt;
    auto d = config::parse_duration(tok.substr(0, a));
    double rate = 0;
    try {
      rate = std::stod(std::string(tok.substr(a + 1)));
    } catch (...) {
      return std::nullopt;
    }
    if (!d || rate < 0) return std::nullopt;
    out.push_back({*d, rate});
    if (comma == std::string_view::npos) break;
    s.remove_prefix(comma + 1);
  }
  if (out.empty()) return std::nullopt;
  return out;
}

CallerPolicy caller_policy(Map& m) {
  CallerPolicy p;
  p.retries = static_cast<std::uint32_t>(m.num("retries", 0, 0, 100));
  p.backoff = m.dur("backoff", std::chrono::milliseconds(50));
  p.honor_retry_after = m.flag("honor_retry_after", false);
  p.honor_no_retry = m.flag("honor_no_retry", false);
  p.retry_connect_errors = m.flag("retry_connect_errors", false);
  return p;
}

void read_caller(Ctx& c, Map& m, const std::string& path, CallerPolicy& p) {
  p = caller_policy(m);
  if (auto b = m.take("retry_budget"); b.IsDefined() && !b.IsNull()) {
    Map bm(c, b, m.sub("retry_budget"));
    core::RetryBudgetConfig rb;
    rb.ratio = bm.num("ratio", 0.1, 0, 100);
    rb.min_per_second = bm.num("min_per_second", 0, 0, 1e9);
    rb.max_attempts = p.retries + 1;
    rb.window = bm.dur("window", std::chrono::seconds(10));
    p.budget = rb;
  }
  if (auto t = m.take("throttle"); t.IsDefined() && !t.IsNull()) {
    Map tm(c, t, m.sub("throttle"));
    core::ThrottleConfig tc;
    tc.k = tm.num("k", 2.0, 0.01, 1000);
    tc.window = tm.dur("window", std::chrono::minutes(2));
    tc.min_requests = tm.num("min_requests", 20, 0, 1e12);
    p.throttle = tc;
  }
  (void)path;
}

}  // namespace

ScenarioResult load_scenario_string(const std::string& text, const std::string& name, const std::string& dir) {
  ScenarioResult res;
  Ctx c{res.errors, dir};
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    res.errors.push_back(name + ": " + e.what());
    return res;
  }
  Scenario s;
  {
    Map m(c, root, "");
    s.name = m.str("name", name);
    s.description = m.str("description");
    s.seed = static_cast<std::uint64_t>(m.num("seed", 1, 0, 1.8e19));
    s.warmup = m.dur("warmup", Duration::zero());
    s.timeline = m.dur("timeline", Duration::zero());
    s.front = m.str("front", "levee");
    s.step = m.num("step", 0);
    s.capacity = m.num("capacity", 0);
    {
      Map n(c, m.take("network"), "network");
      s.network.delay = n.dur("delay", std::chrono::microseconds(50));
      s.network.jitter = n.dur("jitter", Duration::zero());
    }
    auto backends = m.take("backends");
    for (std::size_t i = 0; backends.IsSequence() && i < backends.size(); ++i) {
      const std::string p = at("backends", i);
      Map b(c, backends[i], p);
      BackendConfig bc;
      bc.name = b.str("name");
      if (bc.name.empty()) c.error(p, "needs a name");
      bc.instances = static_cast<std::uint32_t>(b.num("instances", 1, 1, 100000));
      bc.workers = static_cast<std::uint32_t>(b.num("workers", 10, 0, 1e9));
      const auto svc = b.str("service", "fixed:10ms");
      if (auto t = ServiceTime::parse(svc)) bc.service = *t;
      else c.error(b.sub("service"), "'" + svc + "' is not fixed:D, exp:D, uniform:D:D or lognormal:D:SIGMA");
      bc.cost_factor = b.num("cost_factor", 1.0, 0, 1e9);
      bc.orca = b.flag("orca", true);
      bc.warmup_seconds = b.num("warmup_seconds", 0, 0, 1e9);
      bc.warmup_factor = b.num("warmup_factor", 1, 0, 1e9);
      const auto mode = b.str("warmup_mode", "slow");
      if (mode != "slow" && mode != "thrash") c.error(b.sub("warmup_mode"), "must be slow or thrash");
      bc.thrash = mode == "thrash";
      bc.crash_queue = static_cast<std::uint32_t>(b.num("crash_queue", 0, 0, 1e9));
      bc.restart_after = b.dur("restart_after", std::chrono::seconds(5));
      std::string down;
      if (auto d = b.take("downstream"); d.IsDefined() && !d.IsNull()) {
        Map dm(c, d, b.sub("downstream"));
        DownstreamConfig dc;
        down = dm.str("target");
        if (down.empty()) c.error(dm.sub("target"), "is required");
        dc.target = down;
        dc.timeout = dm.dur("timeout", std::chrono::seconds(1));
        read_caller(c, dm, dm.sub(""), dc.policy);
        bc.downstream = dc;
      }
      s.backends.push_back(std::move(bc));
      s.downstream_targets.push_back(down);
    }
    auto levee = m.take("levee");
    for (std::size_t i = 0; levee.IsSequence() && i < levee.size(); ++i) {
      const std::string p = at("levee", i);
      Map l(c, levee[i], p);
      InstanceGroupConfig g;
      g.name = l.str("name");
      if (g.name.empty()) c.error(p, "needs a name");
      g.instances = static_cast<std::uint32_t>(l.num("instances", 1, 1, 100000));
      g.listener = l.str("listener");
      config::LoadResult lr;
      const auto file = l.str("config");
      auto inl = l.take("config_inline");
      if (!file.empty()) {
        lr = config::load_file(file.front() == '/' ? file : dir + "/" + file);
      } else if (inl.IsDefined() && !inl.IsNull()) {
        YAML::Emitter e;
        e << inl;
        lr = config::load_string(e.c_str(), name + ":" + p + ".config_inline");
      } else {
        c.error(p, "needs config (a levee YAML file) or config_inline");
      }
      for (const auto& e : lr.errors) c.error(p + ".config", e.format());
      if (lr.ok()) {
        auto cfg = std::make_shared<config::Config>(std::move(*lr.config));
        auto targets = l.take("targets");
        for (const auto& cl : cfg->clusters) {
          std::string t = cl.name;
          if (targets.IsMap() && targets[cl.name].IsDefined()) t = targets[cl.name].as<std::string>();
          g.cluster_targets.push_back(t);
        }
        g.cfg = std::move(cfg);
      } else {
        l.take("targets");
      }
      {
        Map cm(c, l.take("cpu"), l.sub("cpu"));
        g.cpu.workers = static_cast<std::uint32_t>(cm.num("workers", 0, 0, 4096));
        g.cpu.request = cm.dur("request", g.cpu.request);
        g.cpu.reject = cm.dur("reject", g.cpu.reject);
        if (g.cpu.reject > g.cpu.request) c.error(cm.sub("reject"), "must not exceed cpu.request");
      }
      // The fleet quota sync: on with a `fleet` key here, or with the
      // proxy config's quota_sync.enabled; the proxy config's quota_sync
      // gives the defaults, the keys here override them.
      if (auto f = l.take("fleet"); (f.IsDefined() && !f.IsNull()) || (g.cfg && g.cfg->quota_sync.enabled)) {
        const config::QuotaSyncConfig q = g.cfg ? g.cfg->quota_sync : config::QuotaSyncConfig{};
        const std::string fp = l.sub("fleet");
        const bool timeout_given = f.IsMap() && f["timeout"].IsDefined();
        const bool ttl_given = f.IsMap() && f["member_ttl"].IsDefined();
        Map fm(c, f, fp);
        FleetSyncConfig fc;
        auto& k = fc.core;
        k.interval = fm.dur("interval", q.interval);
        k.bucket = fm.dur("bucket", q.bucket);
        k.timeout = fm.dur("timeout", q.redis.timeout);
        k.member_ttl = fm.dur("member_ttl", q.member_ttl);
        k.max_instances = static_cast<std::uint32_t>(fm.num("max_instances", q.max_instances, 0, 1e6));
        k.key_prefix = q.key_prefix;
        // Each group is a fleet of its own (its hash tag) unless the proxy
        // config names one.
        k.fleet = q.fleet != "default" ? q.fleet : g.name;
        fc.latency = fm.dur("latency", fc.latency);
        fc.connect_timeout = fm.dur("connect_timeout", q.redis.connect_timeout);
        if (g.cfg) k.window = g.cfg->tenants.window;
        if (k.interval < std::chrono::milliseconds(1)) c.error(fp + ".interval", "must be at least 1ms");
        if (k.bucket < std::chrono::milliseconds(1) || k.bucket > k.window)
          c.error(fp + ".bucket", "must be between 1ms and tenants.window");
        // The proxy's rules (config/loader.cpp); defaults follow the interval.
        if (!timeout_given) k.timeout = std::min(k.timeout, k.interval);
        else if (k.timeout > k.interval) c.error(fp + ".timeout", "must not exceed interval");
        if (!ttl_given) k.member_ttl = std::max(k.member_ttl, 3 * k.interval);
        else if (k.member_ttl < 3 * k.interval) c.error(fp + ".member_ttl", "must be at least 3 x interval");
        g.fleet = fc;
      }
      s.levee.push_back(std::move(g));
    }
    {
      Map r(c, m.take("redis"), "redis");
      auto outs = r.take("outages");
      for (std::size_t i = 0; outs.IsSequence() && i < outs.size(); ++i) {
        Map o(c, outs[i], at("redis.outages", i));
        RedisOutageSpec spec;
        spec.from = o.dur("from", Duration::zero());
        spec.to = o.dur("to", Duration::zero());
        const std::string mode = o.str("mode", "hang");
        if (mode == "refuse") spec.mode = RedisModel::OutageMode::Refuse;
        else if (mode != "hang") c.error(o.sub("mode"), "must be hang or refuse");
        spec.flush = o.flag("flush", false);
        if (spec.to < spec.from) c.error(o.sub("to"), "must not be before from");
        s.redis_outages.push_back(spec);
      }
    }
    auto clients = m.take("clients");
    for (std::size_t i = 0; clients.IsSequence() && i < clients.size(); ++i) {
      const std::string p = at("clients", i);
      Map k(c, clients[i], p);
      ClientGroupConfig g;
      g.name = k.str("name", "clients" + std::to_string(i));
      g.count = static_cast<std::uint32_t>(k.num("count", 0, 1, 1e9));  // 0: one per target instance
      const auto target = k.str("target");
      if (target.empty()) c.error(k.sub("target"), "is required");
      g.poisson = k.flag("poisson", true);
      const auto phases = k.str("phases");
      const double rate = k.num("rate", -1, 0, 1e12);
      const Duration length = k.dur("duration", std::chrono::seconds(10));
      const auto trace = k.str("trace");
      if (!phases.empty()) {
        if (auto ph = parse_phases(phases)) g.phases = *ph;
        else c.error(k.sub("phases"), "want e.g. 10s@500,20s@5000");
      } else if (rate >= 0) {
        g.phases = {{length, rate}};
      } else if (trace.empty()) {
        c.error(p, "needs phases, rate or trace");
      }
      read_caller(c, k, p, g.policy);
      auto classes = k.take("classes");
      for (std::size_t j = 0; classes.IsSequence() && j < classes.size(); ++j) {
        Map cm(c, classes[j], at(k.sub("classes"), j));
        RequestClass rc;
        rc.name = cm.str("name");
        if (rc.name.empty()) c.error(at(k.sub("classes"), j), "needs a name");
        rc.weight = cm.num("weight", 1, 1e-12, 1e12);
        rc.criticality = cm.str("criticality");
        if (!rc.criticality.empty() && !core::parse_criticality(rc.criticality))
          c.error(cm.sub("criticality"), "'" + rc.criticality + "' is not a criticality");
        rc.tenant = cm.str("tenant");
        rc.deadline = cm.dur("deadline", std::chrono::seconds(1));
        g.classes.push_back(std::move(rc));
      }
      if (!trace.empty()) {
        std::ifstream f(trace.front() == '/' ? trace : dir + "/" + trace);
        if (!f) c.error(k.sub("trace"), "cannot read " + trace);
        std::string line;
        double last = 0;
        while (std::getline(f, line)) {
          if (line.empty() || line[0] == '#') continue;
          const auto comma = line.find(',');
          double t = 0;
          try {
            t = std::stod(line.substr(0, comma));
          } catch (...) {
            c.error(k.sub("trace"), "bad line '" + line + "'");
            break;
          }
          std::uint32_t cls = 0xffffffffu;
          if (comma != std::string::npos) {
            const auto cname = line.substr(comma + 1);
            for (std::uint32_t q = 0; q < g.classes.size(); ++q)
              if (g.classes[q].name == cname) cls = q;
          }
          if (t < last) c.error(k.sub("trace"), "arrival times must not decrease");
          last = t;
          g.trace.emplace_back(t, cls);
        }
      }
      s.clients.push_back(std::move(g));
      s.client_targets.push_back(target);
    }
    auto events = m.take("events");
    for (std::size_t i = 0; events.IsSequence() && i < events.size(); ++i) {
      const std::string p = at("events", i);
      Map em(c, events[i], p);
      EventSpec ev;
      ev.at = em.dur("at", Duration::zero());
      ev.action = em.str("action");
      static const std::set<std::string> kActions = {"kill",   "restart", "hang",        "unhang",    "fail",
                                                     "recover", "health_fail", "health_ok", "rate"};
      if (!kActions.count(ev.action)) c.error(em.sub("action"), "unknown action '" + ev.action + "'");
      ev.target = em.str("target");
      if (ev.target.empty()) c.error(em.sub("target"), "is required");
      ev.instance = static_cast<int>(em.num("instance", -1, -1, 1e9));
      ev.value = em.num(ev.action == "rate" ? "scale" : "rate", 1.0, 0, 1e9);
      ev.status = static_cast<std::uint16_t>(em.num("status", 503, 100, 599));
      s.events.push_back(std::move(ev));
    }
  }
  // Names must resolve.
  std::set<std::string> groups;
  for (const auto& b : s.backends)
    if (!groups.insert(b.name).second) res.errors.push_back("backends: duplicate name '" + b.name + "'");
  for (const auto& l : s.levee)
    if (!groups.insert(l.name).second) res.errors.push_back("levee: duplicate name '" + l.name + "'");
  std::set<std::string> client_names;
  for (const auto& k : s.clients) client_names.insert(k.name);
  for (std::size_t i = 0; i < s.client_targets.size(); ++i)
    if (!s.client_targets[i].empty() && !groups.count(s.client_targets[i]))
      res.errors.push_back(at("clients", i) + ".target: no group '" + s.client_targets[i] + "'");
  for (std::size_t i = 0; i < s.downstream_targets.size(); ++i)
    if (!s.downstream_targets[i].empty() && !groups.count(s.downstream_targets[i]))
      res.errors.push_back(at("backends", i) + ".downstream.target: no group '" + s.downstream_targets[i] + "'");
  for (std::size_t i = 0; i < s.levee.size(); ++i)
    for (const auto& t : s.levee[i].cluster_targets)
      if (!groups.count(t)) res.errors.push_back(at("levee", i) + ".targets: no group '" + t + "' for a cluster");
  for (std::size_t i = 0; i < s.events.size(); ++i) {
    const auto& e = s.events[i];
    const bool ok = e.action == "rate" ? client_names.count(e.target) > 0 : groups.count(e.target) > 0;
    if (!ok && !e.target.empty()) res.errors.push_back(at("events", i) + ".target: no group '" + e.target + "'");
  }
  if (s.clients.empty()) res.errors.push_back("clients: at least one client group is needed");
  if (res.errors.empty()) res.scenario = std::move(s);
  return res;
}

ScenarioResult load_scenario_file(const std::string& path) {
  std::ifstream f(path);
  if (!f) {
    ScenarioResult r;
    r.errors.push_back(path + ": cannot read");
    return r;
  }
  std::stringstream ss;
  ss << f.rdbuf();
  const auto slash = path.rfind('/');
  return load_scenario_string(ss.str(), path, slash == std::string::npos ? "." : path.substr(0, slash));
}

}  // namespace levee::sim

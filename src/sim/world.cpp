#include "sim/world.hpp"

#include <stdexcept>

namespace levee::sim {

World::World(const Scenario& s) : s_(s), e_(s.seed), wire_(e_, s.network) {
  for (const auto& o : s.redis_outages) redis_.add_outage({TimePoint{} + o.from, TimePoint{} + o.to, o.mode, o.flush});
  for (const auto& b : s.backends) {
    auto& v = backends_[b.name];
    for (std::uint32_t i = 0; i < b.instances; ++i) {
      v.push_back(std::make_unique<Backend>(e_, wire_, b, i));
      nodes_[b.name].push_back(v.back().get());
    }
  }
  // Levee groups in dependency order: a group is built once every group
  // its clusters point at exists (edge -> services -> sidecars -> backends).
  std::vector<bool> built(s.levee.size(), false);
  for (bool progress = true; progress;) {
    progress = false;
    for (std::size_t gi = 0; gi < s.levee.size(); ++gi) {
      if (built[gi]) continue;
      const auto& g = s.levee[gi];
      bool ready = true;
      for (const auto& t : g.cluster_targets) ready = ready && nodes_.count(t) > 0;
      if (!ready) continue;
      std::vector<std::vector<Node*>> eps;
      for (const auto& t : g.cluster_targets) eps.push_back(nodes_[t]);
      auto& v = instances_[g.name];
      for (std::uint32_t i = 0; i < g.instances; ++i) {
        v.push_back(std::make_unique<Instance>(e_, wire_, g, i, eps, &redis_));
        nodes_[g.name].push_back(v.back().get());
      }
      built[gi] = progress = true;
    }
  }
  for (std::size_t gi = 0; gi < s.levee.size(); ++gi)
    if (!built[gi]) throw std::runtime_error("levee group '" + s.levee[gi].name + "': its clusters point in a cycle");
  // Services call their next hop through a Caller of their own.
  for (std::size_t bi = 0; bi < s.backends.size(); ++bi) {
    const auto& b = s.backends[bi];
    if (!b.downstream) continue;
    service_callers_.push_back(std::make_unique<Caller>(e_, wire_, b.downstream->policy, b.instances));
    for (auto& be : backends_[b.name]) be->connect(nodes_[b.downstream->target], service_callers_.back().get());
  }
  for (std::size_t ci = 0; ci < s.clients.size(); ++ci) {
    clients_.push_back(std::make_unique<ClientGroup>(e_, wire_, s.clients[ci], nodes_[s.client_targets[ci]], s.warmup));
    clients_.back()->timeline.interval = s.timeline;
  }
  Duration longest{};
  TimePoint last{};
  for (const auto& c : clients_) {
    last = std::max(last, c->end());
    for (const auto& rc : c->config().classes) longest = std::max(longest, rc.deadline);
  }
  // As levee-loadgen: requests in flight get their deadline and half a second.
  end_ = last + longest + std::chrono::milliseconds(500);
}

World::~World() = default;

void World::run() {
  for (auto& [name, v] : instances_)
    for (auto& i : v) i->start();
  for (auto& c : clients_) c->start();
  for (std::uint32_t i = 0; i < s_.events.size(); ++i) e_.at(TimePoint{} + s_.events[i].at, this, 0, i);
  e_.run_until(end_);
}

void World::fire(std::uint32_t, std::uint32_t slot, std::uint32_t) { apply(s_.events[slot]); }

void World::apply(const EventSpec& ev) {
  if (ev.action == "rate") {
    for (auto& c : clients_)
      if (c->config().name == ev.target) c->scale_rate(ev.value);
    return;
  }
  auto it = backends_.find(ev.target);
  if (it == backends_.end()) return;  // events act on backends (and client rates)
  for (std::size_t i = 0; i < it->second.size(); ++i) {
    if (ev.instance >= 0 && static_cast<std::size_t>(ev.instance) != i) continue;
    Backend& b = *it->second[i];
    if (ev.action == "kill") b.kill();
    else if (ev.action == "restart") b.restart(true);
    else if (ev.action == "hang") b.set_hang(true);
    else if (ev.action == "unhang") b.set_hang(false);
    else if (ev.action == "fail") b.set_fail(ev.status, ev.value);
    else if (ev.action == "recover") b.set_fail(0, 0);
    else if (ev.action == "health_fail") b.set_health(false);
    else if (ev.action == "health_ok") b.set_health(true);
  }
}

const std::vector<std::unique_ptr<Backend>>& World::backends(const std::string& group) const {
  return backends_.at(group);
}
const std::vector<std::unique_ptr<Instance>>& World::instances(const std::string& group) const {
  return instances_.at(group);
}
ClientGroup& World::clients(const std::string& group) {
  for (auto& c : clients_)
    if (c->config().name == group) return *c;
  throw std::out_of_range("no client group " + group);
}

RunInfo World::info() const {
  RunInfo r;
  r.scenario = s_.name;
  r.front = s_.front;
  r.step = s_.step;
  r.capacity = s_.capacity;
  r.seed = s_.seed;
  Duration load{};
  for (const auto& c : clients_) load = std::max(load, c->end() - TimePoint{});
  r.measured_seconds = std::max(0.001, core::to_seconds(load - s_.warmup));
  r.warmup_seconds = core::to_seconds(s_.warmup);
  r.simulated_seconds = core::to_seconds(end_ - TimePoint{});
  r.wall_seconds = wall_seconds;
  r.events = e_.events();
  for (const auto& c : clients_) r.requests += c->offered();
  return r;
}

std::vector<ClassStats> World::classes() {
  std::vector<ClassStats> out;
  for (auto& c : clients_)
    for (auto cs : c->classes()) {
      if (clients_.size() > 1) cs.name = c->config().name + "/" + cs.name;
      out.push_back(std::move(cs));
    }
  return out;
}

std::vector<Second> World::seconds() {
  std::size_t n = 0, k = 0;
  for (auto& c : clients_) {
    n = std::max(n, c->seconds().size());
    k += c->config().classes.size();
  }
  std::vector<Second> out(n);
  for (auto& s : out) s.ok_by_class.assign(k, 0);
  std::size_t base = 0;
  for (auto& c : clients_) {
    const auto& v = c->seconds();
    for (std::size_t i = 0; i < v.size(); ++i) {
      auto& a = out[i];
      const auto& b = v[i];
      a.offered += b.offered;
      a.sent += b.sent;
      a.ok += b.ok;
      a.rejected += b.rejected;
      a.failed += b.failed;
      a.timeouts += b.timeouts;
      a.errors += b.errors;
      a.retries += b.retries;
      for (std::size_t q = 0; q < b.ok_by_class.size(); ++q) a.ok_by_class[base + q] += b.ok_by_class[q];
    }
    base += c->config().classes.size();
  }
  // The load generator writes one row per second of load and one more.
  if (!out.empty()) out.pop_back();
  return out;
}

namespace {
void add(std::vector<std::uint64_t>& into, const std::vector<std::uint64_t>& v) {
  if (into.size() < v.size()) into.resize(v.size(), 0);
  for (std::size_t i = 0; i < v.size(); ++i) into[i] += v[i];
}
}  // namespace

std::vector<NodeSeries> World::nodes() const {
  std::vector<NodeSeries> out;
  for (const auto& b : s_.backends) {
    NodeSeries n;
    n.name = b.name;
    n.kind = "backend";
    Backend::Counters t;
    for (const auto& be : backends_.at(b.name)) {
      add(n.received, be->received_by_second);
      add(n.served, be->ok_by_second);
      const auto& c = be->counters();
      t.received += c.received;
      t.refused += c.refused;
      t.retries += c.retries;
      t.answered += c.answered;
      t.ok += c.ok;
      t.wasted += c.wasted;
      t.crashes += c.crashes;
      t.max_queue = std::max(t.max_queue, c.max_queue);
      t.busy_seconds += c.busy_seconds;
    }
    n.totals = {{"received", static_cast<double>(t.received)}, {"refused", static_cast<double>(t.refused)},
                {"retries", static_cast<double>(t.retries)},   {"answered", static_cast<double>(t.answered)},
                {"ok", static_cast<double>(t.ok)},             {"wasted", static_cast<double>(t.wasted)},
                {"crashes", static_cast<double>(t.crashes)},   {"max_queue", static_cast<double>(t.max_queue)},
                {"busy_seconds", t.busy_seconds}};
    out.push_back(std::move(n));
  }
  for (const auto& g : s_.levee) {
    NodeSeries n;
    n.name = g.name;
    n.kind = "levee";
    Instance::Counters t;
    double fallback_s = 0, max_load = 0, sync_commands = 0, sync_failures = 0;
    double limit_min = 1e18, limit_max = 0, adm_min = 1e18, adm_max = 0;
    for (const auto& in : instances_.at(g.name)) {
      add(n.received, in->received_by_second);
      add(n.served, in->ok_by_second);
      const auto& c = in->counters();
      t.received += c.received;
      t.admitted += c.admitted;
      t.attempts += c.attempts;
      t.retries += c.retries;
      t.ok += c.ok;
      for (std::size_t r = 0; r < core::kReasonCount; ++r) t.answers[r] += c.answers[r];
      if (const auto* f = in->fleet()) {
        fallback_s += core::to_seconds(f->time_in_fallback(e_.now()));
        sync_commands += static_cast<double>(f->commands_sent());
        sync_failures += static_cast<double>(f->failures());
      }
      max_load = std::max(max_load, in->executor_load());
      // Cluster 0's limit at the end, and how evenly the instances admitted.
      const double lim = in->limit(0);
      limit_min = std::min(limit_min, lim);
      limit_max = std::max(limit_max, lim);
      adm_min = std::min(adm_min, static_cast<double>(c.admitted));
      adm_max = std::max(adm_max, static_cast<double>(c.admitted));
    }
    n.totals = {{"received", static_cast<double>(t.received)}, {"admitted", static_cast<double>(t.admitted)},
                {"attempts", static_cast<double>(t.attempts)}, {"retries", static_cast<double>(t.retries)},
                {"ok", static_cast<double>(t.ok)}};
    for (std::size_t r = 1; r < core::kReasonCount; ++r)
      if (t.answers[r]) n.totals[std::string(core::to_string(static_cast<core::Reason>(r)))] = static_cast<double>(t.answers[r]);
    if (g.fleet) {
      n.totals["fallback_seconds"] = fallback_s;
      n.totals["sync_commands"] = sync_commands;
      n.totals["sync_failures"] = sync_failures;
    }
    n.totals["limit_min"] = limit_min;
    n.totals["limit_max"] = limit_max;
    n.totals["admitted_min"] = adm_min;
    n.totals["admitted_max"] = adm_max;
    n.totals["executor_load_max"] = max_load;
    out.push_back(std::move(n));
  }
  return out;
}

}  // namespace levee::sim

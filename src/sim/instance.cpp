#include "sim/instance.hpp"

#include <algorithm>
#include <array>
#include <charconv>
#include <span>

#include "config/to_core.hpp"
#include "core/retry.hpp"

namespace levee::sim {

using core::Reason;

struct Instance::Cluster {
  Cluster(const config::ClusterConfig& c, core::AdmissionConfig a, core::EndpointPolicy p,
          const std::vector<double>& weights, TimePoint now)
      : cfg(&c), adm(std::move(a)), eps(p, weights, now) {}
  const config::ClusterConfig* cfg;
  core::Admission adm;
  core::EndpointSet eps;
  std::vector<Node*> nodes;
  std::vector<std::uint32_t> outstanding;
  core::WeightedSet set;
  std::vector<core::EndpointLoad> loads;
  bool dirty = true;
  struct Check {
    core::HealthState state;
    bool decided = false;
    Duration interval{};
  };
  std::vector<Check> checks;
};

struct Instance::Ex {
  // Abandoned: answered (or its client gone) while the backend still works
  // on its last attempt; it holds the permit until the backend answers or
  // the response timeout passes (proxy/abandoned.hpp).
  enum class St : std::uint8_t { Cpu, Queued, Attempt, Backoff, Abandoned };
  Peer* from = nullptr;
  std::uint64_t cookie = 0;
  Call call;
  St st = St::Cpu;
  core::Classification cls;
  std::uint32_t cluster = 0;
  TimePoint start{};
  core::QueueGate::Ticket ticket = core::QueueGate::kNoTicket;
  bool permit = false;
  std::uint32_t in_flight_at_start = 0;
  std::uint32_t attempts = 0;  // counted attempts made
  std::size_t avoid = core::kNoEndpoint;
  std::size_t ep = core::kNoEndpoint;
  std::uint32_t number = 1;
  TimePoint sent_at{};
  std::uint64_t up_ticket = 0;
  bool up_accepted = false;
  bool held = false;        // a timed-out attempt the backend may still work on
  std::uint32_t timer = 0;  // the one timer armed for it
  std::uint32_t token = 0;  // the attempt in flight
};

struct Instance::Sink {
  Instance* s;
  void operator()(const core::QueueGate::Wake& w) const { s->wakes_.push_back(w); }
};

namespace {
struct Field {
  std::string_view name, value;
};
const core::Address kPeer = core::ipv4_mapped({127, 0, 0, 1});
}  // namespace

Instance::Instance(Engine& e, Wire& w, const InstanceGroupConfig& g, std::uint32_t index,
                   std::vector<std::vector<Node*>> endpoints, RedisModel* redis)
    : e_(e),
      w_(w),
      g_(g),
      index_(index),
      rng_(e.rng.split()),
      tenants_(config::tenant_table(*g.cfg)),
      self_protection_(config::self_protection_policy(g.cfg->self_protection)),
      load_(config::executor_load_config(g.cfg->self_protection)),
      ex_(std::make_unique<Slab<Ex>>()) {
  const config::Config& cfg = *g.cfg;
  const config::ListenerConfig* l = &cfg.listeners.front();
  for (const auto& x : cfg.listeners)
    if (x.name == g.listener) l = &x;
  // Simulated clients are the service's own callers: their signals count
  // unless the scenario writes a `trust` section (a real listener off
  // loopback trusts nobody by default).
  config::ListenerConfig trusted = *l;
  if (!trusted.trust.set) trusted.trust.sources.any = true;
  classifier_ = std::make_unique<core::Classifier>(config::classifier(cfg, trusted, tenants_));
  for (const auto& r : l->routes) route_cluster_.push_back(r.cluster_index);
  for (std::size_t c = 0; c < cfg.clusters.size(); ++c) {
    const auto& cl = cfg.clusters[c];
    const auto& nodes = endpoints[c];
    std::vector<double> weights(nodes.size(), 1.0);
    if (cl.endpoints.size() == nodes.size())
      for (std::size_t k = 0; k < nodes.size(); ++k) weights[k] = cl.endpoints[k].weight;
    auto cs = std::make_unique<Cluster>(cl, config::admission_config(cfg, cl, tenants_), config::endpoint_policy(cl),
                                        weights, e.now());
    cs->nodes = nodes;
    cs->outstanding.assign(nodes.size(), 0);
    cs->loads.assign(nodes.size(), core::EndpointLoad{0.0, 0});
    cs->checks.resize(nodes.size());
    cs->adm.set_limit_scale(cs->eps.limit_scale());
    clusters_.push_back(std::move(cs));
  }
  workers_ = g.cpu.workers ? g.cpu.workers : (cfg.workers ? cfg.workers : 1);
  sample_interval_ = cfg.self_protection.sample_interval;
  if (redis != nullptr && g.fleet) {
    // As control/server.cpp wires quota::FleetSync: the layout by name, and
    // two hooks onto each cluster's quota gate (Cluster::take_quota_usage,
    // Cluster::set_fleet_view).
    core::FleetLayout layout{{}, tenants_.names()};
    for (const auto& cl : cfg.clusters) layout.clusters.push_back(cl.name);
    FleetSyncConfig fc = *g.fleet;
    fc.core.instance_id = g.name + "-" + std::to_string(index);
    fleet_ = std::make_unique<FleetSync>(
        e, *redis, std::move(fc), std::move(layout),
        FleetSync::Hooks{[this](std::size_t c, auto& out) { clusters_[c]->adm.quota().take_recorded(out); },
                         [this](std::size_t c, auto& v) { clusters_[c]->adm.quota().set_fleet_view(v); }});
  }
}

Instance::~Instance() = default;

core::Admission& Instance::admission(std::size_t cluster) { return clusters_[cluster]->adm; }

double Instance::limit(std::size_t cluster) const {
  const auto& a = clusters_[cluster]->adm;
  return a.config().queue_mode == core::GateMode::Off ? 0.0 : static_cast<double>(a.queue().limit());
}

void Instance::start() {
  for (std::uint32_t c = 0; c < clusters_.size(); ++c) {
    e_.after(Duration::zero(), this, kTick, c);  // as LoadSampler: at start, then every 100 ms
    const auto& hc = clusters_[c]->cfg->health_check;
    if (!hc.enabled) continue;
    for (std::uint32_t k = 0; k < clusters_[c]->nodes.size(); ++k) {
      // The proxy checks before it serves: the first verdict is in at start.
      clusters_[c]->checks[k].interval = hc.interval;
      health_result(c, k, clusters_[c]->nodes[k]->health() == Node::Health::Ok);
    }
  }
  if (self_protection_.mode != core::GateMode::Off) e_.after(sample_interval_, this, kSample);
  if (fleet_) fleet_->start(rng_.uniform());
}

void Instance::bump(std::vector<std::uint64_t>& v) {
  const auto s = static_cast<std::size_t>(core::to_seconds(e_.now().time_since_epoch()));
  if (v.size() <= s) v.resize(s + 1, 0);
  ++v[s];
}

std::uint32_t Instance::arm(std::uint32_t i, Duration d, Kind k) {
  const std::uint32_t t = ++timer_seq_;
  (*ex_)[i].timer = t;
  e_.after(d, this, k, i, t);
  return t;
}

// --- the CPU ------------------------------------------------------------------

Duration Instance::charge(Duration cost) {
  const TimePoint now = e_.now();
  if (cpu_free_ < now) cpu_free_ = now;
  const Duration wait = cpu_free_ - now;
  cpu_free_ += Duration(static_cast<Duration::rep>(static_cast<double>(cost.count()) / workers_));
  charged_s_ += core::to_seconds(cost);
  return wait;
}

void Instance::sample_cpu() {
  // As LoadSampler does: workers running (the CPU they used over the
  // interval) plus ready work queued beyond them (how long a probe posted
  // now would wait, in intervals).
  const TimePoint now = e_.now();
  const double interval = core::to_seconds(sample_interval_);
  const double backlog = cpu_free_ > now ? core::to_seconds(cpu_free_ - now) : 0.0;
  const double used = std::min(1.0, charged_s_ / (workers_ * interval));
  charged_s_ = 0;
  const double busy = workers_ * used + workers_ * std::max(0.0, backlog / interval - 1.0);
  load_.sample(now, busy, workers_);
  core::CriticalityMask m = 0;
  for (auto c : core::kAllCriticalities)
    if (load_.over(c)) m |= core::bit(c);
  levels_.executor_over = m;
}

// --- arrival -------------------------------------------------------------------

std::uint64_t Instance::receive(const Call& c, Peer* from, std::uint64_t cookie) {
  ++n_.received;
  bump(received_by_second);
  const std::uint32_t i = ex_->alloc();
  Ex& x = (*ex_)[i];
  x.from = from;
  x.cookie = cookie;
  x.call = c;
  const std::uint64_t ticket = pack(i, ex_->gen(i));
  const Duration wait = charge(g_.cpu.reject);
  if (wait > Duration::zero()) {
    x.st = Ex::St::Cpu;
    arm(i, wait, kProcess);
  } else {
    process(i);
  }
  return ticket;
}

void Instance::process(std::uint32_t i) {
  Ex& x = (*ex_)[i];
  const TimePoint now = e_.now();
  x.start = now;
  std::array<Field, 4> f;
  std::size_t n = 0;
  char ms[24], att[12];
  if (!x.call.criticality.empty()) f[n++] = {"x-criticality", x.call.criticality};
  if (!x.call.tenant.empty()) f[n++] = {"x-tenant-id", x.call.tenant};
  if (x.call.timeout_ms >= 0) {
    auto r = std::to_chars(ms, ms + sizeof ms, x.call.timeout_ms);
    f[n++] = {"x-request-timeout-ms", std::string_view(ms, static_cast<std::size_t>(r.ptr - ms))};
  }
  if (x.call.attempt > 1) {
    auto r = std::to_chars(att, att + sizeof att, x.call.attempt);
    f[n++] = {"x-attempt-count", std::string_view(att, static_cast<std::size_t>(r.ptr - att))};
  }
  x.cls = classifier_->classify("sim", "/", std::span<const Field>(f.data(), n), kPeer, now);
  if (x.cls.error != Reason::None) return fail(i, x.cls.error);
  x.cluster = static_cast<std::uint32_t>(route_cluster_[x.cls.route]);
  Cluster& c = *clusters_[x.cluster];

  // Gate 1: self-protection, from what the CPU model last published.
  const core::Verdict v1 = core::screen(self_protection_, levels_, x.cls.criticality);
  if (v1.rejected()) return reject(i, v1.decision);

  // Gates 2-4.
  core::Arrival a;
  a.criticality = x.cls.criticality;
  a.tenant = x.cls.tenant;
  a.attempt = x.cls.attempt;
  a.now = now;
  a.deadline = x.cls.deadline;
  a.u = rng_.uniform();
  a.cookie = pack(i, ex_->gen(i));
  const core::Verdict v = c.adm.admit(a, Sink{this});
  if (v.rejected()) {
    reject(i, v.decision);
  } else if (v.queued()) {
    x.st = Ex::St::Queued;
    x.ticket = v.ticket;
    // exchange.cpp's give-up time: the gate drops entries past their
    // deadline or maximum wait when it next looks; this makes sure we look.
    const auto& qc = c.cfg->admission.queue;
    const auto grace = std::chrono::duration_cast<Duration>(qc.target * std::max(1.0, qc.max_wait_factor));
    const TimePoint give_up = std::min(x.cls.deadline, x.start + grace) + std::chrono::milliseconds(1);
    arm(i, give_up - now, kGiveUp);
  } else {
    x.permit = v.permit;
    x.in_flight_at_start = v.in_flight;
    ++n_.admitted;
    forward(i);
  }
  flush_wakes();
}

void Instance::flush_wakes() {
  if (flushing_) return;  // the outer loop picks up what nested calls add
  flushing_ = true;
  for (std::size_t k = 0; k < wakes_.size(); ++k) {
    const core::QueueGate::Wake w = wakes_[k];
    const std::uint32_t i = slot_of(w.cookie);
    if (!ex_->live(i, gen_of(w.cookie)) || (*ex_)[i].st != Ex::St::Queued) continue;
    if (!w.granted) {
      reject(i, w.decision);
      continue;
    }
    Ex& x = (*ex_)[i];
    x.permit = true;
    x.in_flight_at_start = w.in_flight;
    ++n_.admitted;
    forward(i);
  }
  wakes_.clear();
  flushing_ = false;
}

// --- attempts ------------------------------------------------------------------

std::size_t Instance::pick(Cluster& c, std::size_t avoid) {
  if (c.dirty) {
    for (std::size_t k = 0; k < c.loads.size(); ++k) c.loads[k].weight = c.eps.effective_weight(k);
    c.set.rebuild(c.loads);
    c.dirty = false;
  }
  if (c.set.empty()) return core::kNoEndpoint;
  auto weight = [&](std::size_t k) { return c.loads[k].weight; };
  auto outstanding = [&](std::size_t k) { return c.outstanding[k]; };
  std::size_t k = core::pick_p2c_with(c.set, weight, outstanding, rng_.uniform(), rng_.uniform());
  if (k == avoid && c.nodes.size() > 1) {
    // A retry prefers a different endpoint: one more draw.
    const std::size_t k2 = core::pick_p2c_with(c.set, weight, outstanding, rng_.uniform(), rng_.uniform());
    if (k2 != core::kNoEndpoint) k = k2;
  }
  return k;
}

void Instance::weights_changed(Cluster& c) {
  c.dirty = true;
  c.adm.set_limit_scale(c.eps.limit_scale());
}

void Instance::forward(std::uint32_t i) {
  const TimePoint now = e_.now();
  Ex& x = (*ex_)[i];
  Cluster& c = *clusters_[x.cluster];
  if (now >= x.cls.deadline) return fail(i, Reason::Deadline);
  const std::size_t ep = pick(c, x.avoid);
  if (ep == core::kNoEndpoint) return fail(i, Reason::NoEndpoint);
  charge(g_.cpu.request - g_.cpu.reject);
  x.ep = ep;
  ++c.outstanding[ep];
  x.number = x.attempts + 1;
  x.st = Ex::St::Attempt;
  x.sent_at = now;
  x.token = ++timer_seq_;
  x.up_accepted = false;
  ++n_.attempts;
  if (x.number > 1) ++n_.retries;
  Call out = x.call;
  out.attempt = x.number;
  if (x.cls.deadline != TimePoint::max())
    out.timeout_ms = std::chrono::duration_cast<std::chrono::milliseconds>(x.cls.deadline - now).count();
  w_.send_call(c.nodes[ep], out, this, pack(i, x.token));
  arm(i, std::min(x.cls.deadline, now + c.cfg->response_timeout) - now, kWatchdog);
}

bool Instance::on_accepted(std::uint64_t cookie, std::uint64_t ticket) {
  const std::uint32_t i = slot_of(cookie);
  if (!ex_->used(i)) return false;
  Ex& x = (*ex_)[i];
  if (x.st != Ex::St::Attempt || x.token != gen_of(cookie)) return false;
  x.up_ticket = ticket;
  x.up_accepted = true;
  return true;
}

void Instance::on_reply(std::uint64_t cookie, const Reply& r) {
  const std::uint32_t i = slot_of(cookie);
  if (!ex_->used(i)) return;
  Ex& x = (*ex_)[i];
  if (x.st == Ex::St::Abandoned && x.token == gen_of(cookie)) {
    // The backend is done with an attempt nobody waits for: its permit back.
    --clusters_[x.cluster]->outstanding[x.ep];
    release_permit(i, nullptr);
    finish(i);
    return;
  }
  if (x.st != Ex::St::Attempt || x.token != gen_of(cookie)) return;
  Cluster& c = *clusters_[x.cluster];
  --c.outstanding[x.ep];
  x.up_accepted = false;
  if (r.kind == Reply::Kind::ConnectFailed) {
    ++x.attempts;
    report(i, core::Answer::Unanswered, true, std::nullopt, nullptr);
    after_attempt(i, true, core::AttemptFailure::Connect, nullptr);
  } else if (r.kind == Reply::Kind::Reset) {
    ++x.attempts;
    report(i, core::Answer::Unanswered, true, std::nullopt, nullptr);
    after_attempt(i, true, core::AttemptFailure::Reset, nullptr);
  } else if (r.status == 503 && !r.no_retry) {
    ++x.attempts;
    after_attempt(i, false, core::AttemptFailure::Overloaded, &r);
  } else {
    relay(i, r);
  }
}

void Instance::after_attempt(std::uint32_t i, bool failed, core::AttemptFailure f, const Reply* r) {
  const TimePoint now = e_.now();
  Ex& x = (*ex_)[i];
  Cluster& c = *clusters_[x.cluster];
  const auto& rc = c.cfg->retry;
  core::RetryContext ctx;
  ctx.enabled = rc.enabled;
  ctx.replayable = true;  // every simulated request is an idempotent GET
  ctx.sent = f != core::AttemptFailure::Connect;
  ctx.max_attempts = rc.max_attempts;
  ctx.deadline = x.cls.deadline;
  ctx.failure = f;
  ctx.attempts = x.attempts;
  ctx.now = now;
  core::RetryPlan plan = core::plan_retry(ctx);
  if (plan.retry && plan.budget && !c.adm.try_retry(now, x.attempts + 1)) plan.retry = false;
  if (!failed) {
    // A 503 that says nothing against a retry.
    if (!plan.retry) return relay(i, *r);
    report(i, core::Answer::Overloaded, true, now - x.sent_at, r);
  }
  if (!plan.retry) {
    if (now >= x.cls.deadline)
      return fail(i, f == core::AttemptFailure::Timeout ? Reason::UpstreamTimeout : Reason::Deadline);
    switch (f) {
      case core::AttemptFailure::Connect: return fail(i, Reason::UpstreamConnect);
      case core::AttemptFailure::Timeout: return fail(i, Reason::UpstreamTimeout);
      default: return fail(i, Reason::UpstreamReset);
    }
  }
  x.held = false;  // retried: the permit goes with the next attempt (exchange.cpp)
  if (plan.counts) x.avoid = x.ep;
  if (plan.backoff) {
    const auto wait = core::retry_backoff(rc.backoff_base, rc.backoff_max, x.attempts, rng_.uniform());
    if (now + wait >= x.cls.deadline) return fail(i, Reason::Deadline);
    x.st = Ex::St::Backoff;
    arm(i, wait, kBackoff);
    return;
  }
  forward(i);
}

void Instance::report(std::uint32_t i, core::Answer a, bool failure, std::optional<Duration> latency,
                      const Reply* load) {
  const TimePoint now = e_.now();
  Ex& x = (*ex_)[i];
  Cluster& c = *clusters_[x.cluster];
  core::AttemptReport rep;
  rep.now = now;
  rep.criticality = x.cls.criticality;
  rep.tenant = x.cls.tenant;
  rep.answer = a;
  if (load != nullptr && load->has_load) {
    rep.cost = load->cost;
    rep.utilization = load->utilization;
  }
  // Cluster::on_attempt, in its order.
  c.adm.on_attempt(rep);
  if (latency) c.eps.on_response(x.ep, now, *latency, rep.utilization);
  if (c.eps.on_result(x.ep, now, !failure)) weights_changed(c);
}

void Instance::relay(std::uint32_t i, const Reply& r) {
  const TimePoint now = e_.now();
  Ex& x = (*ex_)[i];
  const bool overloaded = r.status == 429 || r.status == 503 || r.no_retry;
  report(i, overloaded ? core::Answer::Overloaded : core::Answer::Accepted, r.status >= 500, now - x.sent_at, &r);
  const core::QueueGate::Sample s{now - x.sent_at, x.in_flight_at_start, overloaded};
  release_permit(i, &s);
  Reply out = r;
  // levee gave up below because of overload: tell the caller not to retry either.
  out.no_retry = r.no_retry || (overloaded && x.number > 1);
  out.has_load = false;  // what describes the inside does not leave
  if (r.status >= 200 && r.status < 300) {
    ++n_.ok;
    bump(ok_by_second);
  }
  answer(i, out);
  finish(i);
}

// --- local answers ---------------------------------------------------------------

void Instance::release_permit(std::uint32_t i, const core::QueueGate::Sample* s) {
  Ex& x = (*ex_)[i];
  if (!x.permit) return;
  x.permit = false;
  clusters_[x.cluster]->adm.release(e_.now(), s, Sink{this});
  flush_wakes();
}

void Instance::reject(std::uint32_t i, const core::Decision& d) {
  release_permit(i, nullptr);
  Reply r;
  r.status = d.status;
  r.reason = d.reason;
  r.retry_after_s = core::retry_after_seconds(d.retry_after, rng_.uniform());
  r.no_retry = d.no_retry;
  ++n_.answers[static_cast<std::size_t>(d.reason)];
  answer(i, r);
  finish(i);
}

void Instance::fail(std::uint32_t i, Reason reason) {
  Ex& x = (*ex_)[i];
  const bool held = std::exchange(x.held, false);
  if (!held) release_permit(i, nullptr);
  Reply r;
  r.status = core::info(reason).status;
  r.reason = reason;
  ++n_.answers[static_cast<std::size_t>(reason)];
  answer(i, r);
  if (held) return hold(i);
  finish(i);
}

void Instance::hold(std::uint32_t i) {
  // The backend has the whole request and is presumably still at it; the
  // permit comes back when it answers, or at the response timeout.
  Ex& x = (*ex_)[i];
  const TimePoint until = x.sent_at + clusters_[x.cluster]->cfg->response_timeout;
  if (until <= e_.now()) {
    clusters_[x.cluster]->nodes[x.ep]->abandon(x.up_ticket);
    release_permit(i, nullptr);
    finish(i);
    return;
  }
  ++clusters_[x.cluster]->outstanding[x.ep];  // still busy, as the balancer sees it
  x.st = Ex::St::Abandoned;
  arm(i, until - e_.now(), kWatchdog);
}

void Instance::answer(std::uint32_t i, const Reply& r) {
  const Ex& x = (*ex_)[i];
  w_.send_reply(x.from, x.cookie, r);
}

void Instance::finish(std::uint32_t i) { ex_->release(i); }

void Instance::abandon(std::uint64_t ticket) {
  // The client went away: the request leaves the queue, its upstream
  // attempt is closed and its permit returns without a sample; nothing is
  // reported about the attempt (exchange.cpp's client_gone paths).
  const std::uint32_t i = slot_of(ticket);
  if (!ex_->live(i, gen_of(ticket))) return;
  Ex& x = (*ex_)[i];
  if (x.st == Ex::St::Abandoned) return;  // answered already; the permit waits for the backend
  ++n_.answers[static_cast<std::size_t>(Reason::ClientGone)];
  switch (x.st) {
    case Ex::St::Cpu: break;
    case Ex::St::Queued: clusters_[x.cluster]->adm.cancel(x.ticket, e_.now()); break;
    case Ex::St::Attempt: {
      Cluster& c = *clusters_[x.cluster];
      --c.outstanding[x.ep];
      if (x.up_accepted && x.permit) return hold(i);
      if (x.up_accepted) c.nodes[x.ep]->abandon(x.up_ticket);
      release_permit(i, nullptr);
      break;
    }
    case Ex::St::Backoff: release_permit(i, nullptr); break;
    case Ex::St::Abandoned: break;
  }
  finish(i);
}

// --- timers ------------------------------------------------------------------------

void Instance::health_result(std::uint32_t c, std::uint32_t k, bool ok) {
  Cluster& cl = *clusters_[c];
  const auto& hc = cl.cfg->health_check;
  auto& ck = cl.checks[k];
  bool healthy;
  if (!ck.decided) {
    // No history yet: the first answer decides, then hysteresis applies.
    ck.decided = true;
    ck.state = core::HealthState({hc.healthy, hc.unhealthy}, ok);
    healthy = ok;
  } else {
    ck.state.on_check(ok);
    healthy = ck.state.healthy();
  }
  if (cl.eps.set_healthy(k, healthy, e_.now())) weights_changed(cl);
  // Endpoints that stay down are probed less and less often.
  ck.interval = (!healthy && !ok) ? std::min(hc.max_interval, ck.interval * 2) : hc.interval;
  const double j = 1.0 + hc.jitter * (2.0 * rng_.uniform() - 1.0);
  e_.after(core::from_seconds(core::to_seconds(ck.interval) * j), this, kHealth, (c << 16) | k);
}

void Instance::health_check(std::uint32_t c, std::uint32_t k) {
  const auto& hc = clusters_[c]->cfg->health_check;
  const Node::Health h = clusters_[c]->nodes[k]->health();
  const Duration rtt = 2 * w_.config().delay;
  const Duration at = h == Node::Health::Hung ? hc.timeout : rtt;
  e_.after(at, this, kHealthResult, (c << 16) | k, h == Node::Health::Ok ? 1 : 0);
}

void Instance::fire(std::uint32_t kind, std::uint32_t slot, std::uint32_t gen) {
  switch (kind) {
    case kTick: {
      Cluster& c = *clusters_[slot];
      if (c.eps.refresh(e_.now())) c.dirty = true;
      c.adm.set_limit_scale(c.eps.limit_scale());
      c.adm.tick(e_.now(), Sink{this});
      flush_wakes();
      e_.after(std::chrono::milliseconds(100), this, kTick, slot);
      return;
    }
    case kSample:
      sample_cpu();
      e_.after(sample_interval_, this, kSample);
      return;
    case kHealth: return health_check(slot >> 16, slot & 0xffff);
    case kHealthResult: return health_result(slot >> 16, slot & 0xffff, gen != 0);
    default: break;
  }
  if (!ex_->used(slot) || (*ex_)[slot].timer != gen) return;
  Ex& x = (*ex_)[slot];
  switch (kind) {
    case kProcess:
      if (x.st == Ex::St::Cpu) process(slot);
      return;
    case kGiveUp:
      if (x.st != Ex::St::Queued) return;
      if (clusters_[x.cluster]->adm.cancel(x.ticket, e_.now())) {
        const auto d = x.cls.deadline <= e_.now() ? core::Decision::reject(Reason::Deadline, Duration::zero())
                                                  : core::Decision::reject(Reason::QueueTimeout, std::chrono::seconds(1));
        reject(slot, d);
      }
      return;
    case kWatchdog: {
      if (x.st == Ex::St::Abandoned) {
        // The response timeout: levee waits no longer for any backend.
        --clusters_[x.cluster]->outstanding[x.ep];
        clusters_[x.cluster]->nodes[x.ep]->abandon(x.up_ticket);
        release_permit(slot, nullptr);
        finish(slot);
        return;
      }
      if (x.st != Ex::St::Attempt) return;
      Cluster& c = *clusters_[x.cluster];
      --c.outstanding[x.ep];
      const std::size_t ep = x.ep;
      const std::uint64_t job = x.up_ticket;
      const bool accepted = x.up_accepted;
      x.up_accepted = false;
      x.st = Ex::St::Backoff;  // no reply for this attempt is wanted any more
      ++x.attempts;
      report(slot, core::Answer::Unanswered, true, std::nullopt, nullptr);
      // Given up on without a retry, it keeps the permit (fail, hold);
      // retried, the backend's work on it is wasted.
      x.held = accepted && x.permit;
      after_attempt(slot, true, core::AttemptFailure::Timeout, nullptr);
      if (!ex_->used(slot) || (*ex_)[slot].st != Ex::St::Abandoned) {
        if (accepted) c.nodes[ep]->abandon(job);
        if (ex_->used(slot)) (*ex_)[slot].held = false;
      }
      return;
    }
    case kBackoff:
      if (x.st == Ex::St::Backoff) forward(slot);
      return;
    default: return;
  }
}

}  // namespace levee::sim

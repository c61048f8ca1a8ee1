// The simulated instance: arrival and classification, its CPU, the core
// admission pipeline, local answers and the timers that drive them. The
// upstream side (attempts, answers, health checks) is in
// instance_upstream.cpp; the state both share in instance_state.hpp.
#include "sim/instance.hpp"

#include <algorithm>
#include <array>
#include <charconv>
#include <span>

#include "config/to_core.hpp"
#include "core/retry.hpp"
#include "sim/instance_state.hpp"

namespace levee::sim {

using core::Reason;

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
    x.tag = v.tag;
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
    x.tag = w.tag;
    ++n_.admitted;
    forward(i);
  }
  wakes_.clear();
  flushing_ = false;
}

// --- local answers ---------------------------------------------------------------

void Instance::release_permit(std::uint32_t i, const core::QueueGate::Sample* s) {
  Ex& x = (*ex_)[i];
  if (!x.permit) return;
  x.permit = false;
  clusters_[x.cluster]->adm.release(e_.now(), s, Sink{this}, x.tag);
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

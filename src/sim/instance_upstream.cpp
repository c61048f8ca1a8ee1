// The simulated instance's upstream side: choosing an endpoint, sending an
// attempt, what its answer (or its loss) means for retries and the
// endpoint's state, and active health checks. The same decisions as
// src/proxy/upstream.cpp and exchange.cpp, in simulated time.
#include "sim/instance.hpp"

#include <algorithm>

#include "core/retry.hpp"
#include "sim/instance_state.hpp"

namespace levee::sim {

using core::Reason;

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

// --- health checks ---------------------------------------------------------------

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

}  // namespace levee::sim

#include "sim/clients.hpp"

#include <algorithm>
#include <cmath>

namespace levee::sim {

std::string reason_of(const Reply& r) {
  if (r.reason != core::Reason::None && core::is_shed(r.reason)) return std::string(core::to_string(r.reason));
  return "status_" + std::to_string(r.status);
}

// --- Caller ------------------------------------------------------------------

Caller::Caller(Engine& e, Wire& w, CallerPolicy p, std::uint32_t clients)
    : e_(e), w_(w), p_(std::move(p)), rng_(e.rng.split()) {
  if (p_.throttle) throttles_.resize(clients);
  if (p_.budget) budgets_.resize(clients);
}

core::AdaptiveThrottle* Caller::throttle(std::uint32_t client) {
  if (!p_.throttle) return nullptr;
  auto& t = throttles_[client % throttles_.size()];
  if (!t) t = std::make_unique<core::AdaptiveThrottle>(*p_.throttle);
  return t.get();
}

core::RetryBudget* Caller::budget(std::uint32_t client) {
  if (!p_.budget) return nullptr;
  auto& b = budgets_[client % budgets_.size()];
  if (!b) b = std::make_unique<core::RetryBudget>(*p_.budget);
  return b.get();
}

void Caller::start(const CallSpec& s, CallOwner* owner, std::uint64_t cookie) {
  const std::uint32_t i = pending_.alloc();
  Pending& p = pending_[i];
  p.spec = s;
  p.owner = owner;
  p.owner_cookie = cookie;
  if (auto* b = budget(s.client)) b->on_request(e_.now());
  // One timer for the whole call: the client gives up at its deadline.
  e_.at(s.deadline, this, kDeadline, i, pending_.gen(i));
  send(i);
}

void Caller::send(std::uint32_t i) {
  Pending& p = pending_[i];
  const TimePoint now = e_.now();
  ++p.attempt;
  // Client-side throttling: refuse locally in proportion to what the
  // backend has been refusing (counted as a request, never sent).
  if (auto* t = throttle(p.spec.client)) {
    if (!t->admit(p.spec.crit, now, rng_.uniform()).admitted()) {
      ++throttled_;
      p.out.reason = "client_throttle";
      finish(i, Outcome::Kind::Rejected);
      return;
    }
  }
  if (p.attempt > 1) {
    if (auto* b = budget(p.spec.client); b && !b->try_retry(now, p.attempt)) {
      // Out of budget: the last answer stands.
      ++budget_denied_;
      finish(i, p.out.status == 429 || p.out.status == 503 ? Outcome::Kind::Rejected
                                                             : (p.out.status ? Outcome::Kind::Failed : Outcome::Kind::Error));
      return;
    }
  }
  const auto left_ms = std::chrono::duration_cast<std::chrono::milliseconds>(p.spec.deadline - now).count();
  if (left_ms <= 0) {
    finish(i, Outcome::Kind::Timeout);
    return;
  }
  p.owner->on_send(p.owner_cookie, p.attempt);
  if (p.attempt == 1) p.out.first_attempt_sent = true;
  p.out.attempts = p.attempt;
  p.state = State::Waiting;
  p.accepted = false;
  p.ticket = 0;
  Call c;
  c.id = p.spec.id;
  c.criticality = p.spec.criticality;
  c.tenant = p.spec.tenant;
  c.timeout_ms = left_ms;
  c.attempt = p.attempt;
  w_.send_call(p.spec.target, c, this, pack(i, pending_.gen(i)));
}

bool Caller::on_accepted(std::uint64_t cookie, std::uint64_t ticket) {
  const std::uint32_t i = slot_of(cookie);
  // Gave up while the call was on its way: the connection closes now.
  if (!pending_.live(i, gen_of(cookie))) return false;
  Pending& p = pending_[i];
  if (p.state != State::Waiting) return false;
  p.ticket = ticket;
  p.accepted = true;
  return true;
}

void Caller::on_reply(std::uint64_t cookie, const Reply& r) {
  const std::uint32_t i = slot_of(cookie);
  if (!pending_.live(i, gen_of(cookie))) return;
  Pending& p = pending_[i];
  if (p.state != State::Waiting) return;
  const TimePoint now = e_.now();
  p.accepted = false;
  if (r.kind != Reply::Kind::Answer) {
    if (auto* t = throttle(p.spec.client)) t->on_response(p.spec.crit, now, false);
    const bool retry = r.kind == Reply::Kind::Reset || p_.retry_connect_errors;
    if (retry && p.attempt <= p_.retries && now < p.spec.deadline) {
      p.out.status = 0;
      backoff(i, 0, false);
      return;
    }
    finish(i, Outcome::Kind::Error);
    return;
  }
  const bool overload = r.status == 429 || r.status == 503;
  if (auto* t = throttle(p.spec.client)) t->on_response(p.spec.crit, now, !overload);
  if (r.status >= 200 && r.status < 300) {
    p.out.status = r.status;
    finish(i, Outcome::Kind::Ok);
    return;
  }
  p.out.status = r.status;
  p.out.no_retry = r.no_retry;
  p.out.reason = reason_of(r);
  if (!p.out.refused) {
    p.out.refused = true;
    p.out.first_refusal = now;
  }
  if (p.attempt <= p_.retries && !(p_.honor_no_retry && r.no_retry) && now < p.spec.deadline &&
      (overload || r.status >= 500)) {
    backoff(i, p_.honor_retry_after ? static_cast<double>(r.retry_after_s) : 0.0, true);
    return;
  }
  finish(i, overload ? Outcome::Kind::Rejected : Outcome::Kind::Failed);
}

void Caller::backoff(std::uint32_t i, double retry_after_s, bool after_answer) {
  Pending& p = pending_[i];
  const double base = core::to_seconds(p_.backoff);
  double wait = retry_after_s > 0 ? retry_after_s : base * static_cast<double>(1u << std::min(p.attempt - 1, 10u));
  if (base > 0 || retry_after_s > 0) wait *= 0.5 + rng_.uniform();
  const TimePoint until = std::min(p.spec.deadline, e_.now() + core::from_seconds(wait));
  p.state = State::Backoff;
  p.after_answer = after_answer;
  e_.at(until, this, kSend, i, pending_.gen(i));
}

void Caller::fire(std::uint32_t kind, std::uint32_t i, std::uint32_t gen) {
  if (!pending_.live(i, gen)) return;
  Pending& p = pending_[i];
  if (kind == kDeadline) {
    if (p.state != State::Waiting) return;  // a backoff ends by the deadline and decides itself
    if (p.accepted) p.spec.target->abandon(p.ticket);
    finish(i, Outcome::Kind::Timeout);
    return;
  }
  // kSend: a backoff is over.
  if (p.state != State::Backoff) return;
  if (p.after_answer && e_.now() >= p.spec.deadline) {
    // Time ran out while backing off after a refusal: the refusal stands.
    const bool overload = p.out.status == 429 || p.out.status == 503;
    finish(i, overload ? Outcome::Kind::Rejected : Outcome::Kind::Failed);
    return;
  }
  send(i);
}

void Caller::finish(std::uint32_t i, Outcome::Kind k) {
  Pending& p = pending_[i];
  p.out.kind = k;
  CallOwner* owner = p.owner;
  const std::uint64_t cookie = p.owner_cookie;
  const Outcome out = std::move(p.out);
  pending_.release(i);
  owner->on_outcome(cookie, out);
}

// --- ClientGroup -------------------------------------------------------------

namespace {
ClientGroupConfig with_count(ClientGroupConfig c, std::size_t targets) {
  if (c.count == 0) c.count = static_cast<std::uint32_t>(std::max<std::size_t>(1, targets));
  return c;
}
}  // namespace

ClientGroup::ClientGroup(Engine& e, Wire& w, ClientGroupConfig cfg, std::vector<Node*> targets, Duration warmup)
    : e_(e),
      cfg_(with_count(std::move(cfg), targets.size())),
      targets_(std::move(targets)),
      warmup_(warmup),
      caller_(e, w, cfg_.policy, cfg_.count),
      rng_(e.rng.split()) {
  if (cfg_.classes.empty()) cfg_.classes.push_back(RequestClass{"default", 1, "", "", std::chrono::seconds(1)});
  for (const auto& c : cfg_.classes) {
    total_weight_ += c.weight;
    ClassStats s;
    s.name = c.name;
    stats_.push_back(std::move(s));
  }
  Duration total{};
  for (const auto& p : cfg_.phases) total += p.length;
  if (!cfg_.trace.empty()) total = std::max(total, core::from_seconds(cfg_.trace.back().first) + 1ns);
  end_ = TimePoint{} + total;
  seconds_.resize(static_cast<std::size_t>(core::to_seconds(total)) + 2);
  for (auto& s : seconds_) s.ok_by_class.assign(cfg_.classes.size(), 0);
}

std::uint32_t ClientGroup::pick_class() {
  double x = rng_.uniform() * total_weight_;
  for (std::uint32_t i = 0; i < cfg_.classes.size(); ++i) {
    if (x < cfg_.classes[i].weight) return i;
    x -= cfg_.classes[i].weight;
  }
  return static_cast<std::uint32_t>(cfg_.classes.size() - 1);
}

bool ClientGroup::next_arrival(TimePoint& t, std::uint32_t& cls) {
  if (!cfg_.trace.empty()) {
    if (trace_i_ >= cfg_.trace.size()) return false;
    const auto& [at, c] = cfg_.trace[trace_i_++];
    t = TimePoint{} + core::from_seconds(at);
    cls = c < cfg_.classes.size() ? c : pick_class();
    return true;
  }
  while (phase_ < cfg_.phases.size()) {
    const Phase& p = cfg_.phases[phase_];
    const TimePoint end = phase_start_ + p.length;
    const double rate = p.rate * scale_;
    if (rate > 0) {
      TimePoint cand;
      if (cfg_.poisson) {
        const TimePoint from = k_ == 0 ? phase_start_ : last_;
        cand = from + core::from_seconds(-std::log(std::max(1e-12, 1.0 - rng_.uniform())) / rate);
      } else {
        cand = k_ == 0 ? phase_start_ : last_ + core::from_seconds(1.0 / rate);
      }
      if (cand < end) {
        last_ = cand;
        ++k_;
        t = cand;
        cls = pick_class();
        return true;
      }
    }
    phase_start_ = end;
    ++phase_;
    k_ = 0;
  }
  return false;
}

void ClientGroup::start() {
  if (next_arrival(next_, next_cls_)) e_.at(next_, this, 0);
}

Second& ClientGroup::second(TimePoint t) {
  const auto i = static_cast<std::size_t>(std::max(0.0, core::to_seconds(t.time_since_epoch())));
  return seconds_[std::min(i, seconds_.size() - 1)];
}

void ClientGroup::fire(std::uint32_t, std::uint32_t, std::uint32_t) {
  // An arrival: schedule the next one first, so arrivals stay open loop.
  const TimePoint t = next_;
  const std::uint32_t cls = next_cls_;
  if (next_arrival(next_, next_cls_)) e_.at(next_, this, 0);

  const RequestClass& rc = cfg_.classes[cls];
  const std::uint32_t i = reqs_.alloc();
  Req& r = reqs_[i];
  r.cls = cls;
  r.start = t;
  r.counted = t - TimePoint{} >= warmup_;
  ++offered_;
  ++(r.counted ? stats_[cls] : warm_).offered;
  ++second(t).offered;
  if (r.counted) timeline.add_offered(t);

  CallSpec s;
  s.id = next_id_++;
  s.criticality = rc.criticality;
  s.crit = rc.criticality.empty() ? core::Criticality::Critical
                                  : core::parse_criticality(rc.criticality).value_or(core::Criticality::Critical);
  s.tenant = rc.tenant;
  s.start = t;
  s.deadline = t + rc.deadline;
  s.client = static_cast<std::uint32_t>(rng_.below(cfg_.count));
  s.target = targets_[s.client % targets_.size()];
  caller_.start(s, this, pack(i, reqs_.gen(i)));
}

void ClientGroup::on_send(std::uint64_t cookie, std::uint32_t attempt) {
  Req& r = reqs_[slot_of(cookie)];
  ClassStats& cs = r.counted ? stats_[r.cls] : warm_;
  ++cs.attempts;
  if (attempt == 1) {
    ++cs.sent;
    ++second(r.start).sent;
  } else {
    ++second(r.start).retries;
  }
}

void ClientGroup::on_outcome(std::uint64_t cookie, const Outcome& o) {
  const std::uint32_t i = slot_of(cookie);
  const Req r = reqs_[i];
  reqs_.release(i);
  ClassStats& cs = r.counted ? stats_[r.cls] : warm_;
  Second& sec = second(r.start);
  const auto us = [&](TimePoint t) {
    return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(t - r.start).count());
  };
  if (o.refused) cs.rej_latency.record(us(o.first_refusal));
  switch (o.kind) {
    case Outcome::Kind::Ok:
      ++cs.ok;
      ++sec.ok;
      ++sec.ok_by_class[r.cls];
      cs.ok_latency.record(us(e_.now()));
      if (r.counted) timeline.add_ok(e_.now(), static_cast<double>(us(e_.now())) / 1000.0);
      break;
    case Outcome::Kind::Rejected:
      ++cs.reasons[o.reason];
      ++cs.rejected;
      ++sec.rejected;
      break;
    case Outcome::Kind::Failed:
      ++cs.reasons[o.reason];
      ++cs.failed;
      ++sec.failed;
      break;
    case Outcome::Kind::Timeout:
      ++cs.timeouts;
      ++sec.timeouts;
      break;
    case Outcome::Kind::Error:
      ++cs.errors;
      ++sec.errors;
      break;
  }
}

}  // namespace levee::sim

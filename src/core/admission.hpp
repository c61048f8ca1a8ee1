// The admission pipeline: levee's gates composed once, in order, cheapest
// first. The shell calls it for every request and acts on the value it
// returns; nothing here reads a clock, draws a random number or takes a lock.
//
//   screen()    gate 1, self-protection. levee's own executor load (and, as a
//               sidecar, host CPU) are sampled elsewhere and arrive here as
//               per-criticality "over threshold" bits. Stateless, so the shell
//               calls it before anything else and without any lock: under a
//               flood of cheap requests, refusing must not contend.
//   (the batch fuse waits here, in the shell: a fuse waiter holds no permit)
//   admit()     everything that reads or writes cluster state, in one call
//               under the cluster's lock:
//                 retry storm   most arrivals are retries: "don't retry"
//                 gate 2        adaptive throttle (levee as the cluster's client)
//                 gate 3        tenant CPU quota, only while overloaded;
//                               over-quota requests are demoted to the queue's
//                               lowest lane, not refused (work-conserving)
//                 gate 4        concurrency limit and queue-time gate
//   on_attempt() what one attempt at the backend learned (throttle accepts,
//               tenant cost, backend utilization)
//   release()   a permit comes back, with a latency sample when the request
//               reached a backend; queued requests are granted in its place
//
// Each gate has a mode: off, dry run (count what it would refuse, then let
// the request through) or enforce. A dry-run refusal is reported in the
// verdict and never changes what happens to the request.
//
// Wakes for queued requests are handed to a sink (a callable taking a
// QueueGate::Wake) while the caller still holds its lock; the shell posts
// them once it has let go.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <vector>

#include "core/concurrency_limit.hpp"
#include "core/criticality.hpp"
#include "core/decision.hpp"
#include "core/ewma.hpp"
#include "core/queue_gate.hpp"
#include "core/retry_budget.hpp"
#include "core/tenant_quota.hpp"
#include "core/throttle.hpp"

namespace levee::core {

enum class GateMode : std::uint8_t { Off, DryRun, Enforce };
enum class QuotaWhen : std::uint8_t { Overload, Always };

/// One bit per criticality (bit index(c)): set when that class is over its
/// self-protection threshold.
using CriticalityMask = std::uint8_t;
constexpr CriticalityMask bit(Criticality c) noexcept {
  return static_cast<CriticalityMask>(1u << index(c));
}

/// Gate 1's inputs, as the load sampler last published them.
struct LoadLevels {
  CriticalityMask executor_over = 0;
  CriticalityMask host_over = 0;
};

struct SelfProtectionPolicy {
  GateMode mode = GateMode::Enforce;
  Duration retry_after = std::chrono::seconds(1);
};

/// When the cluster counts as overloaded (the condition for quotas to bite).
struct OverloadPolicy {
  double utilization = 0.9;                                  ///< smoothed backend utilization; 0: not a signal
  Duration queue_time = std::chrono::milliseconds(20);       ///< smoothed queuing time; 0: not a signal
  /// Still overloaded this long after the last signal: CoDel's verdict is
  /// per 100 ms interval and the smoothed queue time dips under its
  /// threshold between bursts, and quotas that switch off in each dip let
  /// an over-quota tenant compete level with the others for the permits
  /// (and a light tenant be refused for it). Demotion is work-conserving,
  /// so holding the state costs the over-quota tenant nothing when the
  /// capacity is really spare.
  Duration hold = std::chrono::seconds(1);
  bool operator==(const OverloadPolicy&) const = default;
};

struct AdmissionConfig {
  bool retry_storm = true;  ///< answer "don't retry" to retries arriving in numbers
  AttemptHistogramConfig attempts{};
  RetryBudgetConfig budget{};
  bool retries = true;  ///< levee retries at all (the budget is consulted)

  GateMode throttle_mode = GateMode::Enforce;
  ThrottleConfig throttle{};

  GateMode quota_mode = GateMode::Enforce;  ///< Off as well when no quotas are configured
  QuotaWhen quota_when = QuotaWhen::Overload;
  TenantQuotaConfig quota{};
  std::vector<double> quotas;  ///< by TenantId; [0] is the default tenant's

  GateMode queue_mode = GateMode::Enforce;  ///< Off: no concurrency limit at all
  QueueConfig queue{};
  ConcurrencyLimitConfig limit{};

  OverloadPolicy overload{};

  bool operator==(const AdmissionConfig&) const = default;
};

/// Whether a pipeline built from `a` can carry on under `b` without losing
/// its meaning: everything but the gate modes is the same. Modes (off, dry
/// run, enforce) switch on a running pipeline (Admission::set_modes); any
/// other change needs a new pipeline, whose learned state starts afresh.
bool same_shape(const AdmissionConfig& a, const AdmissionConfig& b) noexcept;

/// Which gate decided.
enum class Gate : std::uint8_t { None, SelfProtection, RetryStorm, Throttle, Quota, Queue };

/// The pipeline's answer for one request.
struct Verdict {
  enum class Kind : std::uint8_t { Granted, Queued, Rejected };
  Kind kind = Kind::Granted;
  Decision decision{};               ///< the rejection, when Rejected
  Gate gate = Gate::None;            ///< the gate that rejected or queued
  QueueGate::Ticket ticket = QueueGate::kNoTicket;  ///< when Queued
  TimePoint expires{};               ///< when Queued: the gate drops it then (the waiter's give-up time)
  bool permit = false;               ///< Granted holding a permit of the limit (to release)
  std::uint32_t in_flight = 0;       ///< in flight once granted: the latency sample's context
  std::uint32_t tag = 0;             ///< granted: the limit's tag for it (its lane and probe), for release()
  Reason dry_run = Reason::None;     ///< a dry-run gate would have refused with this

  bool granted() const noexcept { return kind == Kind::Granted; }
  bool queued() const noexcept { return kind == Kind::Queued; }
  bool rejected() const noexcept { return kind == Kind::Rejected; }
};

/// A request as admission sees it.
struct Arrival {
  Criticality criticality = Criticality::Critical;
  TenantId tenant = kDefaultTenant;
  std::uint32_t attempt = 1;  ///< as it arrived (x-attempt-count and friends)
  TimePoint now{};
  TimePoint deadline = TimePoint::max();
  double u = 0.5;            ///< uniform draw in [0,1) for the throttle
  std::uint64_t cookie = 0;  ///< handed back in the Wake of a queued request
};

/// What the backend made of one attempt.
enum class Answer : std::uint8_t {
  Accepted,    ///< a response that is not an overload refusal
  Overloaded,  ///< 429/503 or an explicit overload marker
  Unanswered,  ///< no response head: connect failure, reset, timeout
};

struct AttemptReport {
  TimePoint now{};
  Criticality criticality = Criticality::Critical;
  TenantId tenant = kDefaultTenant;
  Answer answer = Answer::Accepted;
  std::optional<double> cost;         ///< request_cost.cpu the backend reported
  std::optional<double> utilization;  ///< the endpoint's reported utilization
};

/// Gate 1 on its own: a pure function of the published load levels.
Verdict screen(const SelfProtectionPolicy& p, const LoadLevels& levels, Criticality c) noexcept;

/// Gates 2-4 of one cluster. Not thread-safe: the shell serialises calls.
class Admission {
 public:
  explicit Admission(AdmissionConfig cfg);

  template <typename Sink>
  Verdict admit(const Arrival& a, Sink&& sink);

  /// One attempt at the backend: its answer and what it reported.
  void on_attempt(const AttemptReport& r) noexcept;

  /// Returns a permit. sample: the last attempt's latency, or null when the
  /// request never reached a backend. tag: Verdict::tag or Wake::tag of
  /// its grant.
  template <typename Sink>
  void release(TimePoint now, const QueueGate::Sample* sample, Sink&& sink, std::uint32_t tag = 0);

  /// A queued request gives up. False: it was granted or dropped meanwhile
  /// (its Wake is in a sink already).
  bool cancel(QueueGate::Ticket t, TimePoint now) noexcept { return gate_.cancel(t, now); }

  /// Grants free permits and drops queued requests whose time is up.
  template <typename Sink>
  void tick(TimePoint now, Sink&& sink) {
    gate_.pump(now, sink);
  }

  /// Spends retry budget on attempt number `attempt` (2 = the first retry).
  bool try_retry(TimePoint now, std::uint32_t attempt) noexcept {
    return cfg_.retries && budget_.try_retry(now, attempt);
  }

  /// Whether the cluster counts as overloaded at `now`: a signal says so,
  /// or one did within the last OverloadPolicy::hold.
  bool overloaded(TimePoint now) const noexcept { return signalled() || now < overloaded_until_; }

  /// Switches gate modes in place (a reload that flips a dry run, an
  /// operator's runtime toggle). Everything learned is kept. A queue gate
  /// switched off hands out no permits from then on; permits already out
  /// still come back.
  void set_modes(GateMode throttle, GateMode quota, GateMode queue) noexcept {
    cfg_.throttle_mode = throttle;
    cfg_.quota_mode = quota;
    cfg_.queue_mode = queue;
  }

  /// The share of the cluster's weight that is ready (see QueueGate::set_limit_scale).
  void set_limit_scale(double s) noexcept { gate_.set_limit_scale(s); }

  // --- observability ---------------------------------------------------------
  const AdmissionConfig& config() const noexcept { return cfg_; }
  QueueGate& queue() noexcept { return gate_; }
  const QueueGate& queue() const noexcept { return gate_; }
  AdaptiveThrottle& throttle() noexcept { return throttle_; }
  TenantQuota& quota() noexcept { return quota_; }
  AttemptHistogram& attempts() noexcept { return attempts_; }
  RetryBudget& budget() noexcept { return budget_; }
  /// Smoothed backend utilization, or nullopt before any report.
  std::optional<double> utilization() const noexcept {
    return have_utilization_ ? std::optional<double>(utilization_.value()) : std::nullopt;
  }

 private:
  bool quota_active() const noexcept { return cfg_.quota_mode != GateMode::Off && !cfg_.quotas.empty(); }
  /// A signal of overload, now (standing queue, queue time, utilization).
  bool signalled() const noexcept;

  AdmissionConfig cfg_;
  QueueGate gate_;
  AdaptiveThrottle throttle_;
  TenantQuota quota_;
  RetryBudget budget_;
  AttemptHistogram attempts_;
  Ewma utilization_{std::chrono::seconds(1)};
  bool have_utilization_ = false;
  TimePoint overloaded_until_{};  ///< the last signal's time plus the hold
};

// ---------------------------------------------------------------------------

template <typename Sink>
Verdict Admission::admit(const Arrival& a, Sink&& sink) {
  Verdict v;
  auto reject = [&](Gate g, const Decision& d) {
    v.kind = Verdict::Kind::Rejected;
    v.gate = g;
    v.decision = d;
    return v;
  };
  // Every request counts towards the retry budget's base, retried or not.
  budget_.on_request(a.now);

  // Retries arriving in numbers mean the layers below are failing: say
  // "don't retry" so that only the layer above the failure retries.
  if (cfg_.retry_storm) {
    attempts_.record(a.now, a.attempt);
    if (Decision d = attempts_.admit(a.now, a.attempt); !d.admitted()) return reject(Gate::RetryStorm, d);
  }

  if (cfg_.throttle_mode != GateMode::Off) {
    if (Decision d = throttle_.admit(a.criticality, a.now, a.u); !d.admitted()) {
      if (cfg_.throttle_mode == GateMode::Enforce) return reject(Gate::Throttle, d);
      v.dry_run = d.reason;
    }
  }

  // Over quota while overloaded: not refused outright but demoted to the
  // queue's lowest lane, behind every in-quota request. It is served from
  // capacity nobody in quota uses, and refused (429) when there is none.
  bool demoted = false;
  Decision quota_refusal;
  if (quota_active()) {
    // (a.now may be older than another worker's arrival already seen: max.)
    const bool signal = signalled();
    if (signal) overloaded_until_ = std::max(overloaded_until_, a.now + cfg_.overload.hold);
    const bool enforce = cfg_.quota_when == QuotaWhen::Always || signal || a.now < overloaded_until_;
    if (Decision d = quota_.admit(a.tenant, a.criticality, a.now, enforce); !d.admitted()) {
      if (cfg_.quota_mode == GateMode::DryRun) {
        if (v.dry_run == Reason::None) v.dry_run = d.reason;
      } else if (cfg_.queue_mode == GateMode::Off) {
        return reject(Gate::Quota, d);  // no queue to demote into
      } else {
        demoted = true;
        quota_refusal = d;
      }
    }
  }

  if (cfg_.queue_mode == GateMode::Off) return v;  // granted, no permit to return

  const QueueGate::Arrival q = gate_.arrive(a.now, a.criticality, a.deadline, a.cookie, sink, demoted);
  switch (q.outcome) {
    case QueueGate::Outcome::Granted:
      v.permit = true;
      v.in_flight = gate_.in_flight();
      v.tag = q.tag;
      return v;
    case QueueGate::Outcome::Queued:
      if (cfg_.queue_mode == GateMode::Enforce) {
        v.kind = Verdict::Kind::Queued;
        v.gate = Gate::Queue;
        v.ticket = q.ticket;
        v.expires = q.expires;
        return v;
      }
      gate_.cancel(q.ticket, a.now);
      break;
    case QueueGate::Outcome::Rejected:
      if (cfg_.queue_mode == GateMode::Enforce) {
        if (!demoted) return reject(Gate::Queue, q.decision);
        // The quota is why there was no room: say so (429, its Retry-After).
        Decision d = quota_refusal;
        d.retry_after = std::max(quota_refusal.retry_after, q.decision.retry_after);
        return reject(Gate::Quota, d);
      }
      break;
  }
  // Dry run: count what the gate would have done, then let the request
  // through holding a permit above the limit, so in-flight stays truthful
  // for the estimates.
  if (v.dry_run == Reason::None)
    v.dry_run = q.outcome == QueueGate::Outcome::Queued ? Reason::QueueWait : q.decision.reason;
  v.tag = gate_.force_acquire(a.now, a.criticality, demoted);
  v.permit = true;
  v.in_flight = gate_.in_flight();
  return v;
}

template <typename Sink>
void Admission::release(TimePoint now, const QueueGate::Sample* sample, Sink&& sink, std::uint32_t tag) {
  gate_.release(now, sample, sink, tag);
}

}  // namespace levee::core

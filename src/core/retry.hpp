// The retry decision: one rule for every way an upstream attempt can fail.
//
//   - Never past the deadline, never more than max_attempts in all, and a
//     retry is paid from the cluster's retry budget (the caller asks it when
//     the plan says so): a budget that connect failures could bypass would
//     let a dead endpoint multiply load.
//   - A request that may have reached the application is re-sent only if it
//     may be repeated: an idempotent method, or an idempotency key. Once any
//     byte of it was accepted by an upstream socket, it may have reached the
//     application, even when the connection then broke without an answer.
//   - Body bytes that have already left levee cannot be sent again: a
//     request whose body was streamed is never retried.
//   - A pooled connection that the peer had already closed (stale) is
//     levee's own artefact, not a backend failure: trying a fresh connection
//     neither counts as an attempt nor spends budget, under the same rule
//     about what may have reached the application.
//   - A timeout is not retried: the backend was slow, another copy of the
//     request would only add to its load, and the deadline is mostly spent.
//   - An overload answer (503 without "don't retry") may go to another
//     endpoint; any answer that says "don't retry" is final.
#pragma once

#include <algorithm>
#include <cstdint>

#include "core/time.hpp"

namespace levee::core {

enum class AttemptFailure : std::uint8_t {
  Connect,     ///< no connection: nothing was sent
  Stale,       ///< a pooled connection turned out closed, before any response byte
  Reset,       ///< the connection broke, or the response was malformed, before a response head
  Timeout,     ///< no response head in time
  Overloaded,  ///< 503 without a don't-retry signal
};

struct RetryContext {
  AttemptFailure failure = AttemptFailure::Connect;
  bool enabled = true;       ///< the cluster's retry policy
  bool replayable = false;   ///< idempotent method, or an idempotency key
  bool sent = false;         ///< some byte of the request was accepted by the upstream socket
  bool body_gone = false;    ///< part of the body left levee and is not held for a replay
  bool no_retry = false;     ///< the answer said "don't retry"
  std::uint32_t attempts = 1;      ///< attempts made so far, this one included
  std::uint32_t max_attempts = 3;  ///< in all, the first included
  TimePoint now{};
  TimePoint deadline = TimePoint::max();
};

struct RetryPlan {
  bool retry = false;
  bool counts = true;   ///< the next try counts as an attempt
  bool budget = true;   ///< ... and must be paid from the retry budget
  bool backoff = false; ///< wait (jittered, exponential) before it
};

constexpr RetryPlan plan_retry(const RetryContext& c) noexcept {
  RetryPlan p;
  if (c.now >= c.deadline || c.no_retry || c.body_gone) return p;
  const bool may_resend = !c.sent || c.replayable;
  switch (c.failure) {
    case AttemptFailure::Stale:
      p.retry = may_resend;
      p.counts = false;
      p.budget = false;
      return p;
    case AttemptFailure::Connect:
      p.retry = c.enabled && c.attempts < c.max_attempts;
      return p;
    case AttemptFailure::Reset:
      p.retry = c.enabled && may_resend && c.attempts < c.max_attempts;
      return p;
    case AttemptFailure::Timeout:
      return p;
    case AttemptFailure::Overloaded:
      p.retry = c.enabled && c.replayable && c.attempts < c.max_attempts;
      p.backoff = true;
      return p;
  }
  return p;
}

/// Jittered exponential backoff before retry number `retry` (1 = the first):
/// base * 2^(retry-1), capped at max, times a uniform factor in [0.5, 1.5).
constexpr Duration retry_backoff(Duration base, Duration max, std::uint32_t retry, double u) noexcept {
  Duration d = base;
  for (std::uint32_t i = 1; i < retry && d < max; ++i) d *= 2;
  d = std::min(d, max);
  return Duration(static_cast<std::int64_t>(static_cast<double>(d.count()) * (0.5 + u)));
}

}  // namespace levee::core

// The one retry rule, case by case.
#include <catch2/catch_test_macros.hpp>

#include "core/retry.hpp"
#include "sim_time.hpp"

using namespace levee::core;
using namespace levee::test;

namespace {
RetryContext ctx(AttemptFailure f, bool replayable, bool sent) {
  RetryContext c;
  c.failure = f;
  c.replayable = replayable;
  c.sent = sent;
  c.attempts = 1;
  c.max_attempts = 3;
  c.now = at(1s);
  c.deadline = at(2s);
  return c;
}
}  // namespace

TEST_CASE("a request that may have reached the application is re-sent only if it may be repeated", "[retry]") {
  // A POST whose bytes went out on a connection that then broke without an
  // answer: the backend may have acted on it. Never again.
  CHECK_FALSE(plan_retry(ctx(AttemptFailure::Reset, false, true)).retry);
  CHECK_FALSE(plan_retry(ctx(AttemptFailure::Stale, false, true)).retry);
  // Idempotent (or with an idempotency key): fine.
  CHECK(plan_retry(ctx(AttemptFailure::Reset, true, true)).retry);
  CHECK(plan_retry(ctx(AttemptFailure::Stale, true, true)).retry);
  // Nothing went out: anything may go again.
  CHECK(plan_retry(ctx(AttemptFailure::Stale, false, false)).retry);
  CHECK(plan_retry(ctx(AttemptFailure::Connect, false, false)).retry);
  // An overload answer came from the application itself.
  CHECK_FALSE(plan_retry(ctx(AttemptFailure::Overloaded, false, true)).retry);
  CHECK(plan_retry(ctx(AttemptFailure::Overloaded, true, true)).retry);
}

TEST_CASE("every counted retry is paid from the budget, connect failures included", "[retry]") {
  for (auto f : {AttemptFailure::Connect, AttemptFailure::Reset, AttemptFailure::Overloaded}) {
    auto p = plan_retry(ctx(f, true, f != AttemptFailure::Connect));
    REQUIRE(p.retry);
    CHECK(p.counts);
    CHECK(p.budget);
  }
  // A stale pooled connection is levee's own artefact: a fresh one is free.
  auto s = plan_retry(ctx(AttemptFailure::Stale, true, false));
  CHECK(s.retry);
  CHECK_FALSE(s.counts);
  CHECK_FALSE(s.budget);
  CHECK(plan_retry(ctx(AttemptFailure::Overloaded, true, true)).backoff);
  CHECK_FALSE(plan_retry(ctx(AttemptFailure::Connect, true, false)).backoff);
}

TEST_CASE("limits: attempts, deadline, disabled retries, streamed bodies, don't-retry, timeouts", "[retry]") {
  auto c = ctx(AttemptFailure::Connect, true, false);
  c.attempts = 3;
  CHECK_FALSE(plan_retry(c).retry);
  c = ctx(AttemptFailure::Connect, true, false);
  c.now = c.deadline;
  CHECK_FALSE(plan_retry(c).retry);
  c = ctx(AttemptFailure::Connect, true, false);
  c.enabled = false;
  CHECK_FALSE(plan_retry(c).retry);
  c = ctx(AttemptFailure::Reset, true, true);
  c.body_gone = true;
  CHECK_FALSE(plan_retry(c).retry);
  c = ctx(AttemptFailure::Overloaded, true, true);
  c.no_retry = true;
  CHECK_FALSE(plan_retry(c).retry);
  CHECK_FALSE(plan_retry(ctx(AttemptFailure::Timeout, true, true)).retry);
  // A stale connection is retried even with retries off (it is not a retry
  // of the backend), but never a body that is gone.
  c = ctx(AttemptFailure::Stale, true, true);
  c.enabled = false;
  CHECK(plan_retry(c).retry);
}

TEST_CASE("backoff doubles and is capped and jittered by half either way", "[retry]") {
  CHECK(retry_backoff(25ms, 250ms, 1, 0.5) == Duration(25ms));
  CHECK(retry_backoff(25ms, 250ms, 2, 0.5) == Duration(50ms));
  CHECK(retry_backoff(25ms, 250ms, 5, 0.5) == Duration(250ms));
  CHECK(retry_backoff(25ms, 250ms, 1, 0.0) == Duration(12500us));
  CHECK(retry_backoff(25ms, 250ms, 1, 0.999) < Duration(37500us));
}

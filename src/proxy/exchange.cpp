#include "proxy/exchange.hpp"

#include <boost/asio/connect.hpp>
#include <boost/beast/http/error.hpp>

#include "core/admission.hpp"
#include "core/headers.hpp"
#include "core/orca.hpp"
#include "proxy/abandoned.hpp"
#include "http/h2_reply.hpp"
#include "http/rewrite.hpp"
#include "proxy/attempt.hpp"
#include "proxy/io.hpp"
#include "proxy/listener.hpp"
#include "proxy/runtime.hpp"
#include "proxy/tls_context.hpp"
#include "proxy/worker.hpp"

namespace levee::proxy {

using core::Reason;
using core::TimePoint;
namespace beast_http = boost::beast::http;

Exchange::Exchange(Worker& w, Listener& l, Downstream& d, ExchangeBuffers& b, TimePoint start)
    : w_(w), l_(l), d_(d), b_(b), rt_(l.runtime()), rec_(w, l, d, b, start), wait_(b.wait_timer, d) {
  executor = w.ctx.get_executor();
}

Exchange::~Exchange() {
  b_.watchdog.disarm();
  if (call_) call_->release();
  unlink();
  // Members settle in reverse order: the upstream connection closes (or
  // was pooled), the fuse slot and the permit return, then the record.
}

void Exchange::on_deadline(Watchdog::Phase) noexcept {
  d_.cancel_io();
  if (up_) up_->stream.cancel();
  if (call_) call_->abort();
}

void Exchange::drop_upstream() noexcept {
  up_.reset();
  if (call_) call_->release();
}

void Exchange::on_wake(const core::QueueGate::Wake& w) {
  wake_ = w;
  wait_.wake();
}

void Exchange::on_client_gone() noexcept {
  client_gone_ = true;
  if (up_) up_->stream.cancel();
  if (call_) call_->abort();
}

void Exchange::start_client_watch() { d_.watch(*this); }

bool Exchange::shed_for_own_load() const noexcept {
  return rec_.rejected && (rec_.reason == Reason::ExecutorOverload || rec_.reason == Reason::HostCpu) &&
         w_.screened_above(cls_.criticality, rec_.start);
}

awaitable<bool> Exchange::reject(const core::Decision& d) {
  auto& m = *rt_.metrics;
  permit_.reset();
  b_.watchdog.disarm();  // a local answer has its own time to be written
  rec_.reason = d.reason;
  rec_.status = d.status;
  rec_.rejected = true;
  const std::size_t ci = cluster_ ? cluster_->index : 0;
  m.rejected.inc(w_.index, m.rejected.index({ci, static_cast<std::size_t>(d.reason),
                                             core::index(cls_.criticality), cls_.tenant}));
  auto reply = http::rejection(d, core::retry_after_seconds(d.retry_after, w_.rng.uniform()));
  co_return co_await d_.send_local(reply);
}

awaitable<bool> Exchange::fail(Reason r, std::string_view detail) {
  auto& m = *rt_.metrics;
  permit_.reset();
  b_.watchdog.disarm();  // a local answer has its own time to be written
  rec_.reason = r;
  rec_.status = core::info(r).status;
  m.local_replies.inc(w_.index, m.local_replies.index({l_.index, static_cast<std::size_t>(r)}));
  auto reply = http::failure(r, detail);
  co_return co_await d_.send_local(reply);
}

awaitable<bool> Exchange::client_gone() {
  rec_.reason = Reason::ClientGone;
  rec_.status = 499;
  co_return false;
}

awaitable<bool> Exchange::refuse(Reason r, std::string_view detail) { co_return co_await fail(r, detail); }

// --- the request path ----------------------------------------------------------

awaitable<bool> Exchange::run() {
  const auto& info = b_.req;
  // First: every answer and log line, refusals included, carries it.
  if (info.request_id >= 0) {
    rec_.request_id = b_.req_head.value(info.request_id);
  } else {
    static constexpr char hex[] = "0123456789abcdef";
    const std::uint64_t a = w_.rng.next(), b = w_.rng.next();
    for (int i = 0; i < 16; ++i) {
      b_.request_id[i] = hex[(a >> (i * 4)) & 0xf];
      b_.request_id[16 + i] = hex[(b >> (i * 4)) & 0xf];
    }
    rec_.request_id = std::string_view(b_.request_id, 32);
  }
  b_.request_id_out = rec_.request_id;  // returned to the client with the answer
  cls_ = l_.classifier.classify(http::authority(b_.req_head, info), info.target, b_.req_head.fields(),
                                core::PeerView{d_.peer().address, d_.peer().identity}, rec_.start);
  count_untrusted();  // proxy/trust.cpp
  rec_.criticality = cls_.criticality;
  rec_.tenant = cls_.tenant;
  if (cls_.route != core::kNoRoute) {
    route_ = &l_.routes[cls_.route];
    cluster_ = route_->cluster;
    rec_.route = route_;
    rec_.cluster = cluster_;
  }
  if (cls_.error == Reason::NoRoute) co_return co_await fail(Reason::NoRoute);
  if (cls_.error == Reason::BadCriticality) {
    // Named, not a temporary: GCC 12 mishandles temporaries in co_await operands.
    const std::string detail =
        rt_.cfg->headers.criticality + " must be CRITICAL_PLUS, CRITICAL, SHEDDABLE_PLUS or SHEDDABLE";
    co_return co_await fail(Reason::BadCriticality, detail);
  }
  // A small body is read whole before admission, so a client trickling it
  // in holds no permit meanwhile (a larger one streams once admitted, at
  // the listener's minimum rate). A client waiting for "100 Continue" sends
  // nothing before it is admitted. A gRPC call's body is read to the end
  // of its first message: a streaming call sends the next ones only as
  // answers come back.
  if (d_.has_body() && !d_.body_done() && !info.expect_continue) {
    arm(std::min(cls_.deadline, now() + l_.cfg.body_timeout), Watchdog::Phase::Body);
    const bool grpc = std::any_of(b_.req_head.fields().begin(), b_.req_head.fields().end(), [](const http::Field& f) {
      return f.id == http::FieldId::content_type && http::is_grpc(f.value);
    });
    while (!d_.body_done() && !b_.req_body.full() && !(grpc && http::grpc_message_whole(b_.req_body.data()))) {
      const BodyRead r = co_await d_.read_body();
      if (r == BodyRead::Timeout) co_return co_await fail(now() >= cls_.deadline ? Reason::Deadline : Reason::RequestTimeout);
      if (r == BodyRead::Malformed) co_return co_await fail(Reason::BadRequest);
      if (r == BodyRead::Gone) co_return co_await client_gone();
    }
    b_.watchdog.disarm();
  }
  // Most requests pass every gate at once: no coroutine for admission.
  if (const Gate g = admit_now(); g != Gate::Passed && !co_await admit_rest(g)) co_return answered_keep_;
  co_return co_await forward();
}

Exchange::Gate Exchange::admit_now() {
  auto& m = *rt_.metrics;
  // Gate 1: self-protection, from what the load sampler last published.
  held_ = core::screen(rt_.self_protection, rt_.load_levels(), cls_.criticality);
  if (held_.dry_run != Reason::None)
    m.dry_run.inc(w_.index, m.dry_run.index({cluster_->index, static_cast<std::size_t>(held_.dry_run),
                                             core::index(cls_.criticality)}));
  if (held_.rejected()) return Gate::Refused;
  w_.screened(cls_.criticality, rec_.start);

  // A slot of the fuse first, so that batch requests waiting for one of its
  // few connections hold no cluster permit.
  if (l_.batch() || route_->fuse) {
    Fuse& f = w_.fuse(l_, *cluster_);
    if (!f.try_acquire(*cluster_)) {
      fuse_wait_ = &f;
      return Gate::Fuse;
    }
    fuse_ = FuseSlot(f);
  }
  return cluster_gates();
}

Exchange::Gate Exchange::cluster_gates() {
  auto& m = *rt_.metrics;
  const std::size_t ci = cluster_->index;
  const std::size_t crit = core::index(cls_.criticality);
  // Gates 2-4, in one call under the cluster's lock.
  core::Arrival a;
  a.criticality = cls_.criticality;
  a.tenant = cls_.tenant;
  a.attempt = cls_.attempt;
  a.now = rec_.start;
  a.deadline = cls_.deadline;
  a.u = w_.rng.uniform();
  held_ = cluster_->admit(a, *this);
  if (held_.dry_run != Reason::None) m.dry_run.inc(w_.index, m.dry_run.index({ci, static_cast<std::size_t>(held_.dry_run), crit}));
  if (held_.rejected()) return Gate::Refused;
  if (held_.queued()) return Gate::Queued;
  if (held_.permit) permit_ = Permit(cluster_, held_.tag);
  in_flight_at_start_ = held_.in_flight;
  m.admitted.inc(w_.index, m.admitted.index({ci, crit, cls_.tenant}));
  return Gate::Passed;
}

awaitable<bool> Exchange::admit_rest(Gate g) {
  if (g == Gate::Fuse) {
    if (!co_await wait_for_fuse(*fuse_wait_)) co_return false;
    g = cluster_gates();
  }
  if (g == Gate::Refused) {
    answered_keep_ = co_await reject(held_.decision);
    co_return false;
  }
  if (g == Gate::Queued) {
    if (!co_await wait_in_queue(held_.ticket, held_.expires)) co_return false;
    auto& m = *rt_.metrics;
    m.admitted.inc(w_.index, m.admitted.index({cluster_->index, core::index(cls_.criticality), cls_.tenant}));
  }
  co_return true;
}

awaitable<bool> Exchange::wait_for_fuse(Fuse& f) {
  const core::Duration qt = l_.cfg.fuse.queue_timeout;
  // A worker with no share of a split fuse (fewer fuse connections than
  // workers) cannot serve it at all: say so at once.
  if (!f.enqueue(wait_)) {
    answered_keep_ = co_await reject(core::Decision::reject(Reason::Fuse, qt));
    co_return false;
  }
  const auto end = co_await wait_.wait(rec_.start, std::min(cls_.deadline, rec_.start + qt));
  if (end == AdmissionWait::End::Woken) {
    fuse_ = FuseSlot(f);  // the slot was passed on to this request
    co_return true;
  }
  f.leave(wait_);
  if (end == AdmissionWait::End::ClientGone) answered_keep_ = co_await client_gone();
  else answered_keep_ = co_await reject(core::Decision::reject(Reason::Fuse, qt));
  co_return false;
}

awaitable<bool> Exchange::wait_in_queue(core::QueueGate::Ticket t, TimePoint expires) {
  // The gate drops entries past their give-up time when it next looks; the
  // timer makes sure we look even if nothing else happens.
  const TimePoint give_up = std::min(cls_.deadline, expires) + std::chrono::milliseconds(1);
  d_.queued(true);
  const auto end = co_await wait_.wait(rec_.start, give_up);
  d_.queued(false);
  if (end != AdmissionWait::End::Woken) {
    if (cluster_->cancel(t, now())) {
      if (end == AdmissionWait::End::ClientGone) {
        answered_keep_ = co_await client_gone();
      } else {
        const auto d = cls_.deadline <= now() ? core::Decision::reject(Reason::Deadline, core::Duration::zero())
                                              : core::Decision::reject(Reason::QueueTimeout, std::chrono::seconds(1));
        answered_keep_ = co_await reject(d);
      }
      co_return false;
    }
    // Granted or dropped at the same moment: the wake is already posted.
    co_await wait_.wait_for_wake();
  }
  if (!wake_.granted) {
    answered_keep_ = co_await reject(wake_.decision);
    co_return false;
  }
  permit_ = Permit(cluster_, wake_.tag);
  in_flight_at_start_ = wake_.in_flight;
  rec_.queue_ms = core::to_seconds(wake_.waited) * 1e3;
  auto& m = *rt_.metrics;
  m.queue_time.observe(w_.index, cluster_->index, core::to_seconds(wake_.waited));
  if (end == AdmissionWait::End::ClientGone) {
    // The client left while queued: it is never sent upstream.
    answered_keep_ = co_await client_gone();
    co_return false;
  }
  co_return true;
}

// --- attempts -------------------------------------------------------------------

void Exchange::report(TimePoint at, const Attempt& a, core::Answer answer, bool failure,
                      std::optional<core::Duration> latency, const core::LoadReport* load) {
  AttemptResult r;
  r.now = at;
  r.criticality = cls_.criticality;
  r.tenant = cls_.tenant;
  r.endpoint = a.endpoint;
  r.answer = answer;
  r.failure = failure;
  r.latency = latency;
  if (load) {
    r.cost = load->cost;
    r.utilization = load->utilization();
  }
  cluster_->on_attempt(r);
}

void Exchange::read_load_report(Attempt& a, std::string_view value, bool bin) {
  auto& m = *rt_.metrics;
  const auto& sel = cluster_->cfg.load_report.select;
  core::LoadReport r;
  const auto st = bin ? core::parse_orca_bin(value, r, sel) : core::parse_orca(value, r, sel);
  if (st != core::OrcaStatus::Ok) {
    m.load_report_errors.inc(w_.index, cluster_->index);
    return;
  }
  if (r.unknown > 0) m.load_report_ignored.inc(w_.index, m.load_report_ignored.index({cluster_->index, 0}), r.unknown);
  if (r.malformed > 0)
    m.load_report_ignored.inc(w_.index, m.load_report_ignored.index({cluster_->index, 1}), r.malformed);
  a.load = r;
  a.load_ok = true;
}

bool Exchange::replayable() const noexcept { return http::idempotent(b_.req.method) || cls_.idempotency_key; }

awaitable<bool> Exchange::forward() {
  const auto& cc = cluster_->cfg;
  auto& m = *rt_.metrics;
  std::size_t avoid = core::kNoEndpoint;
  std::uint32_t attempts = 0;  // counted attempts made
  bool body_gone = false;
  for (;;) {
    Attempt a;
    a.begun = now();
    if (a.begun >= cls_.deadline) co_return co_await fail(Reason::Deadline);
    a.number = attempts + 1;
    // The fuse chooses by its connections; over HTTP/2 it caps streams (its
    // slots) and the balancer chooses, the connections being few anyway.
    a.endpoint = fuse_.fuse() && !call_upstream() ? fuse_.fuse()->pick(*cluster_)
                                                  : w_.balancer.pick(*cluster_, avoid, w_.rng);
    if (a.endpoint == core::kNoEndpoint) co_return co_await fail(Reason::NoEndpoint);
    rec_.endpoint = a.endpoint;
    rec_.attempts = a.number;
    Outstanding outstanding(*cluster_->endpoints[a.endpoint]);
    if (call_upstream()) co_await try_endpoint_h2(a);
    else co_await try_endpoint(a);
    body_gone = body_gone || a.body_streamed;
    if (a.client) {
      // The client failed while its body was relayed: nobody is left to
      // answer, or it was too slow (408) or sent a bad body (400).
      drop_upstream();
      if (*a.client == BodyRead::Timeout) co_return co_await fail(Reason::RequestTimeout);
      if (*a.client == BodyRead::Malformed) co_return co_await fail(Reason::BadRequest);
      co_return co_await client_gone();
    }
    if (client_gone_) {
      abandon_attempt(a);
      drop_upstream();
      co_return co_await client_gone();
    }

    core::RetryContext ctx;
    ctx.enabled = cc.retry.enabled;
    ctx.replayable = replayable();
    ctx.sent = a.sent;
    ctx.body_gone = body_gone;
    ctx.max_attempts = cc.retry.max_attempts;
    ctx.deadline = cls_.deadline;
    // A timed-out attempt keeps its connection until it is known whether it
    // is retried (then closed) or the last (then abandoned, below).
    const bool timed_out = a.failed && a.failure == core::AttemptFailure::Timeout;
    if (a.failed) {
      if (!timed_out) drop_upstream();
      ctx.failure = a.failure;
      if (a.failure != core::AttemptFailure::Stale) {
        ++attempts;
        m.upstream_error(w_.index, cluster_->index, a.endpoint, a.error);
        report(now(), a, core::Answer::Unanswered, true, std::nullopt, nullptr);
      }
    } else if (b_.resp.status == 503 && !b_.resp.no_retry) {
      ++attempts;
      ctx.failure = core::AttemptFailure::Overloaded;
    } else {
      co_return co_await relay(a);
    }
    ctx.attempts = attempts;
    ctx.now = now();
    core::RetryPlan plan = core::plan_retry(ctx);
    if (plan.retry && plan.budget && !cluster_->try_retry(ctx.now, attempts + 1)) plan.retry = false;
    if (!a.failed) {
      // A 503 that says nothing against a retry.
      if (!plan.retry) co_return co_await relay(a);
      report(ctx.now, a, core::Answer::Overloaded, true, a.head_at - a.sent_at, a.load_ok ? &a.load : nullptr);
      drop_upstream();
    }
    if (timed_out) {
      // Waited for in vain (the deadline or the response timeout passed):
      // the backend may still be at it.
      if (!plan.retry) abandon_attempt(a);
      drop_upstream();
    }
    if (!plan.retry) {
      // A gRPC call whose own deadline (grpc-timeout) passed is DEADLINE_EXCEEDED
      // to its client, whatever the backend was doing meanwhile.
      if (now() >= cls_.deadline)
        co_return co_await fail(a.failure == core::AttemptFailure::Timeout && !cls_.grpc_timeout ? Reason::UpstreamTimeout
                                                                                                : Reason::Deadline);
      switch (a.failure) {
        case core::AttemptFailure::Connect: co_return co_await fail(Reason::UpstreamConnect);
        case core::AttemptFailure::Timeout: co_return co_await fail(Reason::UpstreamTimeout);
        default: co_return co_await fail(Reason::UpstreamReset);
      }
    }
    if (plan.counts) avoid = a.endpoint;
    if (plan.backoff) {
      const auto wait = core::retry_backoff(cc.retry.backoff_base, cc.retry.backoff_max, attempts, w_.rng.uniform());
      if (now() + wait >= cls_.deadline) co_return co_await fail(Reason::Deadline);
      b_.wait_timer.expires_after(std::chrono::duration_cast<Timer::duration>(wait));
      co_await b_.wait_timer.async_wait(nothrow);
    }
  }
}

void Exchange::write_head(Attempt& a, bool h2, TimePoint t) {
  const auto& cc = cluster_->cfg;
  const auto& info = b_.req;
  http::UpstreamHead u{b_.req_head, info, rt_.rewrite_names};
  u.client_ip = b_.client_ip();
  u.default_host = cluster_->endpoints[a.endpoint]->authority;
  if (info.request_id < 0) u.generated_id = rec_.request_id;
  if (cls_.deadline != TimePoint::max()) u.remaining = cls_.deadline - t;
  u.grpc_timeout = cls_.grpc_timeout;
  u.attempt = a.number;
  untrusted_rewrite(u);  // proxy/trust.cpp
  switch (cc.load_report.request_format) {
    case config::LoadReportConfig::Format::Off: break;
    case config::LoadReportConfig::Format::Text: u.load_format = "text"; break;
    case config::LoadReportConfig::Format::Json: u.load_format = "json"; break;
  }
  if (d_.has_body()) {
    if (auto len = d_.body_length()) {
      u.framing = http::BodyFraming::Length;
      u.length = *len;
    } else if (!h2) {
      u.framing = http::BodyFraming::Chunked;  // HTTP/2 frames the body itself
    }
  }
  b_.out.clear();
  http::write_upstream_head(b_.out, u);
}

bool Exchange::continue_due() noexcept {
  // 100-continue: levee answers it itself, once the request is admitted and
  // an upstream connection is ready.
  if (!continue_owed()) return false;
  sent_continue_ = true;
  return true;
}

void Exchange::note_response_head(Attempt& a) {
  auto& m = *rt_.metrics;
  a.head_at = now();
  const int status = b_.resp.status;
  rec_.upstream_ms = core::to_seconds(a.head_at - a.sent_at) * 1e3;
  m.upstream_latency.observe(w_.index, cluster_->index, core::to_seconds(a.head_at - a.sent_at));
  m.upstream_requests.inc(w_.index, m.upstream_requests.index({m.endpoint(cluster_->index, a.endpoint), code_class(status)}));
  // What the backend says about load and cost.
  if (b_.resp.load_report >= 0) read_load_report(a, b_.resp_head.value(b_.resp.load_report), false);
  if (b_.resp.load_report_bin >= 0) read_load_report(a, b_.resp_head.value(b_.resp.load_report_bin), true);
  a.overloaded = status == 429 || status == 503 || b_.resp.no_retry;
}

void Exchange::settle_attempt(Attempt& a, TimePoint at, bool upstream_ok) {
  // gRPC servers report load in trailers: the later report wins.
  if (const auto& t = b_.resp.trailer_load; t.size > 0) read_load_report(a, t.value(), t.bin);
  else if (t.truncated) rt_.metrics->load_report_errors.inc(w_.index, cluster_->index);
  report(at, a, a.overloaded ? core::Answer::Overloaded : core::Answer::Accepted, b_.resp.status >= 500 || !upstream_ok,
         a.head_at - a.sent_at, a.load_ok ? &a.load : nullptr);
  if (permit_) permit_.finish(at, core::QueueGate::Sample{a.head_at - a.sent_at, in_flight_at_start_, a.overloaded});
}

void Exchange::abandon_attempt(const Attempt& a) {
  if (!up_ || !permit_ || !a.whole || a.head_at != TimePoint{}) return;
  AbandonedAttempt::start(w_, rt_, *cluster_->endpoints[a.endpoint], std::move(up_), std::move(permit_),
                          std::move(fuse_), a.sent_at + cluster_->cfg.response_timeout);
}

void Exchange::finish_start(ResponseStart& start, const Attempt& a) {
  // levee gave up below because of overload: tell the caller not to retry either.
  start.no_retry = a.overloaded && a.number > 1 && !b_.resp.no_retry;
  // What describes the inside (load reports, Server) stays inside.
  start.strip_inside = !cls_.trusted;
  rec_.status = b_.resp.status;
}

void Exchange::note_relay_failure(const Attempt& a) {
  // The answer broke off upstream (reset, or its gap or the deadline passed).
  const bool timeout = b_.watchdog.expired();
  rt_.metrics->upstream_error(w_.index, cluster_->index, a.endpoint,
                              timeout ? UpstreamError::Timeout : UpstreamError::Reset);
  rec_.reason = timeout ? Reason::UpstreamTimeout : Reason::UpstreamReset;
}

awaitable<bool> Exchange::relay(Attempt& a) {
  // Not a coroutine: the caller awaits the chosen one directly, with no
  // frame between. (Not a conditional expression of two awaitables: GCC 12
  // destroys such temporaries twice.)
  if (call_upstream()) return relay_response_h2(a);
  return relay_response(a);
}

}  // namespace levee::proxy

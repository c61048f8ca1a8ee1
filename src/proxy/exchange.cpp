#include "proxy/exchange.hpp"

#include <boost/asio/connect.hpp>
#include <boost/beast/http/error.hpp>

#include "core/admission.hpp"
#include "core/headers.hpp"
#include "core/orca.hpp"
#include "http/rewrite.hpp"
#include "proxy/io.hpp"
#include "proxy/listener.hpp"
#include "proxy/runtime.hpp"
#include "proxy/tls_context.hpp"
#include "proxy/worker.hpp"

namespace levee::proxy {

using core::Reason;
using core::TimePoint;
namespace beast_http = boost::beast::http;

/// One try at an endpoint, and what became of it.
struct Exchange::Attempt {
  std::uint32_t number = 1;  ///< x-attempt-count sent with it
  std::size_t endpoint = core::kNoEndpoint;
  bool reused = false;       ///< on a pooled connection
  bool sent = false;         ///< some byte of the request was accepted by the socket
  bool body_streamed = false;  ///< body bytes left levee beyond what the sink holds
  TimePoint sent_at{};
  TimePoint head_at{};
  // The outcome: a response head, an upstream failure, or the client's end.
  bool failed = false;
  core::AttemptFailure failure = core::AttemptFailure::Reset;
  UpstreamError error = UpstreamError::Reset;
  std::optional<BodyRead> client;  ///< the client failed while its body was relayed
  bool overloaded = false;         ///< 429/503 or an overload marker
  bool head_read = false;          ///< the response head arrived (early, while the request was sent)
  core::LoadReport load;
  bool load_ok = false;
};

Exchange::Exchange(Worker& w, Listener& l, Downstream& d, ExchangeBuffers& b, TimePoint start)
    : w_(w), l_(l), d_(d), b_(b), rt_(l.runtime()), rec_(w, l, d, b, start), wait_(b.wait_timer, d) {
  executor = w.ctx.get_executor();
}

Exchange::~Exchange() {
  b_.watchdog.disarm();
  unlink();
  // Members settle in reverse order: the upstream connection closes (or
  // was pooled), the fuse slot and the permit return, then the record.
}

void Exchange::on_deadline(Watchdog::Phase) noexcept {
  d_.cancel_io();
  if (up_) up_->stream.cancel();
}

void Exchange::on_wake(const core::QueueGate::Wake& w) {
  wake_ = w;
  wait_.wake();
}

void Exchange::on_client_gone() noexcept {
  client_gone_ = true;
  if (up_) up_->stream.cancel();
}

void Exchange::start_client_watch() { d_.watch(*this); }

void Exchange::watch_upstream() {
  b_.upstream_spoke = false;
  b_.up_watch_target = &d_;
  watch_upstream_once(++b_.up_watch_gen);
}

void Exchange::watch_upstream_once(std::uint64_t gen) {
  ExchangeBuffers* b = &b_;
  up_->stream.wait_readable([b, gen, this](error_code ec) {
    if (ec || gen != b->up_watch_gen || b->up_watch_target == nullptr) return;
    // Still watched, so this exchange and its connection are alive. A TLS
    // record that held no data (a session ticket) is not the backend speaking.
    if (up_->stream.poll(up_->buf) == Stream::Poll::Nothing) return watch_upstream_once(gen);
    b->upstream_spoke = true;
    b->up_watch_target->cancel_io();  // stop waiting for the client's body
  });
}

void Exchange::unwatch_upstream() {
  b_.up_watch_target = nullptr;
  ++b_.up_watch_gen;
  up_->stream.cancel();  // the pending wait, if it has not fired
}

// --- answers levee makes itself ----------------------------------------------

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
  // nothing before it is admitted.
  if (d_.has_body() && !d_.body_done() && !info.expect_continue) {
    arm(std::min(cls_.deadline, now() + l_.cfg.body_timeout), Watchdog::Phase::Body);
    while (!d_.body_done() && !b_.req_body.full()) {
      const BodyRead r = co_await d_.read_body();
      if (r == BodyRead::Timeout) co_return co_await fail(now() >= cls_.deadline ? Reason::Deadline : Reason::RequestTimeout);
      if (r == BodyRead::Malformed) co_return co_await fail(Reason::BadRequest);
      if (r == BodyRead::Gone) co_return co_await client_gone();
    }
    b_.watchdog.disarm();
  }
  if (!co_await admit()) co_return answered_keep_;
  co_return co_await forward();
}

awaitable<bool> Exchange::admit() {
  auto& m = *rt_.metrics;
  const std::size_t ci = cluster_->index;
  const std::size_t crit = core::index(cls_.criticality);

  // Gate 1: self-protection, from what the load sampler last published.
  const core::Verdict v1 = core::screen(rt_.self_protection, rt_.load_levels(), cls_.criticality);
  if (v1.dry_run != Reason::None) m.dry_run.inc(w_.index, m.dry_run.index({ci, static_cast<std::size_t>(v1.dry_run), crit}));
  if (v1.rejected()) {
    answered_keep_ = co_await reject(v1.decision);
    co_return false;
  }

  // A slot of the fuse first, so that batch requests waiting for one of its
  // few connections hold no cluster permit.
  if (l_.batch() || route_->fuse) {
    Fuse& f = w_.fuse(l_, *cluster_);
    if (f.try_acquire(*cluster_)) fuse_ = FuseSlot(f);
    else if (!co_await wait_for_fuse(f)) co_return false;
  }

  // Gates 2-4, in one call under the cluster's lock.
  core::Arrival a;
  a.criticality = cls_.criticality;
  a.tenant = cls_.tenant;
  a.attempt = cls_.attempt;
  a.now = rec_.start;
  a.deadline = cls_.deadline;
  a.u = w_.rng.uniform();
  const core::Verdict v = cluster_->admit(a, *this);
  if (v.dry_run != Reason::None) m.dry_run.inc(w_.index, m.dry_run.index({ci, static_cast<std::size_t>(v.dry_run), crit}));
  if (v.rejected()) {
    answered_keep_ = co_await reject(v.decision);
    co_return false;
  }
  if (v.queued()) {
    if (!co_await wait_in_queue(v.ticket, v.expires)) co_return false;
  } else {
    if (v.permit) permit_ = Permit(cluster_);
    in_flight_at_start_ = v.in_flight;
  }
  m.admitted.inc(w_.index, m.admitted.index({ci, crit, cls_.tenant}));
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
  permit_ = Permit(cluster_);
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

void Exchange::report(const Attempt& a, core::Answer answer, bool failure, std::optional<core::Duration> latency,
                      const core::LoadReport* load) {
  AttemptResult r;
  r.now = now();
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

awaitable<bool> Exchange::forward() {
  const auto& cc = cluster_->cfg;
  auto& m = *rt_.metrics;
  const bool replayable = http::idempotent(b_.req.method) || cls_.idempotency_key;
  std::size_t avoid = core::kNoEndpoint;
  std::uint32_t attempts = 0;  // counted attempts made
  bool body_gone = false;
  for (;;) {
    if (now() >= cls_.deadline) co_return co_await fail(Reason::Deadline);
    Attempt a;
    a.number = attempts + 1;
    a.endpoint = fuse_.fuse() ? fuse_.fuse()->pick(*cluster_) : w_.balancer.pick(*cluster_, avoid, w_.rng);
    if (a.endpoint == core::kNoEndpoint) co_return co_await fail(Reason::NoEndpoint);
    rec_.endpoint = a.endpoint;
    rec_.attempts = a.number;
    Outstanding outstanding(*cluster_->endpoints[a.endpoint]);
    co_await try_endpoint(a);
    body_gone = body_gone || a.body_streamed;
    if (a.client) {
      // The client failed while its body was relayed: nobody is left to
      // answer, or it was too slow (408) or sent a bad body (400).
      up_.reset();
      if (*a.client == BodyRead::Timeout) co_return co_await fail(Reason::RequestTimeout);
      if (*a.client == BodyRead::Malformed) co_return co_await fail(Reason::BadRequest);
      co_return co_await client_gone();
    }
    if (client_gone_) {
      up_.reset();
      co_return co_await client_gone();
    }

    core::RetryContext ctx;
    ctx.enabled = cc.retry.enabled;
    ctx.replayable = replayable;
    ctx.sent = a.sent;
    ctx.body_gone = body_gone;
    ctx.max_attempts = cc.retry.max_attempts;
    ctx.deadline = cls_.deadline;
    if (a.failed) {
      up_.reset();
      ctx.failure = a.failure;
      if (a.failure != core::AttemptFailure::Stale) {
        ++attempts;
        m.upstream_error(w_.index, cluster_->index, a.endpoint, a.error);
        report(a, core::Answer::Unanswered, true, std::nullopt, nullptr);
      }
    } else if (b_.resp.status == 503 && !b_.resp.no_retry) {
      ++attempts;
      ctx.failure = core::AttemptFailure::Overloaded;
    } else {
      co_return co_await relay_response(a);
    }
    ctx.attempts = attempts;
    ctx.now = now();
    core::RetryPlan plan = core::plan_retry(ctx);
    if (plan.retry && plan.budget && !cluster_->try_retry(ctx.now, attempts + 1)) plan.retry = false;
    if (!a.failed) {
      // A 503 that says nothing against a retry.
      if (!plan.retry) co_return co_await relay_response(a);
      report(a, core::Answer::Overloaded, true, a.head_at - a.sent_at, a.load_ok ? &a.load : nullptr);
      up_.reset();
    }
    if (!plan.retry) {
      if (now() >= cls_.deadline) co_return co_await fail(a.failure == core::AttemptFailure::Timeout ? Reason::UpstreamTimeout : Reason::Deadline);
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

awaitable<void> Exchange::try_endpoint(Attempt& a) {
  const auto& cc = cluster_->cfg;
  auto& m = *rt_.metrics;
  Endpoint& ep = *cluster_->endpoints[a.endpoint];
  const TimePoint t = now();
  Fuse* fuse = fuse_.fuse();
  up_ = fuse ? fuse->take(a.endpoint, t, *cluster_) : w_.pool.take(*cluster_, a.endpoint, t);
  if (up_) {
    a.reused = true;
  } else {
    up_ = std::make_unique<UpstreamConn>(w_.ctx.get_executor(), *cluster_, a.endpoint,
                                         ep.addr_generation.load(std::memory_order_acquire));
    // Counted before connecting: nothing may open one more while this one connects.
    if (fuse) fuse->note_open(*up_);
    const auto addrs = ep.addresses();
    error_code ec = asio::error::host_not_found;
    if (!addrs.empty()) {
      arm(std::min(cls_.deadline, t + cc.connect_timeout), Watchdog::Phase::Connect);
      auto [cec, connected] = co_await asio::async_connect(up_->sock(), addrs, nothrow);
      (void)connected;
      ec = cec;
    }
    if (ec) {
      a.failed = true;
      a.failure = core::AttemptFailure::Connect;
      a.error = UpstreamError::Connect;
      co_return;
    }
    error_code ig;
    up_->sock().set_option(tcp::no_delay(true), ig);
    up_->sock().non_blocking(true, ig);
    // TLS to the endpoint, within the same connect deadline (proxy/tls_context.cpp).
    if (cluster_->tls && !co_await connect_tls(up_->stream, *cluster_->tls, ep.host)) {
      a.failed = true;
      a.failure = core::AttemptFailure::Connect;
      a.error = UpstreamError::Connect;
      co_return;
    }
    m.upstream_connects.inc(w_.index, cluster_->index);
  }
  ++up_->uses;
  if (!co_await send_request(a)) co_return;
  if (!a.head_read) co_await read_response_head(a);
}

awaitable<bool> Exchange::early_answer(Attempt& a) {
  // The backend stopped reading the request and closed: it may have
  // answered first (a 413 before the body, say), and its answer is worth
  // more to the client than a 502. It is already in the socket, if at all.
  if (!a.sent || b_.watchdog.expired()) co_return false;
  const auto failure = a.failure;
  const auto error = a.error;
  a.failed = false;
  arm(std::min(cls_.deadline, now() + std::chrono::milliseconds(200)), Watchdog::Phase::Upstream);
  co_await read_response_head(a);
  if (a.failed) {
    a.failure = failure;
    a.error = error;
    co_return false;
  }
  a.head_read = true;
  co_return true;
}

awaitable<bool> Exchange::send_request(Attempt& a) {
  const auto& cc = cluster_->cfg;
  const auto& info = b_.req;
  const TimePoint t = now();
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
    } else {
      u.framing = http::BodyFraming::Chunked;
    }
  }
  const bool chunked = u.framing == http::BodyFraming::Chunked;
  b_.out.clear();
  http::write_upstream_head(b_.out, u);

  // 100-continue: levee answers it itself, once the request is admitted and
  // an upstream connection is ready.
  if (b_.req.expect_continue && !d_.body_done() && !sent_continue_) {
    sent_continue_ = true;
    if (!co_await d_.send_continue()) {
      a.client = BodyRead::Gone;
      co_return false;
    }
  }

  // The head and whatever body is already read, in one write.
  arm(std::min(cls_.deadline, now() + cc.response_timeout), Watchdog::Phase::Upstream);
  a.sent_at = now();
  auto& sink = b_.req_body;
  {
    http::Buffers bufs;
    char chunk_head[24];
    bufs.push(asio::buffer(b_.out));
    bufs.push_body(asio::buffer(sink.data()), chunked, chunk_head);
    if (chunked && d_.body_done()) bufs.push_last_chunk();
    auto [ec, n] = co_await up_->stream.write_all(bufs);
    a.sent = n > 0;
    if (ec) {
      a.failed = true;
      // A pooled connection the peer had closed, and nothing of this
      // request went out: levee's artefact, not the backend's failure.
      a.failure = a.reused && !a.sent ? core::AttemptFailure::Stale : core::AttemptFailure::Reset;
      a.error = b_.watchdog.expired() ? UpstreamError::Timeout : UpstreamError::Reset;
      if (b_.watchdog.expired()) a.failure = core::AttemptFailure::Timeout;
      co_return co_await early_answer(a);
    }
  }
  if (d_.body_done()) co_return true;

  // The rest of the body, streamed through the fixed sink: from here on it
  // cannot be replayed. While levee waits for more of it, the upstream is
  // watched: a backend that answers early (a 413) and stops reading must
  // not wait for a body the client may never finish.
  a.body_streamed = true;
  sink.clear();
  for (;;) {
    arm(std::min(cls_.deadline, now() + l_.cfg.body_timeout), Watchdog::Phase::Body);
    watch_upstream();
    const BodyRead r = co_await d_.read_body();
    const bool spoke = b_.upstream_spoke;
    unwatch_upstream();
    if (spoke) {
      a.failed = true;
      a.failure = core::AttemptFailure::Reset;
      a.error = UpstreamError::Reset;
      co_return co_await early_answer(a);
    }
    if (r != BodyRead::Data) {
      a.client = r;
      co_return false;
    }
    const bool done = d_.body_done();
    http::Buffers bufs;
    char chunk_head[24];
    bufs.push_body(asio::buffer(sink.data()), chunked, chunk_head);
    if (chunked && done) bufs.push_last_chunk();
    if (!bufs.empty()) {
      arm(std::min(cls_.deadline, now() + l_.cfg.body_timeout), Watchdog::Phase::Upstream);
      auto [ec, n] = co_await up_->stream.write_all(bufs);
      sink.clear();
      if (ec) {
        a.failed = true;
        a.failure = b_.watchdog.expired() ? core::AttemptFailure::Timeout : core::AttemptFailure::Reset;
        a.error = b_.watchdog.expired() ? UpstreamError::Timeout : UpstreamError::Reset;
        co_return co_await early_answer(a);
      }
    }
    if (done) co_return true;
  }
}

awaitable<void> Exchange::read_response_head(Attempt& a) {
  const auto& cc = cluster_->cfg;
  auto& m = *rt_.metrics;
  arm(std::min(cls_.deadline, a.sent_at + cc.response_timeout), Watchdog::Phase::Upstream);
  // Watch the client while the backend works: one that leaves frees the
  // backend's connection and the permit at once. Watching costs a reactor
  // re-arm, so the worker's sweep starts it only for waits past 10 ms.
  w_.upstream_waits.push(*this, a.sent_at);
  bool got_bytes = false;
  for (;;) {
    b_.resp_head.reset();
    b_.resp = http::ResponseInfo{};
    b_.resp_body.clear();
    b_.resp_parser.emplace(b_.resp_head, b_.resp, b_.resp_body, rt_.response_signals);
    auto& rp = *b_.resp_parser;
    rp.header_limit(64 * 1024);
    if (b_.req.method == http::Verb::head) rp.skip(true);
    while (!rp.is_header_done()) {
      if (!up_->buf.empty()) {
        error_code ec;
        const std::size_t n = rp.put(up_->buf.cbuf(), ec);
        up_->buf.consume(n);
        if (rp.is_header_done()) break;
        if (ec && ec != beast_http::error::need_more) {
          a.failed = true;
          a.failure = core::AttemptFailure::Reset;
          a.error = UpstreamError::Protocol;
          break;
        }
      }
      auto buf = up_->buf.prepare();
      if (buf.size() == 0) {  // a head larger than the buffer: the parser's limit stops it first
        a.failed = true;
        a.failure = core::AttemptFailure::Reset;
        a.error = UpstreamError::Protocol;
        break;
      }
      auto [ec, n] = co_await up_->stream.read_some(buf);
      if (ec) {
        a.failed = true;
        if (b_.watchdog.expired()) {
          a.failure = core::AttemptFailure::Timeout;
          a.error = UpstreamError::Timeout;
        } else {
          a.failure = a.reused && !got_bytes ? core::AttemptFailure::Stale : core::AttemptFailure::Reset;
          a.error = UpstreamError::Reset;
        }
        break;
      }
      got_bytes = true;
      up_->buf.commit(n);
    }
    if (a.failed) break;
    // 1xx (other than 101) are informational: skip them, the final answer
    // follows. A 101 answers an upgrade nobody asked for (levee forwards
    // none): the connection now speaks something else.
    const int status = b_.resp.status;
    if (status == 101) {
      a.failed = true;
      a.failure = core::AttemptFailure::Reset;
      a.error = UpstreamError::Protocol;
      break;
    }
    if (status >= 100 && status < 200) continue;
    break;
  }
  unlink();  // out of the worker's list of upstream waits
  d_.unwatch();
  if (a.failed) co_return;

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

awaitable<bool> Exchange::relay_response(Attempt& a) {
  const auto& cc = cluster_->cfg;
  auto& rp = *b_.resp_parser;
  auto& sink = b_.resp_body;
  const int status = b_.resp.status;
  const bool no_body = b_.req.method == http::Verb::head || status == 204 || status == 304 ||
                       (status >= 100 && status < 200);
  ResponseStart start{b_.resp_head, b_.resp, no_body, std::nullopt};
  if (!rp.chunked()) {
    if (auto len = rp.content_length()) start.length = *len;
  }
  // levee gave up below because of overload: tell the caller not to retry either.
  start.no_retry = a.overloaded && a.number > 1 && !b_.resp.no_retry;
  // What describes the inside (load reports, Server) stays inside.
  start.strip_inside = !cls_.trusted;
  rec_.status = status;

  // The backend is done once its response is whole: the permit, the
  // connection and the fuse slot go back before the client is written to,
  // so the next request is on its way sooner. Streamed responses settle at
  // their end.
  bool settled = false;
  auto settle = [&](TimePoint at, bool upstream_ok) {
    if (settled) return;
    settled = true;
    // gRPC servers report load in trailers: the later report wins.
    if (const auto& t = b_.resp.trailer_load; t.size > 0) read_load_report(a, t.value(), t.bin);
    else if (t.truncated) rt_.metrics->load_report_errors.inc(w_.index, cluster_->index);
    report(a, a.overloaded ? core::Answer::Overloaded : core::Answer::Accepted, status >= 500 || !upstream_ok,
           a.head_at - a.sent_at, a.load_ok ? &a.load : nullptr);
    if (permit_) permit_.finish(at, core::QueueGate::Sample{a.head_at - a.sent_at, in_flight_at_start_, a.overloaded});
    // Back to the pool only if the response ended exactly where its framing
    // said and nothing more arrived after it.
    if (upstream_ok && rp.is_done() && rp.keep_alive() && up_->buf.empty()) {
      if (Fuse* f = up_->fuse) f->put(std::move(up_), at);
      else w_.pool.put(std::move(up_), at);
    } else {
      up_.reset();
    }
    fuse_.reset();
  };
  if (rp.is_done()) settle(a.head_at, true);

  bool last_sent = rp.is_done();
  // Writing the answer counts against the request's deadline too (the
  // connection adds its own gap and minimum-rate limits).
  arm(cls_.deadline, Watchdog::Phase::Write);
  bool client_ok = co_await d_.send_response(start, sink.data(), last_sent);
  sink.clear();
  bool upstream_ok = true;
  while (client_ok && !rp.is_done()) {
    if (!up_->buf.empty()) {
      error_code ec;
      const std::size_t n = rp.put(up_->buf.cbuf(), ec);
      up_->buf.consume(n);
      const bool more = ec == beast_http::error::need_more;  // e.g. half a chunk header
      if (ec && !more && ec != beast_http::error::need_buffer) {
        upstream_ok = false;
        break;
      }
      if (sink.size() > 0) {
        if (rp.is_done()) settle(now(), true);
        last_sent = rp.is_done();
        arm(cls_.deadline, Watchdog::Phase::Write);
        client_ok = co_await d_.send_body(sink.data(), last_sent);
        sink.clear();
        continue;
      }
      if (rp.is_done()) break;
      if (n > 0 && !more && !up_->buf.empty()) continue;  // progress was made: parse on
    }
    auto buf = up_->buf.prepare();
    if (buf.size() == 0) {  // no progress possible: a framing element larger than the buffer
      upstream_ok = false;
      break;
    }
    arm(std::min(cls_.deadline, now() + cc.response_timeout), Watchdog::Phase::Response);
    auto [ec, n] = co_await up_->stream.read_some(buf);
    if (ec) {
      if (ec == asio::error::eof && rp.need_eof()) {
        error_code pec;
        rp.put_eof(pec);
        break;
      }
      upstream_ok = false;
      break;
    }
    up_->buf.commit(n);
  }
  const bool complete = upstream_ok && rp.is_done();
  if (complete) settle(now(), true);
  if (client_ok && complete && !last_sent) {
    arm(cls_.deadline, Watchdog::Phase::Write);
    client_ok = co_await d_.send_body({}, true);
  }
  if (!upstream_ok) {
    auto& m = *rt_.metrics;
    const bool timeout = b_.watchdog.expired();
    m.upstream_error(w_.index, cluster_->index, a.endpoint, timeout ? UpstreamError::Timeout : UpstreamError::Reset);
    rec_.reason = timeout ? Reason::UpstreamTimeout : Reason::UpstreamReset;
  }
  settle(now(), upstream_ok);
  co_return client_ok && complete;
}

}  // namespace levee::proxy

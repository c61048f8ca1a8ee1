// The exchange: one request, from its parsed head to the end of its answer,
// whatever protocol carries it (it sees its client only through
// Downstream). In order:
//
//   classify       route, criticality, tenant, deadline, attempt (core)
//   gate 1         self-protection, lock-free (core::screen)
//   fuse           a slot of the batch fuse, when the route has one
//   gates 2-4      the cluster's admission pipeline; a queued request waits
//                  (AdmissionWait) until granted, dropped, or its client leaves
//   attempts       endpoint choice, a pooled or new connection, the request
//                  head and body, the response head; on failure the one
//                  retry rule (core::plan_retry) says whether to try again
//   response       relayed to the client; the permit, the fuse slot and the
//                  upstream connection come back as soon as the backend is done
//
// Everything it holds settles itself on every exit: the Permit returns to
// its cluster, the FuseSlot to its fuse, an upstream connection not handed
// back to a pool is closed, and the Record writes metrics and the log line.
#pragma once

#include <memory>
#include <string_view>

#include "core/admission.hpp"
#include "core/classify.hpp"
#include "core/decision.hpp"
#include "core/queue_gate.hpp"
#include "core/retry.hpp"
#include "proxy/admission_wait.hpp"
#include "proxy/cluster.hpp"
#include "proxy/downstream.hpp"
#include "proxy/exchange_buffers.hpp"
#include "proxy/fuse.hpp"
#include "proxy/record.hpp"
#include "proxy/timed_list.hpp"
#include "proxy/upstream.hpp"
#include "proxy/watchdog.hpp"

namespace levee::http {
struct UpstreamHead;
}

namespace levee::proxy {

class Listener;
class Runtime;
class Worker;
struct Route;

class Exchange final : public QueueWaiter, public ClientWatch, public Watchdog::Target, public TimedHook {
 public:
  Exchange(Worker& w, Listener& l, Downstream& d, ExchangeBuffers& b, core::TimePoint start);
  Exchange(const Exchange&) = delete;
  Exchange& operator=(const Exchange&) = delete;
  ~Exchange();

  /// Runs the request to its end. True when the answer went out whole and
  /// the client's connection may carry another request.
  awaitable<bool> run();
  /// Answers a request that cannot be served at all (a protocol error found
  /// before classification).
  awaitable<bool> refuse(core::Reason r, std::string_view detail = {});
  /// The worker's sweep: this exchange has waited a while for its backend.
  void start_client_watch();
  /// Refused by self-protection (for the worker's own load, not the
  /// backend's) while it let more critical requests through.
  bool shed_for_own_load() const noexcept;

 private:
  /// What admission decided without waiting.
  enum class Gate : std::uint8_t {
    Passed,   ///< admitted (a permit held when the limit gave one)
    Refused,  ///< held_.decision is the answer
    Fuse,     ///< no slot of fuse_wait_ free: wait for one, then the cluster's gates
    Queued,   ///< held_.ticket waits in the cluster's queue
  };
  /// Gate 1, the fuse's slot and gates 2-4, as far as they go without
  /// waiting. Not a coroutine: most requests pass here.
  Gate admit_now();
  /// Gates 2-4, in one call under the cluster's lock.
  Gate cluster_gates();
  /// The rest of admission: the refusal, the fuse's wait, the queue wait.
  /// False: answered.
  awaitable<bool> admit_rest(Gate g);
  awaitable<bool> wait_for_fuse(Fuse& f);
  awaitable<bool> wait_in_queue(core::QueueGate::Ticket t, core::TimePoint expires);
  /// Attempts and the response.
  awaitable<bool> forward();
  struct Attempt;
  /// One attempt over HTTP/1.1: a connection (pooled or new), the request,
  /// the answer's head (proxy/exchange_h1.cpp).
  awaitable<void> try_endpoint(Attempt& a);
  /// A pooled connection to the attempt's endpoint, into up_.
  bool take_pooled(Attempt& a);
  /// A new connection to the attempt's endpoint, into up_. False: failed.
  awaitable<bool> connect(Attempt& a);
  /// A "100 Continue" is owed before the body (continue_due() sends it).
  bool continue_owed() const noexcept;
  /// The request's first write: its head and the body already held.
  void request_buffers(http::Buffers& bufs, char (&chunk_head)[24]) const;
  /// That write, sent at t, as far as the socket takes it at once (a.put,
  /// a.taken).
  Sent first_write(Attempt& a, core::TimePoint t);
  /// The head and a body all held, when no "100 Continue" is owed: true
  /// when first_write() sent the whole request.
  bool sent_at_once(Attempt& a);
  /// The first write failed: why, as the retry rule needs it.
  void fail_first_write(Attempt& a);
  /// The request: head, held body, the rest of the body streamed, from
  /// where first_write() left it if it ran. False: the attempt failed (or
  /// the client did).
  awaitable<bool> send_request(Attempt& a);
  // The trust boundary (proxy/trust.cpp): counts the headers classification
  // did not believe, and replaces them in the head sent upstream.
  void count_untrusted() noexcept;
  void untrusted_rewrite(http::UpstreamHead& u) const noexcept;
  awaitable<void> read_response_head(Attempt& a);
  awaitable<bool> early_answer(Attempt& a);
  void watch_upstream();
  void watch_upstream_once(std::uint64_t gen);
  void unwatch_upstream();
  awaitable<bool> relay(Attempt& a);  ///< the response, by the attempt's protocol
  awaitable<bool> relay_response(Attempt& a);
  /// The head for the upstream (one writer for both protocols) into b_.out;
  /// the time left to the deadline counts from t.
  void write_head(Attempt& a, bool h2, TimePoint t);
  /// A 100 Continue is due to the client now (and counted as sent).
  bool continue_due() noexcept;
  /// A response head arrived: latency, counts, the load report.
  void note_response_head(Attempt& a);
  /// The backend is done: report, permit back.
  void settle_attempt(Attempt& a, core::TimePoint at, bool upstream_ok);
  /// levee stops waiting for an answer the backend may still be working
  /// on: the permit comes back when it is done (proxy/abandoned.hpp).
  void abandon_attempt(const Attempt& a);
  /// What both relays add to the response head: don't-retry, the trust
  /// boundary's stripping, the record's status.
  void finish_start(ResponseStart& start, const Attempt& a);
  /// The answer broke off upstream: counted, and the record's reason.
  void note_relay_failure(const Attempt& a);
  /// Closes (HTTP/1.1) or resets (HTTP/2) what the attempt holds upstream.
  void drop_upstream() noexcept;
  /// The request may be sent again: an idempotent method, or an idempotency key.
  bool replayable() const noexcept;
  // HTTP/2 upstream (exchange_h2.cpp).
  bool call_upstream() const noexcept;
  awaitable<void> try_endpoint_h2(Attempt& a);
  awaitable<bool> send_body_h2(Attempt& a);
  awaitable<bool> relay_response_h2(Attempt& a);
  awaitable<void> pump_body_h2();

  awaitable<bool> reject(const core::Decision& d);
  awaitable<bool> fail(core::Reason r, std::string_view detail = {});
  awaitable<bool> client_gone();
  /// What an attempt came to, at time at, for the cluster's controllers.
  void report(TimePoint at, const Attempt& a, core::Answer answer, bool failure, std::optional<core::Duration> latency,
              const core::LoadReport* load);
  /// Reads an ORCA load report (a header's or a trailer's) into a.load.
  void read_load_report(Attempt& a, std::string_view value, bool bin);

  void on_wake(const core::QueueGate::Wake& w) override;
  void on_client_gone() noexcept override;
  void on_deadline(Watchdog::Phase p) noexcept override;
  void arm(core::TimePoint deadline, Watchdog::Phase p) { b_.watchdog.arm(deadline, p, *this); }

  Worker& w_;
  Listener& l_;
  Downstream& d_;
  ExchangeBuffers& b_;
  Runtime& rt_;
  Record rec_;
  core::Classification cls_;
  const Route* route_ = nullptr;
  Cluster* cluster_ = nullptr;
  Permit permit_;
  FuseSlot fuse_;
  std::unique_ptr<UpstreamConn> up_;
  H2Call* call_ = nullptr;  ///< the HTTP/2 attempt's stream (in b_), when the cluster speaks http2
  AdmissionWait wait_;
  core::QueueGate::Wake wake_{};
  core::Verdict held_{};        ///< admission's verdict, for admit_rest()
  Fuse* fuse_wait_ = nullptr;   ///< the fuse admit_now() found full
  std::uint32_t in_flight_at_start_ = 0;
  bool client_gone_ = false;
  bool sent_continue_ = false;
  bool h2_stale_retried_ = false;  ///< an HTTP/2 attempt was retried once for free
  bool h2_body_open_ = false;      ///< the answer began before the request body ended
  bool h2_pump_running_ = false;   ///< pump_body_h2 runs beside the relay
  bool h2_pump_stop_ = false;
  bool h2_sink_unsent_ = false;    ///< the request sink holds body the pump must send first
  bool answered_keep_ = false;  ///< when admission answered: the connection may carry on
};

}  // namespace levee::proxy

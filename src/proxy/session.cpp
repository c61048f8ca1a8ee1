#include "proxy/session.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/connect.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/buffers_suffix.hpp>
#include <boost/beast/http/error.hpp>
#include <sys/socket.h>

#include "core/headers.hpp"
#include "core/text.hpp"
#include "proxy/server.hpp"
#include "proxy/worker.hpp"

namespace levee::proxy {

namespace asio = boost::asio;
using boost::system::error_code;
using core::Reason;
constexpr auto nothrow = asio::as_tuple(asio::use_awaitable);

namespace {

bool idempotent(http::verb m) {
  switch (m) {
    case http::verb::get:
    case http::verb::head:
    case http::verb::options:
    case http::verb::trace:
    case http::verb::put:
    case http::verb::delete_:
      return true;
    default:
      return false;
  }
}

std::size_t code_class(int status) {
  if (status < 100) return 4;
  return static_cast<std::size_t>(std::min(5, status / 100) - 1);
}

std::string_view status_reason(int s) {
  switch (s) {
    case 100: return "Continue";
    case 200: return "OK";
    case 400: return "Bad Request";
    case 404: return "Not Found";
    case 408: return "Request Timeout";
    case 413: return "Payload Too Large";
    case 414: return "URI Too Long";
    case 417: return "Expectation Failed";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 499: return "Client Closed Request";
    case 501: return "Not Implemented";
    case 502: return "Bad Gateway";
    case 503: return "Service Unavailable";
    case 504: return "Gateway Timeout";
    default: return "Unknown";
  }
}

void append_uint(std::string& out, std::uint64_t v) {
  char buf[24];
  auto [p, ec] = std::to_chars(buf, buf + sizeof buf, v);
  (void)ec;
  out.append(buf, static_cast<std::size_t>(p - buf));
}

void append_field(std::string& out, std::string_view name, std::string_view value) {
  out.append(name);
  out.append(": ", 2);
  out.append(value);
  out.append("\r\n", 2);
}

std::string_view field_value(const Exchange& ex, int i) {
  return i >= 0 ? ex.req_head.fields()[static_cast<std::size_t>(i)].value : std::string_view{};
}

}  // namespace

struct Session::Request {
  TimePoint start{};
  TimePoint deadline = TimePoint::max();
  const Route* route = nullptr;
  Cluster* cluster = nullptr;
  Criticality crit = Criticality::Critical;
  TenantId tenant = core::kDefaultTenant;
  std::uint32_t attempt = 1;   // as it arrived
  std::uint32_t attempts = 0;  // levee's upstream attempts
  Reason reason = Reason::None;
  int status = 0;
  bool keep_alive = true;
  bool head_request = false;
  bool sent_continue = false;
  std::uint64_t rx = 0;
  std::uint64_t tx = 0;
  double upstream_ms = -1;
  double queue_ms = 0;
  std::size_t endpoint = core::kNoEndpoint;
  core::Permit permit;
  std::uint32_t inflight_at_start = 0;
  std::string_view request_id;
  char rid_buf[32];
  bool rejected = false;
  /// A batch fuse slot, returned when the upstream part is done (or at the
  /// latest when the request ends).
  struct FuseSlot {
    Worker* w = nullptr;
    Fuse* f = nullptr;
    void reset() {
      if (f) std::exchange(w, nullptr)->fuse_release(*std::exchange(f, nullptr));
    }
    ~FuseSlot() { reset(); }
  } fuse;
};

Session::Session(Worker& w, Listener& l, tcp::socket s)
    : w_(w),
      rt_(w.rt),
      l_(l),
      down_(std::move(s)),
      in_(4096, l.cfg.max_header_bytes + 16 * 1024),
      watchdog_(w.ctx),
      wait_timer_(w.ctx) {
  executor = down_.get_executor();
  error_code ec;
  auto ep = down_.remote_endpoint(ec);
  if (!ec) {
    auto a = ep.address();
    client_ip_ = a.to_string();
    client_ = (a.is_v6() ? "[" + client_ip_ + "]" : client_ip_) + ":" + std::to_string(ep.port());
    if (a.is_v4()) {
      auto b = a.to_v4().to_bytes();
      client_addr_.fill(0);
      client_addr_[10] = client_addr_[11] = 0xff;
      std::copy(b.begin(), b.end(), client_addr_.begin() + 12);
    } else {
      client_addr_ = a.to_v6().to_bytes();
    }
  }
  down_.set_option(tcp::no_delay(true), ec);
  down_.non_blocking(true, ec);
  w_.attach(this);
}

Session::~Session() { w_.detach(this); }

void Session::close_if_idle() {
  if (idle_ && !closed_) {
    error_code ec;
    down_.cancel(ec);
  }
}

// --- the watchdog: one timer per connection, re-armed lazily --------------

void Session::set_deadline(TimePoint d, Phase p) {
  phase_ = p;
  deadline_ = d;
  timed_out_ = false;
  if (watch_active_ && d >= watch_at_) return;  // fires early, then re-arms
  watch_at_ = d;
  watch_active_ = true;
  ++watch_gen_;
  watchdog_.expires_at(to_steady(d));
  watchdog_.async_wait([self = shared_from_this(), g = watch_gen_](error_code) { self->on_watchdog(g); });
}

void Session::on_watchdog(std::uint64_t gen) {
  if (gen != watch_gen_) return;  // superseded by an earlier deadline
  watch_active_ = false;
  if (closed_ || deadline_ == TimePoint::max()) return;
  if (now() < deadline_) {
    set_deadline(deadline_, phase_);
    return;
  }
  timed_out_ = true;
  timed_out_phase_ = phase_;
  error_code ec;
  down_.cancel(ec);
  if (up_) up_->sock.cancel(ec);
  wait_timer_.cancel();
}

// --- the connection loop ----------------------------------------------------

asio::awaitable<void> Session::run() {
  auto self = shared_from_this();
  for (;;) {
    Request rq;
    // Between requests a connection holds only its read buffer: the
    // per-request scratch (heads, body buffers) is taken once bytes of the
    // next request arrive. Idle keep-alive connections stay small.
    if (in_.empty()) {
      idle_ = true;
      set_deadline(now() + l_.cfg.idle_timeout, Phase::Idle);
      auto [ec, n] = co_await down_.async_read_some(in_.prepare(), nothrow);
      if (ec) break;  // idle timeout, drain, or the client left
      in_.commit(n);
      rq.rx += n;
    }
    ex_ = w_.take_exchange();
    auto head = co_await read_head(rq);
    bool keep = false;
    if (head == HeadResult::Ok) {
      keep = co_await handle(rq);
    } else if (head == HeadResult::Failed) {
      co_await local_reply(rq, rq.reason, {}, /*close=*/true);
    }
    w_.put_exchange(std::move(ex_));
    if (up_) up_.reset();  // a connection not returned to the pool is closed
    if (head == HeadResult::Ok) ++served_;
    if (!keep || rt_->draining.load(std::memory_order_relaxed)) break;
  }
  if (linger_) co_await lingering_close();
  closed_ = true;
  deadline_ = TimePoint::max();
  watchdog_.cancel();
  error_code ec;
  down_.shutdown(tcp::socket::shutdown_both, ec);
  down_.close(ec);
}

asio::awaitable<void> Session::lingering_close() {
  // We answered before reading the whole request (a rejection, an error).
  // Closing now would make the kernel reset the connection when more of the
  // client's body arrives, and a reset can destroy our answer before the
  // client reads it. So: stop sending, then read and discard for a while.
  error_code ec;
  down_.shutdown(tcp::socket::shutdown_send, ec);
  set_deadline(now() + std::chrono::seconds(2), Phase::Body);
  std::size_t drained = 0;
  while (drained < 4 * 1024 * 1024) {
    in_.clear();
    auto [rec, n] = co_await down_.async_read_some(in_.prepare(), nothrow);
    if (rec) break;
    drained += n;
  }
  in_.clear();
}

asio::awaitable<Session::HeadResult> Session::read_head(Request& rq) {
  auto& ex = *ex_;
  ex.req_head.set_max_fields(l_.cfg.max_headers);
  ex.req_parser.emplace(ex.req_head, ex.req, ex.req_body, w_.watched());
  auto& p = *ex.req_parser;
  p.header_limit(l_.cfg.max_header_bytes);
  bool got = !in_.empty();
  idle_ = !got;
  set_deadline(now() + (got ? l_.cfg.header_timeout : l_.cfg.idle_timeout), got ? Phase::Header : Phase::Idle);
  for (;;) {
    if (!in_.empty()) {
      error_code ec;
      std::size_t n = p.put(in_.cbuf(), ec);
      in_.consume(n);
      if (p.is_header_done()) {
        if (ec && ec != http::error::need_buffer && ec != http::error::need_more) {
          rq.reason = Reason::BadRequest;
          co_return HeadResult::Failed;
        }
        co_return HeadResult::Ok;
      }
      if (ec == http::error::header_limit) {
        // Which limit: a request line longer than its own limit is a 414.
        auto v = in_.view();
        auto eol = v.find("\r\n");
        bool long_line = (eol == std::string_view::npos ? v.size() : eol) > l_.cfg.max_request_line;
        rq.reason = (!ex.req.too_many_fields && long_line) ? Reason::UriTooLong : Reason::HeaderTooLarge;
        co_return HeadResult::Failed;
      }
      if (ec && ec != http::error::need_more) {
        rq.reason = Reason::BadRequest;
        co_return HeadResult::Failed;
      }
    }
    auto buf = in_.prepare();
    if (buf.size() == 0) {
      rq.reason = Reason::HeaderTooLarge;
      co_return HeadResult::Failed;
    }
    auto [ec, n] = co_await down_.async_read_some(buf, nothrow);
    if (ec) {
      if (got && timed_out_) {
        rq.reason = Reason::RequestTimeout;
        co_return HeadResult::Failed;
      }
      co_return HeadResult::Closed;  // idle timeout, drain, or the client left
    }
    in_.commit(n);
    rq.rx += n;
    if (!got) {
      got = true;
      idle_ = false;
      set_deadline(now() + l_.cfg.header_timeout, Phase::Header);
    }
  }
}

asio::awaitable<bool> Session::handle(Request& rq) {
  auto& ex = *ex_;
  auto& info = ex.req;
  auto& p = *ex.req_parser;
  rq.start = now();
  rq.head_request = info.method == http::verb::head;
  rq.keep_alive = p.keep_alive();
  set_deadline(TimePoint::max(), Phase::Header);

  if (info.method_str.size() + info.target.size() + 10 > l_.cfg.max_request_line)
    co_return co_await local_reply(rq, Reason::UriTooLong, {}, true);
  if (p.upgrade() || info.method == http::verb::connect)
    co_return co_await local_reply(rq, Reason::NotImplemented, "upgrades and CONNECT are not supported", true);
  if (info.bad_expect)
    co_return co_await local_reply(rq, Reason::BadRequest, "unsupported Expect", true);
  if (info.version >= 11 && info.host < 0)
    co_return co_await local_reply(rq, Reason::BadRequest, "missing Host", true);

  // Classify: route, criticality, tenant, deadline, attempt.
  rq.route = l_.match(field_value(ex, info.host), info.target);
  if (!rq.route) co_return co_await local_reply(rq, Reason::NoRoute);
  rq.cluster = rq.route->cluster;
  rq.crit = rq.route->criticality;
  if (info.criticality >= 0) {
    auto c = core::parse_criticality(field_value(ex, info.criticality));
    if (!c) {
      // Named, not a temporary: GCC 12 mishandles temporaries in co_await operands.
      const std::string detail =
          rt_->cfg->headers.criticality + " must be CRITICAL_PLUS, CRITICAL, SHEDDABLE_PLUS or SHEDDABLE";
      co_return co_await local_reply(rq, Reason::BadCriticality, detail);
    }
    rq.crit = *c;
  }
  const config::TenantSource& ts = *rq.route->tenant;
  bool tenant_found = false;
  if (!ts.api_key_header.empty()) {
    for (const auto& f : ex.req_head.fields()) {
      if (!core::iequals(f.name, ts.api_key_header)) continue;
      for (const auto& [key, tenant] : ts.api_keys) {
        if (key == core::trim(f.value)) {
          rq.tenant = rt_->tenant_id(tenant);
          tenant_found = true;
          break;
        }
      }
      break;
    }
  }
  if (!tenant_found && !ts.header.empty()) {
    bool trusted = ts.trust_all;
    for (std::size_t i = 0; !trusted && i < ts.trusted_networks.size(); ++i)
      trusted = ts.trusted_networks[i].contains(client_addr_);
    if (trusted) {
      for (const auto& f : ex.req_head.fields()) {
        if (core::iequals(f.name, ts.header)) {
          rq.tenant = rt_->tenant_id(core::trim(f.value));
          break;
        }
      }
    }
  }
  rq.deadline = rq.start + rq.route->timeout;
  if (auto d = core::parse_timeout_ms(field_value(ex, info.timeout_ms)); d && info.timeout_ms >= 0)
    rq.deadline = std::min(rq.deadline, rq.start + *d);
  if (auto d = core::parse_grpc_timeout(field_value(ex, info.grpc_timeout)); d && info.grpc_timeout >= 0)
    rq.deadline = std::min(rq.deadline, rq.start + *d);
  for (int i : {info.attempt, info.envoy_attempt}) {
    if (auto a = core::parse_attempt(field_value(ex, i)); a && i >= 0) rq.attempt = std::max(rq.attempt, *a);
  }
  if (auto a = core::parse_attempt(field_value(ex, info.grpc_attempts)); a && info.grpc_attempts >= 0)
    rq.attempt = std::max(rq.attempt, *a + 1);
  if (info.request_id >= 0) {
    rq.request_id = field_value(ex, info.request_id);
  } else {
    static constexpr char hex[] = "0123456789abcdef";
    std::uint64_t a = w_.rng.next(), b = w_.rng.next();
    for (int i = 0; i < 16; ++i) {
      rq.rid_buf[i] = hex[(a >> (i * 4)) & 0xf];
      rq.rid_buf[16 + i] = hex[(b >> (i * 4)) & 0xf];
    }
    rq.request_id = std::string_view(rq.rid_buf, 32);
  }

  auto& m = *rt_->metrics;
  const std::size_t shard = w_.index;
  const std::size_t ci = rq.cluster->index;
  const std::size_t crit_i = core::index(rq.crit);

  // Gate 1: self-protection, from atomics the load sampler keeps fresh.
  const auto& sp = rt_->cfg->self_protection;
  if (sp.enabled) {
    Reason r = Reason::None;
    if (rt_->executor_over[crit_i].load(std::memory_order_relaxed)) r = Reason::ExecutorOverload;
    else if (sp.host_cpu.enabled && rt_->host_over[crit_i].load(std::memory_order_relaxed)) r = Reason::HostCpu;
    if (r != Reason::None) {
      if (sp.dry_run) {
        m.dry_run.inc(shard, m.dry_run.index({ci, static_cast<std::size_t>(r), crit_i}));
      } else {
        co_return co_await reject(rq, Decision::reject(r, std::chrono::seconds(1)));
      }
    }
  }

  // Batch listeners: a slot of the fuse first, so that batch requests
  // waiting for one of its few connections hold no cluster permit.
  if (l_.cfg.mode == config::ListenerConfig::Mode::Batch || rq.route->fuse) {
    Fuse& f = w_.fuse(l_, *rq.cluster);
    if (!w_.fuse_try_acquire(f, *rq.cluster)) {
      const Duration qt = l_.cfg.fuse.queue_timeout;
      // A worker with no share of a split fuse (fewer fuse connections than
      // workers) cannot serve it at all: say so at once.
      if (f.waiters.size() >= f.queue_max || f.per_endpoint == 0)
        co_return co_await reject(rq, Decision::reject(Reason::Fuse, qt));
      FuseWaiter fw;
      fw.timer = &wait_timer_;
      f.waiters.push_back(&fw);
      l_.fuse_waiting.fetch_add(1, std::memory_order_relaxed);
      client_gone_ = false;
      const TimePoint give_up = std::min(rq.deadline, rq.start + qt);
      const TimePoint watch_from = rq.start + std::chrono::milliseconds(10);
      bool watching = false;
      wait_timer_.expires_at(to_steady(std::min(give_up, watch_from)));
      for (;;) {
        co_await wait_timer_.async_wait(nothrow);
        if (fw.granted) break;
        if (!watching && !client_gone_ && now() < give_up) {
          watching = true;
          if (in_.empty()) watch_client();
          wait_timer_.expires_at(to_steady(give_up));
          continue;
        }
        break;
      }
      if (watching) {
        watching_client_ = false;
        ++watch_client_gen_;
        error_code wec;
        down_.cancel(wec);
      }
      if (!fw.granted) {
        f.waiters.erase(std::find(f.waiters.begin(), f.waiters.end(), &fw));
        l_.fuse_waiting.fetch_sub(1, std::memory_order_relaxed);
        if (client_gone_) {
          rq.reason = Reason::ClientGone;
          rq.status = 499;
          finish(rq);
          co_return false;
        }
        co_return co_await reject(rq, Decision::reject(Reason::Fuse, qt));
      }
    }
    rq.fuse = {&w_, &f};
  }

  // Gates 2-4 in one critical section of the cluster.
  AdmitInput in{rq.crit, rq.tenant, rq.attempt, rq.start, rq.deadline, w_.rng.uniform(), this};
  AdmitResult res = rq.cluster->admit(in);
  if (res.dry_run != Reason::None)
    m.dry_run.inc(shard, m.dry_run.index({ci, static_cast<std::size_t>(res.dry_run), crit_i}));
  if (res.outcome == core::QueueGate::Outcome::Rejected) co_return co_await reject(rq, res.decision);
  rq.inflight_at_start = res.inflight_at_start;
  if (res.outcome == core::QueueGate::Outcome::Queued) {
    int r = co_await wait_in_queue(rq, *rq.cluster, res.ticket);
    if (r == 1) co_return co_await reject(rq, wake_.decision);
    if (r >= 2) {
      // The client left while queued: it is never sent upstream.
      if (r == 3) rq.cluster->release_permit(0);
      rq.reason = Reason::ClientGone;
      rq.status = 499;
      finish(rq);
      co_return false;
    }
    rq.queue_ms = core::to_seconds(wake_.waited) * 1e3;
    rq.inflight_at_start = wake_.in_flight;
    m.queue_time.observe(shard, ci, core::to_seconds(wake_.waited));
  }
  if (rq.cluster->cfg.admission.enabled) rq.permit = core::Permit(rq.cluster, 0);
  m.admitted.inc(shard, m.admitted.index({ci, crit_i, rq.tenant}));
  co_return co_await proxy(rq, *rq.cluster);
}

// --- waiting in a cluster queue ---------------------------------------------

void Session::on_wake(const core::QueueGate::Wake& w) {
  wake_ = w;
  have_wake_ = true;
  wait_timer_.cancel();
}

void Session::watch_client() {
  // Readable while queued means EOF (the client left) or pipelined data.
  watching_client_ = true;
  auto gen = ++watch_client_gen_;
  down_.async_wait(tcp::socket::wait_read, [self = shared_from_this(), gen](error_code ec) {
    if (ec || gen != self->watch_client_gen_ || !self->watching_client_) return;
    char c;
    ssize_t n = ::recv(self->down_.native_handle(), &c, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) {
      self->client_gone_ = true;
      self->wait_timer_.cancel();
    } else if (n < 0) {
      self->watch_client();  // spurious wake-up
    }
    // n > 0: pipelined data; it waits in the socket for after this request.
  });
}

asio::awaitable<int> Session::wait_in_queue(Request& rq, Cluster& c, core::QueueGate::Ticket t) {
  // Returns 0 granted, 1 rejected (wake_.decision), 2 client gone,
  // 3 client gone but a permit was granted meanwhile (caller releases it).
  have_wake_ = false;
  client_gone_ = false;
  set_deadline(TimePoint::max(), Phase::Queue);
  // The gate drops entries past their deadline or max wait when it next
  // looks; this timer makes sure we look even if nothing else happens.
  const auto& qc = c.cfg.admission.queue;
  const auto grace = std::chrono::duration_cast<Duration>(qc.target * std::max(1.0, qc.max_wait_factor));
  const TimePoint give_up = std::min(rq.deadline, rq.start + grace) + std::chrono::milliseconds(1);
  // Most waits are short; watching the client costs a reactor re-arm, so
  // it starts only once the wait has lasted a while. A client that leaves
  // sooner costs at most the one request it abandoned.
  const TimePoint watch_from = rq.start + std::chrono::milliseconds(10);
  bool watching = false;
  wait_timer_.expires_at(to_steady(std::min(give_up, watch_from)));
  int result = 0;
  for (;;) {
    co_await wait_timer_.async_wait(nothrow);
    if (have_wake_) {
      result = wake_.granted ? (client_gone_ ? 3 : 0) : 1;
      break;
    }
    if (!watching && !client_gone_ && now() < give_up) {
      watching = true;
      if (in_.empty()) watch_client();
      wait_timer_.expires_at(to_steady(give_up));
      continue;
    }
    if (c.cancel(t, now())) {
      if (client_gone_) {
        result = 2;
      } else {
        result = 1;
        wake_.decision = rq.deadline <= now() ? Decision::reject(Reason::Deadline, Duration::zero())
                                              : Decision::reject(Reason::QueueTimeout, std::chrono::seconds(1));
      }
      break;
    }
    // Granted or dropped at the same moment: the wake is already posted.
    wait_timer_.expires_at(asio::steady_timer::time_point::max());
  }
  if (watching) {
    watching_client_ = false;
    ++watch_client_gen_;
    error_code ec;
    down_.cancel(ec);  // the readiness wait
  }
  co_return result;
}

// --- local answers ----------------------------------------------------------

asio::awaitable<std::pair<error_code, std::size_t>> Session::write_all(tcp::socket& s, const Buffers& bufs) {
  const std::size_t total = asio::buffer_size(bufs);
  error_code ec;
  std::size_t n = s.write_some(bufs, ec);  // the socket is in non-blocking mode
  if (ec == asio::error::would_block || ec == asio::error::try_again) ec = {};
  if (ec || n == total) co_return std::pair{ec, n};
  boost::beast::buffers_suffix<Buffers> rest(bufs);
  rest.consume(n);
  auto [aec, an] = co_await asio::async_write(s, rest, nothrow);
  co_return std::pair{aec, n + an};
}

asio::awaitable<bool> Session::write_down(const Buffers& bufs, Request& rq) {
  set_deadline(now() + l_.cfg.body_timeout, Phase::Write);
  auto [ec, n] = co_await write_all(down_, bufs);
  rq.tx += n;
  co_return !ec;
}

asio::awaitable<bool> Session::reject(Request& rq, const Decision& d) {
  auto& m = *rt_->metrics;
  rq.reason = d.reason;
  rq.rejected = true;
  const std::size_t ci = rq.cluster ? rq.cluster->index : 0;
  m.rejected.inc(w_.index, m.rejected.index({ci, static_cast<std::size_t>(d.reason), core::index(rq.crit), rq.tenant}));
  auto& out = ex_->out;
  out.clear();
  const bool close = !ex_->req_parser->is_done() || !rq.keep_alive;
  if (!ex_->req_parser->is_done()) linger_ = true;
  rq.status = d.status;
  out.append("HTTP/1.1 ");
  append_uint(out, d.status);
  out.push_back(' ');
  out.append(status_reason(d.status));
  out.append("\r\ncontent-type: text/plain\r\nretry-after: ");
  append_uint(out, core::retry_after_seconds(d.retry_after, w_.rng.uniform()));
  out.append("\r\nx-levee-reject: ");
  out.append(core::to_string(d.reason));
  if (d.no_retry) out.append("\r\nx-levee-no-retry: 1");
  if (close) out.append("\r\nconnection: close");
  out.append("\r\ncontent-length: ");
  std::string_view body = "overloaded: ";
  append_uint(out, body.size() + core::to_string(d.reason).size() + 1);
  out.append("\r\n\r\n");
  out.append(body);
  out.append(core::to_string(d.reason));
  out.push_back('\n');
  Buffers bufs;
  bufs.push(asio::buffer(out));
  bool ok = co_await write_down(bufs, rq);
  finish(rq);
  co_return ok && !close;
}

asio::awaitable<bool> Session::local_reply(Request& rq, Reason r, std::string_view detail, bool close) {
  auto& m = *rt_->metrics;
  rq.reason = r;
  const auto& ri = core::info(r);
  rq.status = ri.status;
  m.local_replies.inc(w_.index, m.local_replies.index({l_.index, static_cast<std::size_t>(r)}));
  if (ex_->req_parser && !ex_->req_parser->is_done()) {
    close = true;
    if (ex_->req_parser->is_header_done()) linger_ = true;
  }
  if (!rq.keep_alive) close = true;
  auto& out = ex_->out;
  out.clear();
  out.append("HTTP/1.1 ");
  append_uint(out, ri.status);
  out.push_back(' ');
  out.append(status_reason(ri.status));
  out.append("\r\ncontent-type: text/plain\r\nx-levee-error: ");
  out.append(ri.name);
  if (close) out.append("\r\nconnection: close");
  out.append("\r\ncontent-length: ");
  std::size_t len = ri.name.size() + 1 + (detail.empty() ? 0 : detail.size() + 2);
  append_uint(out, len);
  out.append("\r\n\r\n");
  out.append(ri.name);
  if (!detail.empty()) {
    out.append(": ");
    out.append(detail);
  }
  out.push_back('\n');
  Buffers bufs;
  bufs.push(asio::buffer(out));
  bool ok = co_await write_down(bufs, rq);
  finish(rq);
  co_return ok && !close;
}

// --- accounting ---------------------------------------------------------------

void Session::finish(Request& rq) {
  auto& m = *rt_->metrics;
  const TimePoint t = now();
  const double dur = rq.start == TimePoint{} ? 0.0 : core::to_seconds(t - rq.start);
  if (rq.route) m.requests.inc(w_.index, m.requests.index({rq.route->metric_index, code_class(rq.status)}));
  if (rq.cluster)
    m.request_duration.observe(w_.index, m.request_duration.index({rq.cluster->index, rq.rejected ? 1u : 0u}), dur);
  m.bytes.inc(w_.index, 0, rq.rx);
  m.bytes.inc(w_.index, 1, rq.tx);
  LogRecord lr;
  lr.client = client_;
  if (ex_ && ex_->req_parser && ex_->req_parser->is_header_done()) {
    lr.method = ex_->req.method_str;
    lr.target = ex_->req.target;
    lr.version = ex_->req.version;
  }
  lr.status = rq.status;
  if (rq.route) lr.route = rq.route->label;
  if (rq.cluster) {
    lr.cluster = rq.cluster->cfg.name;
    if (rq.endpoint != core::kNoEndpoint) lr.endpoint = rq.cluster->endpoints[rq.endpoint]->label;
  }
  lr.criticality = rq.crit;
  lr.tenant = rt_->tenant_names[rq.tenant];
  lr.duration_ms = dur * 1e3;
  lr.upstream_ms = rq.upstream_ms;
  lr.queue_ms = rq.queue_ms;
  lr.rx_bytes = rq.rx;
  lr.tx_bytes = rq.tx;
  lr.reason = rq.reason;
  lr.request_id = rq.request_id;
  lr.attempts = rq.attempts;
  w_.server.access_log().log(lr, w_.rng.uniform());
  rq.rx = rq.tx = 0;
}

// --- proxying ---------------------------------------------------------------

asio::awaitable<bool> Session::proxy(Request& rq, Cluster& c) {
  auto& ex = *ex_;
  auto& info = ex.req;
  auto& rp_sink = ex.resp_body;
  auto& m = *rt_->metrics;
  const std::size_t shard = w_.index;
  const auto& cc = c.cfg;
  const bool can_retry_method =
      idempotent(info.method) || std::any_of(ex.req_head.fields().begin(), ex.req_head.fields().end(),
                                             [](const Field& f) { return core::iequals(f.name, "idempotency-key"); });
  std::size_t avoid = core::kNoEndpoint;
  bool body_streamed = false;  // part of the request body left levee: no replay

  auto fail = [&](Reason r) -> asio::awaitable<bool> {
    rq.permit.reset();
    co_return co_await local_reply(rq, r);
  };

  for (;;) {
    ++rq.attempts;
    const std::size_t epi = rq.fuse.f ? w_.fuse_pick(*rq.fuse.f, c) : w_.pick(c, avoid);
    if (epi == core::kNoEndpoint) co_return co_await fail(Reason::NoEndpoint);
    Endpoint& ep = *c.endpoints[epi];
    rq.endpoint = epi;
    const std::size_t epm = m.endpoint_base[c.index] + epi;
    struct Outstanding {
      Endpoint& e;
      explicit Outstanding(Endpoint& x) : e(x) { e.outstanding.fetch_add(1, std::memory_order_relaxed); }
      ~Outstanding() { e.outstanding.fetch_sub(1, std::memory_order_relaxed); }
    } outstanding(ep);

    TimePoint t = now();
    if (t >= rq.deadline) co_return co_await fail(Reason::Deadline);

    // A pooled connection, or a new one.
    bool reused = false;
    up_ = rq.fuse.f ? w_.fuse_take(*rq.fuse.f, epi, t) : w_.take_idle(c.index, epi, t);
    if (up_) {
      reused = true;
    } else {
      up_ = std::make_unique<UpstreamConn>(w_.ctx, 64 * 1024);
      up_->cluster = c.index;
      up_->endpoint = epi;
      up_->generation = ep.addr_generation.load(std::memory_order_acquire);
      // Counted before connecting: nothing may open a fifth while this one connects.
      if (rq.fuse.f) w_.fuse_note_open(*rq.fuse.f, *up_, epi);
      auto addrs = ep.addresses();
      error_code ec = asio::error::host_not_found;
      if (!addrs.empty()) {
        set_deadline(std::min(rq.deadline, t + cc.connect_timeout), Phase::Connect);
        auto [cec, connected] = co_await asio::async_connect(up_->sock, addrs, nothrow);
        ec = cec;
        (void)connected;
      }
      if (ec) {
        m.upstream_errors.inc(shard, m.upstream_errors.index({epm, 0}));
        c.endpoint_result(epi, now(), false);
        up_.reset();
        const bool deadline_hit = now() >= rq.deadline;
        // Nothing was sent: any request may try another endpoint.
        if (!deadline_hit && rq.attempts < cc.retry.max_attempts && cc.retry.enabled) {
          avoid = epi;
          continue;
        }
        c.complete({rq.crit, rq.tenant, now(), Duration::zero(), rq.inflight_at_start, false, false, true,
                    true, std::nullopt, std::nullopt, epi});
        rq.permit.release();
        co_return co_await fail(deadline_hit ? Reason::Deadline : Reason::UpstreamConnect);
      }
      error_code ig;
      up_->sock.set_option(tcp::no_delay(true), ig);
      up_->sock.non_blocking(true, ig);
      m.upstream_connects.inc(shard, c.index);
    }
    ++up_->uses;

    // --- the request head, rewritten for the next hop ---
    auto& out = ex.out;
    out.clear();
    out.append(info.method_str);
    out.push_back(' ');
    out.append(info.target);
    out.append(" HTTP/1.1\r\n");
    const auto& hn = rt_->cfg->headers;
    for (const auto& f : ex.req_head.fields()) {
      if (is_hop_by_hop(f) || f.id == http::field::expect) continue;
      if (core::iequals(f.name, "x-forwarded-for") || core::iequals(f.name, "via") ||
          core::iequals(f.name, "x-forwarded-proto"))
        continue;
      if (core::iequals(f.name, hn.timeout_ms) || core::iequals(f.name, hn.attempt) ||
          core::iequals(f.name, "grpc-timeout"))
        continue;
      if (info.connection_tokens > 0 && named_in_connection(ex.req_head.fields(), f.name)) continue;
      append_field(out, f.name, f.value);
    }
    if (info.host < 0) append_field(out, "host", ep.label);
    // Via and X-Forwarded-For append to what came in.
    out.append("via: ");
    if (info.via >= 0) {
      out.append(field_value(ex, info.via));
      out.append(", ");
    }
    out.append(info.version == 10 ? "1.0 levee\r\n" : "1.1 levee\r\n");
    out.append("x-forwarded-for: ");
    if (info.xff >= 0) {
      out.append(field_value(ex, info.xff));
      out.append(", ");
    }
    out.append(client_ip_);
    out.append("\r\nx-forwarded-proto: http\r\n");
    if (info.request_id < 0) append_field(out, hn.request_id, rq.request_id);
    // The remaining deadline, never a stale one.
    t = now();
    if (t >= rq.deadline) {
      up_.reset();
      co_return co_await fail(Reason::Deadline);
    }
    if (rq.deadline != TimePoint::max()) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(rq.deadline - t).count();
      out.append(hn.timeout_ms);
      out.append(": ");
      append_uint(out, static_cast<std::uint64_t>(std::max<std::int64_t>(1, left)));
      out.append("\r\n");
      if (info.grpc_timeout >= 0) {
        char buf[16];
        auto n = core::format_grpc_timeout(rq.deadline - t, buf);
        append_field(out, "grpc-timeout", std::string_view(buf, n));
      }
    }
    out.append(hn.attempt);
    out.append(": ");
    append_uint(out, rq.attempts);
    out.append("\r\n");
    auto& p = *ex.req_parser;
    const bool req_chunked = p.chunked();
    const bool req_has_body = req_chunked || p.content_length().value_or(0) > 0;
    if (req_chunked) out.append("transfer-encoding: chunked\r\n");
    else if (p.content_length()) {
      out.append("content-length: ");
      append_uint(out, *p.content_length());
      out.append("\r\n");
    }
    out.append("\r\n");

    // 100-continue: levee answers it itself, once the request is admitted
    // and an upstream connection is ready.
    if (info.expect_continue && !p.is_done() && !rq.sent_continue) {
      rq.sent_continue = true;
      static constexpr std::string_view cont = "HTTP/1.1 100 Continue\r\n\r\n";
      Buffers cont_bufs;
      cont_bufs.push(asio::buffer(cont));
      if (!co_await write_down(cont_bufs, rq)) {
        up_.reset();
        co_return false;
      }
    }

    // Head and whatever body is already parsed, in one write.
    set_deadline(std::min(rq.deadline, now() + cc.response_timeout), Phase::Upstream);
    const TimePoint sent_at = now();
    {
      Buffers bufs;
      char chunk_head[24];
      bufs.push(asio::buffer(out));
      bufs.push_body(asio::buffer(ex.req_body.data()), req_chunked, chunk_head);
      if (req_chunked && p.is_done()) bufs.push_last_chunk();
      auto [ec, n] = co_await write_all(up_->sock, bufs);
      if (ec) {
        up_.reset();
        if (reused && !body_streamed) {
          --rq.attempts;  // a stale pooled connection does not count
          continue;
        }
        m.upstream_errors.inc(shard, m.upstream_errors.index({epm, 1}));
        c.endpoint_result(epi, now(), false);
        co_return co_await fail(timed_out_ ? Reason::UpstreamTimeout : Reason::UpstreamReset);
      }
    }
    // The rest of the body, streamed through the fixed sink.
    if (!p.is_done()) {
      body_streamed = true;
      ex.req_body.clear();
      bool terminated = false;
      for (;;) {
        bool starved = in_.empty();  // nothing parseable left: read more
        if (!in_.empty() && !p.is_done() && !ex.req_body.full()) {
          error_code ec;
          std::size_t n = p.put(in_.cbuf(), ec);
          in_.consume(n);
          if (ec == http::error::need_more) starved = true;  // e.g. half a chunk header
          else if (ec && ec != http::error::need_buffer) {
            up_.reset();
            co_return co_await fail(Reason::BadRequest);
          }
        }
        const bool flush = ex.req_body.size() > 0 && (ex.req_body.full() || p.is_done() || in_.empty());
        const bool terminate = req_chunked && p.is_done() && !terminated;
        if (flush || terminate) {
          char chunk_head[24];
          Buffers bufs;
          bufs.push_body(asio::buffer(ex.req_body.data()), req_chunked, chunk_head);
          if (terminate) {
            bufs.push_last_chunk();
            terminated = true;
          }
          set_deadline(std::min(rq.deadline, now() + l_.cfg.body_timeout), Phase::Upstream);
          auto [ec, n] = co_await write_all(up_->sock, bufs);
          ex.req_body.clear();
          if (ec) {
            up_.reset();
            m.upstream_errors.inc(shard, m.upstream_errors.index({epm, 1}));
            co_return co_await fail(timed_out_ ? Reason::UpstreamTimeout : Reason::UpstreamReset);
          }
          continue;
        }
        if (p.is_done()) break;
        if (!starved) continue;
        set_deadline(std::min(rq.deadline, now() + l_.cfg.body_timeout), Phase::Body);
        auto [ec, n] = co_await down_.async_read_some(in_.prepare(), nothrow);
        if (ec) {
          // The client stopped sending its body: nobody is left to answer
          // (or it was too slow: 408).
          up_.reset();
          if (timed_out_) co_return co_await local_reply(rq, Reason::RequestTimeout, {}, true);
          rq.reason = Reason::ClientGone;
          rq.status = 499;
          finish(rq);
          co_return false;
        }
        in_.commit(n);
        rq.rx += n;
      }
    }
    (void)req_has_body;

    // --- the response head ---
    set_deadline(std::min(rq.deadline, now() + cc.response_timeout), Phase::Upstream);
    bool got_bytes = false;
    bool head_ok = false;
    Reason up_fail = Reason::UpstreamReset;
    for (;;) {
      ex.resp_head.reset();
      ex.resp = ResponseInfo{};
      rp_sink.clear();
      ex.resp_parser.emplace(ex.resp_head, ex.resp, rp_sink, w_.response_watched());
      auto& rp = *ex.resp_parser;
      rp.header_limit(64 * 1024);
      if (rq.head_request) rp.skip(true);
      bool done_head = false;
      bool failed = false;
      while (!done_head) {
        if (!up_->buf.empty()) {
          error_code ec;
          std::size_t n = rp.put(up_->buf.cbuf(), ec);
          up_->buf.consume(n);
          if (rp.is_header_done()) {
            done_head = true;
            break;
          }
          if (ec && ec != http::error::need_more) {
            up_fail = Reason::UpstreamReset;
            m.upstream_errors.inc(shard, m.upstream_errors.index({epm, 3}));
            failed = true;
            break;
          }
        }
        auto buf = up_->buf.prepare();
        auto [ec, n] = co_await up_->sock.async_read_some(buf, nothrow);
        if (ec) {
          up_fail = timed_out_ ? Reason::UpstreamTimeout : Reason::UpstreamReset;
          m.upstream_errors.inc(shard, m.upstream_errors.index({epm, timed_out_ ? 2u : 1u}));
          failed = true;
          break;
        }
        got_bytes = true;
        up_->buf.commit(n);
      }
      if (failed) break;
      // 1xx (other than 101) are informational: skip them, the final answer follows.
      if (ex.resp.status >= 100 && ex.resp.status < 200 && ex.resp.status != 101) continue;
      head_ok = true;
      break;
    }
    if (!head_ok) {
      up_.reset();
      if (reused && !got_bytes && !body_streamed && up_fail == Reason::UpstreamReset) {
        --rq.attempts;  // the pooled connection had been closed by the peer
        continue;
      }
      const bool timeout = up_fail == Reason::UpstreamTimeout;
      const bool last = !(can_retry_method && !body_streamed && cc.retry.enabled &&
                          rq.attempts < cc.retry.max_attempts && !timeout && now() < rq.deadline);
      c.complete({rq.crit, rq.tenant, now(), now() - sent_at, rq.inflight_at_start, false, timeout, true,
                  last, std::nullopt, std::nullopt, epi});
      if (!last && c.try_retry(now(), rq.attempts + 1)) {
        avoid = epi;
        continue;
      }
      if (last) rq.permit.release();  // complete() returned it
      else rq.permit.reset();          // no retry after all: return it now
      co_return co_await fail(timeout && now() >= rq.deadline ? Reason::UpstreamTimeout : up_fail);
    }

    auto& rp = *ex.resp_parser;
    const int status = ex.resp.status;
    const TimePoint head_at = now();
    rq.upstream_ms = core::to_seconds(head_at - sent_at) * 1e3;
    m.upstream_latency.observe(shard, c.index, core::to_seconds(head_at - sent_at));
    m.upstream_requests.inc(shard, m.upstream_requests.index({epm, code_class(status)}));

    // What the backend says about load and cost.
    core::LoadReport report;
    if (ex.resp.load_report >= 0) {
      auto st = core::parse_orca(ex.resp_head.fields()[static_cast<std::size_t>(ex.resp.load_report)].value, report);
      if (st != core::OrcaStatus::Ok) {
        m.load_report_errors.inc(shard, c.index);
        report = {};
      }
    }
    const bool overload_answer = status == 429 || status == 503 || ex.resp.no_retry;

    // A 503 without "don't retry" from an idempotent request may go to
    // another endpoint, within the attempt cap and the retry budget.
    if (status == 503 && !ex.resp.no_retry && can_retry_method && !body_streamed && cc.retry.enabled &&
        rq.attempts < cc.retry.max_attempts && now() < rq.deadline && c.try_retry(now(), rq.attempts + 1)) {
      c.complete({rq.crit, rq.tenant, now(), head_at - sent_at, rq.inflight_at_start, true, true, true, false,
                  report.cost_cpu, report.utilization(), epi});
      up_.reset();
      avoid = epi;
      // Jittered exponential backoff before the next attempt.
      auto base = cc.retry.backoff_base * (1u << std::min<std::uint32_t>(rq.attempts - 1, 10));
      auto wait = std::min<Duration>(cc.retry.backoff_max, base);
      wait = Duration(static_cast<std::int64_t>(static_cast<double>(wait.count()) * (0.5 + w_.rng.uniform())));
      if (now() + wait < rq.deadline) {
        wait_timer_.expires_after(std::chrono::duration_cast<asio::steady_timer::duration>(wait));
        co_await wait_timer_.async_wait(nothrow);
      }
      continue;
    }

    // --- the response to the client ---
    const bool no_body = rq.head_request || status == 204 || status == 304 || (status >= 100 && status < 200);
    bool close_after = !rq.keep_alive || rt_->draining.load(std::memory_order_relaxed) ||
                       rt_->close_connections.load(std::memory_order_relaxed);
    bool client_chunked = false;
    out.clear();
    out.append("HTTP/1.1 ");
    append_uint(out, static_cast<std::uint64_t>(status));
    out.push_back(' ');
    out.append(ex.resp.reason.empty() ? status_reason(status) : ex.resp.reason);
    out.append("\r\n");
    const auto& rfields = ex.resp_head.fields();
    for (const auto& f : rfields) {
      if (f.id == http::field::content_length && no_body) {
        append_field(out, f.name, f.value);  // HEAD and 304 describe the real body
        continue;
      }
      if (is_hop_by_hop(f)) continue;
      if (named_in_connection(rfields, f.name)) continue;
      append_field(out, f.name, f.value);
    }
    if (!no_body) {
      if (auto cl = rp.content_length()) {
        out.append("content-length: ");
        append_uint(out, *cl);
        out.append("\r\n");
      } else if (info.version >= 11) {
        client_chunked = true;
        out.append("transfer-encoding: chunked\r\n");
      } else {
        close_after = true;  // HTTP/1.0: the end of the body is the close
      }
    }
    // levee gave up below because of overload: tell the caller not to retry either.
    if (overload_answer && rq.attempts > 1 && !ex.resp.no_retry) append_field(out, hn.no_retry, "1");
    if (close_after) out.append("connection: close\r\n");
    else if (info.version == 10) out.append("connection: keep-alive\r\n");
    out.append("\r\n");

    rq.status = status;
    // A response that arrived whole (the common case for small ones) frees
    // the backend now: return the permit and the connection before writing
    // to the client, so the next queued request is on its way sooner.
    bool accounted = false;
    auto account = [&](TimePoint at, bool upstream_ok) {
      if (accounted) return;
      accounted = true;
      c.complete({rq.crit, rq.tenant, at, head_at - sent_at, rq.inflight_at_start, true, overload_answer,
                  status >= 500 || !upstream_ok, true, report.cost_cpu, report.utilization(), epi});
      rq.permit.release();
      if (upstream_ok && rp.is_done() && rp.keep_alive() && p.is_done() && up_->buf.empty())
        w_.put_idle(std::move(up_), at);
      else
        up_.reset();
      rq.fuse.reset();  // the connection is back: the next batch request may have it
    };
    if (rp.is_done()) account(head_at, true);
    char chunk_head[24];
    bool terminated = false;
    auto write_piece = [&](bool head) -> asio::awaitable<bool> {
      Buffers bufs;
      if (head) bufs.push(asio::buffer(out));
      bufs.push_body(asio::buffer(rp_sink.data()), client_chunked, chunk_head);
      if (client_chunked && rp.is_done() && !terminated) {
        bufs.push_last_chunk();
        terminated = true;
      }
      if (bufs.empty()) co_return true;
      bool ok = co_await write_down(bufs, rq);
      rp_sink.clear();
      co_return ok;
    };
    bool client_ok = co_await write_piece(true);
    bool upstream_ok = true;
    while (client_ok && !rp.is_done()) {
      bool starved = up_->buf.empty();
      if (!up_->buf.empty()) {
        error_code ec;
        std::size_t n = rp.put(up_->buf.cbuf(), ec);
        up_->buf.consume(n);
        if (ec == http::error::need_more) starved = true;  // e.g. half a chunk header
        else if (ec && ec != http::error::need_buffer) {
          upstream_ok = false;
          break;
        }
        if (rp_sink.size() > 0 && (rp_sink.full() || rp.is_done() || up_->buf.empty() || starved)) {
          client_ok = co_await write_piece(false);
          continue;
        }
        if (rp.is_done()) break;
        if (!starved) continue;
      }
      set_deadline(std::min(rq.deadline, now() + cc.response_timeout), Phase::Response);
      auto [ec, n] = co_await up_->sock.async_read_some(up_->buf.prepare(), nothrow);
      if (ec) {
        if (ec == asio::error::eof && rp.need_eof()) {
          error_code pec;
          rp.put_eof(pec);
          client_ok = co_await write_piece(false);
          break;
        }
        upstream_ok = false;
        break;
      }
      up_->buf.commit(n);
    }
    if (client_ok && rp.is_done() && (rp_sink.size() > 0 || (client_chunked && !terminated)))
      client_ok = co_await write_piece(false);

    const TimePoint end = now();
    const bool complete = upstream_ok && rp.is_done();
    // Streamed responses are accounted at their end; the connection goes
    // back to the pool only if both messages ended cleanly.
    account(end, upstream_ok);
    if (!upstream_ok) {
      m.upstream_errors.inc(shard, m.upstream_errors.index({epm, timed_out_ ? 2u : 1u}));
      rq.reason = timed_out_ ? Reason::UpstreamTimeout : Reason::UpstreamReset;
    }
    finish(rq);
    co_return client_ok && complete && !close_after;
  }
}

}  // namespace levee::proxy

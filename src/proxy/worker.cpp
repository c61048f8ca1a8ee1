#include "proxy/worker.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/ip/v6_only.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "proxy/server.hpp"
#include "proxy/session.hpp"

namespace levee::proxy {

namespace asio = boost::asio;
using boost::system::error_code;

Worker::Worker(Server& s, std::size_t i, std::shared_ptr<Runtime> r)
    : server(s), index(i), rt(std::move(r)), rng(0x5eed0000ull + i * 7919 + static_cast<std::uint64_t>(::getpid())),
      sweep_timer_(ctx) {
  idle_.resize(rt->clusters.size());
  lb_.resize(rt->clusters.size());
  for (std::size_t c = 0; c < rt->clusters.size(); ++c) idle_[c].resize(rt->clusters[c]->endpoints.size());
  const auto& h = rt->cfg->headers;
  watched_ = WatchedNames{h.criticality, "", "", h.timeout_ms, h.attempt, h.request_id};
  resp_watched_ = ResponseWatched{h.load_report, h.no_retry};
}

Worker::~Worker() { join(); }

UpstreamConn::~UpstreamConn() {
  if (fuse) {
    --fuse->eps[endpoint].open;
    fuse->listener->fuse_open.fetch_sub(1, std::memory_order_relaxed);
  }
}

void Worker::open_listeners() {
  for (auto& l : rt->listeners) {
    // A batch listener is served by one worker: its fuse is a small pool,
    // and one worker can hold it exactly, without locks.
    if (l->cfg.mode == config::ListenerConfig::Mode::Batch && !serves_batch()) continue;
    auto a = std::make_unique<tcp::acceptor>(ctx);
    tcp::endpoint ep(asio::ip::make_address(l->cfg.address), l->cfg.port);
    a->open(ep.protocol());
    a->set_option(asio::socket_base::reuse_address(true));
    // Each worker has its own accept queue; the kernel spreads connections.
    using reuse_port = asio::detail::socket_option::boolean<SOL_SOCKET, SO_REUSEPORT>;
    a->set_option(reuse_port(true));
    if (ep.address().is_v6()) a->set_option(asio::ip::v6_only(false));
    a->bind(ep);
    a->listen(4096);
    acceptor_listener_.push_back(l.get());
    acceptors_.push_back(std::move(a));
  }
}

void Worker::start() {
  for (std::size_t i = 0; i < acceptors_.size(); ++i)
    asio::co_spawn(ctx, accept_loop(*acceptors_[i], *acceptor_listener_[i]), asio::detached);
  sweep_idle();
  thread_ = std::thread([this] {
    tid.store(static_cast<int>(::syscall(SYS_gettid)));
    pthread_setname_np(pthread_self(), ("levee-w" + std::to_string(index)).c_str());
    auto guard = asio::make_work_guard(ctx);
    ctx.run();
  });
}

asio::awaitable<void> Worker::accept_loop(tcp::acceptor& a, Listener& l) {
  auto& m = *rt->metrics;
  for (;;) {
    auto [ec, sock] = co_await a.async_accept(asio::as_tuple(asio::use_awaitable));
    if (ec) {
      if (ec == asio::error::operation_aborted || draining_) co_return;
      // EMFILE and friends: back off briefly rather than spin.
      spdlog::warn("accept on {}: {}", l.cfg.name, ec.message());
      asio::steady_timer t(ctx, std::chrono::milliseconds(10));
      co_await t.async_wait(asio::as_tuple(asio::use_awaitable));
      continue;
    }
    const std::uint32_t conns = l.connections.load(std::memory_order_relaxed);
    const std::uint32_t cap = l.cfg.max_connections;
    std::array<std::uint8_t, 16> addr{};
    {
      error_code aec;
      auto ep = sock.remote_endpoint(aec);
      if (!aec) {
        if (ep.address().is_v4()) {
          auto b = ep.address().to_v4().to_bytes();
          addr[10] = addr[11] = 0xff;
          std::copy(b.begin(), b.end(), addr.begin() + 12);
        } else {
          addr = ep.address().to_v6().to_bytes();
        }
      }
    }
    // Connection guards: the cap, the accept rate, the per-source cap.
    std::size_t cause = 4;
    core::Reason reason = core::Reason::ConnectionLimit;
    if (conns >= cap) cause = 0;
    else if (!l.take_accept_token(now())) cause = 2;
    else if (!l.source_enter(addr)) cause = 1;
    if (cause < 4) {
      m.refused.inc(index, m.refused.index({l.index, cause}));
      // Refuse politely while that is cheap (a bounded number at a time,
      // not far beyond the cap); beyond that, close at once.
      const std::uint32_t margin = std::max<std::uint32_t>(16, cap / 10);
      if (l.refusing.load(std::memory_order_relaxed) < 1024 && conns < cap + margin) {
        asio::co_spawn(ctx, refuse(std::move(sock), l, reason), asio::detached);
      } else {
        error_code ig;
        sock.set_option(asio::socket_base::linger(true, 0), ig);
        sock.close(ig);
      }
      continue;
    }
    // Near the cap, idle keep-alive connections make room first.
    if (conns + 1 > cap - cap / 10) close_idle_sessions(l, conns + 1 - (cap - cap / 10));
    l.connections.fetch_add(1, std::memory_order_relaxed);
    m.connections.inc(index, l.index);
    auto s = std::make_shared<Session>(*this, l, std::move(sock));
    asio::co_spawn(ctx, s->run(), [s, &l, addr](std::exception_ptr e) {
      l.connections.fetch_sub(1, std::memory_order_relaxed);
      l.source_leave(addr);
      if (e) {
        try {
          std::rethrow_exception(e);
        } catch (const std::exception& ex) {
          spdlog::error("session: {}", ex.what());
        }
      }
    });
  }
}

asio::awaitable<void> Worker::refuse(tcp::socket s, Listener& l, core::Reason reason) {
  l.refusing.fetch_add(1, std::memory_order_relaxed);
  error_code ec;
  // Read what the client sends first, briefly, so that closing does not
  // reset the connection before it reads the answer.
  asio::steady_timer t(ctx, std::chrono::milliseconds(200));
  t.async_wait([&s](error_code tec) {
    if (!tec) {
      error_code ig;
      s.cancel(ig);
    }
  });
  char buf[2048];
  co_await s.async_read_some(asio::buffer(buf), asio::as_tuple(asio::use_awaitable));
  t.cancel();
  const auto retry = core::retry_after_seconds(std::chrono::seconds(1), rng.uniform());
  std::string resp = "HTTP/1.1 503 Service Unavailable\r\ncontent-type: text/plain\r\nretry-after: " +
                     std::to_string(retry) + "\r\nx-levee-reject: " + std::string(core::to_string(reason)) +
                     "\r\nconnection: close\r\ncontent-length: " +
                     std::to_string(12 + core::to_string(reason).size() + 1) + "\r\n\r\noverloaded: " +
                     std::string(core::to_string(reason)) + "\n";
  co_await asio::async_write(s, asio::buffer(resp), asio::as_tuple(asio::use_awaitable));
  s.shutdown(tcp::socket::shutdown_both, ec);
  s.close(ec);
  l.refusing.fetch_sub(1, std::memory_order_relaxed);
}

void Worker::close_idle_sessions(Listener& l, std::size_t n) {
  for (Session* s = sessions_; s && n > 0; s = s->next) {
    if (&s->listener() == &l && s->idle()) {
      s->close_if_idle();
      --n;
    }
  }
}

Fuse& Worker::fuse(Listener& l, Cluster& c) {
  if (fuses_.empty()) fuses_.resize(rt->listeners.size());
  auto& row = fuses_[l.index];
  if (row.empty()) row.resize(rt->clusters.size());
  auto& f = row[c.index];
  if (!f) {
    f = std::make_unique<Fuse>();
    f->listener = &l;
    f->per_endpoint = l.cfg.fuse.connections_per_endpoint;
    if (l.cfg.mode != config::ListenerConfig::Mode::Batch) {
      // A fuse route on a normal listener: every worker serves it, and
      // sockets cannot cross workers, so the per-endpoint budget is split:
      // worker w gets N/W, the first N%W one more. The total stays N.
      const auto n = l.cfg.fuse.connections_per_endpoint;
      const auto w = static_cast<std::uint32_t>(rt->workers);
      f->per_endpoint = n / w + (index < n % w ? 1u : 0u);
    }
    f->queue_max = l.cfg.fuse.queue;
    f->eps.resize(c.endpoints.size());
  }
  return *f;
}

bool Worker::fuse_try_acquire(Fuse& f, Cluster& c) {
  // Room for per_endpoint requests per available endpoint (at least one
  // endpoint's worth, so a cluster with none answers no_endpoint at once
  // rather than making batch requests wait for nothing).
  std::uint32_t available = 0;
  for (std::size_t i = 0; i < f.eps.size(); ++i)
    available += c.endpoints[i]->effective_weight.load(std::memory_order_relaxed) > 0;
  if (f.per_endpoint == 0) return false;  // this worker's share of a split fuse is empty
  const std::uint32_t capacity = f.per_endpoint * std::max<std::uint32_t>(1, available);
  if (f.in_use < capacity && f.waiters.empty()) {
    ++f.in_use;
    f.listener->fuse_in_use.fetch_add(1, std::memory_order_relaxed);
    return true;
  }
  return false;
}

void Worker::fuse_release(Fuse& f) {
  if (!f.waiters.empty()) {
    // The slot passes straight to the longest waiter.
    FuseWaiter* w = f.waiters.front();
    f.waiters.pop_front();
    f.listener->fuse_waiting.fetch_sub(1, std::memory_order_relaxed);
    w->granted = true;
    w->timer->cancel();
    return;
  }
  --f.in_use;
  f.listener->fuse_in_use.fetch_sub(1, std::memory_order_relaxed);
}

std::size_t Worker::fuse_pick(Fuse& f, Cluster& c) {
  // Prefer an idle connection (reuse), then the endpoint with the fewest
  // open connections that still has room, among available endpoints.
  std::size_t best = core::kNoEndpoint;
  for (std::size_t i = 0; i < f.eps.size(); ++i) {
    if (c.endpoints[i]->effective_weight.load(std::memory_order_relaxed) <= 0) continue;
    if (!f.eps[i].idle.empty()) return i;
    if (f.eps[i].open < f.per_endpoint && (best == core::kNoEndpoint || f.eps[i].open < f.eps[best].open)) best = i;
  }
  return best;
}

std::unique_ptr<UpstreamConn> Worker::fuse_take(Fuse& f, std::size_t e, TimePoint t) {
  auto& list = f.eps[e].idle;
  while (!list.empty()) {
    auto conn = std::move(list.back());
    list.pop_back();
    auto& c = *rt->clusters[conn->cluster];
    if (t - conn->idle_since >= c.cfg.idle_timeout) continue;  // destroyed: the slot frees
    if (conn->generation != c.endpoints[e]->addr_generation.load(std::memory_order_acquire)) continue;
    return conn;
  }
  return nullptr;
}

void Worker::fuse_note_open(Fuse& f, UpstreamConn& conn, std::size_t e) {
  conn.fuse = &f;
  ++f.eps[e].open;
  f.listener->fuse_open.fetch_add(1, std::memory_order_relaxed);
}

void Worker::begin_drain() {
  asio::post(ctx, [this] {
    draining_ = true;
    for (auto& a : acceptors_) {
      error_code ec;
      a->close(ec);
    }
    for (Session* s = sessions_; s; s = s->next) s->close_if_idle();
  });
}

void Worker::stop() { ctx.stop(); }

void Worker::join() {
  if (thread_.joinable()) thread_.join();
}

void Worker::attach(Session* s) {
  s->next = sessions_;
  if (sessions_) sessions_->prev = s;
  sessions_ = s;
  active_sessions.fetch_add(1, std::memory_order_relaxed);
}

void Worker::detach(Session* s) {
  if (s->prev) s->prev->next = s->next;
  else sessions_ = s->next;
  if (s->next) s->next->prev = s->prev;
  active_sessions.fetch_sub(1, std::memory_order_relaxed);
}

std::unique_ptr<Exchange> Worker::take_exchange() {
  if (exchanges_.empty()) {
    std::size_t max_fields = 100;
    for (auto& l : rt->cfg->listeners) max_fields = std::max<std::size_t>(max_fields, l.max_headers);
    return std::make_unique<Exchange>(max_fields);
  }
  auto e = std::move(exchanges_.back());
  exchanges_.pop_back();
  return e;
}

void Worker::put_exchange(std::unique_ptr<Exchange> e) {
  if (!e) return;
  e->reset();
  // Keep a bounded stock: enough for the usual concurrency, not a leak.
  if (exchanges_.size() < 1024) exchanges_.push_back(std::move(e));
}

std::unique_ptr<UpstreamConn> Worker::take_idle(std::size_t c, std::size_t e, TimePoint t) {
  auto& list = idle_[c][e];
  const auto idle_timeout = rt->clusters[c]->cfg.idle_timeout;
  const auto generation = rt->clusters[c]->endpoints[e]->addr_generation.load(std::memory_order_acquire);
  while (!list.empty()) {
    auto conn = std::move(list.back());  // most recently used first
    list.pop_back();
    idle_total_.fetch_sub(1, std::memory_order_relaxed);
    if (t - conn->idle_since >= idle_timeout) continue;
    if (conn->generation != generation) continue;  // DNS moved the endpoint
    // A peer that closed while we were idle shows up as EOF (or data it
    // should not have sent): either way the connection is not reusable.
    // Servers close idle connections after seconds, not milliseconds, so a
    // connection back in the pool for less than a second skips the syscall
    // (the rare miss is retried on a fresh connection by the session).
    if (t - conn->idle_since < std::chrono::seconds(1)) return conn;
    char b;
    ssize_t n = ::recv(conn->sock.native_handle(), &b, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return conn;
  }
  return nullptr;
}

void Worker::put_idle(std::unique_ptr<UpstreamConn> conn, TimePoint t) {
  if (conn->fuse) {
    conn->idle_since = t;
    conn->buf.clear();
    if (!draining_) conn->fuse->eps[conn->endpoint].idle.push_back(std::move(conn));
    return;
  }
  auto& cl = *rt->clusters[conn->cluster];
  auto& list = idle_[conn->cluster][conn->endpoint];
  if (list.size() >= cl.cfg.max_idle || draining_) return;  // closed by destruction
  conn->idle_since = t;
  conn->buf.clear();
  list.push_back(std::move(conn));
  idle_total_.fetch_add(1, std::memory_order_relaxed);
}

void Worker::sweep_idle() {
  sweep_timer_.expires_after(std::chrono::seconds(1));
  sweep_timer_.async_wait([this](error_code ec) {
    if (ec) return;
    const TimePoint t = now();
    for (std::size_t c = 0; c < idle_.size(); ++c) {
      const auto timeout = rt->clusters[c]->cfg.idle_timeout;
      for (auto& list : idle_[c]) {
        // Oldest at the front: drop those idle too long.
        std::size_t keep_from = 0;
        while (keep_from < list.size() && t - list[keep_from]->idle_since >= timeout) ++keep_from;
        if (keep_from > 0) {
          list.erase(list.begin(), list.begin() + static_cast<std::ptrdiff_t>(keep_from));
          idle_total_.fetch_sub(keep_from, std::memory_order_relaxed);
        }
      }
    }
    sweep_idle();
  });
}

std::size_t Worker::pick(Cluster& c, std::size_t avoid) {
  auto& v = lb_[c.index];
  const auto version = c.weights_version.load(std::memory_order_acquire);
  const std::size_t n = c.endpoints.size();
  if (v.version != version || v.loads.size() != n) {
    v.loads.resize(n);
    for (std::size_t i = 0; i < n; ++i)
      v.loads[i].weight = c.endpoints[i]->effective_weight.load(std::memory_order_relaxed);
    v.set.rebuild(v.loads);
    v.version = version;
  }
  if (v.set.empty()) return core::kNoEndpoint;
  auto weight = [&](std::size_t i) { return v.loads[i].weight; };
  auto outstanding = [&](std::size_t i) { return c.endpoints[i]->outstanding.load(std::memory_order_relaxed); };
  std::size_t k = core::pick_p2c_with(v.set, weight, outstanding, rng.uniform(), rng.uniform());
  if (k == avoid && n > 1) {
    // A retry prefers a different endpoint: one more draw.
    std::size_t k2 = core::pick_p2c_with(v.set, weight, outstanding, rng.uniform(), rng.uniform());
    if (k2 != core::kNoEndpoint) k = k2;
  }
  return k;
}

}  // namespace levee::proxy

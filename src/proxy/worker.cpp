#include "proxy/worker.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/ip/v6_only.hpp>
#include <boost/asio/use_awaitable.hpp>
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

void Worker::open_listeners() {
  for (auto& l : rt->listeners) {
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
    if (l.connections.load(std::memory_order_relaxed) >= l.cfg.max_connections) {
      m.refused.inc(index, m.refused.index({l.index, 0}));
      error_code ig;
      sock.close(ig);
      continue;
    }
    l.connections.fetch_add(1, std::memory_order_relaxed);
    m.connections.inc(index, l.index);
    auto s = std::make_shared<Session>(*this, l, std::move(sock));
    asio::co_spawn(ctx, s->run(), [s, &l](std::exception_ptr e) {
      l.connections.fetch_sub(1, std::memory_order_relaxed);
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

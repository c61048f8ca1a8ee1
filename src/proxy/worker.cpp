#include "proxy/worker.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/ip/v6_only.hpp>
#include <boost/asio/post.hpp>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <system_error>

#include "proxy/cluster.hpp"
#include "proxy/exchange.hpp"
#include "proxy/listener.hpp"
#include "proxy/runtime.hpp"

namespace levee::proxy {

namespace {
/// An idle connection keeps its read buffer and its coroutine this long (a
/// keep-alive client between quick requests reuses them); after that it
/// parks without either. Short, so that a burst of requests on many
/// connections that then go quiet does not leave a buffer for each.
constexpr core::Duration kParkAfter = std::chrono::milliseconds(100);
/// Upstream waits longer than this get a watch on their client.
constexpr core::Duration kWatchAfter = std::chrono::milliseconds(10);
constexpr core::Duration kSweepInterval = std::chrono::milliseconds(10);
}  // namespace

Worker::Worker(std::size_t i, std::shared_ptr<Runtime> r, control::AccessLog::Shard& l)
    : ctx_(std::in_place, BOOST_ASIO_CONCURRENCY_HINT_UNSAFE_IO),
      ctx(*ctx_),
      index(i),
      rt(std::move(r)),
      log(l),
      rng(0x5eed0000ull + i * 7919 + static_cast<std::uint64_t>(::getpid())),
      pool(*rt),
      balancer(rt->clusters.size()),
      sweep_timer_(std::in_place, ctx.get_executor()) {
  for (std::size_t k = 0; k < rt->listeners.size(); ++k) idle_.push_back(std::make_unique<IdleLists>());
  for (const auto& lc : rt->cfg->listeners) {
    max_fields_ = std::max<std::size_t>(max_fields_, lc.max_headers);
    read_buffer_max_ = std::max<std::size_t>(read_buffer_max_, lc.max_header_bytes + 16 * 1024);
  }
}

Worker::~Worker() {
  join();
  // Coroutines still suspended (the process exits past its drain timeout)
  // own objects that reference this worker and the runtime: destroy them
  // first, while all of that is alive. What they hand back is freed.
  shutting_down_ = true;
  draining_ = true;
  pool.draining = true;
  sweep_timer_.reset();
  acceptors_.clear();
  pool.close_all();
  for (auto& row : fuses_)
    for (auto& f : row)
      if (f) f->close_idle();
  buffers_.clear();
  ctx_.reset();
}

void Worker::open_listeners() {
  for (auto& l : rt->listeners) {
    // A batch listener is served by one worker: its fuse is a small pool,
    // and one worker can hold it exactly, without locks.
    if (l->batch() && !serves_batch()) continue;
    auto a = std::make_unique<Acceptor>(ctx.get_executor());
    try {
      tcp::endpoint ep(asio::ip::make_address(l->cfg.address), l->cfg.port);
      a->open(ep.protocol());
      a->set_option(asio::socket_base::reuse_address(true));
      // Each worker has its own accept queue; the kernel spreads connections.
      using reuse_port = asio::detail::socket_option::boolean<SOL_SOCKET, SO_REUSEPORT>;
      a->set_option(reuse_port(true));
      if (ep.address().is_v6()) a->set_option(asio::ip::v6_only(false));
      a->bind(ep);
      a->listen(4096);
    } catch (const std::system_error& e) {
      throw std::system_error(e.code(), "listener " + l->cfg.name + " on " + l->cfg.address + ":" +
                                            std::to_string(l->cfg.port));
    }
    acceptor_listener_.push_back(l.get());
    acceptors_.push_back(std::move(a));
  }
}

void Worker::start() {
  for (std::size_t i = 0; i < acceptors_.size(); ++i)
    asio::co_spawn(ctx, accept_loop(*this, *acceptors_[i], *acceptor_listener_[i]), asio::detached);
  last_pool_sweep_ = now();
  arm_sweep();
  thread_ = std::thread([this] {
    tid.store(static_cast<int>(::syscall(SYS_gettid)));
    pthread_setname_np(pthread_self(), ("levee-w" + std::to_string(index)).c_str());
    auto guard = asio::make_work_guard(ctx);
    ctx.run();
  });
}

void Worker::begin_drain() {
  asio::post(ctx, [this] {
    draining_ = true;
    pool.draining = true;
    for (auto& a : acceptors_) {
      error_code ec;
      a->close(ec);
    }
    for (auto& lists : idle_) {
      for (TimedList* list : {&lists->fresh, &lists->hot, &lists->parked}) {
        while (auto* h = list->front()) {
          h->unlink();
          static_cast<IdleConnection*>(h)->expire();
        }
      }
    }
    pool.close_all();
  });
}

void Worker::stop() { ctx.stop(); }

void Worker::join() {
  if (thread_.joinable()) thread_.join();
}

Fuse& Worker::fuse(Listener& l, const Cluster& c) {
  if (fuses_.empty()) fuses_.resize(rt->listeners.size());
  auto& row = fuses_[l.index];
  if (row.empty()) row.resize(rt->clusters.size());
  auto& f = row[c.index];
  if (!f) {
    std::uint32_t per_endpoint = l.cfg.fuse.connections_per_endpoint;
    if (!l.batch()) {
      // A fuse route on a normal listener: every worker serves it, and
      // sockets cannot cross workers, so the per-endpoint budget is split:
      // worker w gets N/W, the first N%W one more. The total stays N.
      const auto n = per_endpoint;
      const auto w = static_cast<std::uint32_t>(rt->workers);
      per_endpoint = n / w + (index < n % w ? 1u : 0u);
    }
    f = std::make_unique<Fuse>(l, c, per_endpoint);
  }
  return *f;
}

std::unique_ptr<ExchangeBuffers> Worker::take_buffers() {
  if (buffers_.empty()) return std::make_unique<ExchangeBuffers>(ctx, max_fields_);
  auto b = std::move(buffers_.back());
  buffers_.pop_back();
  return b;
}

void Worker::put_buffers(std::unique_ptr<ExchangeBuffers> b) {
  if (!b || shutting_down_) return;
  b->reset();
  // Keep a bounded stock: enough for the usual concurrency, not a leak.
  if (buffers_.size() < 1024) buffers_.push_back(std::move(b));
}

std::unique_ptr<IoBuffer> Worker::take_read_buffer() {
  if (read_buffers_.empty()) return std::make_unique<IoBuffer>(4096, read_buffer_max_);
  auto b = std::move(read_buffers_.back());
  read_buffers_.pop_back();
  return b;
}

void Worker::put_read_buffer(std::unique_ptr<IoBuffer> b) {
  if (!b || shutting_down_) return;
  // A buffer that grew for one large head is not kept at that size.
  if (b->capacity() > 16 * 1024 || read_buffers_.size() >= 4096) return;
  b->clear();
  read_buffers_.push_back(std::move(b));
}

void Worker::idle(IdleConnection& c, const Listener& l, core::TimePoint since, bool fresh) {
  auto& lists = *idle_[l.index];
  (fresh ? lists.fresh : lists.hot).push(c, since);
}

void Worker::close_idle(const Listener& l, std::size_t n) {
  auto& lists = *idle_[l.index];
  for (TimedList* list : {&lists.parked, &lists.hot}) {
    while (n > 0 && list->front()) {
      auto* h = list->front();
      h->unlink();
      static_cast<IdleConnection*>(h)->expire();
      --n;
    }
  }
}

void Worker::arm_sweep() {
  sweep_timer_->expires_after(std::chrono::duration_cast<Timer::duration>(kSweepInterval));
  sweep_timer_->async_wait([this](error_code ec) {
    if (!ec) sweep();
  });
}

void Worker::sweep() {
  const core::TimePoint t = now();
  for (std::size_t li = 0; li < idle_.size(); ++li) {
    auto& lists = *idle_[li];
    const core::Duration timeout = rt->listeners[li]->cfg.idle_timeout;
    // Both lists are in the order connections became idle.
    while (auto* h = lists.hot.front()) {
      if (t - h->since() >= timeout) {
        h->unlink();
        static_cast<IdleConnection*>(h)->expire();
      } else if (t - h->since() >= kParkAfter) {
        lists.parked.push(*h, h->since());
        static_cast<IdleConnection*>(h)->park();
      } else {
        break;
      }
    }
    for (TimedList* list : {&lists.parked, &lists.fresh}) {
      while (auto* h = list->front()) {
        if (t - h->since() < timeout) break;
        h->unlink();
        static_cast<IdleConnection*>(h)->expire();
      }
    }
  }
  while (auto* h = upstream_waits.front()) {
    if (t - h->since() < kWatchAfter) break;
    h->unlink();
    static_cast<Exchange*>(h)->start_client_watch();
  }
  if (t - last_pool_sweep_ >= std::chrono::seconds(1)) {
    pool.sweep(t);
    last_pool_sweep_ = t;
  }
  arm_sweep();
}

}  // namespace levee::proxy

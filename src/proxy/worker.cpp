#include "proxy/worker.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/ip/v6_only.hpp>
#include <boost/asio/post.hpp>
#include <spdlog/spdlog.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <system_error>

#include "proxy/allocator.hpp"
#include "proxy/cluster.hpp"
#include "proxy/exchange.hpp"
#include "proxy/listener.hpp"
#include "proxy/runtime.hpp"

namespace levee::proxy {

namespace {
/// An idle connection keeps its coroutine this long (a keep-alive client
/// between quick requests reuses it); after that it parks without one.
/// Short, so that a burst of requests on many connections that then go
/// quiet does not leave a frame for each. A cleartext one holds no read
/// buffer either way; a TLS one gives its buffers back when it parks.
constexpr core::Duration kParkAfter = std::chrono::milliseconds(100);
/// Upstream waits longer than this get a watch on their client.
constexpr core::Duration kWatchAfter = std::chrono::milliseconds(10);
constexpr core::Duration kSweepInterval = std::chrono::milliseconds(10);
/// A read buffer as first made; it grows only for a head that does not fit.
constexpr std::size_t kReadBufferBytes = 4096;
}  // namespace

Worker::Worker(std::size_t i, std::shared_ptr<Runtime> r, control::AccessLog::Shard& l)
    : ctx_(std::in_place, BOOST_ASIO_CONCURRENCY_HINT_UNSAFE_IO),
      ctx(*ctx_),
      index(i),
      rt(std::move(r)),
      log(l),
      rng(0x5eed0000ull + i * 7919 + static_cast<std::uint64_t>(::getpid())),
      pool(*rt),
      balancer(i),
      readiness(ctx.get_executor()),
      sweep_timer_(std::in_place, ctx.get_executor()) {
  applied_generation.store(rt->generation);
  size_buffers();
}

void Worker::size_buffers() {
  std::size_t fields = 100, read_max = 80 * 1024;
  for (const auto& lc : rt->cfg->listeners) {
    fields = std::max<std::size_t>(fields, lc.max_headers);
    read_max = std::max<std::size_t>(read_max, lc.max_header_bytes + 16 * 1024);
  }
  if (fields != max_fields_ || read_max != read_buffer_max_) {
    // Pooled scratch is sized for the old limits: let it go.
    buffers_.clear();
    read_buffers_.clear();
  }
  max_fields_ = fields;
  read_buffer_max_ = read_max;
}

Worker::IdleLists* Worker::lists(std::size_t slot) {
  if (slot >= idle_.size()) idle_.resize(slot + 1);
  if (!idle_[slot]) idle_[slot] = std::make_unique<IdleLists>();
  return idle_[slot].get();
}

void Worker::expire_all(IdleLists& lists) {
  for (TimedList* list : {&lists.fresh, &lists.hot, &lists.parked}) {
    while (auto* h = list->front()) {
      h->unlink();
      static_cast<IdleConnection*>(h)->expire();
    }
  }
}

bool Worker::serves(const Listener& l) const noexcept {
  // A batch listener is served by one worker: its fuse is a small pool,
  // and one worker can hold it exactly, without locks.
  return !l.batch() || serves_batch();
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
  h2pool.retire_all();
  for (auto& row : fuses_)
    for (auto& f : row)
      if (f) f->close_idle();
  for (auto& r : retired_fuses_) r.fuse->close_idle();
  buffers_.clear();
  readiness.shutdown();
  ctx_.reset();
}

int bind_listener(const config::ListenerConfig& c) {
  tcp::endpoint ep;
  try {
    ep = tcp::endpoint(asio::ip::make_address(c.address), c.port);
  } catch (const std::system_error& e) {
    throw std::system_error(e.code(), "listener " + c.name + " on " + c.address + ":" + std::to_string(c.port));
  }
  const int fd = ::socket(ep.address().is_v6() ? AF_INET6 : AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  auto fail = [&](int err) -> int {
    if (fd >= 0) ::close(fd);
    throw std::system_error(err, std::system_category(),
                            "listener " + c.name + " on " + c.address + ":" + std::to_string(c.port));
  };
  if (fd < 0) return fail(errno);
  const int one = 1, zero = 0;
  // Each worker has its own accept queue; the kernel spreads connections.
  if (::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0) return fail(errno);
  if (::setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one) != 0) return fail(errno);
  if (ep.address().is_v6() && ::setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero) != 0) return fail(errno);
  if (::bind(fd, ep.data(), static_cast<socklen_t>(ep.size())) != 0) return fail(errno);
  if (::listen(fd, 4096) != 0) return fail(errno);
  return fd;
}

void Worker::open_listeners() {
  for (auto& l : rt->listeners) {
    if (!serves(*l)) continue;
    const int fd = bind_listener(l->cfg);
    auto a = std::make_shared<Acceptor>(ctx.get_executor());
    const tcp::endpoint ep(asio::ip::make_address(l->cfg.address), l->cfg.port);
    a->assign(ep.protocol(), fd);
    const std::size_t slot = l->slot->id;
    if (slot >= acceptors_.size()) acceptors_.resize(slot + 1);
    acceptors_[slot] = std::move(a);
  }
  slot_listener_.clear();
  for (auto& l : rt->listeners) {
    if (!serves(*l)) continue;
    if (l->slot->id >= slot_listener_.size()) slot_listener_.resize(l->slot->id + 1, nullptr);
    slot_listener_[l->slot->id] = l.get();
  }
}

void Worker::pin(const Runtime* r) noexcept {
  if (r == rt.get()) {
    ++pins_;
    return;
  }
  for (auto& k : kept_) {
    if (k.rt.get() == r) {
      ++k.pins;
      return;
    }
  }
}

void Worker::unpin(const Runtime* r) noexcept {
  if (r == rt.get()) {
    --pins_;
    return;
  }
  for (auto it = kept_.begin(); it != kept_.end(); ++it) {
    if (it->rt.get() != r) continue;
    if (--it->pins == 0) kept_.erase(it);  // may be the Runtime's last reference
    return;
  }
}

void Worker::start_acceptor(std::size_t slot, std::shared_ptr<Acceptor> a) {
  if (slot >= acceptors_.size()) acceptors_.resize(slot + 1);
  acceptors_[slot] = a;
  asio::co_spawn(ctx, accept_loop(*this, std::move(a), slot), asio::detached);
}

void Worker::apply(std::shared_ptr<Runtime> next, std::vector<std::pair<std::size_t, int>> bound) {
  // Runs on this worker's thread: nothing else touches what follows.
  std::shared_ptr<Runtime> old = std::exchange(rt, std::move(next));
  // Requests in progress under the old Runtime keep it (Pin).
  if (pins_ > 0) kept_.push_back({old, std::exchange(pins_, 0u)});
  std::vector<Listener*> served(slot_listener_.size(), nullptr);
  for (auto& l : rt->listeners) {
    if (!serves(*l)) continue;
    if (l->slot->id >= served.size()) served.resize(l->slot->id + 1, nullptr);
    served[l->slot->id] = l.get();
  }
  for (std::size_t s = 0; s < served.size() || s < acceptors_.size(); ++s) {
    const bool keep = s < served.size() && served[s] != nullptr;
    if (!keep && s < acceptors_.size() && acceptors_[s]) {
      // A listener the new configuration no longer has: stop accepting,
      // and close its idle connections (those in flight finish).
      error_code ec;
      acceptors_[s]->close(ec);
      acceptors_[s].reset();
      if (s < idle_.size() && idle_[s]) expire_all(*idle_[s]);
    }
  }
  slot_listener_ = std::move(served);
  for (auto& [slot, fd] : bound) {
    auto a = std::make_shared<Acceptor>(ctx.get_executor());
    const Listener* l = listener_in_slot(slot);
    error_code ec;
    if (l) {
      const tcp::endpoint ep(asio::ip::make_address(l->cfg.address, ec), l->cfg.port);
      if (!ec) a->assign(ep.protocol(), fd, ec);
    }
    if (!l || ec) {
      ::close(fd);
      continue;
    }
    if (draining_) {
      a->close(ec);
      continue;
    }
    start_acceptor(slot, std::move(a));
  }
  // Pooled connections follow their endpoints; fuses of the old Runtime
  // serve its requests still in flight, then go.
  pool.rebind(*rt);
  h2pool.retire_all();  // HTTP/2 connections finish their streams; new ones follow the new clusters
  for (std::size_t li = 0; li < fuses_.size(); ++li)
    for (std::size_t ci = 0; ci < fuses_[li].size(); ++ci)
      if (auto& f = fuses_[li][ci]) {
        f->retire();
        retired_fuses_.push_back({old, old->listeners[li].get(), old->clusters[ci].get(), std::move(f)});
      }
  fuses_.clear();
  size_buffers();
  log.configure(rt->cfg->access_log);
  applied_generation.store(rt->generation, std::memory_order_release);
}

void Worker::start() {
  for (std::size_t i = 0; i < acceptors_.size(); ++i)
    if (acceptors_[i]) asio::co_spawn(ctx, accept_loop(*this, acceptors_[i], i), asio::detached);
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
      if (a) a->close(ec);
    }
    for (auto& lists : idle_)
      if (lists) expire_all(*lists);
    pool.close_all();
    h2pool.retire_all();
  });
}

void Worker::close_idle_connections() {
  asio::post(ctx, [this] {
    for (auto& lists : idle_)
      if (lists) expire_all(*lists);
  });
}

void Worker::stop() { ctx.stop(); }

void Worker::join() {
  if (thread_.joinable()) thread_.join();
}

Fuse& Worker::fuse(Listener& l, const Cluster& c) {
  if (&l.runtime() != rt.get()) {
    // A request of an older Runtime (it began before a reload): its fuse.
    for (auto& r : retired_fuses_)
      if (r.listener == &l && r.cluster == &c) return *r.fuse;
    std::uint32_t per_endpoint = l.cfg.fuse.connections_per_endpoint;
    if (!l.batch()) {
      const auto w = static_cast<std::uint32_t>(l.runtime().workers);
      per_endpoint = per_endpoint / w + (index < per_endpoint % w ? 1u : 0u);
    }
    retired_fuses_.push_back({l.runtime().shared_from_this(), &l, &c, std::make_unique<Fuse>(l, c, per_endpoint)});
    retired_fuses_.back().fuse->retire();
    return *retired_fuses_.back().fuse;
  }
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
  if (auto b = buffers_.take()) return b;
  return std::make_unique<ExchangeBuffers>(ctx, max_fields_);
}

void Worker::put_buffers(std::unique_ptr<ExchangeBuffers> b) {
  if (!b || shutting_down_) return;
  b->reset();
  buffers_.put(std::move(b));
}

std::unique_ptr<IoBuffer> Worker::take_read_buffer() {
  if (auto b = read_buffers_.take()) return b;
  return std::make_unique<IoBuffer>(kReadBufferBytes, read_buffer_max_);
}

void Worker::put_read_buffer(std::unique_ptr<IoBuffer> b) {
  if (!b || shutting_down_) return;
  // A buffer that grew for one large head is not kept at that size.
  if (b->capacity() > 16 * 1024) return;
  b->clear();
  read_buffers_.put(std::move(b));
}

void Worker::trim_stocks() {
  // What a burst left in the stocks goes back to the allocator, and on to
  // the system when that is a megabyte or more (as much as was freed: the
  // allocator's pages are the whole process's, and other workers are busy
  // with theirs).
  const std::size_t freed = read_buffers_.trim() * kReadBufferBytes + buffers_.trim() * kExchangeBuffersBytes;
  if (freed >= 1024 * 1024) release_free_memory(freed);
}

void Worker::idle(IdleConnection& c, std::size_t slot, core::TimePoint since, bool fresh) {
  auto& lists = *this->lists(slot);
  (fresh ? lists.fresh : lists.hot).push(c, since);
}

void Worker::close_idle(std::size_t slot, std::size_t n) {
  auto& lists = *this->lists(slot);
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
  for (std::size_t slot = 0; slot < idle_.size(); ++slot) {
    if (!idle_[slot]) continue;
    auto& lists = *idle_[slot];
    const Listener* l = listener_in_slot(slot);
    if (!l) {
      expire_all(lists);  // a listener a reload removed
      continue;
    }
    const core::Duration timeout = l->cfg.idle_timeout;
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
    h2pool.sweep(t);
    last_pool_sweep_ = t;
    std::erase_if(retired_fuses_, [](const RetiredFuse& r) { return r.fuse->unused(); });
    trim_stocks();
  }
  arm_sweep();
}

}  // namespace levee::proxy

#include "proxy/fuse.hpp"

#include <algorithm>

#include "proxy/admission_wait.hpp"
#include "proxy/cluster.hpp"
#include "proxy/listener.hpp"
#include "proxy/upstream.hpp"

namespace levee::proxy {

Fuse::Fuse(Listener& l, const Cluster& c, std::uint32_t per_ep)
    : listener(l), per_endpoint(per_ep), queue_max(l.cfg.fuse.queue), eps_(c.endpoints.size()) {}

Fuse::~Fuse() {
  // Idle connections go first; their destructors count themselves out.
  for (auto& e : eps_) e.idle.clear();
}

bool Fuse::try_acquire(const Cluster& c) {
  // Room for per_endpoint requests per available endpoint (at least one
  // endpoint's worth, so a cluster with none answers no_endpoint at once
  // rather than making batch requests wait for nothing).
  if (per_endpoint == 0) return false;  // this worker's share of a split fuse is empty
  std::uint32_t available = 0;
  for (const auto& ep : c.endpoints) available += ep->effective_weight.load(std::memory_order_relaxed) > 0;
  const std::uint32_t capacity = per_endpoint * std::max<std::uint32_t>(1, available);
  if (in_use_ < capacity && waiters_.empty()) {
    ++in_use_;
    listener.fuse_in_use.fetch_add(1, std::memory_order_relaxed);
    return true;
  }
  return false;
}

void Fuse::release() {
  if (!waiters_.empty()) {
    // The slot passes straight to the longest waiter.
    AdmissionWait* w = waiters_.front();
    waiters_.pop_front();
    listener.fuse_waiting.fetch_sub(1, std::memory_order_relaxed);
    w->wake();
    return;
  }
  --in_use_;
  listener.fuse_in_use.fetch_sub(1, std::memory_order_relaxed);
}

bool Fuse::enqueue(AdmissionWait& w) {
  if (waiters_.size() >= queue_max || per_endpoint == 0) return false;
  waiters_.push_back(&w);
  listener.fuse_waiting.fetch_add(1, std::memory_order_relaxed);
  return true;
}

void Fuse::leave(AdmissionWait& w) {
  auto it = std::find(waiters_.begin(), waiters_.end(), &w);
  if (it == waiters_.end()) return;
  waiters_.erase(it);
  listener.fuse_waiting.fetch_sub(1, std::memory_order_relaxed);
}

std::size_t Fuse::pick(const Cluster& c) const {
  // Prefer an idle connection (reuse), then the endpoint with the fewest
  // open connections that still has room, among available endpoints.
  std::size_t best = core::kNoEndpoint;
  for (std::size_t i = 0; i < eps_.size(); ++i) {
    if (c.endpoints[i]->effective_weight.load(std::memory_order_relaxed) <= 0) continue;
    if (!eps_[i].idle.empty()) return i;
    if (eps_[i].open < per_endpoint && (best == core::kNoEndpoint || eps_[i].open < eps_[best].open)) best = i;
  }
  return best;
}

std::unique_ptr<UpstreamConn> Fuse::take(std::size_t e, core::TimePoint t, const Cluster& c, bool retry_free) {
  auto& list = eps_[e].idle;
  const auto generation = c.endpoints[e]->addr_generation.load(std::memory_order_acquire);
  while (!list.empty()) {
    auto conn = std::move(list.back());
    list.pop_back();
    if (t - conn->idle_since >= c.cfg.idle_timeout) continue;  // destroyed: the slot frees
    if (conn->generation != generation) continue;
    if (!conn->reusable(retry_free)) continue;
    return conn;
  }
  return nullptr;
}

void Fuse::put(std::unique_ptr<UpstreamConn> conn, core::TimePoint t) {
  if (retired_) return;  // closed by destruction
  conn->idle_since = t;
  conn->buf.clear();
  eps_[conn->endpoint].idle.push_back(std::move(conn));
}

void Fuse::note_open(UpstreamConn& conn) {
  conn.fuse = this;
  ++eps_[conn.endpoint].open;
  listener.fuse_open.fetch_add(1, std::memory_order_relaxed);
}

void Fuse::note_closed(const UpstreamConn& conn) noexcept {
  --eps_[conn.endpoint].open;
  listener.fuse_open.fetch_sub(1, std::memory_order_relaxed);
}

bool Fuse::unused() const noexcept {
  if (in_use_ > 0 || !waiters_.empty()) return false;
  return std::all_of(eps_.begin(), eps_.end(), [](const PerEndpoint& e) { return e.open == 0; });
}

void Fuse::close_idle() {
  for (auto& e : eps_) e.idle.clear();
}

}  // namespace levee::proxy

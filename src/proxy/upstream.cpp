#include "proxy/upstream.hpp"

#include <sys/socket.h>

#include <cerrno>

#include "proxy/cluster.hpp"
#include "proxy/fuse.hpp"
#include "proxy/runtime.hpp"

namespace levee::proxy {

UpstreamConn::UpstreamConn(Executor ex, const Cluster& c, std::size_t ep, std::uint64_t gen)
    : stream(ex), buf(8 * 1024, 80 * 1024), owner(&c), cluster(c.index), endpoint(ep), generation(gen) {}

UpstreamConn::~UpstreamConn() {
  if (fuse) fuse->note_closed(*this);
}

UpstreamPool::UpstreamPool(const Runtime& rt) : rt_(&rt) {
  idle_.resize(rt.clusters.size());
  for (std::size_t c = 0; c < rt.clusters.size(); ++c) {
    idle_[c].resize(rt.clusters[c]->endpoints.size());
    owner_.push_back(rt.clusters[c].get());
  }
}

void UpstreamPool::rebind(const Runtime& next) {
  auto old = std::move(idle_);
  auto old_owner = std::move(owner_);
  rt_ = &next;
  idle_.clear();
  idle_.resize(next.clusters.size());
  owner_.clear();
  moved_.clear();
  idle_total_ = 0;
  for (std::size_t c = 0; c < next.clusters.size(); ++c) {
    idle_[c].resize(next.clusters[c]->endpoints.size());
    owner_.push_back(next.clusters[c].get());
  }
  for (std::size_t oc = 0; oc < old_owner.size(); ++oc) {
    const Cluster& was = *old_owner[oc];
    const Cluster* now_c = next.cluster(was.cfg.name);
    if (!now_c) continue;  // a cluster removed: its connections close
    Moved m;
    m.cluster = now_c->index;
    for (const auto& ep : was.endpoints) m.endpoint.push_back(now_c->find_endpoint(ep->label));
    moved_.emplace(&was, std::move(m));
  }
  for (auto& per_cluster : old)
    for (auto& list : per_cluster)
      for (auto& conn : list)
        if (adopt(*conn)) {
          idle_[conn->cluster][conn->endpoint].push_back(std::move(conn));
          ++idle_total_;
        }
}

bool UpstreamPool::adopt(UpstreamConn& c) const {
  if (c.cluster < owner_.size() && owner_[c.cluster] == c.owner) return true;
  auto it = moved_.find(c.owner);
  if (it == moved_.end() || c.endpoint >= it->second.endpoint.size()) return false;
  const std::size_t e = it->second.endpoint[c.endpoint];
  if (e == core::kNoEndpoint) return false;
  c.owner = owner_[it->second.cluster];
  c.cluster = it->second.cluster;
  c.endpoint = e;
  c.generation = c.owner->endpoints[e]->addr_generation.load(std::memory_order_relaxed);
  return true;
}

std::unique_ptr<UpstreamConn> UpstreamPool::take(const Cluster& cl, std::size_t e, core::TimePoint t,
                                                bool retry_free) {
  if (cl.index >= owner_.size() || owner_[cl.index] != &cl) return nullptr;  // a request of an older Runtime
  auto& list = idle_[cl.index][e];
  const auto generation = cl.endpoints[e]->addr_generation.load(std::memory_order_acquire);
  while (!list.empty()) {
    auto conn = std::move(list.back());  // most recently used first
    list.pop_back();
    --idle_total_;
    if (t - conn->idle_since >= cl.cfg.idle_timeout) continue;
    if (conn->generation != generation) continue;
    if (conn->reusable(retry_free)) return conn;
  }
  return nullptr;
}

void UpstreamPool::put(std::unique_ptr<UpstreamConn> conn, core::TimePoint t) {
  if (draining || !adopt(*conn)) return;  // closed by destruction
  auto& list = idle_[conn->cluster][conn->endpoint];
  if (list.size() >= rt_->clusters[conn->cluster]->cfg.max_idle) return;
  conn->idle_since = t;
  conn->buf.clear();
  list.push_back(std::move(conn));
  ++idle_total_;
}

void UpstreamPool::sweep(core::TimePoint t) {
  for (std::size_t c = 0; c < idle_.size(); ++c) {
    const auto timeout = rt_->clusters[c]->cfg.idle_timeout;
    for (auto& list : idle_[c]) {
      // Oldest at the front: drop those idle too long.
      std::size_t keep_from = 0;
      while (keep_from < list.size() && t - list[keep_from]->idle_since >= timeout) ++keep_from;
      if (keep_from > 0) {
        list.erase(list.begin(), list.begin() + static_cast<std::ptrdiff_t>(keep_from));
        idle_total_ -= keep_from;
      }
    }
  }
}

void UpstreamPool::close_all() {
  for (auto& c : idle_)
    for (auto& list : c) list.clear();
  idle_total_ = 0;
}

std::size_t Balancer::pick(Cluster& c, std::size_t avoid, Rng& rng) {
  auto& v = c.views[worker_ < c.views.size() ? worker_ : 0];
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
    const std::size_t k2 = core::pick_p2c_with(v.set, weight, outstanding, rng.uniform(), rng.uniform());
    if (k2 != core::kNoEndpoint) k = k2;
  }
  return k;
}

}  // namespace levee::proxy

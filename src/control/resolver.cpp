#include "control/resolver.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ip/udp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <random>
#include <set>

#include "control/dns.hpp"

namespace levee::control {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using udp = asio::ip::udp;
constexpr auto nothrow = asio::as_tuple(asio::use_awaitable);

struct Resolver::Watch {
  Watch(asio::io_context& ctx, Key k, std::uint64_t gen) : key(std::move(k)), generation(gen), timer(ctx) {}
  const Key key;
  const std::uint64_t generation;
  // Written on the lookups' thread only (posted there).
  core::Duration interval{};
  config::ResolverConfig cfg;
  bool stopped = false;
  asio::steady_timer timer;
  std::uint16_t next_id = 0;
};

Resolver::Resolver(asio::io_context& admin, std::function<void()> on_change)
    : admin_(admin), on_change_(std::move(on_change)) {
  work_.emplace(ctx_.get_executor());
}

Resolver::~Resolver() { stop(); }

void Resolver::start() {
  if (thread_.joinable()) return;
  thread_ = std::thread([this] {
    pthread_setname_np(pthread_self(), "levee-dns");
    ctx_.run();
  });
}

void Resolver::stop() {
  work_.reset();
  ctx_.stop();
  if (thread_.joinable()) thread_.join();
}

void Resolver::watch(const config::Config& c) {
  // Every hostname (not a literal address) with the shortest interval any
  // cluster asks of it.
  std::map<Key, core::Duration> want;
  for (const auto& cl : c.clusters) {
    for (const auto& e : cl.endpoints) {
      boost::system::error_code ec;
      asio::ip::make_address(e.host, ec);
      if (!ec) continue;
      auto [it, fresh] = want.emplace(Key{e.host, e.port}, cl.resolve_interval);
      if (!fresh) it->second = std::min(it->second, cl.resolve_interval);
    }
  }
  for (auto it = watches_.begin(); it != watches_.end();) {
    if (want.count(it->first)) {
      ++it;
      continue;
    }
    asio::post(ctx_, [w = it->second] {
      w->stopped = true;
      w->timer.cancel();
    });
    found_.erase(it->first);
    stats_.erase(it->first);
    warned_.erase(it->first);
    it = watches_.erase(it);
  }
  for (const auto& [key, interval] : want) {
    auto& w = watches_[key];
    const bool fresh = !w;
    if (fresh) w = std::make_shared<Watch>(ctx_, key, ++generation_);
    asio::post(ctx_, [this, w, interval, cfg = c.resolver, fresh] {
      w->interval = interval;
      w->cfg = cfg;
      if (fresh) asio::co_spawn(ctx_, loop(w), asio::detached);
    });
    stats_[key];
  }
}

asio::awaitable<void> Resolver::loop(std::shared_ptr<Watch> w) {
  std::minstd_rand rng(static_cast<unsigned>(std::hash<std::string>{}(w->key.first) ^ w->generation));
  w->next_id = static_cast<std::uint16_t>(rng());
  while (!w->stopped) {
    // Not a conditional expression with a co_await in each arm: GCC 12
    // destroys the result twice.
    Result r;
    if (w->cfg.servers.empty()) r = co_await lookup_system(*w);
    else r = co_await lookup_dns(*w);
    if (w->stopped) co_return;
    // The TTL decides when to look again, within [min_ttl, interval]; the
    // system resolver gives none: every interval. A failure is retried
    // sooner (a second or min_ttl), keeping the last good set meanwhile.
    core::Duration next = w->interval;
    if (!r.ok) next = std::min(w->interval, std::max<core::Duration>(w->cfg.min_ttl, std::chrono::seconds(1)));
    else if (r.ttl) next = std::clamp<core::Duration>(std::chrono::seconds(*r.ttl), w->cfg.min_ttl, w->interval);
    asio::post(admin_, [this, key = w->key, gen = w->generation, r = std::move(r)]() mutable {
      report(key, gen, std::move(r));
    });
    w->timer.expires_after(std::chrono::duration_cast<asio::steady_timer::duration>(next));
    co_await w->timer.async_wait(nothrow);
  }
}

asio::awaitable<Resolver::Result> Resolver::lookup_system(const Watch& w) {
  tcp::resolver resolver(ctx_);
  auto [ec, results] = co_await resolver.async_resolve(w.key.first, std::to_string(w.key.second), nothrow);
  Result r;
  if (ec) {
    r.error = ec.message();
    co_return r;
  }
  std::set<std::string> seen;
  for (const auto& e : results) seen.insert(e.endpoint().address().to_string());
  r.addresses.assign(seen.begin(), seen.end());
  r.ok = !r.addresses.empty();
  if (!r.ok) r.error = "no addresses";
  co_return r;
}

asio::awaitable<Resolver::Result> Resolver::lookup_dns(Watch& w) {
  Result r;
  r.error = "no answer";
  for (const auto& server : w.cfg.servers) {
    boost::system::error_code aec;
    const auto addr = asio::ip::make_address(server.host, aec);
    if (aec) {
      r.error = "resolver.servers: '" + server.host + "' is not an address";
      continue;
    }
    const udp::endpoint to(addr, server.port);
    for (std::uint32_t attempt = 0; attempt < w.cfg.attempts; ++attempt) {
      bool answered = false;
      std::optional<std::uint32_t> ttl;
      std::vector<std::string> found;
      int rcode = 0;
      for (std::uint16_t type : {dns::kA, dns::kAAAA}) {
        const std::uint16_t id = w.next_id++;
        const auto query = dns::build_query(id, w.key.first, type);
        if (query.empty()) {
          r.error = "not a valid DNS name";
          co_return r;
        }
        udp::socket sock(ctx_);
        boost::system::error_code ec;
        sock.open(to.protocol(), ec);
        if (ec) break;
        asio::steady_timer timeout(ctx_);
        timeout.expires_after(std::chrono::duration_cast<asio::steady_timer::duration>(w.cfg.timeout));
        timeout.async_wait([&sock](boost::system::error_code tec) {
          if (!tec) sock.cancel();
        });
        auto [sec, sn] = co_await sock.async_send_to(asio::buffer(query), to, nothrow);
        if (sec) {
          timeout.cancel();
          break;
        }
        std::vector<std::uint8_t> buf(4096);
        // Replies to other ids (late answers to an earlier attempt) are skipped.
        for (;;) {
          udp::endpoint from;
          auto [rec, n] = co_await sock.async_receive_from(asio::buffer(buf), from, nothrow);
          if (rec) break;
          if (from != to) continue;
          auto a = dns::parse_response({buf.data(), n}, id, type);
          if (!a) continue;
          answered = true;
          rcode = a->rcode;
          if (a->rcode == 0 && !a->addresses.empty()) {
            found.insert(found.end(), a->addresses.begin(), a->addresses.end());
            ttl = ttl ? std::min(*ttl, a->ttl) : a->ttl;
          }
          break;
        }
        timeout.cancel();
      }
      if (!found.empty()) {
        std::sort(found.begin(), found.end());
        found.erase(std::unique(found.begin(), found.end()), found.end());
        r.ok = true;
        r.addresses = std::move(found);
        r.ttl = ttl;
        co_return r;
      }
      if (answered) {
        // An answer without addresses (NXDOMAIN, an empty set): asking
        // again will not change it; the last good set stays.
        r.error = rcode == 3 ? "no such name (NXDOMAIN)" : rcode ? "server failure (rcode " + std::to_string(rcode) + ")" : "no addresses";
        co_return r;
      }
      r.error = "timed out asking " + server.host + ":" + std::to_string(server.port);
    }
  }
  co_return r;
}

void Resolver::report(const Key& k, std::uint64_t generation, Result r) {
  auto w = watches_.find(k);
  if (w == watches_.end() || w->second->generation != generation) return;  // no longer watched
  auto& st = stats_[k];
  ++st.lookups;
  const std::string name = k.first + ":" + std::to_string(k.second);
  if (!r.ok) {
    ++st.failures;
    if (!warned_[k])
      spdlog::warn("resolver: cannot resolve {}: {}; keeping its {} address(es)", name, r.error,
                   found_.count(k) ? found_[k].size() : 0);
    warned_[k] = true;
    return;
  }
  if (warned_[k]) spdlog::info("resolver: {} resolves again", name);
  warned_[k] = false;
  auto it = found_.find(k);
  if (it != found_.end() && it->second == r.addresses) return;
  ++st.changes;
  st.addresses = r.addresses.size();
  std::string list;
  for (const auto& a : r.addresses) list += (list.empty() ? "" : ", ") + a;
  spdlog::info("resolver: {} resolves to {} address(es): {}", name, r.addresses.size(), list);
  found_[k] = std::move(r.addresses);
  if (on_change_) on_change_();
}

}  // namespace levee::control

#include "control/resolver.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <spdlog/spdlog.h>

#include "proxy/runtime.hpp"

namespace levee::control {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
constexpr auto nothrow = asio::as_tuple(asio::use_awaitable);

Resolver::Resolver(asio::io_context& ctx, proxy::Runtime& rt) : ctx_(ctx), rt_(rt) {}

void Resolver::start() {
  for (auto& c : rt_.clusters) {
    for (auto& ep : c->endpoints) {
      boost::system::error_code ec;
      const auto addr = asio::ip::make_address(ep->host, ec);
      if (!ec) {
        ep->set_addresses({tcp::endpoint(addr, ep->port)});
        continue;
      }
      asio::co_spawn(ctx_, loop(*c, *ep), asio::detached);
    }
  }
}

asio::awaitable<void> Resolver::loop(proxy::Cluster& c, proxy::Endpoint& ep) {
  tcp::resolver resolver(ctx_);
  asio::steady_timer sleep(ctx_);
  bool warned = false;
  for (;;) {
    auto [ec, results] = co_await resolver.async_resolve(ep.host, std::to_string(ep.port), nothrow);
    if (ec) {
      if (!warned) spdlog::warn("cluster {}: cannot resolve {}: {}", c.cfg.name, ep.label, ec.message());
      warned = true;
    } else {
      warned = false;
      std::vector<tcp::endpoint> addrs;
      for (const auto& r : results) addrs.push_back(r.endpoint());
      if (ep.set_addresses(std::move(addrs))) {
        spdlog::info("cluster {}: {} resolves to a new address set: slow start", c.cfg.name, ep.label);
        c.endpoint_moved(ep.index, proxy::now());
      }
    }
    if (rt_.draining.load()) co_return;
    sleep.expires_after(std::chrono::duration_cast<asio::steady_timer::duration>(c.cfg.resolve_interval));
    auto [sec] = co_await sleep.async_wait(nothrow);
    if (sec) co_return;
  }
}

}  // namespace levee::control

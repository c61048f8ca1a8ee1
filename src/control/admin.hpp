// The admin listener: /metrics, /healthz, /ready, /admin/clusters. Read-only
// endpoints answer GET and HEAD (anything else is a 405 naming them); every
// connection has a header timeout and an idle timeout like the proxy's,
// requests are bounded in size, and connections are capped, so the admin
// port cannot be used to pin descriptors. Answers go through the same
// writer as every other local reply.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>

#include <atomic>
#include <functional>
#include <memory>
#include <string>

#include "config/config.hpp"

namespace levee::control {

struct AdminPages {
  std::function<std::string()> metrics;
  /// (ready, text)
  std::function<std::pair<bool, std::string>()> ready;
  std::function<std::string()> clusters;
};

class AdminServer {
 public:
  AdminServer(boost::asio::io_context& ctx, const config::AdminConfig& cfg, AdminPages pages);
  /// Binds; throws std::system_error naming the address on failure.
  void bind();
  void start();
  /// Stops accepting (drain, shutdown).
  void close();

 private:
  boost::asio::awaitable<void> accept();
  boost::asio::awaitable<void> session(boost::asio::ip::tcp::socket s);

  boost::asio::io_context& ctx_;
  const config::AdminConfig cfg_;
  AdminPages pages_;
  std::unique_ptr<boost::asio::ip::tcp::acceptor> acceptor_;
  std::shared_ptr<std::atomic<std::size_t>> connections_ = std::make_shared<std::atomic<std::size_t>>(0);
};

}  // namespace levee::control

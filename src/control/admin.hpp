// The admin listener: HTTP/1.1 on its own thread (the admin thread). It
// parses requests and hands each to one handler (Server::admin_request,
// src/control/admin_actions.cpp), which answers with a value. Every
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
#include <mutex>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "core/net.hpp"

namespace levee::control {

struct AdminRequest {
  std::string method;  ///< "GET", "POST", ...
  std::string path;    ///< without the query
  std::vector<std::pair<std::string, std::string>> query;  ///< decoded
  std::string authorization;
  std::string host;    ///< the Host header, as sent
  std::string origin;  ///< the Origin header, as sent (browsers send it)
  bool has_origin = false;
  std::string body;
  boost::asio::ip::address peer;
  bool head = false;

  /// The query parameter `name`, or empty.
  std::string param(std::string_view name) const;
  bool has(std::string_view name) const;
};

struct AdminReply {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
  std::string extra;  ///< extra header lines, each ending in CRLF
};

using AdminHandler = std::function<boost::asio::awaitable<AdminReply>(const AdminRequest&)>;

class AdminServer {
 public:
  AdminServer(boost::asio::io_context& ctx, const config::AdminConfig& cfg, AdminHandler handler);
  /// Binds; throws std::system_error naming the address on failure.
  void bind();
  void start();
  /// Stops accepting (drain, shutdown).
  void close();

 private:
  boost::asio::awaitable<void> accept();
  boost::asio::awaitable<void> session(boost::asio::ip::tcp::socket s, core::Address from);

  boost::asio::io_context& ctx_;
  const config::AdminConfig cfg_;
  AdminHandler handler_;
  std::unique_ptr<boost::asio::ip::tcp::acceptor> acceptor_;
  /// Connections at once, in all and per client address. Shared with the
  /// sessions, which may outlive the server (they run detached).
  struct Connections {
    std::atomic<std::size_t> total{0};
    std::mutex mu;
    core::SourceCounts per_source;
  };
  std::shared_ptr<Connections> connections_ = std::make_shared<Connections>();
};

}  // namespace levee::control

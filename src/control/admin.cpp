#include "control/admin.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http.hpp>

#include <system_error>

#include "http/local_reply.hpp"

namespace levee::control {

namespace asio = boost::asio;
namespace beast = boost::beast;
using tcp = asio::ip::tcp;
constexpr auto nothrow = asio::as_tuple(asio::use_awaitable);

AdminServer::AdminServer(asio::io_context& ctx, const config::AdminConfig& cfg, AdminPages pages)
    : ctx_(ctx), cfg_(cfg), pages_(std::move(pages)) {}

void AdminServer::bind() {
  const tcp::endpoint ep(asio::ip::make_address(cfg_.address), cfg_.port);
  acceptor_ = std::make_unique<tcp::acceptor>(ctx_);
  try {
    acceptor_->open(ep.protocol());
    acceptor_->set_option(asio::socket_base::reuse_address(true));
    acceptor_->bind(ep);
    acceptor_->listen(128);
  } catch (const std::system_error& e) {
    throw std::system_error(e.code(), "admin listener on " + cfg_.address + ":" + std::to_string(cfg_.port));
  }
}

void AdminServer::start() { asio::co_spawn(ctx_, accept(), asio::detached); }

void AdminServer::close() {
  if (!acceptor_) return;
  boost::system::error_code ec;
  acceptor_->close(ec);
}

asio::awaitable<void> AdminServer::accept() {
  for (;;) {
    auto [ec, sock] = co_await acceptor_->async_accept(nothrow);
    if (ec) {
      if (ec == asio::error::operation_aborted || !acceptor_->is_open()) co_return;
      continue;
    }
    if (connections_->load() >= cfg_.max_connections) {
      boost::system::error_code ig;
      sock.close(ig);
      continue;
    }
    asio::co_spawn(ctx_, session(std::move(sock)), asio::detached);
  }
}

asio::awaitable<void> AdminServer::session(tcp::socket sock) {
  namespace bh = beast::http;
  struct Count {
    std::shared_ptr<std::atomic<std::size_t>> n;
    explicit Count(std::shared_ptr<std::atomic<std::size_t>> c) : n(std::move(c)) { ++*n; }
    ~Count() { --*n; }
  } count(connections_);
  beast::tcp_stream stream(std::move(sock));
  beast::flat_buffer buf;
  for (bool first = true;; first = false) {
    bh::request_parser<bh::string_body> parser;
    parser.header_limit(16 * 1024);
    parser.body_limit(64 * 1024);
    // The first request must arrive within the header timeout; a kept-alive
    // connection may idle for the idle timeout before its next one.
    stream.expires_after(std::chrono::duration_cast<std::chrono::steady_clock::duration>(
        first ? cfg_.header_timeout : cfg_.idle_timeout));
    auto [ec, n] = co_await bh::async_read(stream, buf, parser, nothrow);
    if (ec) co_return;
    const auto& req = parser.get();
    http::LocalReply r;
    r.close = !req.keep_alive();
    r.keep_alive_10 = req.keep_alive() && req.version() == 10;
    std::string_view target = req.target();
    if (auto q = target.find('?'); q != std::string_view::npos) target = target.substr(0, q);
    const bool known = target == "/metrics" || target == "/healthz" || target == "/ready" || target == "/admin/clusters";
    const bool read = req.method() == bh::verb::get || req.method() == bh::verb::head;
    r.head = req.method() == bh::verb::head;
    std::string body;
    if (!known) {
      r.status = 404;
      body = "not found: try /metrics, /healthz, /ready, /admin/clusters\n";
    } else if (!read) {
      r.status = 405;
      r.extra = "allow: GET, HEAD\r\n";
      body = "method not allowed: this endpoint answers GET and HEAD\n";
    } else if (target == "/metrics") {
      r.content_type = "text/plain; version=0.0.4; charset=utf-8";
      body = pages_.metrics();
    } else if (target == "/healthz") {
      body = "ok\n";
    } else if (target == "/ready") {
      auto [ok, text] = pages_.ready();
      r.status = ok ? 200 : 503;
      body = std::move(text);
    } else {
      r.content_type = "application/json";
      body = pages_.clusters();
    }
    r.body = body;
    std::string out;
    http::write_http1(out, r);
    stream.expires_after(std::chrono::duration_cast<std::chrono::steady_clock::duration>(cfg_.header_timeout));
    auto [wec, wn] = co_await asio::async_write(stream, asio::buffer(out), nothrow);
    if (wec || r.close) co_return;
  }
}

}  // namespace levee::control

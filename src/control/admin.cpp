#include "control/admin.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http.hpp>

#include <array>
#include <system_error>

#include "http/local_reply.hpp"
#include "proxy/listener.hpp"

namespace levee::control {

namespace asio = boost::asio;
namespace beast = boost::beast;
using tcp = asio::ip::tcp;
constexpr auto nothrow = asio::as_tuple(asio::use_awaitable);

namespace {

/// Answers a request too large or malformed, then closes.
asio::awaitable<void> refuse_and_close(beast::tcp_stream& stream, std::uint16_t status,
                                       std::chrono::steady_clock::duration write_timeout) {
  http::LocalReply r;
  r.status = status;
  r.close = true;
  r.body = status == 431   ? "request header fields too large: the admin listener reads at most 16 KiB of head\n"
           : status == 413 ? "request body too large: the admin listener reads at most 64 KiB of body\n"
                           : "bad request\n";
  std::string out;
  http::write_http1(out, r);
  stream.expires_after(write_timeout);
  auto [wec, wn] = co_await asio::async_write(stream, asio::buffer(out), nothrow);
  if (wec) co_return;
  // A lingering close: what the client is still sending is read and thrown
  // away (at most 1 MiB, for at most a second), so that closing with it
  // unread does not reset the connection before the client reads the answer.
  boost::system::error_code ig;
  stream.socket().shutdown(tcp::socket::shutdown_send, ig);
  stream.expires_after(std::chrono::seconds(1));
  std::array<char, 16 * 1024> sink;
  for (std::size_t drained = 0; drained < (1u << 20);) {
    auto [rec, rn] = co_await stream.async_read_some(asio::buffer(sink), nothrow);
    if (rec) break;
    drained += rn;
  }
}

int hex(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::string decode(std::string_view s) {
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '+') out += ' ';
    else if (s[i] == '%' && i + 2 < s.size() && hex(s[i + 1]) >= 0 && hex(s[i + 2]) >= 0) {
      out += static_cast<char>(hex(s[i + 1]) * 16 + hex(s[i + 2]));
      i += 2;
    } else out += s[i];
  }
  return out;
}

}  // namespace

std::string AdminRequest::param(std::string_view name) const {
  for (const auto& [k, v] : query)
    if (k == name) return v;
  return {};
}

bool AdminRequest::has(std::string_view name) const {
  for (const auto& [k, v] : query)
    if (k == name) return true;
  return false;
}

AdminServer::AdminServer(asio::io_context& ctx, const config::AdminConfig& cfg, AdminHandler handler)
    : ctx_(ctx), cfg_(cfg), handler_(std::move(handler)) {}

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
    // Beyond either cap the connection is closed at once: the admin
    // listener answers probes and scrapes, not crowds.
    boost::system::error_code pec;
    const auto ep = sock.remote_endpoint(pec);
    const core::Address from = pec ? core::Address{} : proxy::mapped(ep.address());
    bool admit = connections_->total.load() < cfg_.max_connections;
    if (admit) {
      std::lock_guard lk(connections_->mu);
      admit = connections_->per_source.enter(from, cfg_.max_connections_per_source);
    }
    if (!admit) {
      boost::system::error_code ig;
      sock.close(ig);
      continue;
    }
    asio::co_spawn(ctx_, session(std::move(sock), from), asio::detached);
  }
}

asio::awaitable<void> AdminServer::session(tcp::socket sock, core::Address from) {
  namespace bh = beast::http;
  // Counted from accept (per source) and from here (in all) to the end.
  struct Count {
    std::shared_ptr<Connections> c;
    core::Address from;
    Count(std::shared_ptr<Connections> cs, const core::Address& a) : c(std::move(cs)), from(a) { ++c->total; }
    ~Count() {
      --c->total;
      std::lock_guard lk(c->mu);
      c->per_source.leave(from);
    }
  } count(connections_, from);
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
    if (ec) {
      // Too large or malformed: an answer saying so, then the close. A
      // timeout, or a client that closed, gets none.
      const std::uint16_t status = ec == bh::error::header_limit ? 431
                                   : ec == bh::error::body_limit ? 413
                                   : ec.category() == bh::make_error_code(bh::error::bad_method).category() &&
                                           ec != bh::error::end_of_stream && ec != bh::error::partial_message
                                       ? 400
                                       : 0;
      if (status != 0)
        co_await refuse_and_close(stream, status,
                                  std::chrono::duration_cast<std::chrono::steady_clock::duration>(cfg_.header_timeout));
      co_return;
    }
    const auto& req = parser.get();
    AdminRequest ar;
    ar.method = std::string(req.method_string());
    std::string_view target = req.target();
    if (auto q = target.find('?'); q != std::string_view::npos) {
      std::string_view qs = target.substr(q + 1);
      target = target.substr(0, q);
      while (!qs.empty()) {
        const auto amp = qs.find('&');
        const std::string_view part = qs.substr(0, amp);
        const auto eq = part.find('=');
        if (!part.empty())
          ar.query.emplace_back(decode(part.substr(0, eq)),
                                eq == std::string_view::npos ? std::string{} : decode(part.substr(eq + 1)));
        if (amp == std::string_view::npos) break;
        qs = qs.substr(amp + 1);
      }
    }
    ar.path = std::string(target);
    ar.head = req.method() == bh::verb::head;
    if (auto it = req.find(bh::field::authorization); it != req.end()) ar.authorization = std::string(it->value());
    if (auto it = req.find(bh::field::host); it != req.end()) ar.host = std::string(it->value());
    if (auto it = req.find(bh::field::origin); it != req.end()) {
      ar.origin = std::string(it->value());
      ar.has_origin = true;
    }
    ar.body = req.body();
    {
      boost::system::error_code pec;
      const auto ep = stream.socket().remote_endpoint(pec);
      if (!pec) ar.peer = ep.address();
    }
    AdminReply reply = co_await handler_(ar);
    http::LocalReply r;
    r.close = !req.keep_alive();
    r.keep_alive_10 = req.keep_alive() && req.version() == 10;
    r.head = ar.head;
    r.status = static_cast<std::uint16_t>(reply.status);
    r.content_type = reply.content_type;
    r.extra = reply.extra;
    std::string body = std::move(reply.body);
    r.body = body;
    std::string out;
    http::write_http1(out, r);
    stream.expires_after(std::chrono::duration_cast<std::chrono::steady_clock::duration>(cfg_.header_timeout));
    auto [wec, wn] = co_await asio::async_write(stream, asio::buffer(out), nothrow);
    if (wec || r.close) co_return;
  }
}

}  // namespace levee::control

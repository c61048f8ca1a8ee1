// The readiness set's own wait in Asio's reactor (proxy/readiness.hpp): it
// must wake a waiter for every arrival, pass after pass, with only the
// event loop running (the set is re-armed from its own completion and
// waits for epoll without re-registering, which test_syscalls.py checks),
// including more arrivals than one drain takes and a socket watched by a
// waiter while a drain is being delivered. Its one operation must be freed
// on each way the set can end: shut down while queued in the reactor,
// while its first completion is posted, by a waiter while its events are
// being delivered, and left for the io_context to destroy without ever
// running again. Those are for the sanitizer builds, which fail on a leak
// or a use after free; each also checks what a waiter was told. A lost
// wake-up, or an operation that never ends, fails on a deadline instead
// of hanging.
#include <catch2/catch_test_macros.hpp>

#include <boost/asio/write.hpp>
#include <unistd.h>

#include <chrono>
#include <memory>
#include <optional>
#include <vector>

#include "proxy/readiness.hpp"

using namespace levee::proxy;
using namespace std::chrono_literals;

namespace {

/// Runs handlers until done() or a 5 s deadline; whether done() came.
template <typename Pred>
bool run_until(asio::io_context& ctx, Pred done) {
  ctx.restart();
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  while (!done() && std::chrono::steady_clock::now() < deadline) ctx.run_one_for(100ms);
  return done();
}

/// Runs handlers until none is left, within 5 s; whether none is left.
bool ran_out(asio::io_context& ctx) {
  ctx.restart();
  ctx.run_for(5s);
  return ctx.stopped();
}

struct Conn {
  tcp::socket peer;
  int fd = -1;
};

/// A loopback connection whose accepted end is handed out of Asio (as
/// Stream hands a watched socket to the set).
Conn connect(asio::io_context& ctx) {
  tcp::acceptor acc(ctx, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
  Conn c{tcp::socket(ctx)};
  c.peer.connect(acc.local_endpoint());
  tcp::socket mine(ctx);
  acc.accept(mine);
  mine.non_blocking(true);
  c.fd = mine.release();
  return c;
}

/// Reads what is there, as a reader that empties the socket does.
std::size_t empty_it(Readiness& rd, int fd) {
  char buf[256];
  std::size_t got = 0;
  for (;;) {
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    got += static_cast<std::size_t>(n);
  }
  rd.empty_and_open(fd);
  return got;
}

struct Watched {
  asio::io_context ctx;
  std::optional<Readiness> rd;
  Conn c = connect(ctx);
  tcp::socket& peer = c.peer;
  int fd = c.fd;

  Watched() {
    rd.emplace(ctx.get_executor());
    REQUIRE(rd->watch(fd, this));
  }
  ~Watched() {
    if (rd) rd->forget(fd, this);
    ::close(fd);
  }
};

}  // namespace

TEST_CASE("the readiness set wakes a reader for each arrival, pass after pass, on its own") {
  Watched w;
  // The first watch marks the socket readable (nothing known yet).
  REQUIRE(w.rd->readable(w.fd));
  REQUIRE(empty_it(*w.rd, w.fd) == 0);
  REQUIRE_FALSE(w.rd->readable(w.fd));
  for (int round = 0; round < 50; ++round) {
    std::optional<error_code> woke;
    w.rd->async_wait(w.fd, Readiness::Want::Read, [&](error_code ec) { woke = ec; });
    // Nothing has arrived: the loop finds nothing to do for the reader.
    w.ctx.restart();
    w.ctx.poll();
    REQUIRE_FALSE(woke);
    const char byte = 'x';
    asio::write(w.peer, asio::buffer(&byte, 1));
    // Only the event loop runs: the set's wait in the reactor sees the byte.
    REQUIRE(run_until(w.ctx, [&] { return woke.has_value(); }));
    REQUIRE(*woke == error_code{});
    REQUIRE(w.rd->readable(w.fd));
    REQUIRE(empty_it(*w.rd, w.fd) == 1);
  }
}

TEST_CASE("the readiness set wakes every reader when more arrive at once than one drain takes") {
  asio::io_context ctx;
  Readiness rd(ctx.get_executor());
  constexpr int kConns = 150;  // over two drains' worth (64 events each)
  std::vector<Conn> conns;
  conns.reserve(kConns);
  for (int k = 0; k < kConns; ++k) {
    conns.push_back(connect(ctx));
    REQUIRE(rd.watch(conns.back().fd, &conns.back()));
    empty_it(rd, conns.back().fd);
  }
  ctx.poll();  // the first drains deliver only room to send
  int woke = 0;
  for (auto& c : conns)
    rd.async_wait(c.fd, Readiness::Want::Read, [&](error_code ec) { woke += ec ? 0 : 1; });
  const char byte = 'x';
  for (auto& c : conns) asio::write(c.peer, asio::buffer(&byte, 1));
  REQUIRE(run_until(ctx, [&] { return woke == kConns; }));
  for (auto& c : conns) {
    REQUIRE(rd.readable(c.fd));
    rd.forget(c.fd, &c);
    ::close(c.fd);
  }
}

TEST_CASE("a socket watched by a waiter while a drain is delivered is drained next") {
  Watched w;
  empty_it(*w.rd, w.fd);
  Conn late = connect(w.ctx);
  std::optional<error_code> first, second;
  w.rd->async_wait(w.fd, Readiness::Want::Read, [&](error_code ec) {
    first = ec;
    // A new connection joins the set from inside the delivery, as a
    // client kept open after its answer does.
    REQUIRE(w.rd->watch(late.fd, &late));
    empty_it(*w.rd, late.fd);
    w.rd->async_wait(late.fd, Readiness::Want::Read, [&](error_code ec2) { second = ec2; });
  });
  const char byte = 'x';
  asio::write(w.peer, asio::buffer(&byte, 1));
  REQUIRE(run_until(w.ctx, [&] { return first.has_value(); }));
  REQUIRE_FALSE(second);
  asio::write(late.peer, asio::buffer(&byte, 1));
  REQUIRE(run_until(w.ctx, [&] { return second.has_value(); }));
  REQUIRE(*second == error_code{});
  w.rd->forget(late.fd, &late);
  ::close(late.fd);
}

TEST_CASE("a readiness set shut down while its first drain's completion is posted frees it") {
  Watched w;  // watch() armed the set: its first drain completed at once and is posted
  w.rd->shutdown();
  // The posted completion finds the set gone and frees itself; then
  // nothing is left to run.
  REQUIRE(ran_out(w.ctx));
  SUCCEED("no leak and no use after free (the sanitizer builds check)");
}

TEST_CASE("a readiness set shut down while its wait is queued frees it when the loop runs") {
  Watched w;
  empty_it(*w.rd, w.fd);
  std::optional<error_code> woke;
  w.rd->async_wait(w.fd, Readiness::Want::Read, [&](error_code ec) { woke = ec; });
  w.ctx.poll();  // the set's wait is now queued in the reactor
  w.rd->shutdown();
  // The waiter is destroyed, not called; the set's operation completes
  // aborted and frees itself.
  REQUIRE(ran_out(w.ctx));
  REQUIRE_FALSE(woke);
}

TEST_CASE("a readiness set shut down by a waiter it is waking frees its wait afterwards") {
  Watched w;
  empty_it(*w.rd, w.fd);
  std::optional<error_code> woke;
  w.rd->async_wait(w.fd, Readiness::Want::Read, [&](error_code ec) {
    woke = ec;
    w.rd->shutdown();  // as a worker stopping from a resumed coroutine would
  });
  const char byte = 'x';
  asio::write(w.peer, asio::buffer(&byte, 1));
  REQUIRE(ran_out(w.ctx));  // a shut-down set leaves nothing queued
  REQUIRE(woke);
  REQUIRE(*woke == error_code{});
}

TEST_CASE("a readiness set's queued wait is destroyed with an io_context that never runs again") {
  auto w = std::make_unique<Watched>();
  empty_it(*w->rd, w->fd);
  w->ctx.poll();
  w->rd->shutdown();  // its wait is now an aborted completion in the queue
  w->rd.reset();
  w.reset();  // the io_context destroys the completion unrun: it must free itself
  SUCCEED("no leak and no use after free (the sanitizer builds check)");
}

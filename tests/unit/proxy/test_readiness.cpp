// The readiness set (proxy/readiness.hpp): each watched socket's
// registration in Asio's own epoll, with levee's operation as its data. It
// must wake a waiter for every arrival, pass after pass, with only the
// event loop running (test_syscalls.py checks that it costs no epoll_ctl
// per pass), including many arrivals in one pass and a socket watched by a
// waiter while another's events are being delivered. A completion Asio
// has queued for a socket that is closed in the same pass must reach no
// other socket, even one given the same descriptor number, and must be
// safe to run, or to destroy with its io_context, after the set is gone
// (the sanitizer builds fail on a use after free). The io_context has work
// while anything is watched, and none left once nothing is. A lost
// wake-up, or work that never ends, fails on a deadline instead of
// hanging.
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

/// As a worker's io_context runs (worker.cpp): one thread, no reactor
/// locking; a handler posted from a handler then waits in the thread's
/// own queue, and its work is counted only when the running one returns.
constexpr int kWorkerHint = BOOST_ASIO_CONCURRENCY_HINT_UNSAFE_IO;

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
  asio::io_context ctx{kWorkerHint};
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

TEST_CASE("the readiness set wakes every reader when more arrive at once than one epoll_wait takes") {
  asio::io_context ctx{kWorkerHint};
  Readiness rd(ctx.get_executor());
  constexpr int kConns = 150;  // more than Asio's epoll_wait takes at once (128)
  std::vector<Conn> conns;
  conns.reserve(kConns);
  for (int k = 0; k < kConns; ++k) {
    conns.push_back(connect(ctx));
    REQUIRE(rd.watch(conns.back().fd, &conns.back()));
    empty_it(rd, conns.back().fd);
  }
  ctx.poll();  // the first events say only that there is room to send
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

TEST_CASE("a socket watched by a waiter while events are delivered is reported next") {
  Watched w;
  empty_it(*w.rd, w.fd);
  Conn late = connect(w.ctx);
  std::optional<error_code> first, second;
  bool joined = false;
  // (Checks inside a waiter are recorded and made after it: a failed
  // REQUIRE would throw through the set's noexcept delivery.)
  w.rd->async_wait(w.fd, Readiness::Want::Read, [&](error_code ec) {
    first = ec;
    // A new connection joins the set from inside the delivery, as a
    // client kept open after its answer does.
    joined = w.rd->watch(late.fd, &late);
    empty_it(*w.rd, late.fd);
    w.rd->async_wait(late.fd, Readiness::Want::Read, [&](error_code ec2) { second = ec2; });
  });
  const char byte = 'x';
  asio::write(w.peer, asio::buffer(&byte, 1));
  REQUIRE(run_until(w.ctx, [&] { return first.has_value(); }));
  REQUIRE(joined);
  REQUIRE_FALSE(second);
  asio::write(late.peer, asio::buffer(&byte, 1));
  REQUIRE(run_until(w.ctx, [&] { return second.has_value(); }));
  REQUIRE(*second == error_code{});
  w.rd->forget(late.fd, &late);
  ::close(late.fd);
}

TEST_CASE("the io_context has work while a socket is watched, and none once it is not") {
  Watched w;
  empty_it(*w.rd, w.fd);
  w.ctx.restart();
  w.ctx.poll();  // stops the io_context if it has no work left
  REQUIRE_FALSE(w.ctx.stopped());  // watched: the loop would wait for it
  w.rd->forget(w.fd, &w);
  REQUIRE(ran_out(w.ctx));  // the set still exists, with nothing watched
}

namespace {
/// Two watched connections whose events come in one pass, b's first: a
/// byte to b, then a's peer closing.
struct TwoInOnePass {
  asio::io_context ctx{kWorkerHint};
  std::optional<Readiness> rd;
  Conn a = connect(ctx), b = connect(ctx);
  TwoInOnePass() {
    rd.emplace(ctx.get_executor());
    REQUIRE(rd->watch(a.fd, &a));
    REQUIRE(rd->watch(b.fd, &b));
    empty_it(*rd, a.fd);
    empty_it(*rd, b.fd);
    ctx.poll();  // their first events (room to send) are delivered
  }
  void arrive() {
    const char byte = 'x';
    asio::write(b.peer, asio::buffer(&byte, 1));
    a.peer.shutdown(tcp::socket::shutdown_send);
  }
  ~TwoInOnePass() {
    if (rd) {
      rd->forget(a.fd, &a);
      rd->forget(b.fd, &b);
    }
    if (a.fd >= 0) ::close(a.fd);
    ::close(b.fd);
  }
};
}  // namespace

TEST_CASE("an event queued for a socket closed in the same pass reaches no socket given its number") {
  TwoInOnePass t;
  Conn c = connect(t.ctx);
  std::optional<error_code> woke_b, woke_c;
  bool a_not_yet = false, took_number = false, rewatched = false, quiet_after_rewatch = false;
  t.rd->async_wait(t.b.fd, Readiness::Want::Read, [&](error_code ec) {
    woke_b = ec;
    // a's close is queued behind this (a was emptied: had its event come
    // first, a would be marked). a is closed here, and another connection
    // takes its descriptor number and is watched, emptied.
    a_not_yet = !t.rd->readable(t.a.fd);
    const int n = t.a.fd;
    t.rd->forget(n, &t.a);
    ::close(n);
    took_number = ::dup2(c.fd, n) == n;
    ::close(c.fd);
    c.fd = n;
    rewatched = t.rd->watch(n, &c);
    empty_it(*t.rd, n);
    quiet_after_rewatch = !t.rd->readable(n);
    t.a.fd = -1;
    t.rd->async_wait(n, Readiness::Want::Peek, [&](error_code ec2) { woke_c = ec2; });
  });
  t.arrive();
  REQUIRE(run_until(t.ctx, [&] { return woke_b.has_value(); }));
  REQUIRE(*woke_b == error_code{});
  REQUIRE(a_not_yet);
  REQUIRE(took_number);
  REQUIRE(rewatched);
  REQUIRE(quiet_after_rewatch);
  // a's close, queued in the same pass, runs now: it marks nothing on c
  // and wakes nobody.
  t.ctx.restart();
  t.ctx.poll();
  REQUIRE_FALSE(t.rd->readable(c.fd));
  REQUIRE_FALSE(woke_c);
  // c's own arrivals still come through.
  const char byte = 'y';
  asio::write(c.peer, asio::buffer(&byte, 1));
  REQUIRE(run_until(t.ctx, [&] { return woke_c.has_value(); }));
  REQUIRE(*woke_c == error_code{});
  t.rd->forget(c.fd, &c);
  ::close(c.fd);
}

TEST_CASE("a completion queued when the set goes runs afterwards and touches nothing") {
  TwoInOnePass t;
  std::optional<error_code> woke_a, woke_b;
  t.rd->async_wait(t.a.fd, Readiness::Want::Peek, [&](error_code ec) { woke_a = ec; });
  t.rd->async_wait(t.b.fd, Readiness::Want::Read, [&](error_code ec) { woke_b = ec; });
  t.arrive();
  t.ctx.restart();
  // One pass collects both; only b's completion runs: a's stays queued.
  REQUIRE(t.ctx.run_one_for(5s) == 1);
  REQUIRE(woke_b);
  REQUIRE_FALSE(woke_a);
  t.rd.reset();  // a's waiter is destroyed, not called
  REQUIRE(ran_out(t.ctx));
  REQUIRE_FALSE(woke_a);
}

TEST_CASE("a completion queued when the set goes is destroyed with its io_context, unrun") {
  auto t = std::make_unique<TwoInOnePass>();
  bool woke_b = false;
  t->rd->async_wait(t->b.fd, Readiness::Want::Read, [&](error_code) { woke_b = true; });
  t->arrive();
  t->ctx.restart();
  REQUIRE(t->ctx.run_one_for(5s) == 1);
  REQUIRE(woke_b);
  t->rd.reset();
  t.reset();  // the io_context destroys a's queued completion: no use after free
  SUCCEED("no leak and no use after free (the sanitizer builds check)");
}

TEST_CASE("a readiness set shut down by a waiter it is waking wakes no one after it") {
  TwoInOnePass t;
  std::optional<error_code> woke_a, woke_b;
  t.rd->async_wait(t.a.fd, Readiness::Want::Peek, [&](error_code ec) { woke_a = ec; });
  t.rd->async_wait(t.b.fd, Readiness::Want::Read, [&](error_code ec) {
    woke_b = ec;
    t.rd->shutdown();  // as a worker stopping from a resumed coroutine would
  });
  t.arrive();
  // A shut-down set leaves nothing to wait for, and the loop runs until
  // what was queued (a's completion, its Watch's flush) has run.
  REQUIRE(ran_out(t.ctx));
  t.ctx.restart();
  REQUIRE(t.ctx.poll() == 0);  // nothing was left queued when the loop stopped
  REQUIRE(woke_b);
  REQUIRE(*woke_b == error_code{});
  REQUIRE_FALSE(woke_a);  // destroyed, not called
}

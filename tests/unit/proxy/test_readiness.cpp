// The readiness set's own wait in Asio's reactor (proxy/readiness.hpp): it
// must wake a waiter for every arrival, pass after pass, with nobody
// calling drain() by hand (the set is re-armed from its own completion and
// waits for epoll without re-registering), and its one operation must be
// freed on each way the set can end: shut down while queued in the
// reactor, shut down by a waiter while its events are being delivered, and
// left for the io_context to destroy without ever running again. The last
// three are for the sanitizer builds, which fail on a leak or a use after
// free; each also checks what a waiter was told.
#include <catch2/catch_test_macros.hpp>

#include <boost/asio/write.hpp>
#include <unistd.h>

#include <memory>
#include <optional>

#include "proxy/readiness.hpp"

using namespace levee::proxy;

namespace {

struct Watched {
  asio::io_context ctx;
  tcp::socket peer{ctx};
  tcp::socket mine{ctx};
  std::optional<Readiness> rd;
  int fd = -1;

  Watched() {
    rd.emplace(ctx.get_executor());
    tcp::acceptor acc(ctx, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
    peer.connect(acc.local_endpoint());
    acc.accept(mine);
    mine.non_blocking(true);
    fd = mine.release();  // the set's alone, as Stream hands it over
    REQUIRE(rd->watch(fd, this));
  }
  ~Watched() {
    if (rd) rd->forget(fd, this);
    ::close(fd);
  }

  /// Reads what is there, as a reader that empties the socket does.
  std::size_t empty_it() {
    char buf[256];
    std::size_t got = 0;
    for (;;) {
      const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
      if (n <= 0) break;
      got += static_cast<std::size_t>(n);
    }
    rd->empty_and_open(fd);
    return got;
  }
};

}  // namespace

TEST_CASE("the readiness set wakes a reader for each arrival, pass after pass, on its own") {
  Watched w;
  // The first watch marks the socket readable (nothing known yet).
  REQUIRE(w.rd->readable(w.fd));
  REQUIRE(w.empty_it() == 0);
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
    w.ctx.restart();
    while (!woke) REQUIRE(w.ctx.run_one() == 1);
    REQUIRE(*woke == error_code{});
    REQUIRE(w.rd->readable(w.fd));
    REQUIRE(w.empty_it() == 1);
  }
}

TEST_CASE("a readiness set shut down while its wait is queued frees it when the loop runs") {
  Watched w;
  w.empty_it();
  std::optional<error_code> woke;
  w.rd->async_wait(w.fd, Readiness::Want::Read, [&](error_code ec) { woke = ec; });
  w.ctx.poll();  // the set's wait is now queued in the reactor
  w.rd->shutdown();
  // The waiter is destroyed, not called; the set's operation completes
  // aborted and frees itself.
  w.ctx.restart();
  w.ctx.run();
  REQUIRE_FALSE(woke);
}

TEST_CASE("a readiness set shut down by a waiter it is waking frees its wait afterwards") {
  Watched w;
  w.empty_it();
  std::optional<error_code> woke;
  w.rd->async_wait(w.fd, Readiness::Want::Read, [&](error_code ec) {
    woke = ec;
    w.rd->shutdown();  // as a worker stopping from a resumed coroutine would
  });
  const char byte = 'x';
  asio::write(w.peer, asio::buffer(&byte, 1));
  w.ctx.restart();
  w.ctx.run();  // returns: a shut-down set leaves nothing queued
  REQUIRE(woke);
  REQUIRE(*woke == error_code{});
}

TEST_CASE("a readiness set's queued wait is destroyed with an io_context that never runs again") {
  auto w = std::make_unique<Watched>();
  w->empty_it();
  w->ctx.poll();
  w->rd->shutdown();  // its wait is now an aborted completion in the queue
  w->rd.reset();
  w.reset();  // the io_context destroys the completion unrun: it must free itself
  SUCCEED("no leak and no use after free (the sanitizer builds check)");
}

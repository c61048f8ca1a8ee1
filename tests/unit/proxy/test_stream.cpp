// Stream::read_later on a real loopback connection: it lets the event loop
// make one pass before its first receive, then waits for readability asked
// for in the same handler as a receive that found nothing. It must take
// what is already there, wake for what comes later, see a close that came
// with the last bytes, and end with operation_aborted when cancelled while
// it is not yet waiting on the socket (a deadline or a drain then must not
// be lost).
#include <catch2/catch_test_macros.hpp>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/write.hpp>
#include <optional>
#include <string>

#include "proxy/stream.hpp"

using namespace levee::proxy;
using namespace std::chrono_literals;

namespace {

struct Pair {
  asio::io_context ctx;
  tcp::socket peer{ctx};
  std::optional<Stream> stream;

  Pair() {
    Acceptor acc(ctx.get_executor(), tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
    peer.connect(acc.local_endpoint());
    Socket s(ctx.get_executor());
    acc.accept(s);
    s.non_blocking(true);  // as the listener sets every accepted socket
    stream.emplace(std::move(s));
  }

  struct Read {
    bool done = false;
    error_code ec;
    std::string bytes;
  };

  /// Starts read_later; the result lands in r when it completes.
  void start(Read& r, char* buf, std::size_t n) {
    ctx.restart();  // a loop that ran out of work stays stopped until then
    asio::co_spawn(
        ctx,
        [&r, buf, n, this]() -> awaitable<void> {
          auto [ec, got] = co_await stream->read_later(asio::buffer(buf, n));
          r.ec = ec;
          r.bytes.assign(buf, got);
          r.done = true;
        },
        asio::detached);
  }

  /// Runs the loop until r is done or a second has passed.
  void finish(Read& r) {
    const auto give_up = std::chrono::steady_clock::now() + 1s;
    while (!r.done && std::chrono::steady_clock::now() < give_up) ctx.run_one_for(50ms);
  }
};

}  // namespace

TEST_CASE("read_later takes bytes that are already there", "[stream]") {
  Pair p;
  asio::write(p.peer, asio::buffer(std::string("GET /")));
  char buf[64];
  Pair::Read r;
  p.start(r, buf, sizeof buf);
  p.finish(r);
  REQUIRE(r.done);
  CHECK(!r.ec);
  CHECK(r.bytes == "GET /");
}

TEST_CASE("read_later wakes for bytes that arrive after it found none", "[stream]") {
  Pair p;
  char buf[64];
  Pair::Read r;
  p.start(r, buf, sizeof buf);
  // Its pass and its first receive (nothing yet): it now waits on the socket.
  p.ctx.poll();
  REQUIRE(!r.done);
  asio::write(p.peer, asio::buffer(std::string("late")));
  p.finish(r);
  REQUIRE(r.done);
  CHECK(!r.ec);
  CHECK(r.bytes == "late");
}

TEST_CASE("read_later sees a close that came with the last bytes", "[stream]") {
  // Bytes and FIN in one go: the first read takes the bytes and leaves the
  // FIN, for which no new readiness will ever come. The next read_later
  // must find it by its receive, not wait for an edge.
  Pair p;
  asio::write(p.peer, asio::buffer(std::string("last")));
  p.peer.shutdown(tcp::socket::shutdown_send);
  char buf[64];
  Pair::Read first;
  p.start(first, buf, sizeof buf);
  p.finish(first);
  REQUIRE(first.done);
  CHECK(first.bytes == "last");
  Pair::Read second;
  p.start(second, buf, sizeof buf);
  p.finish(second);
  REQUIRE(second.done);
  CHECK(second.ec == asio::error::eof);
}

namespace {
/// read_later started, then cancelled: during its pass (only its first
/// step has run) or while it waits on the socket (everything ready has run).
error_code cancelled_read(bool during_pass) {
  Pair p;
  char buf[64];
  Pair::Read r;
  p.start(r, buf, sizeof buf);
  if (during_pass) p.ctx.poll_one();  // the coroutine starts and yields for its pass
  else p.ctx.poll();                  // its pass and a receive that found nothing
  REQUIRE(!r.done);
  p.stream->cancel();
  p.finish(r);
  REQUIRE(r.done);
  return r.ec;
}
}  // namespace

TEST_CASE("a cancel during read_later's pass ends it", "[stream]") {
  // Cancelling a socket with nothing queued on it does nothing: without
  // the stream's own flag, a deadline that passed during the pass would be
  // lost and the read would wait for bytes that never come.
  CHECK(cancelled_read(true) == asio::error::operation_aborted);
}

TEST_CASE("a cancel while read_later waits on the socket ends it", "[stream]") {
  CHECK(cancelled_read(false) == asio::error::operation_aborted);
}

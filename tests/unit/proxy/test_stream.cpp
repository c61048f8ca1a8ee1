// Stream::read_later on a real loopback connection: it lets the event loop
// make one pass before its first receive, then waits for readability asked
// for in the same handler as a receive that found nothing. It must take
// what is already there, wake for what comes later, see a close that came
// with the last bytes, and end with operation_aborted when cancelled while
// it is not yet waiting on the socket (a deadline or a drain then must not
// be lost). Each case runs twice: on a bare socket, and on one watched by
// the worker's readiness set (proxy/readiness.hpp), which upstream
// connections use; the watched one is also checked for what it tells the
// pool about an idle connection without a syscall, and both for holding
// the caller's buffer only while bytes are read. Last, the write split
// (write_now, write_rest) both hops use, bare and watched (a watched
// socket is out of Asio's reactor: its writes wait in the readiness set,
// and a peer that only stopped sending must not end that wait), and a
// watched stream's hand-over back to an Asio socket.
#include <catch2/catch_test_macros.hpp>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>
#include <catch2/generators/catch_generators.hpp>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>

#include "proxy/stream.hpp"

using namespace levee::proxy;
using namespace std::chrono_literals;

namespace {

// How many of this process's epoll sets hold descriptor fd (from
// /proc/self/fdinfo: each set lists its members as "tfd: N").
int epoll_sets_holding(int fd) {
  int sets = 0;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) {
    std::error_code ec;
    if (std::filesystem::read_symlink(e.path(), ec).string() != "anon_inode:[eventpoll]") continue;
    std::ifstream info("/proc/self/fdinfo/" + e.path().filename().string());
    std::string line;
    while (std::getline(info, line)) {
      int member = -1;
      if (std::sscanf(line.c_str(), "tfd: %d", &member) == 1 && member == fd) {
        ++sets;
        break;
      }
    }
  }
  return sets;
}

struct Pair {
  asio::io_context ctx;
  tcp::socket peer{ctx};
  Readiness rd{ctx.get_executor()};
  std::optional<Stream> stream;

  explicit Pair(bool watched = false) {
    Acceptor acc(ctx.get_executor(), tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
    peer.connect(acc.local_endpoint());
    Socket s(ctx.get_executor());
    acc.accept(s);
    s.non_blocking(true);  // as the listener sets every accepted socket
    stream.emplace(std::move(s));
    if (watched) {
      const int fd = stream->native_handle();
      stream->watch(rd);
      REQUIRE(rd.watched() == 1);
      // Out of Asio's reactor: the descriptor is the stream's own now.
      REQUIRE(!stream->socket().is_open());
      REQUIRE(stream->native_handle() == fd);
    }
  }

  struct Read {
    bool done = false;
    error_code ec;
    std::string bytes;
    // The buffer, as a connection lends it: asked for when bytes are to be
    // read, given back when a read found none. A buffer given back is
    // spoiled and the next one lent is another, as the worker's stock may
    // do: a read into a buffer after it went back would lose its bytes.
    char* buf = nullptr;  // the one lent now
    std::size_t n = 0;
    char* other = nullptr;
    char spare[64];
    bool held = false;
    int lent = 0;
    int returned = 0;
    Stream::BufferSource source() {
      return {this,
              [](void* p) {
                auto& r = *static_cast<Read*>(p);
                r.held = true;
                ++r.lent;
                return asio::buffer(r.buf, r.n);
              },
              [](void* p) {
                auto& r = *static_cast<Read*>(p);
                r.held = false;
                ++r.returned;
                std::memset(r.buf, 'X', r.n);
                std::swap(r.buf, r.other);
              }};
    }
  };

  /// Starts read_later; the result lands in r when it completes.
  void start(Read& r, char* buf, std::size_t n) {
    ctx.restart();  // a loop that ran out of work stays stopped until then
    r.buf = buf;
    r.n = std::min(n, sizeof r.spare);
    r.other = r.spare;
    asio::co_spawn(
        ctx,
        [&r, this]() -> awaitable<void> {
          auto [ec, got] = co_await stream->read_later(r.source());
          r.ec = ec;
          r.bytes.assign(r.buf, got);
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

namespace {
/// Runs the event loop until the readiness set has drained what is there.
void settle(Pair& p) {
  p.ctx.restart();
  p.ctx.poll();
}
/// A watched stream that has read everything sent to it so far.
void read_all(Pair& p, const std::string& sent) {
  asio::write(p.peer, asio::buffer(sent));
  settle(p);  // the set has said so before the read: no edge is left over
  char buf[64];
  Pair::Read r;
  p.start(r, buf, sizeof buf);
  p.finish(r);
  REQUIRE(r.done);
  REQUIRE(r.bytes == sent);
}
}  // namespace

TEST_CASE("read_later takes bytes that are already there", "[stream]") {
  Pair p(GENERATE(false, true));
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
  const bool watched = GENERATE(false, true);
  Pair p(watched);
  if (watched) {
    // After a short read the socket is known to be empty: the next read
    // waits for the set's word instead of trying a receive that finds nothing.
    read_all(p, "response");
    settle(p);
    CHECK(!p.rd.readable(p.stream->native_handle()));
    CHECK(p.stream->seen_quiet());
  }
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

TEST_CASE("read_later holds the buffer only while it reads", "[stream]") {
  // An idle keep-alive connection waits in read_later: it must not keep a
  // read buffer for the wait, or a burst of requests on many connections
  // leaves one behind for each (they go back to the worker's stock).
  const bool watched = GENERATE(false, true);
  Pair p(watched);
  if (watched) read_all(p, "response");
  char buf[64];
  Pair::Read r;
  p.start(r, buf, sizeof buf);
  p.ctx.poll();  // its pass, and for the bare socket a receive that found nothing
  REQUIRE(!r.done);
  CHECK(!r.held);
  // Watched and known empty: not even lent for a receive.
  if (watched) CHECK(r.lent == 0);
  asio::write(p.peer, asio::buffer(std::string("next")));
  p.finish(r);
  REQUIRE(r.done);
  CHECK(r.held);  // the bytes are in it: the caller keeps it
  CHECK(r.lent == r.returned + 1);
  CHECK(r.bytes == "next");  // in the buffer lent last
}

TEST_CASE("read_later sees a close that came with the last bytes", "[stream]") {
  // Bytes and FIN in one go: the first read takes the bytes and leaves the
  // FIN, for which no new readiness will ever come. The next read_later
  // must find it by its receive, not wait for an edge (watched: the
  // close is remembered for good).
  const bool watched = GENERATE(false, true);
  Pair p(watched);
  asio::write(p.peer, asio::buffer(std::string("last")));
  p.peer.shutdown(tcp::socket::shutdown_send);
  if (watched) settle(p);  // the set reports bytes and close before the first read
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
error_code cancelled_read(bool during_pass, bool watched) {
  Pair p(watched);
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
  CHECK(cancelled_read(true, false) == asio::error::operation_aborted);
}

TEST_CASE("a cancel while read_later waits on the socket ends it", "[stream]") {
  CHECK(cancelled_read(false, GENERATE(false, true)) == asio::error::operation_aborted);
}


TEST_CASE("an idle watched stream knows of stray bytes and of a close without a syscall", "[stream]") {
  const bool close = GENERATE(false, true);
  Pair p(true);
  read_all(p, "response");
  settle(p);
  REQUIRE(p.stream->seen_quiet());
  // The backend sends what belongs to no request, or closes.
  if (close) p.peer.shutdown(tcp::socket::shutdown_send);
  else asio::write(p.peer, asio::buffer(std::string("EVIL")));
  // The event loop's next look at the set marks it.
  const auto give_up = std::chrono::steady_clock::now() + 1s;
  while (p.stream->seen_quiet() && std::chrono::steady_clock::now() < give_up) {
    p.ctx.restart();
    p.ctx.run_one_for(50ms);
  }
  CHECK(!p.stream->seen_quiet());
  CHECK(!p.stream->quiet());  // and the exact look agrees
}

TEST_CASE("a quiet peek clears the mark of a watched stream", "[stream]") {
  Pair p(true);  // just watched: nothing known, so marked
  CHECK(!p.stream->seen_quiet());
  CHECK(p.stream->quiet());
  CHECK(p.stream->seen_quiet());
}

// A parked connection resumes with read_now() (its readiness came through
// Asio): what that receive found is what the mark must say, or the next
// read_later would try the socket once for nothing.
TEST_CASE("read_now keeps a watched stream's mark as its receive found the socket", "[stream]") {
  Pair p(true);
  read_all(p, "first");
  asio::write(p.peer, asio::buffer(std::string("0123456789")));
  settle(p);  // the set marks it
  REQUIRE(!p.stream->seen_quiet());
  char buf[4];
  error_code ec;
  // A full buffer says nothing of what is left: the mark stays.
  CHECK(p.stream->read_now(asio::buffer(buf, sizeof buf), ec) == 4);
  CHECK(!ec);
  CHECK(!p.stream->seen_quiet());
  char rest[64];
  // Less than asked: the socket is empty, and the mark goes.
  CHECK(p.stream->read_now(asio::buffer(rest, sizeof rest), ec) == 6);
  CHECK(!ec);
  CHECK(p.stream->seen_quiet());
  // Bytes that come later make a new edge, which the set reports.
  asio::write(p.peer, asio::buffer(std::string("x")));
  const auto give_up = std::chrono::steady_clock::now() + 1s;
  while (p.stream->seen_quiet() && std::chrono::steady_clock::now() < give_up) {
    p.ctx.restart();
    p.ctx.run_one_for(50ms);
  }
  CHECK(!p.stream->seen_quiet());
  CHECK(p.stream->read_now(asio::buffer(rest, sizeof rest), ec) == 1);
  // Nothing there: EAGAIN clears it too.
  CHECK(p.stream->read_now(asio::buffer(rest, sizeof rest), ec) == 0);
  CHECK(ec == asio::error::would_block);
  CHECK(p.stream->seen_quiet());
}

TEST_CASE("forgetting a watched stream ends its wait", "[stream]") {
  Pair p(true);
  read_all(p, "x");
  char buf[8];
  Pair::Read r;
  p.start(r, buf, sizeof buf);
  p.ctx.poll();
  REQUIRE(!r.done);
  const int fd = p.stream->native_handle();
  p.rd.release(fd, &*p.stream);  // forget(), and out of epoll: the descriptor stays open
  p.finish(r);
  REQUIRE(r.done);
  CHECK(r.ec == asio::error::operation_aborted);
  CHECK(p.rd.watched() == 0);
}

// The write split the client and upstream writes use: write_now() takes
// what the socket takes without waiting (all of a small write, so no
// coroutine runs for it); write_rest() sends the remainder once the peer
// reads, and the bytes arrive whole and in order.
TEST_CASE("write_now takes what fits; write_rest sends the rest in order", "[stream]") {
  Pair p(GENERATE(false, true));
  std::string small = "HTTP/1.1 200 OK\r\ncontent-length: 3\r\n\r\n";
  std::string body = "ok\n";
  levee::http::Buffers bufs;
  bufs.push(asio::buffer(small));
  bufs.push(asio::buffer(body));
  error_code ec;
  REQUIRE(p.stream->write_now(bufs, ec) == small.size() + body.size());
  REQUIRE_FALSE(ec);
  std::string got(small.size() + body.size(), '\0');
  asio::read(p.peer, asio::buffer(got));
  CHECK(got == small + body);

  // More than the socket buffers hold (the send buffer is at most 4 MiB by
  // default, and the peer's window stays small while it does not read):
  // the first call takes part of it. (A receive buffer shrunk after the
  // connect would stall the tail behind TCP's zero-window probes.)
  std::string big(16 << 20, '\0');
  for (std::size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>('a' + i % 23);
  levee::http::Buffers large;
  large.push(asio::buffer(big.data(), big.size() / 2));
  large.push(asio::buffer(big.data() + big.size() / 2, big.size() - big.size() / 2));
  const std::size_t taken = p.stream->write_now(large, ec);
  REQUIRE_FALSE(ec);
  REQUIRE(taken > 0);
  REQUIRE(taken < big.size());
  std::optional<Stream::WriteResult> rest;
  asio::co_spawn(
      p.ctx, [&]() -> awaitable<void> { rest = co_await p.stream->write_rest(large, taken); }, asio::detached);
  std::string received(big.size(), '\0');
  std::size_t have = 0;
  p.peer.non_blocking(true);
  while (have < big.size()) {
    error_code rec;
    const std::size_t n = p.peer.read_some(asio::buffer(received.data() + have, received.size() - have), rec);
    if (rec == asio::error::would_block) {
      p.ctx.restart();
      p.ctx.run_one_for(50ms);
      continue;
    }
    REQUIRE_FALSE(rec);
    have += n;
  }
  const auto give_up = std::chrono::steady_clock::now() + 1s;  // its completion runs on the loop
  while (!rest && std::chrono::steady_clock::now() < give_up) {
    p.ctx.restart();
    p.ctx.run_one_for(50ms);
  }
  REQUIRE(rest.has_value());
  CHECK_FALSE(rest->first);
  CHECK(rest->second == big.size());
  CHECK(received == big);
}

// A watch for the client leaving (or the backend speaking) waits in the
// readiness set, and a look that found nothing clears the mark: otherwise
// the next wait would end at once, again and again, while nothing comes.
TEST_CASE("a watched stream's readiness wait ends for bytes, not for a look that found nothing", "[stream]") {
  Pair p(true);  // just watched: nothing known, so marked
  IoBuffer into(64, 64);
  int woken = 0;
  error_code got;
  const auto wait = [&] {
    p.stream->wait_readable([&](error_code ec) {
      ++woken;
      got = ec;
    });
  };
  wait();
  settle(p);
  REQUIRE(woken == 1);  // marked: the caller looks
  CHECK(!got);
  CHECK(p.stream->poll(into) == Stream::Poll::Nothing);
  wait();
  settle(p);
  CHECK(woken == 1);  // the look cleared the mark
  asio::write(p.peer, asio::buffer("x", 1));
  p.ctx.restart();
  p.ctx.run_one_for(1s);  // the set's drain
  settle(p);
  REQUIRE(woken == 2);
  CHECK(!got);
  CHECK(p.stream->poll(into) == Stream::Poll::Data);
  // A cancel ends a pending wait.
  char c;
  error_code rec;
  CHECK(p.stream->read_now(asio::buffer(&c, 1), rec) == 1);
  CHECK(p.stream->poll(into) == Stream::Poll::Nothing);
  wait();
  settle(p);
  CHECK(woken == 2);
  p.stream->cancel();
  settle(p);
  CHECK(woken == 3);
  CHECK(got == asio::error::operation_aborted);
}

// A peer that stopped sending may still be reading (or not yet): its
// close mark must not end a write's wait for room, or the writer would
// try, find the socket full and try again without end, and a cancel
// (a deadline) would never find it waiting.
TEST_CASE("a watched write waits for room when the peer has only stopped sending", "[stream]") {
  Pair p(true);
  p.peer.shutdown(tcp::socket::shutdown_send);
  // The FIN is here (a receive sees it), so its event is in the set, and
  // the drain that settle() runs marks the close.
  char c;
  error_code fin;
  REQUIRE(p.stream->read_now(asio::buffer(&c, 1), fin) == 0);
  REQUIRE(fin == asio::error::eof);
  settle(p);
  std::string big(16 << 20, 'x');
  levee::http::Buffers bufs;
  bufs.push(asio::buffer(big));
  error_code ec;
  const std::size_t taken = p.stream->write_now(bufs, ec);
  REQUIRE_FALSE(ec);
  REQUIRE(taken < big.size());
  std::optional<Stream::WriteResult> rest;
  asio::co_spawn(
      p.ctx, [&]() -> awaitable<void> { rest = co_await p.stream->write_rest(bufs, taken); }, asio::detached);
  p.ctx.restart();
  const std::size_t ran = p.ctx.run_for(100ms);
  CHECK(!rest);
  // The coroutine's start and its wait (and a drain or two, should the
  // peer's window move): no loop on EAGAIN, which ran 21,294 handlers here.
  CHECK(ran < 100);
  p.stream->cancel();
  const auto give_up = std::chrono::steady_clock::now() + 1s;
  while (!rest && std::chrono::steady_clock::now() < give_up) {
    p.ctx.restart();
    p.ctx.run_one_for(50ms);
  }
  REQUIRE(rest.has_value());
  CHECK(rest->first == asio::error::operation_aborted);
  CHECK(rest->second >= taken);
}

// A connection that changes protocol (HTTP/1.1 to HTTP/2) moves its
// Stream; a watched one goes back into an Asio socket, non-blocking as
// every connected socket here is, and out of the readiness set.
TEST_CASE("a watched stream handed over is an Asio socket again", "[stream]") {
  Pair p(true);
  const int fd = p.stream->native_handle();
  CHECK(epoll_sets_holding(fd) == 1);  // the readiness set's alone
  Stream moved(std::move(*p.stream));
  CHECK(p.rd.watched() == 0);
  REQUIRE(moved.socket().is_open());
  CHECK(moved.socket().non_blocking());
  // In Asio's reactor now, and no longer in the readiness set (which would
  // otherwise wake for every arrival on it, for nobody).
  CHECK(epoll_sets_holding(fd) == 1);
  asio::write(p.peer, asio::buffer("hi", 2));
  char buf[8];
  std::optional<Stream::ReadResult> got;
  asio::co_spawn(
      p.ctx, [&]() -> awaitable<void> { got = co_await moved.read_some(asio::buffer(buf)); }, asio::detached);
  const auto give_up = std::chrono::steady_clock::now() + 1s;
  while (!got && std::chrono::steady_clock::now() < give_up) {
    p.ctx.restart();
    p.ctx.run_one_for(50ms);
  }
  REQUIRE(got.has_value());
  CHECK_FALSE(std::get<0>(*got));
  CHECK(std::string(buf, std::get<1>(*got)) == "hi");
}

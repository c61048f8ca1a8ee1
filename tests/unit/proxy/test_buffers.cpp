// The data plane's buffers: the read buffer's growth and compaction, and the
// small buffer sequence that carries a head and a framed body piece.
#include <catch2/catch_test_macros.hpp>

#include <cstring>

#include "http/framing.hpp"
#include "proxy/io_buffer.hpp"
#include "proxy/unread_bytes.hpp"

using namespace levee;

TEST_CASE("io buffers compact, grow to their maximum and no further", "[buffer]") {
  proxy::IoBuffer b(8, 32);
  auto m = b.prepare();
  CHECK(m.size() == 8);
  std::memcpy(m.data(), "abcdefgh", 8);
  b.commit(8);
  b.consume(3);
  CHECK(b.view() == "defgh");
  m = b.prepare();  // compacts: 3 bytes free at the end
  CHECK(m.size() == 3);
  b.commit(3);
  m = b.prepare();  // full: grows
  CHECK(m.size() == 8);
  b.commit(8);
  m = b.prepare();
  b.commit(m.size());
  CHECK(b.size() == 32);
  CHECK(b.full());
  CHECK(b.prepare().size() == 0);
  b.clear();
  CHECK(b.empty());
}

TEST_CASE("buffer sequences hold up to six pieces and skip empty ones", "[buffer]") {
  http::Buffers bufs;
  CHECK(bufs.empty());
  bufs.push(boost::asio::buffer("ab", 2));
  bufs.push(boost::asio::const_buffer());
  for (int i = 0; i < 10; ++i) bufs.push(boost::asio::buffer("c", 1));
  CHECK(boost::asio::buffer_size(bufs) == 2 + 5);
}

TEST_CASE("a chunked body piece is framed, and the last chunk ends it", "[buffer]") {
  http::Buffers bufs;
  char head[24];
  bufs.push_body(boost::asio::buffer("hello", 5), true, head);
  bufs.push_last_chunk();
  std::string out;
  for (auto b : bufs) out.append(static_cast<const char*>(b.data()), b.size());
  CHECK(out == "5\r\nhello\r\n0\r\n\r\n");
  http::Buffers plain;
  plain.push_body(boost::asio::buffer("hello", 5), false, head);
  CHECK(boost::asio::buffer_size(plain) == 5);
}

TEST_CASE("an HTTP/2 stream's unread bytes stay within about twice what is unread", "[buffer]") {
  // A 64 KiB window arriving in 16 KiB frames, taken a little slower than
  // it arrives (what a slow client of a large answer does): over 100 MiB,
  // the buffer holds about two windows, never everything relayed.
  proxy::UnreadBytes u;
  const std::string frame(16 * 1024, 'x');
  std::size_t relayed = 0, most = 0;
  while (relayed < 100u * 1024 * 1024) {
    while (u.size() + frame.size() <= 64 * 1024) u.append(frame.data(), frame.size());
    const std::size_t n = std::min<std::size_t>(u.size(), 16 * 1024 - 1);
    CHECK(u.view().size() == u.size());
    u.take(n);
    relayed += n;
    most = std::max(most, u.capacity());
  }
  CHECK(most <= 256 * 1024);
  CHECK(!u.empty());
  u.take(u.size());
  CHECK(u.empty());
  // trim() gives a grown buffer back.
  const std::string big(1024 * 1024, 'y');
  u.append(big.data(), big.size());
  u.trim(256 * 1024);
  CHECK(u.empty());
  CHECK(u.capacity() <= 256 * 1024);
}

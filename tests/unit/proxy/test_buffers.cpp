// The data plane's buffers: the read buffer's growth and compaction, and the
// small buffer sequence that carries a head and a framed body piece.
#include <catch2/catch_test_macros.hpp>

#include <cstring>

#include "http/framing.hpp"
#include "proxy/io_buffer.hpp"

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

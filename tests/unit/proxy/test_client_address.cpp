// The client's "ip:port" that every request writes for its log line and
// X-Forwarded-For: IPv4 (carried IPv4-mapped) is formatted by hand on the
// request path, so it is checked against inet_ntop's form here.
#include <catch2/catch_test_macros.hpp>

#include <arpa/inet.h>

#include <boost/asio/io_context.hpp>

#include <array>
#include <cstring>
#include <memory>
#include <string>

#include "core/net.hpp"
#include "proxy/exchange_buffers.hpp"

using namespace levee;

namespace {

core::Address parse(const char* text) {
  core::Address a{};
  in_addr v4{};
  if (::inet_pton(AF_INET, text, &v4) == 1) {
    std::array<std::uint8_t, 4> b{};
    std::memcpy(b.data(), &v4, 4);
    return core::ipv4_mapped(b);
  }
  REQUIRE(::inet_pton(AF_INET6, text, a.data()) == 1);
  return a;
}

}  // namespace

TEST_CASE("the client's address is written as ip:port, IPv6 in brackets", "[buffers]") {
  boost::asio::io_context ctx;
  auto b = std::make_unique<proxy::ExchangeBuffers>(ctx, 100);
  const struct {
    const char* ip;
    std::uint16_t port;
    const char* text;
    const char* xff;
  } cases[] = {
      {"127.0.0.1", 8080, "127.0.0.1:8080", "127.0.0.1"},
      {"0.0.0.0", 0, "0.0.0.0:0", "0.0.0.0"},
      {"255.255.255.255", 65535, "255.255.255.255:65535", "255.255.255.255"},
      {"10.0.100.9", 443, "10.0.100.9:443", "10.0.100.9"},
      {"192.0.2.200", 1, "192.0.2.200:1", "192.0.2.200"},
      {"2001:db8::1", 52000, "[2001:db8::1]:52000", "2001:db8::1"},
      {"::1", 80, "[::1]:80", "::1"},
  };
  for (const auto& c : cases) {
    INFO(c.ip);
    b->set_client(parse(c.ip), c.port);
    CHECK(std::string(b->client_text()) == c.text);
    CHECK(std::string(b->client_ip()) == c.xff);
  }
  // Every IPv4 octet value, against inet_ntop.
  for (unsigned v = 0; v < 256; ++v) {
    const std::array<std::uint8_t, 4> o{static_cast<std::uint8_t>(v), static_cast<std::uint8_t>(255 - v),
                                        static_cast<std::uint8_t>(v / 3), static_cast<std::uint8_t>(v % 10)};
    char want[INET_ADDRSTRLEN];
    REQUIRE(::inet_ntop(AF_INET, o.data(), want, sizeof want) != nullptr);
    b->set_client(core::ipv4_mapped(o), 7);
    CHECK(std::string(b->client_ip()) == want);
    CHECK(std::string(b->client_text()) == std::string(want) + ":7");
  }
}

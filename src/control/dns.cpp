#include "control/dns.hpp"

#include <arpa/inet.h>

#include <algorithm>

namespace levee::control::dns {

namespace {

void put16(std::vector<std::uint8_t>& o, std::uint16_t v) {
  o.push_back(static_cast<std::uint8_t>(v >> 8));
  o.push_back(static_cast<std::uint8_t>(v & 0xff));
}

struct Reader {
  std::span<const std::uint8_t> m;
  std::size_t at = 0;
  bool ok = true;

  std::uint16_t u16() {
    if (at + 2 > m.size()) {
      ok = false;
      return 0;
    }
    const auto v = static_cast<std::uint16_t>((m[at] << 8) | m[at + 1]);
    at += 2;
    return v;
  }
  std::uint32_t u32() {
    const std::uint32_t hi = u16();
    return (hi << 16) | u16();
  }
  /// Skips a (possibly compressed) name.
  void skip_name() {
    for (int labels = 0; labels < 128; ++labels) {
      if (at >= m.size()) break;
      const std::uint8_t len = m[at];
      if ((len & 0xc0) == 0xc0) {  // a pointer ends the name
        at += 2;
        if (at > m.size()) ok = false;
        return;
      }
      if (len & 0xc0) break;  // reserved label types
      at += 1 + len;
      if (len == 0) return;
    }
    ok = false;
  }
};

}  // namespace

std::vector<std::uint8_t> build_query(std::uint16_t id, std::string_view name, std::uint16_t type) {
  if (!name.empty() && name.back() == '.') name.remove_suffix(1);
  if (name.empty() || name.size() > 253) return {};
  std::vector<std::uint8_t> q;
  put16(q, id);
  put16(q, 0x0100);  // a standard query, recursion desired
  put16(q, 1);       // one question
  put16(q, 0);
  put16(q, 0);
  put16(q, 1);  // one additional record: the OPT
  std::size_t start = 0;
  while (start <= name.size()) {
    const std::size_t dot = name.find('.', start);
    const std::size_t end = dot == std::string_view::npos ? name.size() : dot;
    const std::size_t len = end - start;
    if (len == 0 || len > 63) return {};
    q.push_back(static_cast<std::uint8_t>(len));
    q.insert(q.end(), name.begin() + static_cast<std::ptrdiff_t>(start), name.begin() + static_cast<std::ptrdiff_t>(end));
    if (dot == std::string_view::npos) break;
    start = dot + 1;
  }
  q.push_back(0);
  put16(q, type);
  put16(q, 1);  // IN
  // EDNS0: root name, type OPT, payload size 4096, no flags, no options.
  q.push_back(0);
  put16(q, 41);
  put16(q, 4096);
  put16(q, 0);
  put16(q, 0);
  put16(q, 0);
  return q;
}

std::optional<Answer> parse_response(std::span<const std::uint8_t> msg, std::uint16_t id, std::uint16_t type) {
  Reader r{msg};
  if (r.u16() != id) return std::nullopt;
  const std::uint16_t flags = r.u16();
  if (!(flags & 0x8000)) return std::nullopt;  // not a response
  const std::uint16_t qd = r.u16(), an = r.u16();
  r.u16();
  r.u16();
  if (!r.ok) return std::nullopt;
  Answer a;
  a.rcode = flags & 0x0f;
  a.truncated = (flags & 0x0200) != 0;
  for (std::uint16_t i = 0; i < qd && r.ok; ++i) {
    r.skip_name();
    r.u16();
    r.u16();
  }
  bool any_ttl = false;
  for (std::uint16_t i = 0; i < an && r.ok; ++i) {
    r.skip_name();
    const std::uint16_t rtype = r.u16();
    const std::uint16_t rclass = r.u16();
    const std::uint32_t ttl = r.u32();
    const std::uint16_t len = r.u16();
    if (!r.ok || r.at + len > msg.size()) return std::nullopt;
    // CNAMEs lead to the records that follow them in the answer: only
    // address records of the type asked for count.
    if (rclass == 1 && rtype == type && ((type == kA && len == 4) || (type == kAAAA && len == 16))) {
      char text[INET6_ADDRSTRLEN] = {};
      ::inet_ntop(type == kA ? AF_INET : AF_INET6, msg.data() + r.at, text, sizeof text);
      a.addresses.emplace_back(text);
      a.ttl = any_ttl ? std::min(a.ttl, ttl) : ttl;
      any_ttl = true;
    }
    r.at += len;
  }
  if (!r.ok) return std::nullopt;
  std::sort(a.addresses.begin(), a.addresses.end());
  a.addresses.erase(std::unique(a.addresses.begin(), a.addresses.end()), a.addresses.end());
  return a;
}

}  // namespace levee::control::dns

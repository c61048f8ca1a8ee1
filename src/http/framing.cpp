#include "http/framing.hpp"

#include <charconv>

#include "core/text.hpp"

namespace levee::http {

bool is_hop_by_hop(const Field& f) noexcept {
  switch (f.id) {
    case FieldId::connection:
    case FieldId::keep_alive:
    case FieldId::proxy_connection:
    case FieldId::te:
    case FieldId::trailer:
    case FieldId::transfer_encoding:
    case FieldId::upgrade:
    case FieldId::proxy_authenticate:
    case FieldId::content_length:  // re-framed by levee
      return true;
    default:
      return false;
  }
}

bool named_in_connection(const std::vector<Field>& fields, std::string_view name) noexcept {
  for (const auto& f : fields) {
    if (f.id != FieldId::connection) continue;
    bool found = false;
    core::for_each_token(f.value, [&](std::string_view t) {
      if (core::iequals(t, name)) found = true;
    });
    if (found) return true;
  }
  return false;
}

std::size_t chunk_header(char* buf, std::size_t n) noexcept {
  int len = 0;
  char tmp[20];
  do {
    const int d = static_cast<int>(n & 0xf);
    tmp[len++] = static_cast<char>(d < 10 ? '0' + d : 'a' + d - 10);
    n >>= 4;
  } while (n);
  std::size_t i = 0;
  while (len) buf[i++] = tmp[--len];
  buf[i++] = '\r';
  buf[i++] = '\n';
  return i;
}

void append_uint(std::string& out, std::uint64_t v) {
  char buf[24];
  auto [p, ec] = std::to_chars(buf, buf + sizeof buf, v);
  (void)ec;
  out.append(buf, static_cast<std::size_t>(p - buf));
}

void append_field(std::string& out, std::string_view name, std::string_view value) {
  out.append(name);
  out.append(": ", 2);
  out.append(value);
  out.append("\r\n", 2);
}

}  // namespace levee::http

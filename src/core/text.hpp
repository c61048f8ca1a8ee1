// Small allocation-free string helpers shared by header and config parsing.
#pragma once

#include <charconv>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace levee::core {

constexpr char ascii_lower(char c) noexcept {
  return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c;
}

constexpr bool iequals(std::string_view a, std::string_view b) noexcept {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (ascii_lower(a[i]) != ascii_lower(b[i])) return false;
  }
  return true;
}

constexpr bool is_space(char c) noexcept { return c == ' ' || c == '\t'; }

constexpr std::string_view trim(std::string_view s) noexcept {
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return s;
}

/// RFC 9110 5.6.2 token (a field name, a method): 1*tchar.
constexpr bool is_token(std::string_view s) noexcept {
  if (s.empty()) return false;
  for (char c : s) {
    const bool alnum = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
    if (!alnum && std::string_view("!#$%&'*+-.^_`|~").find(c) == std::string_view::npos) return false;
  }
  return true;
}

/// Parses a whole string as an unsigned decimal; rejects signs, spaces inside and overflow.
inline std::optional<std::uint64_t> parse_u64(std::string_view s) noexcept {
  if (s.empty()) return std::nullopt;
  std::uint64_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc{} || p != s.data() + s.size()) return std::nullopt;
  return v;
}

/// Length of the well-formed UTF-8 sequence starting at s[i] (1-4), or 0
/// when the bytes there are not one (overlong forms and surrogates
/// included). Names and values that end up in metric labels, JSON and logs
/// must be UTF-8, or the consumer rejects them.
constexpr std::size_t utf8_sequence(std::string_view s, std::size_t i) noexcept {
  const auto c = static_cast<unsigned char>(s[i]);
  if (c < 0x80) return 1;
  std::size_t n = 0;
  std::uint32_t cp = 0;
  if (c >= 0xc2 && c <= 0xdf) { n = 1; cp = c & 0x1fu; }
  else if (c >= 0xe0 && c <= 0xef) { n = 2; cp = c & 0x0fu; }
  else if (c >= 0xf0 && c <= 0xf4) { n = 3; cp = c & 0x07u; }
  else return 0;
  for (std::size_t k = 1; k <= n; ++k) {
    if (i + k >= s.size()) return 0;
    const auto cc = static_cast<unsigned char>(s[i + k]);
    if ((cc & 0xc0) != 0x80) return 0;
    cp = (cp << 6) | (cc & 0x3fu);
  }
  if ((n == 2 && cp < 0x800) || (n == 3 && (cp < 0x10000 || cp > 0x10ffff)) || (cp >= 0xd800 && cp <= 0xdfff))
    return 0;
  return n + 1;
}

constexpr bool valid_utf8(std::string_view s) noexcept {
  for (std::size_t i = 0; i < s.size();) {
    const std::size_t n = utf8_sequence(s, i);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

/// Calls f(token) for each comma-separated token, trimmed, skipping empty ones.
template <typename F>
constexpr void for_each_token(std::string_view list, F&& f) {
  while (!list.empty()) {
    auto comma = list.find(',');
    auto tok = trim(list.substr(0, comma));
    if (!tok.empty()) f(tok);
    if (comma == std::string_view::npos) break;
    list.remove_prefix(comma + 1);
  }
}

}  // namespace levee::core

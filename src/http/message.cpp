#include "http/message.hpp"

#include <algorithm>
#include <cstring>

namespace levee::http {

Head::Head(std::size_t max_fields) : max_fields_(max_fields) {
  fields_.reserve(std::min<std::size_t>(max_fields, 32));
  blocks_.push_back({std::make_unique<char[]>(kBlock), kBlock});
}

bool Head::add(FieldId id, std::string_view name, std::string_view value) {
  if (fields_.size() >= max_fields_) return false;
  auto n = store(name);
  auto v = store(value);
  fields_.push_back(Field{n, v, id});
  return true;
}

std::string_view Head::store(std::string_view s) {
  if (s.empty()) return {};
  Block* b = &blocks_.back();
  if (used_ + s.size() > b->size) {
    // The parser's header limit bounds the total, so this happens only for
    // unusually large heads.
    std::size_t n = std::max(kBlock, s.size());
    blocks_.push_back({std::make_unique<char[]>(n), n});
    b = &blocks_.back();
    used_ = 0;
  }
  char* at = b->data.get() + used_;
  std::memcpy(at, s.data(), s.size());
  used_ += s.size();
  return {at, s.size()};
}

bool valid_authority(std::string_view a) noexcept {
  std::string_view host = a;
  std::string_view port;
  if (!a.empty() && a.front() == '[') {
    const auto close = a.find(']');
    if (close == std::string_view::npos) return false;
    for (char c : a.substr(1, close - 1)) {
      const bool ok = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F') || c == ':' || c == '.';
      if (!ok) return false;
    }
    if (close + 1 < a.size()) {
      if (a[close + 1] != ':') return false;
      port = a.substr(close + 2);
    }
    host = {};
  } else if (auto colon = a.rfind(':'); colon != std::string_view::npos) {
    host = a.substr(0, colon);
    port = a.substr(colon + 1);
  }
  for (char c : host) {
    const auto u = static_cast<unsigned char>(c);
    const bool unreserved = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
                            c == '.' || c == '_' || c == '~';
    const bool sub_delim = c == '!' || c == '$' || c == '&' || c == '\'' || c == '(' || c == ')' || c == '*' ||
                           c == '+' || c == ',' || c == ';' || c == '=' || c == '%';
    if (!unreserved && !sub_delim) return false;
    (void)u;
  }
  if (port.size() > 5) return false;
  for (char c : port)
    if (c < '0' || c > '9') return false;
  return true;
}

}  // namespace levee::http

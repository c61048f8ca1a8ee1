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

}  // namespace levee::http

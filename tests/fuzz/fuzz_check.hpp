// What every fuzz target shares: a check that aborts with a message (so
// libFuzzer saves the input as a crash) whatever NDEBUG says, and a small
// reader for the parameter bytes some targets take before their payload.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>

/// An invariant of the code under test: on failure, print it and abort.
#define FUZZ_CHECK(cond, ...)                                                 \
  do {                                                                        \
    if (!(cond)) {                                                            \
      std::fprintf(stderr, "\nFUZZ_CHECK failed at %s:%d: %s\n  ", __FILE__,  \
                   __LINE__, #cond);                                          \
      std::fprintf(stderr, "" __VA_ARGS__);                                   \
      std::fprintf(stderr, "\n");                                             \
      std::abort();                                                           \
    }                                                                         \
  } while (0)

namespace levee::fuzz {

/// Reads fixed parameter bytes from the front of an input; missing bytes
/// read as 0, so every input, however short, is a valid one.
class Params {
 public:
  Params(const std::uint8_t* data, std::size_t size, std::size_t count) noexcept
      : data_(data), size_(size < count ? size : count), count_(count) {}
  std::uint8_t byte(std::size_t i) const noexcept { return i < size_ ? data_[i] : 0; }
  /// The payload after the parameter bytes.
  std::string_view rest(std::size_t total) const noexcept {
    if (total <= count_) return {};
    return {reinterpret_cast<const char*>(data_) + count_, total - count_};
  }

 private:
  const std::uint8_t* data_;
  std::size_t size_;
  std::size_t count_;
};

/// Whether `name` is listed in LEVEE_FUZZ_KNOWN_BUGS (comma-separated): a
/// reported, still open bug whose check a long run steps over, so that it
/// keeps looking for other bugs. ctest never sets it: there, open bugs fail.
inline bool known_bug(std::string_view name) {
  static const std::string_view list = [] {
    const char* e = std::getenv("LEVEE_FUZZ_KNOWN_BUGS");
    return std::string_view(e ? e : "");
  }();
  std::string_view rest = list;
  while (!rest.empty()) {
    auto comma = rest.find(',');
    if (rest.substr(0, comma) == name) return true;
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  return false;
}

inline std::string_view as_view(const std::uint8_t* data, std::size_t size) noexcept {
  return {reinterpret_cast<const char*>(data), size};
}

}  // namespace levee::fuzz

// A worker's stock of reusable objects (read buffers, request scratch):
// taken and given back on the request path, so that a warm worker
// allocates none of them, and trimmed to what is being used, so that a
// burst does not leave its high-water mark behind for good.
//
// trim() runs on a slow clock (the worker's one-second sweep): the objects
// that sat in the stock through the whole interval since the last trim
// (its low-water mark) were not needed and are freed. Steady load keeps
// what it cycles through; after a burst of thousands of connections the
// stock is back to what the traffic uses within two intervals.
#pragma once

#include <algorithm>
#include <cstddef>
#include <memory>
#include <vector>

namespace levee::proxy {

template <class T>
class Stock {
 public:
  explicit Stock(std::size_t cap) : cap_(cap) {}

  /// One from the stock, or null when it is empty (the caller makes one).
  std::unique_ptr<T> take() noexcept {
    if (items_.empty()) return nullptr;
    auto p = std::move(items_.back());
    items_.pop_back();
    low_ = std::min(low_, items_.size());
    return p;
  }
  /// Keeps p for reuse, unless the stock is full (p is then freed).
  void put(std::unique_ptr<T> p) {
    if (p && items_.size() < cap_) items_.push_back(std::move(p));
  }
  /// Frees what no take() reached since the last trim: the least recently
  /// returned, at the bottom of the stack. Returns how many.
  std::size_t trim() {
    const std::size_t n = std::min(low_, items_.size());
    items_.erase(items_.begin(), items_.begin() + static_cast<std::ptrdiff_t>(n));
    if (items_.capacity() > 64 && items_.size() < items_.capacity() / 4) items_.shrink_to_fit();
    low_ = items_.size();
    return n;
  }
  void clear() noexcept {
    items_.clear();
    low_ = 0;
  }
  std::size_t size() const noexcept { return items_.size(); }

 private:
  std::vector<std::unique_ptr<T>> items_;
  std::size_t cap_;
  std::size_t low_ = 0;  ///< the fewest items held since the last trim
};

}  // namespace levee::proxy

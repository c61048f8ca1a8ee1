// A byte buffer for socket reads: allocated once per connection, compacted
// in place, grown (doubling, up to a hard maximum) only when one message
// head does not fit, so idle connections stay small and big headers still
// parse up to the configured limit.
#pragma once

#include <boost/asio/buffer.hpp>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <memory>
#include <string_view>

namespace levee::proxy {

class IoBuffer {
 public:
  IoBuffer(std::size_t initial, std::size_t max)
      : data_(new char[initial]), cap_(initial), max_(std::max(initial, max)) {}

  std::size_t size() const noexcept { return end_ - begin_; }
  bool empty() const noexcept { return begin_ == end_; }
  std::size_t capacity() const noexcept { return cap_; }
  const char* data() const noexcept { return data_.get() + begin_; }
  std::string_view view() const noexcept { return {data(), size()}; }
  boost::asio::const_buffer cbuf() const noexcept { return {data(), size()}; }

  /// Space to read into: compacts when that frees room, grows when full.
  /// Empty only when the buffer holds max bytes of unconsumed data.
  boost::asio::mutable_buffer prepare() {
    if (begin_ == end_) begin_ = end_ = 0;
    if (end_ == cap_ && begin_ > 0) compact();
    if (end_ == cap_ && cap_ < max_) grow();
    return {data_.get() + end_, cap_ - end_};
  }
  bool full() const noexcept { return begin_ == 0 && end_ == cap_ && cap_ >= max_; }
  void commit(std::size_t n) noexcept { end_ += n; }
  void consume(std::size_t n) noexcept {
    begin_ += n;
    if (begin_ >= end_) begin_ = end_ = 0;
  }
  void clear() noexcept { begin_ = end_ = 0; }
  void compact() noexcept {
    if (begin_ == 0) return;
    std::memmove(data_.get(), data_.get() + begin_, end_ - begin_);
    end_ -= begin_;
    begin_ = 0;
  }

 private:
  void grow() {
    std::size_t n = std::min(max_, cap_ * 2);
    std::unique_ptr<char[]> d(new char[n]);
    std::memcpy(d.get(), data_.get() + begin_, end_ - begin_);
    end_ -= begin_;
    begin_ = 0;
    data_ = std::move(d);
    cap_ = n;
  }

  std::unique_ptr<char[]> data_;
  std::size_t cap_;
  std::size_t max_;
  std::size_t begin_ = 0;
  std::size_t end_ = 0;
};

}  // namespace levee::proxy

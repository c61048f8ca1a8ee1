// Bytes received on an HTTP/2 stream and not yet taken by the reader: the
// body a client uploads (H2Stream) and the answer a backend sends (H2Call).
// Flow control bounds what is unread to one stream window; append() keeps
// the buffer within about twice that by dropping the taken prefix before
// it could outgrow what is unread, so a long transfer that the reader
// takes a little slower than it arrives does not keep everything it ever
// relayed. trim() gives a buffer that grew past `keep` back to the heap.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace levee::proxy {

class UnreadBytes {
 public:
  void append(const char* data, std::size_t n) {
    if (off_ > 0 && off_ >= buf_.size() - off_) {
      buf_.erase(0, off_);  // at most as many bytes move as were taken
      off_ = 0;
    }
    buf_.append(data, n);
  }
  void take(std::size_t n) noexcept {
    off_ += n;
    if (off_ == buf_.size()) clear();
  }
  std::string_view view() const noexcept { return std::string_view(buf_).substr(off_); }
  std::size_t size() const noexcept { return buf_.size() - off_; }
  bool empty() const noexcept { return off_ == buf_.size(); }
  void clear() noexcept {
    buf_.clear();
    off_ = 0;
  }
  /// Empties it, and frees its storage if that grew past `keep` bytes.
  void trim(std::size_t keep) {
    if (buf_.capacity() > keep) std::string().swap(buf_);
    clear();
  }
  std::size_t capacity() const noexcept { return buf_.capacity(); }

 private:
  std::string buf_;
  std::size_t off_ = 0;  ///< taken
};

}  // namespace levee::proxy

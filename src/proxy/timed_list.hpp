// An intrusive list of objects in the order they joined, for a worker's
// periodic sweep: whatever has been in a list longer than some time is at
// its front, so each sweep looks only at what it acts on. No allocation;
// joining and leaving are O(1).
#pragma once

#include <cstddef>

#include "core/time.hpp"

namespace levee::proxy {

class TimedList;

class TimedHook {
 public:
  TimedHook() noexcept = default;
  TimedHook(const TimedHook&) = delete;
  TimedHook& operator=(const TimedHook&) = delete;
  ~TimedHook();

  bool linked() const noexcept { return list_ != nullptr; }
  TimedList* list() const noexcept { return list_; }
  core::TimePoint since() const noexcept { return since_; }
  /// Leaves whatever list it is in.
  void unlink() noexcept;

 private:
  friend class TimedList;
  TimedHook* prev_ = nullptr;
  TimedHook* next_ = nullptr;
  TimedList* list_ = nullptr;
  core::TimePoint since_{};
};

class TimedList {
 public:
  TimedList() noexcept = default;
  TimedList(const TimedList&) = delete;
  TimedList& operator=(const TimedList&) = delete;
  ~TimedList() {
    while (head_) head_->unlink();
  }

  /// Joins at the back, noting `since` (not earlier than the back's).
  void push(TimedHook& h, core::TimePoint since) noexcept {
    h.unlink();
    h.since_ = since;
    h.list_ = this;
    h.prev_ = tail_;
    h.next_ = nullptr;
    if (tail_) tail_->next_ = &h;
    else head_ = &h;
    tail_ = &h;
    ++size_;
  }
  TimedHook* front() const noexcept { return head_; }
  std::size_t size() const noexcept { return size_; }
  bool empty() const noexcept { return head_ == nullptr; }

 private:
  friend class TimedHook;
  void remove(TimedHook& h) noexcept {
    if (h.prev_) h.prev_->next_ = h.next_;
    else head_ = h.next_;
    if (h.next_) h.next_->prev_ = h.prev_;
    else tail_ = h.prev_;
    h.prev_ = h.next_ = nullptr;
    h.list_ = nullptr;
    --size_;
  }
  TimedHook* head_ = nullptr;
  TimedHook* tail_ = nullptr;
  std::size_t size_ = 0;
};

inline void TimedHook::unlink() noexcept {
  if (list_) list_->remove(*this);
}
inline TimedHook::~TimedHook() { unlink(); }

}  // namespace levee::proxy

#include "proxy/h2_memory.hpp"

#include <nghttp2/nghttp2.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <utility>

// Pools hide a use after free from AddressSanitizer: off under it.
#if defined(__SANITIZE_ADDRESS__)
#define LEVEE_H2_POOLS 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define LEVEE_H2_POOLS 0
#endif
#endif
#ifndef LEVEE_H2_POOLS
#define LEVEE_H2_POOLS 1
#endif

namespace levee::proxy {

namespace {

// Classes of 32 B to 4 KiB, powers of two; larger blocks go to malloc.
constexpr std::size_t kClasses = 8;
constexpr std::size_t kMinShift = 5;
constexpr std::size_t kBig = kClasses;
constexpr std::size_t kKeep = 256;  // blocks kept per class and thread
constexpr std::size_t class_size(std::size_t c) noexcept { return std::size_t{1} << (kMinShift + c); }

// Before each block: its class (kBig: malloc's own) and the size asked
// for; 16 bytes, so the block keeps malloc's alignment.
struct alignas(16) Header {
  std::size_t cls;
  std::size_t size;
};
static_assert(sizeof(Header) == 16);

struct Free {
  Free* next;
};

struct Lists {
  std::array<Free*, kClasses> head{};
  std::array<std::size_t, kClasses> count{};
  ~Lists() {
    for (std::size_t c = 0; c < kClasses; ++c) {
      for (Free* f = head[c]; f;) std::free(reinterpret_cast<Header*>(std::exchange(f, f->next)) - 1);
      head[c] = nullptr;
      count[c] = kKeep;  // a block released after this goes straight to free
    }
  }
};

thread_local Lists lists;

std::size_t class_of(std::size_t size) noexcept {
  for (std::size_t c = 0; c < kClasses; ++c)
    if (size <= class_size(c)) return c;
  return kBig;
}

}  // namespace

namespace h2mem {

void* allocate(std::size_t size) noexcept {
  const std::size_t c = class_of(size);
  Header* h = nullptr;
  if (c != kBig && lists.head[c]) {
    Free* f = lists.head[c];
    lists.head[c] = f->next;
    --lists.count[c];
    h = reinterpret_cast<Header*>(f) - 1;
  } else {
    const std::size_t bytes = c == kBig ? size : class_size(c);
    if (bytes > std::numeric_limits<std::size_t>::max() - sizeof(Header)) return nullptr;
    h = static_cast<Header*>(std::malloc(sizeof(Header) + bytes));
    if (!h) return nullptr;
  }
  h->cls = c;
  h->size = size;
  return h + 1;
}

void release(void* p) noexcept {
  if (!p) return;
  Header* h = static_cast<Header*>(p) - 1;
  const std::size_t c = h->cls;
  if (c == kBig || lists.count[c] >= kKeep) {
    std::free(h);
    return;
  }
  auto* f = static_cast<Free*>(p);
  f->next = lists.head[c];
  lists.head[c] = f;
  ++lists.count[c];
}

void* zeroed(std::size_t n, std::size_t size) noexcept {
  if (size != 0 && n > std::numeric_limits<std::size_t>::max() / size) return nullptr;
  void* p = allocate(n * size);
  if (p) std::memset(p, 0, n * size);
  return p;
}

void* resize(void* p, std::size_t size) noexcept {
  if (!p) return allocate(size);
  Header* h = static_cast<Header*>(p) - 1;
  if (h->cls != kBig && size <= class_size(h->cls)) {  // fits the block it has
    h->size = size;
    return p;
  }
  if (h->cls == kBig && class_of(size) == kBig) {
    if (size > std::numeric_limits<std::size_t>::max() - sizeof(Header)) return nullptr;
    auto* n = static_cast<Header*>(std::realloc(h, sizeof(Header) + size));
    if (!n) return nullptr;
    n->size = size;
    return n + 1;
  }
  void* q = allocate(size);
  if (!q) return nullptr;  // as realloc: the old block stays valid
  std::memcpy(q, p, std::min(h->size, size));
  release(p);
  return q;
}

std::size_t pooled() noexcept {
  std::size_t n = 0;
  for (const auto c : lists.count) n += c;
  return n;
}

}  // namespace h2mem

nghttp2_mem* h2_memory() noexcept {
#if LEVEE_H2_POOLS
  static nghttp2_mem mem{
      nullptr,
      [](std::size_t size, void*) { return h2mem::allocate(size); },
      [](void* p, void*) { h2mem::release(p); },
      [](std::size_t n, std::size_t size, void*) { return h2mem::zeroed(n, size); },
      [](void* p, std::size_t size, void*) { return h2mem::resize(p, size); },
  };
  return &mem;
#else
  return nullptr;
#endif
}

}  // namespace levee::proxy

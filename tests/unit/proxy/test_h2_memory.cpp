// The allocator HTTP/2 sessions use: C allocation semantics (calloc zeroes,
// realloc keeps the contents, free of null is nothing), malloc's alignment,
// and blocks reused from the thread's lists rather than from malloc.
#include <catch2/catch_test_macros.hpp>

#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "proxy/h2_memory.hpp"

using namespace levee::proxy;

TEST_CASE("HTTP/2 session memory behaves as malloc and reuses freed blocks", "[h2mem]") {
  const std::size_t before = h2mem::pooled();
  void* a = h2mem::allocate(100);
  REQUIRE(a != nullptr);
  CHECK(reinterpret_cast<std::uintptr_t>(a) % 16 == 0);
  std::memset(a, 0xab, 100);
  h2mem::release(a);
  CHECK(h2mem::pooled() == before + 1);
  // The same class (65-128 bytes) gets the same block back.
  void* b = h2mem::allocate(120);
  CHECK(b == a);
  CHECK(h2mem::pooled() == before);
  h2mem::release(b);

  // calloc zeroes, even a reused, dirty block.
  auto* z = static_cast<unsigned char*>(h2mem::zeroed(10, 10));
  REQUIRE(z != nullptr);
  CHECK(static_cast<void*>(z) == a);
  for (int i = 0; i < 100; ++i) CHECK(z[i] == 0);
  CHECK(h2mem::zeroed(std::numeric_limits<std::size_t>::max() / 2, 3) == nullptr);  // overflow

  // realloc: within the class in place; beyond it, the contents move.
  for (int i = 0; i < 100; ++i) z[i] = static_cast<unsigned char>(i);
  void* same = h2mem::resize(z, 128);
  CHECK(same == z);
  auto* grown = static_cast<unsigned char*>(h2mem::resize(same, 3000));
  REQUIRE(grown != nullptr);
  for (int i = 0; i < 100; ++i) CHECK(grown[i] == i);
  // Past the largest class: malloc's own block, also resized with its contents.
  auto* big = static_cast<unsigned char*>(h2mem::resize(grown, 100000));
  REQUIRE(big != nullptr);
  for (int i = 0; i < 100; ++i) CHECK(big[i] == i);
  big[99999] = 7;
  auto* bigger = static_cast<unsigned char*>(h2mem::resize(big, 200000));
  REQUIRE(bigger != nullptr);
  CHECK(bigger[99999] == 7);
  CHECK(bigger[50] == 50);
  auto* small = static_cast<unsigned char*>(h2mem::resize(bigger, 40));
  REQUIRE(small != nullptr);
  CHECK(small[39] == 39);
  h2mem::release(small);
  h2mem::release(nullptr);
  void* fresh = h2mem::resize(nullptr, 10);  // realloc(NULL) is malloc
  REQUIRE(fresh != nullptr);
  h2mem::release(fresh);
}

TEST_CASE("HTTP/2 session memory keeps a bounded number of blocks", "[h2mem]") {
  std::vector<void*> blocks;
  for (int i = 0; i < 2000; ++i) blocks.push_back(h2mem::allocate(500));
  const std::size_t before = h2mem::pooled();
  for (void* p : blocks) h2mem::release(p);
  // At most a few hundred kept for the class; the rest went back to malloc.
  CHECK(h2mem::pooled() - before <= 256);
  CHECK(h2mem::pooled() > before);
}

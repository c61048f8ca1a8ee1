// The allocator HTTP/2 sessions are made with. nghttp2 allocates for every
// stream (its stream object, its copy of each header block, frame
// buffers); through malloc that was about six calls per stream. Here they
// come from per-thread free lists by size class, as HAProxy's pools do, so
// a warm worker opens and ends a stream without going to malloc. Each list
// keeps at most a bounded number of blocks, so a burst's memory goes back.
// Under AddressSanitizer the pools are off (null: nghttp2's default), so a
// use after free is still caught.
#pragma once

#include <nghttp2/nghttp2.h>

#include <cstddef>

namespace levee::proxy {

/// Null under AddressSanitizer (nghttp2 then uses malloc).
nghttp2_mem* h2_memory() noexcept;

namespace h2mem {
// The pieces, for tests.
void* allocate(std::size_t size) noexcept;
void release(void* p) noexcept;
void* zeroed(std::size_t n, std::size_t size) noexcept;
void* resize(void* p, std::size_t size) noexcept;
/// Blocks the calling thread's lists hold.
std::size_t pooled() noexcept;
}  // namespace h2mem

}  // namespace levee::proxy

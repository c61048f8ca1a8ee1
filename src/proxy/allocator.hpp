// Asks the process's allocator to give free memory back to the system.
// A worker calls it after trimming its stocks freed a burst's buffers
// (proxy/stock.hpp): without it, both allocators levee runs with keep the
// freed pages, and the burst's high-water mark stays in the resident set.
#pragma once

#include <cstddef>

namespace levee::proxy {

/// Returns the calling thread's cached free memory to the allocator's
/// central lists, and about `bytes` of the allocator's free pages to the
/// system: tcmalloc's when the process runs with it (found through the
/// dynamic linker, as the levee binary links it and the test binaries do
/// not), glibc's malloc_trim() otherwise (which trims whatever it can).
/// A few system calls; for the slow path only.
void release_free_memory(std::size_t bytes) noexcept;

}  // namespace levee::proxy

#include "proxy/allocator.hpp"

#include <dlfcn.h>
#include <malloc.h>

namespace levee::proxy {

namespace {
struct Tcmalloc {
  void (*thread_idle)() = nullptr;
  void (*release)(std::size_t) = nullptr;
  Tcmalloc() noexcept {
    // gperftools' C interface (gperftools/malloc_extension_c.h).
    thread_idle = reinterpret_cast<void (*)()>(::dlsym(RTLD_DEFAULT, "MallocExtension_MarkThreadTemporarilyIdle"));
    release = reinterpret_cast<void (*)(std::size_t)>(::dlsym(RTLD_DEFAULT, "MallocExtension_ReleaseToSystem"));
  }
};
}  // namespace

void release_free_memory(std::size_t bytes) noexcept {
  static const Tcmalloc tc;
  if (tc.release) {
    if (tc.thread_idle) tc.thread_idle();  // the thread's cache back to the central lists
    tc.release(bytes);
    return;
  }
  ::malloc_trim(0);
}

}  // namespace levee::proxy

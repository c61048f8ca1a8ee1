#include "proxy/allocator.hpp"

#include <dlfcn.h>
#include <malloc.h>

namespace levee::proxy {

namespace {
using Fn = void (*)();
struct Tcmalloc {
  Fn thread_idle = nullptr;
  Fn release = nullptr;
  Tcmalloc() noexcept {
    // gperftools' C interface (gperftools/malloc_extension_c.h).
    thread_idle = reinterpret_cast<Fn>(::dlsym(RTLD_DEFAULT, "MallocExtension_MarkThreadTemporarilyIdle"));
    release = reinterpret_cast<Fn>(::dlsym(RTLD_DEFAULT, "MallocExtension_ReleaseFreeMemory"));
  }
};
}  // namespace

void release_free_memory() noexcept {
  static const Tcmalloc tc;
  if (tc.release) {
    if (tc.thread_idle) tc.thread_idle();  // the thread's cache back to the central lists
    tc.release();
    return;
  }
  ::malloc_trim(0);
}

}  // namespace levee::proxy

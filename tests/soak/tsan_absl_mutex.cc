// ThreadSanitizer build only: tells TSan about absl::Mutex. Debian's abseil is a shared
// library built without -fsanitize=thread, so TSan sees neither its locks nor the
// happens-before they create, and would report every access guarded by an absl::Mutex as a
// race. This file interposes absl::Mutex's lock/unlock entry points (the executable's
// definition wins over the shared library's), calls the real ones (dlsym RTLD_NEXT) and
// annotates acquire/release on the mutex's address. Nothing here is suppressed.
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "absl/base/options.h"
#include "absl/synchronization/mutex.h"

extern "C" void __tsan_acquire(void* addr);
extern "C" void __tsan_release(void* addr);

namespace {

#define KVTIER_STR2(x) #x
#define KVTIER_STR(x) KVTIER_STR2(x)

using Fn = void (*)(absl::Mutex*);
using TryFn = bool (*)(absl::Mutex*);

// The real function's address by its mangled name (absl::<inline ns>::Mutex::<name>()).
void* Real(void** cache, const char* name) {
  void* fn = __atomic_load_n(cache, __ATOMIC_ACQUIRE);
  if (fn != nullptr) return fn;
#if ABSL_OPTION_USE_INLINE_NAMESPACE
  const char* ns = KVTIER_STR(ABSL_OPTION_INLINE_NAMESPACE_NAME);
  char mangled[160];
  std::snprintf(mangled, sizeof mangled, "_ZN4absl%zu%s5Mutex%zu%sEv", std::strlen(ns), ns,
                std::strlen(name), name);
#else
  char mangled[160];
  std::snprintf(mangled, sizeof mangled, "_ZN4absl5Mutex%zu%sEv", std::strlen(name), name);
#endif
  fn = dlsym(RTLD_NEXT, mangled);
  if (fn == nullptr) {
    std::fprintf(stderr, "tsan_absl_mutex: %s not found\n", mangled);
    std::abort();
  }
  __atomic_store_n(cache, fn, __ATOMIC_RELEASE);
  return fn;
}

void* lock_fn;
void* unlock_fn;
void* reader_lock_fn;
void* reader_unlock_fn;
void* try_lock_fn;
void* reader_try_lock_fn;

}  // namespace

namespace absl {
ABSL_NAMESPACE_BEGIN

void Mutex::Lock() {
  reinterpret_cast<Fn>(Real(&lock_fn, "Lock"))(this);
  __tsan_acquire(this);
}
void Mutex::Unlock() {
  __tsan_release(this);
  reinterpret_cast<Fn>(Real(&unlock_fn, "Unlock"))(this);
}
void Mutex::ReaderLock() {
  reinterpret_cast<Fn>(Real(&reader_lock_fn, "ReaderLock"))(this);
  __tsan_acquire(this);
}
void Mutex::ReaderUnlock() {
  __tsan_release(this);
  reinterpret_cast<Fn>(Real(&reader_unlock_fn, "ReaderUnlock"))(this);
}
bool Mutex::TryLock() {
  const bool locked = reinterpret_cast<TryFn>(Real(&try_lock_fn, "TryLock"))(this);
  if (locked) __tsan_acquire(this);
  return locked;
}
bool Mutex::ReaderTryLock() {
  const bool locked = reinterpret_cast<TryFn>(Real(&reader_try_lock_fn, "ReaderTryLock"))(this);
  if (locked) __tsan_acquire(this);
  return locked;
}

ABSL_NAMESPACE_END
}  // namespace absl

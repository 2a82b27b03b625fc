// RemoteBlockBytes: the bytes of a block got from the remote tier. Plain value type.
#ifndef KVTIER_REMOTE_REMOTE_BLOCK_BYTES_H_
#define KVTIER_REMOTE_REMOTE_BLOCK_BYTES_H_

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

namespace kvtier {

// A block's bytes, allocated without being zero-filled first: a lookup's value is received
// straight into them (2 MiB of memset per block saved).
template <typename T>
struct UninitializedAllocator : std::allocator<T> {
  template <typename U>
  struct rebind {
    using other = UninitializedAllocator<U>;
  };
  UninitializedAllocator() = default;
  template <typename U>
  UninitializedAllocator(const UninitializedAllocator<U>&) noexcept {}  // NOLINT: rebinding
  template <typename U>
  void construct(U* p) noexcept {
    ::new (static_cast<void*>(p)) U;  // default-initialised: no zeroes for bytes
  }
  template <typename U, typename... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
};
using RemoteBlockBytes = std::vector<uint8_t, UninitializedAllocator<uint8_t>>;

}  // namespace kvtier

#endif  // KVTIER_REMOTE_REMOTE_BLOCK_BYTES_H_

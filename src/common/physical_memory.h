// PhysicalMemoryBytes: the machine's physical memory, what host-side budgets (the host tier,
// the CPU backend's KV pool) are checked and sized against. Stateless; thread-safe.
#ifndef KVTIER_COMMON_PHYSICAL_MEMORY_H_
#define KVTIER_COMMON_PHYSICAL_MEMORY_H_

#include <cstdint>

namespace kvtier {

// Physical memory of this machine in bytes (0 when it cannot be told).
int64_t PhysicalMemoryBytes();

}  // namespace kvtier

#endif  // KVTIER_COMMON_PHYSICAL_MEMORY_H_

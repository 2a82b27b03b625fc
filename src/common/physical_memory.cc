// PhysicalMemoryBytes (physical_memory.h).
#include "common/physical_memory.h"

#include <unistd.h>

namespace kvtier {

int64_t PhysicalMemoryBytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES);
  const long page_size = ::sysconf(_SC_PAGE_SIZE);
  if (pages <= 0 || page_size <= 0) return 0;
  return static_cast<int64_t>(pages) * static_cast<int64_t>(page_size);
}

}  // namespace kvtier

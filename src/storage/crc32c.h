// CRC32C (Castagnoli, reflected polynomial 0x82F63B78), as used by iSCSI, ext4 and LevelDB:
// the checksum of every disk-tier slot and index. Stateless; thread-safe.
#ifndef KVTIER_STORAGE_CRC32C_H_
#define KVTIER_STORAGE_CRC32C_H_

#include <cstddef>
#include <cstdint>

namespace kvtier::crc32c {

// The CRC32C of data[0, n) appended to a stream whose CRC32C so far is `crc` (0 to start).
// Uses the SSE4.2 crc32 instruction when the CPU has it, else a slicing-by-8 table.
uint32_t Extend(uint32_t crc, const void* data, size_t n);

// The CRC32C of data[0, n).
inline uint32_t Value(const void* data, size_t n) { return Extend(0, data, n); }

// The table-driven implementation, always available (tests compare it with Extend).
uint32_t ExtendPortable(uint32_t crc, const void* data, size_t n);

// Whether Extend runs on the hardware instruction on this CPU.
bool HardwareAccelerated();

}  // namespace kvtier::crc32c

#endif  // KVTIER_STORAGE_CRC32C_H_

// CRC32C: slicing-by-8 tables built at compile time, plus the SSE4.2 instruction chosen at
// run time on x86-64. Stateless; thread-safe.
#include "storage/crc32c.h"

#include <array>
#include <bit>
#include <cstring>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <nmmintrin.h>
#define KVTIER_CRC32C_X86 1
#endif

namespace kvtier::crc32c {
namespace {

constexpr uint32_t kPolynomial = 0x82F63B78u;  // reflected Castagnoli

// tables[k][b]: the CRC register after byte b followed by k zero bytes (slicing-by-8).
using Tables = std::array<std::array<uint32_t, 256>, 8>;

constexpr Tables MakeTables() {
  Tables t{};
  for (uint32_t b = 0; b < 256; ++b) {
    uint32_t c = b;
    for (int i = 0; i < 8; ++i) c = (c >> 1) ^ ((c & 1u) ? kPolynomial : 0u);
    t[0][b] = c;
  }
  for (size_t k = 1; k < 8; ++k) {
    for (size_t b = 0; b < 256; ++b) t[k][b] = (t[k - 1][b] >> 8) ^ t[0][t[k - 1][b] & 0xFFu];
  }
  return t;
}

constexpr Tables kTables = MakeTables();

inline uint32_t ByteStep(uint32_t c, uint8_t byte) {
  return kTables[0][(c ^ byte) & 0xFFu] ^ (c >> 8);
}

#ifdef KVTIER_CRC32C_X86
__attribute__((target("sse4.2"))) uint32_t ExtendSse42(uint32_t crc, const uint8_t* p,
                                                      size_t n) {
  uint64_t c = static_cast<uint32_t>(~crc);
  while (n > 0 && (reinterpret_cast<uintptr_t>(p) & 7u) != 0) {
    c = _mm_crc32_u8(static_cast<uint32_t>(c), *p++);
    --n;
  }
  while (n >= 8) {
    uint64_t word;
    std::memcpy(&word, p, 8);
    c = _mm_crc32_u64(c, word);
    p += 8;
    n -= 8;
  }
  while (n > 0) {
    c = _mm_crc32_u8(static_cast<uint32_t>(c), *p++);
    --n;
  }
  return ~static_cast<uint32_t>(c);
}

bool CpuHasSse42() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("sse4.2");
}
#endif

}  // namespace

uint32_t ExtendPortable(uint32_t crc, const void* data, size_t n) {
  const auto* p = static_cast<const uint8_t*>(data);
  uint32_t c = ~crc;
  if constexpr (std::endian::native == std::endian::little) {
    while (n > 0 && (reinterpret_cast<uintptr_t>(p) & 7u) != 0) {
      c = ByteStep(c, *p++);
      --n;
    }
    while (n >= 8) {
      uint64_t word;
      std::memcpy(&word, p, 8);
      const uint32_t lo = c ^ static_cast<uint32_t>(word);
      const auto hi = static_cast<uint32_t>(word >> 32);
      c = kTables[7][lo & 0xFFu] ^ kTables[6][(lo >> 8) & 0xFFu] ^
          kTables[5][(lo >> 16) & 0xFFu] ^ kTables[4][lo >> 24] ^ kTables[3][hi & 0xFFu] ^
          kTables[2][(hi >> 8) & 0xFFu] ^ kTables[1][(hi >> 16) & 0xFFu] ^ kTables[0][hi >> 24];
      p += 8;
      n -= 8;
    }
  }
  while (n > 0) {
    c = ByteStep(c, *p++);
    --n;
  }
  return ~c;
}

bool HardwareAccelerated() {
#ifdef KVTIER_CRC32C_X86
  static const bool has = CpuHasSse42();
  return has;
#else
  return false;
#endif
}

uint32_t Extend(uint32_t crc, const void* data, size_t n) {
#ifdef KVTIER_CRC32C_X86
  if (HardwareAccelerated()) return ExtendSse42(crc, static_cast<const uint8_t*>(data), n);
#endif
  return ExtendPortable(crc, data, n);
}

}  // namespace kvtier::crc32c

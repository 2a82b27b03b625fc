// Fixed-width little-endian encoding of the disk tier's headers, independent of the host's
// byte order. Stateless; thread-safe.
#ifndef KVTIER_STORAGE_CODING_H_
#define KVTIER_STORAGE_CODING_H_

#include <cstdint>

namespace kvtier::coding {

inline void PutFixed32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
inline void PutFixed64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
inline uint32_t GetFixed32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(p[i]) << (8 * i);
  return v;
}
inline uint64_t GetFixed64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}

}  // namespace kvtier::coding

#endif  // KVTIER_STORAGE_CODING_H_

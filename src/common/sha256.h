// SHA-256 (OpenSSL's libcrypto): the digest that names cached KV blocks, so that a block's
// identity cannot be forged by a crafted prompt. Sha256Digest is a plain value type;
// a Sha256 hasher is used by one thread at a time.
#ifndef KVTIER_COMMON_SHA256_H_
#define KVTIER_COMMON_SHA256_H_

#include <array>
#include <compare>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

struct evp_md_ctx_st;  // OpenSSL's EVP_MD_CTX

namespace kvtier {

struct Sha256Digest {
  static constexpr size_t kBytes = 32;
  std::array<uint8_t, kBytes> bytes{};

  // The first 8 bytes, little-endian: a well-mixed 64-bit summary (hash tables, logs).
  uint64_t Prefix64() const {
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(bytes[static_cast<size_t>(i)]) << (8 * i);
    return v;
  }
  std::string Hex() const;
  friend bool operator==(const Sha256Digest&, const Sha256Digest&) = default;
  friend auto operator<=>(const Sha256Digest&, const Sha256Digest&) = default;
};

// Incremental SHA-256. Finish returns the digest of everything updated since construction
// or the previous Finish, and starts over.
// Allocation failure inside libcrypto (its only failure mode with a fixed algorithm) is
// thrown as std::bad_alloc, like any other allocation in the library.
class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;

  Sha256& Update(const void* data, size_t size);
  Sha256& Update(std::string_view text) { return Update(text.data(), text.size()); }
  Sha256& UpdateU32(uint32_t v);  // little-endian
  Sha256& UpdateU64(uint64_t v);  // little-endian
  Sha256Digest Finish();

  static Sha256Digest Of(const void* data, size_t size);

 private:
  void Start();
  ::evp_md_ctx_st* ctx_;
};

}  // namespace kvtier

#endif  // KVTIER_COMMON_SHA256_H_

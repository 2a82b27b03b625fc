// Sha256 over libcrypto's EVP interface. The algorithm is fetched once per process (an
// immutable handle; fetching per digest costs more than hashing a KV block's key input).
#include "common/sha256.h"

#include <openssl/evp.h>

#include <new>

namespace kvtier {
namespace {

const EVP_MD* Sha256Algorithm() {
  static const EVP_MD* const md = [] {
    const EVP_MD* fetched = EVP_MD_fetch(nullptr, "SHA256", nullptr);
    return fetched != nullptr ? fetched : EVP_sha256();
  }();
  return md;
}

void Check(int ok) {
  if (ok != 1) throw std::bad_alloc();
}

}  // namespace

std::string Sha256Digest::Hex() const {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * kBytes);
  for (uint8_t b : bytes) {
    out.push_back(kHex[b >> 4]);
    out.push_back(kHex[b & 15]);
  }
  return out;
}

Sha256::Sha256() : ctx_(EVP_MD_CTX_new()) {
  if (ctx_ == nullptr) throw std::bad_alloc();
  Start();
}

Sha256::~Sha256() { EVP_MD_CTX_free(ctx_); }

void Sha256::Start() { Check(EVP_DigestInit_ex(ctx_, Sha256Algorithm(), nullptr)); }

Sha256& Sha256::Update(const void* data, size_t size) {
  if (size > 0) Check(EVP_DigestUpdate(ctx_, data, size));
  return *this;
}

Sha256& Sha256::UpdateU32(uint32_t v) {
  uint8_t b[4];
  for (int i = 0; i < 4; ++i) b[i] = static_cast<uint8_t>(v >> (8 * i));
  return Update(b, sizeof b);
}

Sha256& Sha256::UpdateU64(uint64_t v) {
  uint8_t b[8];
  for (int i = 0; i < 8; ++i) b[i] = static_cast<uint8_t>(v >> (8 * i));
  return Update(b, sizeof b);
}

Sha256Digest Sha256::Finish() {
  Sha256Digest digest;
  unsigned int size = 0;
  Check(EVP_DigestFinal_ex(ctx_, digest.bytes.data(), &size));
  Start();
  return digest;
}

Sha256Digest Sha256::Of(const void* data, size_t size) {
  Sha256 h;
  h.Update(data, size);
  return h.Finish();
}

}  // namespace kvtier

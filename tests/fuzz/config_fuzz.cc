// Fuzzes config.json parsing: ParseModelConfig must reject malformed text with a status,
// never crash, and accept only configs that validate.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "model/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto config = kvtier::ParseModelConfig(text);
  (void)config;
  return 0;
}

// The block-quantized weight formats of GGUF files (ggml's Q8_0, Q4_0, Q4_K, Q5_K, Q6_K):
// their block geometry, dequantization, and Q8_0 and Q4_K quantization for writing GGUF. Each block
// holds its own scales, so any whole number of blocks decodes on its own. Pure functions;
// thread-safe.
//
// Layouts (little-endian; "half" is IEEE fp16):
//   Q8_0  32 values, 34 bytes: half d; int8 q[32]. x = d * q.
//   Q4_0  32 values, 18 bytes: half d; uint8 qs[16]. x[j] = d * ((qs[j] & 15) - 8) and
//         x[j + 16] = d * ((qs[j] >> 4) - 8).
//   Q4_K  256 values, 144 bytes: half d, dmin; uint8 scales[12]; uint8 qs[128]. Eight
//         sub-blocks of 32 with 6-bit scale s and min m: x = d * s * q - dmin * m.
//   Q5_K  256 values, 176 bytes: as Q4_K plus uint8 qh[32], the fifth bit of each value.
//   Q6_K  256 values, 210 bytes: uint8 ql[128], qh[64]; int8 scales[16]; half d.
//         Sixteen sub-blocks of 16: x = d * scale * (q - 32), q six bits.
#ifndef KVTIER_MODEL_BLOCK_QUANTS_H_
#define KVTIER_MODEL_BLOCK_QUANTS_H_

#include <cstdint>

#include "model/tensor.h"

namespace kvtier {

// out[0, num_elements) = the values of the blocks at `blocks`. `dtype` is a block type and
// num_elements a multiple of its block size.
void DequantizeBlocks(DType dtype, const uint8_t* blocks, int64_t num_elements, float* out);

// The 6-bit scale and min of sub-block j (0..7) of a Q4_K or Q5_K block, whose 12 packed
// scale bytes start at `scales`. Inline: the CPU dot products call it for every block.
inline void KQuantScaleMin(const uint8_t* scales, int j, int* scale, int* min) {
  if (j < 4) {
    *scale = scales[j] & 63;
    *min = scales[j + 4] & 63;
  } else {
    *scale = (scales[j + 4] & 0x0F) | ((scales[j - 4] >> 6) << 4);
    *min = (scales[j + 4] >> 4) | ((scales[j] >> 6) << 4);
  }
}

// Q8_0 of n values (n a multiple of 32), as llama.cpp's reference quantizer rounds:
// d = max |x| / 127 stored as half, q = round(x / d) (halves away from zero).
void QuantizeQ8_0(const float* values, int64_t n, uint8_t* out);

// Q4_K of n values (n a multiple of 256), the bytes llama.cpp's reference quantizer
// (quantize_row_q4_K_ref, no importance matrix) writes: each sub-block's scale and min
// from a weighted least-squares search over 21 candidate scales, the eight scales and mins
// then quantized to 6 bits against the block's largest, and the values rounded against
// those.
void QuantizeQ4_K(const float* values, int64_t n, uint8_t* out);

// True for the block types QuantizeBlocks writes (Q8_0, Q4_K).
bool CanQuantizeBlocks(DType dtype);
// QuantizeQ8_0 or QuantizeQ4_K by `dtype` (CanQuantizeBlocks).
void QuantizeBlocks(DType dtype, const float* values, int64_t n, uint8_t* out);

}  // namespace kvtier

#endif  // KVTIER_MODEL_BLOCK_QUANTS_H_

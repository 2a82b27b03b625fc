// The hardware limits `kvtier bench` divides by (docs/WORKLOADS.md, "Limits"): the HBM copy
// rate and the GEMM rates, read from what the anchors measured in the same device call —
// ceilings.py (HBM copy, bf16 GEMM) and lib_kernels.py (cuBLASLt's fp8 GEMMs on the model's
// projection shapes) — or the documented defaults where a file is not given.
#ifndef KVTIER_TOOLS_KVTIER_BENCH_CEILINGS_H_
#define KVTIER_TOOLS_KVTIER_BENCH_CEILINGS_H_

#include <cmath>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"

namespace kvtier::cli::bench {

struct Ceilings {
  double hbm_Bps = 4.17e12;
  double gemm_flops = 757e12;       // bf16 tensor-core GEMM
  double fp8_gemm_flops = NAN;      // fp8 (e4m3) GEMM; NaN until lib_kernels.py's figures are read
  std::string source = "docs/WORKLOADS.md (2026-11-29)";
  std::string fp8_source = "not measured: fp8 passes use the bf16 GEMM rate";
  // cuDNN's fused causal attention through 32 layers of Llama-3-8B at 32k tokens (bf16,
  // lib_kernels.py), in seconds: the library figure beside W4's prefill. NaN when not read.
  double cudnn_attention_32k_s = NAN;

  // The rate the linear layers' FLOPs are bounded by: the fp8 GEMM's with fp8 weights (their
  // activations are quantized too, so the products run on fp8 tensor cores) where it was
  // measured, the bf16 GEMM's otherwise. Attention's FLOPs stay at the bf16 rate.
  double ProjectionFlops(bool fp8_weights) const {
    return fp8_weights && fp8_gemm_flops > 0 ? fp8_gemm_flops : gemm_flops;
  }
};

// The JSON objects of a file's "RESULT {...}" lines (or lines that are one JSON object), in
// order; lines that do not parse are skipped. Python's NaN and Infinity values read as null.
std::vector<nlohmann::json> ReadResultLines(const std::string& path);

// ceilings.py's RESULT: "hbm_copy_TBps(read+write)" and "bf16_gemm_TFLOPs", where present.
void ApplyCeilingsResult(const nlohmann::json& result, const std::string& source, Ceilings* ceilings);

// lib_kernels.py's RESULT (its attention figure is read too: cudnn_attention_32k_s): its
// "layer_gemms_M<M>" entries give the time of one token batch of
// M rows through the 32 layers' four projections of Llama-3-8B (qkv, o, gate_up, down) with
// cuBLASLt fp8; the fp8 ceiling is the fastest rate among M >= kFp8CeilingMinRows (where the
// products, not the weight stream, bind). False, and the fp8 ceiling left unset, when none is
// usable (the cuDNN figure is read wherever it is present).
inline constexpr int kFp8CeilingMinRows = 256;
bool ApplyLibKernelsResult(const nlohmann::json& result, const std::string& source, Ceilings* ceilings);

}  // namespace kvtier::cli::bench

#endif  // KVTIER_TOOLS_KVTIER_BENCH_CEILINGS_H_

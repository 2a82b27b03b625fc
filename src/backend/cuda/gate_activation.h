// The MLP's gate activation on the GPU: SiLU (Llama, Qwen, Mistral, Phi-3) or GELU with the
// tanh approximation (Gemma's GeGLU, transformers' "gelu_pytorch_tanh"). Kernels take it as
// a template parameter, so the SiLU instances compute what they did before; launchers take
// it at run time and pick the instance. Stateless.
#ifndef KVTIER_BACKEND_CUDA_GATE_ACTIVATION_H_
#define KVTIER_BACKEND_CUDA_GATE_ACTIVATION_H_

namespace kvtier::cuda {

enum class GateActivation { kSilu, kGeluTanh };

#ifdef __CUDACC__
// act(gate) * up, in fp32. GELU-tanh with the CPU backend's constants and order of operations
// (cpu_ops.cc GeluTanhMul): 0.5 g (1 + tanh(sqrt(2 / pi) (g + 0.044715 g^3))).
template <GateActivation A>
__device__ __forceinline__ float GateTimes(float gate, float up) {
  if constexpr (A == GateActivation::kGeluTanh) {
    constexpr float kBeta = 0.7978845608028654f;  // sqrt(2 / pi), rounded to fp32 as the CPU's
    constexpr float kKappa = 0.044715f;
    const float inner = kBeta * (gate + kKappa * gate * gate * gate);
    return 0.5f * gate * (1.0f + tanhf(inner)) * up;
  } else {
    return gate / (1.0f + expf(-gate)) * up;
  }
}
#endif

}  // namespace kvtier::cuda

#endif  // KVTIER_BACKEND_CUDA_GATE_ACTIVATION_H_

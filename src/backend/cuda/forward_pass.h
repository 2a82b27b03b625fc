// ForwardPass: enqueues the forward of one prepared step (StepLaunch) on the compute
// stream — embedding gather, then per layer RMSNorm, the qkv projection, QkvPost (bias, q/k
// norms, RoPE, KV write), attention, the o projection, RMSNorm, gate|up with the gate
// activation and the down projection (a mixture-of-experts layer: its experts, moe_layer.h),
// then the final norm, the LM head and the device-side pick. Gemma adds the sandwich norms on
// the attention and MLP outputs and the logit soft-cap. With layer groups each layer reads and
// writes its group's blocks. With Parts::fork, a step that has both decode rows and prefill
// tiles runs its decode attention on the fork's side stream, joined before the o projection.
// Capturable: nothing inside waits for the device while the stream captures (grammar masks
// wait on the host only, and masked steps are never captured; the MoE experts' library path,
// which reads its grouping back to the host, gives way to the grouped tiles under capture).
// Holds no buffers of its own; one thread at a time.
#ifndef KVTIER_BACKEND_CUDA_FORWARD_PASS_H_
#define KVTIER_BACKEND_CUDA_FORWARD_PASS_H_

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "absl/status/status.h"
#include "backend/cuda/attention_fork.h"
#include "backend/cuda/cuda_weights.h"
#include "backend/cuda/cudnn_prefill.h"
#include "backend/cuda/device_kv_pool.h"
#include "backend/cuda/host_kv_streamer.h"
#include "backend/cuda/prefill_attention.h"
#include "backend/cuda/projections.h"
#include "backend/cuda/step_launch.h"
#include "backend/cuda/workspace.h"
#include "backend/cuda_options.h"
#include "backend/kv_grouping.h"
#include "backend/kv_layout.h"
#include "model/config.h"
#include "model/tensor.h"

namespace kvtier::cuda {

class ForwardPass {
 public:
  // The backend's parts the forward reads; each outlives the ForwardPass.
  struct Parts {
    const ModelConfig* config = nullptr;
    const KvLayout* layout = nullptr;  // of one block: one group's layers with groups
    // Layer groups (kv_grouping.h): each layer reads its group's table (MetaLayout::GroupIndptr)
    // at its index in the group; not enabled: one table, every layer in every block.
    const KvGrouping* grouping = nullptr;
    DType dtype = DType::kBF16;  // the compute dtype: the 16-bit arrays hold bf16 or f16
    const CudaWeights* weights = nullptr;
    const Workspace* ws = nullptr;
    Projections* projections = nullptr;
    HostKvStreamer* host_kv = nullptr;
    const DeviceKvPool* pool = nullptr;
    cudaStream_t stream = nullptr;
    CudaLaunchOptions launch;
    PrefillKernel prefill_kernel = PrefillKernel::kMma;  // the kernel the step planner tiles for
    // bf16 compute: the prefill attention on cuDNN where it takes the step (null: never).
    CudnnPrefill* cudnn = nullptr;
    // A mixed step's decode attention beside its prefill attention (null: one after the other).
    AttentionFork* fork = nullptr;
    // The MoE experts' library path (moe_library.h) where KernelSelection::moe_library (null: never).
    cublasHandle_t moe_cublas = nullptr;
  };
  explicit ForwardPass(const Parts& parts) : parts_(parts) {}

  // Logits go to logits_out (host; null: nowhere) unless the step picks ids on the device,
  // which go to the workspace's ids_host.
  absl::Status Enqueue(const StepLaunch& step, float* logits_out);

 private:
  template <typename T>
  absl::Status EnqueueAs(const StepLaunch& step, float* logits_out);

  const Parts parts_;
};

}  // namespace kvtier::cuda

#endif  // KVTIER_BACKEND_CUDA_FORWARD_PASS_H_

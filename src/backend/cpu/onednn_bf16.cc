// The oneDNN bf16 path of onednn_bf16.h.
#include "backend/cpu/onednn_bf16.h"

#include <algorithm>
#include <atomic>
#include <functional>
#include <tuple>
#include <utility>

#include "backend/cpu/dot16.h"
#include "common/cpu_features.h"

#if defined(KVTIER_HAVE_ONEDNN)
#include <omp.h>

#include <map>
#include <memory>
#include <mutex>

#include "backend/cpu/dot16_bf16pairs.h"
#include "common/thread_pool.h"
#include "oneapi/dnnl/dnnl.hpp"
#endif

namespace kvtier {

#if defined(KVTIER_HAVE_ONEDNN)
namespace {

using DnnlType = dnnl::memory::data_type;
using DnnlTag = dnnl::memory::format_tag;

// Output columns (weight rows) per slice, the unit of work of the pool's threads: fixed, so
// that an output's sum, whose order is oneDNN's for the slice's shape, never depends on the
// thread count; a slice's weights (256 x cols bf16) stay in a core's cache for every row.
constexpr int64_t kDnnlSliceColumns = 256;

// OpenMP's thread count for this thread set to one while it lives, then restored: the
// setting is the calling thread's own (an application's OpenMP code on other threads is
// untouched), and with it oneDNN runs inline instead of starting a team beside the pool.
class DnnlSingleOmpThread {
 public:
  DnnlSingleOmpThread() : saved_(omp_get_max_threads()) { omp_set_num_threads(1); }
  ~DnnlSingleOmpThread() { omp_set_num_threads(saved_); }
  DnnlSingleOmpThread(const DnnlSingleOmpThread&) = delete;
  DnnlSingleOmpThread& operator=(const DnnlSingleOmpThread&) = delete;

 private:
  const int saved_;
};

dnnl::engine& DnnlEngine() {
  static dnnl::engine* engine = new dnnl::engine(dnnl::engine::kind::cpu, 0);  // never destroyed: used at exit
  return *engine;
}

// x (rows x depth, bf16, row-major) times the weights' rows [n0, n0 + width) as a
// (depth x width) matrix in column order, into out (rows x width, row stride out_stride):
// rows a run-time dimension; the scratchpad is the caller's.
struct DnnlSlicePrimitive {
  dnnl::matmul::primitive_desc pd;
  dnnl::matmul matmul;
  size_t scratchpad_bytes = 0;
};

dnnl::memory::desc DnnlWeightsDesc(int64_t depth, int64_t width) {
  return dnnl::memory::desc({depth, width}, DnnlType::bf16, dnnl::memory::dims{1, depth});
}

dnnl::memory::desc DnnlOutDesc(int64_t rows, int64_t width, int64_t out_stride) {
  return dnnl::memory::desc({rows, width}, DnnlType::f32, dnnl::memory::dims{out_stride, 1});
}

// The primitives by (width, depth, out_stride); created on first use, kept for the
// process (a model's distinct projection shapes times at most two slice widths each).
class DnnlPrimitiveCache {
 public:
  // nullptr when oneDNN cannot create it.
  const DnnlSlicePrimitive* Get(int64_t width, int64_t depth, int64_t out_stride) {
    std::lock_guard<std::mutex> lock(mu_);
    auto& slot = primitives_[std::make_tuple(width, depth, out_stride)];
    if (slot == nullptr) slot = Create(width, depth, out_stride);
    return slot.get();
  }

 private:
  static std::unique_ptr<DnnlSlicePrimitive> Create(int64_t width, int64_t depth, int64_t out_stride) {
    try {
      const DnnlSingleOmpThread single;  // the primitive is made for the one thread it runs on
      dnnl::primitive_attr attr;
      attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
      const dnnl::memory::desc src({DNNL_RUNTIME_DIM_VAL, depth}, DnnlType::bf16, DnnlTag::ab);
      auto prim = std::make_unique<DnnlSlicePrimitive>();
      prim->pd = dnnl::matmul::primitive_desc(
          dnnl::matmul::desc(src, DnnlWeightsDesc(depth, width), DnnlOutDesc(DNNL_RUNTIME_DIM_VAL, width, out_stride)), attr,
          DnnlEngine());
      prim->matmul = dnnl::matmul(prim->pd);
      prim->scratchpad_bytes = prim->pd.scratchpad_desc().get_size();
      return prim;
    } catch (const dnnl::error&) {
      return nullptr;
    }
  }

  std::mutex mu_;
  std::map<std::tuple<int64_t, int64_t, int64_t>, std::unique_ptr<DnnlSlicePrimitive>> primitives_;
};

DnnlPrimitiveCache& DnnlCache() {
  static DnnlPrimitiveCache* cache = new DnnlPrimitiveCache();
  return *cache;
}

// Runs one slice on the calling thread; false when oneDNN failed.
bool RunDnnlSlice(const DnnlSlicePrimitive& prim, const uint16_t* x, int64_t rows, int64_t depth, const uint16_t* weights,
              int64_t width, float* out, int64_t out_stride) {
  thread_local std::vector<uint8_t> scratchpad;
  try {
    const DnnlSingleOmpThread single;
    if (scratchpad.size() < prim.scratchpad_bytes) scratchpad.resize(prim.scratchpad_bytes);
    thread_local dnnl::stream stream(DnnlEngine());
    dnnl::memory src(dnnl::memory::desc({rows, depth}, DnnlType::bf16, DnnlTag::ab), DnnlEngine(), const_cast<uint16_t*>(x));
    dnnl::memory wei(DnnlWeightsDesc(depth, width), DnnlEngine(), const_cast<uint16_t*>(weights));
    dnnl::memory dst(DnnlOutDesc(rows, width, out_stride), DnnlEngine(), out);
    dnnl::memory pad(prim.pd.scratchpad_desc(), DnnlEngine(), scratchpad.data());
    prim.matmul.execute(stream, {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, wei}, {DNNL_ARG_DST, dst},
                                 {DNNL_ARG_SCRATCHPAD, pad}});
    stream.wait();
    return true;
  } catch (const dnnl::error&) {
    return false;
  }
}

}  // namespace

bool OnednnBf16Available() {
  static const bool available = CpuHasAvx512Bf16();
  return available;
}

bool OnednnBf16MatMul(const CpuMatrix& w, const float* x, const float* bias, int64_t rows, float* out,
                      ThreadPool* pool, std::vector<uint8_t>* activations) {
  const int64_t slices = (w.rows + kDnnlSliceColumns - 1) / kDnnlSliceColumns;
  const int64_t tail = w.rows - (slices - 1) * kDnnlSliceColumns;
  // The primitives first, on this thread: a whole slice's and the last one's.
  const DnnlSlicePrimitive* whole = DnnlCache().Get(kDnnlSliceColumns, w.cols, w.rows);
  const DnnlSlicePrimitive* last = tail == kDnnlSliceColumns ? whole : DnnlCache().Get(tail, w.cols, w.rows);
  if (whole == nullptr || last == nullptr) return false;
  const size_t values = static_cast<size_t>(rows * w.cols);
  if (activations->size() < values * sizeof(uint16_t)) activations->resize(values * sizeof(uint16_t));
  uint16_t* rounded = reinterpret_cast<uint16_t*>(activations->data());
  auto for_ranges = [pool](int64_t n, const std::function<void(int64_t, int64_t)>& fn) {
    if (pool != nullptr) {
      pool->ParallelFor(n, fn);
    } else {
      fn(0, n);
    }
  };
  for_ranges(rows, [&](int64_t begin, int64_t end) {
    RoundToBf16Avx512(x + begin * w.cols, (end - begin) * w.cols, rounded + begin * w.cols);
  });
  const uint16_t* weights = reinterpret_cast<const uint16_t*>(w.packed.data());
  std::atomic<bool> failed{false};
  for_ranges(slices, [&](int64_t slice_begin, int64_t slice_end) {
    for (int64_t slice = slice_begin; slice < slice_end; ++slice) {
      const int64_t n0 = slice * kDnnlSliceColumns;
      const int64_t width = slice + 1 == slices ? tail : kDnnlSliceColumns;
      if (!RunDnnlSlice(slice + 1 == slices ? *last : *whole, rounded, rows, w.cols, weights + n0 * w.cols, width,
                        out + n0, w.rows)) {
        failed = true;
        return;
      }
      if (bias == nullptr) continue;
      for (int64_t t = 0; t < rows; ++t) {
        float* o = out + t * w.rows + n0;
        for (int64_t n = 0; n < width; ++n) o[n] += bias[n0 + n];
      }
    }
  });
  return !failed;
}

#else

bool OnednnBf16Available() { return false; }

bool OnednnBf16MatMul(const CpuMatrix&, const float*, const float*, int64_t, float*, ThreadPool*,
                      std::vector<uint8_t>*) {
  return false;
}

#endif

bool UsesOnednnBf16(const CpuMatrix& w, int64_t rows) {
  return w.dtype == DType::kBF16 && w.dot16 != nullptr && !w.dot16->exact && rows >= kOnednnBf16MinRows &&
         w.rows * w.cols >= kOnednnBf16MinValues && OnednnBf16Available();
}

}  // namespace kvtier

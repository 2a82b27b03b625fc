// CreateBackend: picks the CPU backend (fast or reference kernels) or the CUDA module. The CUDA module is
// loaded with dlopen only when asked for (or for "auto"), so the core library runs on a
// machine with no GPU, no driver and no CUDA libraries. Thread-safe.
#include <dlfcn.h>

#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "backend/backend.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/cuda_model_support.h"
#include "backend/cuda_module.h"
#include "backend/tensor_parallel.h"
#include "common/log.h"
#include "common/status_macros.h"
#include "model/checkpoint.h"

namespace kvtier {
namespace {

// Directory of the object (libkvtier.so or the executable) that holds this code, so the
// module installed next to the library is found first.
std::string ThisObjectDirectory() {
  Dl_info info;
  if (dladdr(reinterpret_cast<void*>(&ThisObjectDirectory), &info) == 0 || info.dli_fname == nullptr) return "";
  std::string path = info.dli_fname;
  auto slash = path.rfind('/');
  return slash == std::string::npos ? "" : path.substr(0, slash + 1);
}

// dlerror's text for a candidate that does not exist: "<name>: cannot open shared object
// file: No such file or directory", naming the candidate itself (a missing dependency of a
// module that exists names the dependency instead).
bool IsMissing(const std::string& candidate, const char* error) {
  return error == nullptr || (absl::StartsWith(error, candidate + ": ") && absl::StrContains(error, "No such file"));
}

// The module next to this library, in ../lib beside it, then on the library path. The
// error, when none loads, is one short line: that the module was not found, or why the
// first one found could not be loaded.
absl::StatusOr<CreateCudaBackendFn> LoadCudaModule() {
  static CreateCudaBackendFn cached = nullptr;
  static std::string cached_error;
  static bool tried = false;
  static absl::Mutex mu;
  absl::MutexLock lock(&mu);
  if (!tried) {
    tried = true;
    const std::string dir = ThisObjectDirectory();
    for (const std::string& candidate :
         {dir + kCudaModuleFile, dir + "../lib/" + kCudaModuleFile, std::string(kCudaModuleFile)}) {
      void* handle = dlopen(candidate.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (handle == nullptr) {
        const char* e = dlerror();
        if (cached_error.empty() && !IsMissing(candidate, e)) {
          // dlerror names the candidate's full path first when the fault is the module's own.
          cached_error = absl::StrCat("the CUDA module ", kCudaModuleFile,
                                      " cannot be loaded: ", absl::StripPrefix(e, candidate + ": "));
        }
        continue;
      }
      cached = reinterpret_cast<CreateCudaBackendFn>(dlsym(handle, kCudaModuleSymbol));
      if (cached == nullptr) cached_error = absl::StrCat(candidate, " has no symbol ", kCudaModuleSymbol);
      if (auto forward = reinterpret_cast<CudaForwardLogFn>(dlsym(handle, kCudaModuleLogSymbol))) {
        forward([](int32_t level) { return LogEnabled(static_cast<LogLevel>(level)); },
                [](int32_t level, const char* message) { LogMessage(static_cast<LogLevel>(level), message); });
      }
      break;  // the module stays loaded for the life of the process
    }
    if (cached == nullptr && cached_error.empty()) {
      cached_error = absl::StrCat("the CUDA module ", kCudaModuleFile,
                                  " was not found beside libkvtier, in ../lib or on the library path");
    }
  }
  if (cached == nullptr) return absl::UnimplementedError(cached_error);
  return cached;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Backend>> CreateBackend(std::string_view name, const Checkpoint& checkpoint,
                                                       const BackendOptions& options) {
  RETURN_IF_ERROR(ValidateTensorParallelOptions(options.tensor_parallel, options.devices));
  RETURN_IF_ERROR(ValidateTensorParallelModel(checkpoint.config(), options.tensor_parallel));
  if (name == "cuda" && options.tensor_parallel > 1) {
    // Never a silent TP=1 run in its place: the caller sized the model for several GPUs.
    return absl::UnimplementedError(absl::StrCat(
        "tensor_parallel ", options.tensor_parallel,
        " on the cuda backend is not yet implemented (it needs the NCCL all-reduce and one device pool per GPU); "
        "the cpu backend runs the sharded plan"));
  }
  if (name == "auto" && options.tensor_parallel > 1) {
    Log(LogLevel::kWarn, "backend auto: tensor_parallel ", options.tensor_parallel,
        " runs on the CPU (the cuda backend does not shard yet)");
  } else if (name == "cuda" || name == "auto") {
    // A model the CUDA forward cannot run is refused by name ("auto": run on the CPU).
    const absl::Status supported = CudaForwardSupports(checkpoint.config());
    if (!supported.ok() && name == "cuda") return supported;
    absl::StatusOr<CreateCudaBackendFn> create =
        supported.ok() ? LoadCudaModule() : absl::StatusOr<CreateCudaBackendFn>(supported);
    absl::Status why_not_cuda = create.status();
    if (create.ok()) {
      auto backend = (*create)(kCudaModuleAbiVersion, checkpoint, options);
      // A cancelled creation is not a reason to try the CPU.
      if (backend.ok() || name == "cuda" || absl::IsCancelled(backend.status())) return backend;
      why_not_cuda = backend.status();
    } else if (name == "cuda") {
      return create.status();
    }
    // "auto": no usable GPU, fall back to the CPU reference backend — the caller asked for
    // speed it will not get, so say why.
    Log(LogLevel::kWarn, "backend auto: using the CPU (", why_not_cuda.message(), ")");
  } else if (name != "cpu" && name != "cpu-reference") {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown backend '", std::string(name), "' (expected auto, cpu, cpu-reference or cuda)"));
  }
  BackendOptions cpu_options = options;
  if (name == "cpu-reference") cpu_options.cpu_kernels = CpuKernels::kReference;
  auto cpu = CpuBackend::Create(checkpoint, cpu_options);
  if (!cpu.ok()) return cpu.status();
  return std::unique_ptr<Backend>(std::move(*cpu));
}

}  // namespace kvtier

// CreateBackend: picks the CPU reference backend or the CUDA module. The CUDA module is
// loaded with dlopen only when asked for (or for "auto"), so the core library runs on a
// machine with no GPU, no driver and no CUDA libraries. Thread-safe.
#include <dlfcn.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "backend/backend.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/cuda_module.h"
#include "common/log.h"
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

absl::StatusOr<CreateCudaBackendFn> LoadCudaModule() {
  static CreateCudaBackendFn cached = nullptr;
  static std::string cached_error;
  static bool tried = false;
  static absl::Mutex mu;
  absl::MutexLock lock(&mu);
  if (!tried) {
    tried = true;
    std::string errors;
    const std::string dir = ThisObjectDirectory();
    for (const std::string& candidate :
         {dir + kCudaModuleFile, dir + "../lib/" + kCudaModuleFile, std::string(kCudaModuleFile)}) {
      void* handle = dlopen(candidate.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (handle == nullptr) {
        const char* e = dlerror();
        absl::StrAppend(&errors, "\n  ", candidate, ": ", e ? e : "not loadable");
        continue;
      }
      cached = reinterpret_cast<CreateCudaBackendFn>(dlsym(handle, kCudaModuleSymbol));
      if (cached == nullptr) absl::StrAppend(&errors, "\n  ", candidate, ": no symbol ", kCudaModuleSymbol);
      if (auto forward = reinterpret_cast<CudaForwardLogFn>(dlsym(handle, kCudaModuleLogSymbol))) {
        forward([](int32_t level) { return LogEnabled(static_cast<LogLevel>(level)); },
                [](int32_t level, const char* message) { LogMessage(static_cast<LogLevel>(level), message); });
      }
      break;  // the module stays loaded for the life of the process
    }
    if (cached == nullptr) cached_error = absl::StrCat("the CUDA backend module could not be loaded:", errors);
  }
  if (cached == nullptr) return absl::UnimplementedError(cached_error);
  return cached;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Backend>> CreateBackend(std::string_view name, const Checkpoint& checkpoint,
                                                       const BackendOptions& options) {
  if (name == "cuda" || name == "auto") {
    auto create = LoadCudaModule();
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
    Log(LogLevel::kWarn, "backend auto: using the CPU backend because the CUDA backend is not usable: ",
        why_not_cuda.message());
  } else if (name != "cpu") {
    return absl::InvalidArgumentError(absl::StrCat("unknown backend '", std::string(name), "' (expected auto, cpu or cuda)"));
  }
  auto cpu = CpuBackend::Create(checkpoint, options);
  if (!cpu.ok()) return cpu.status();
  return std::unique_ptr<Backend>(std::move(*cpu));
}

}  // namespace kvtier

// ContextFlags: every context option of the C API (kvtier.h, kvt_options) as a flag named
// after its key, '_' written '-' (gpu_mem_limit is --gpu-mem-limit). Values are checked
// against the option's range while the command line is parsed, so a bad one is a usage
// error naming the flag; the library validates them again when they are set. Because the
// names correspond one to one, the library's messages, which name option keys, are
// rewritten to name the flags (InFlagTerms). Not thread-safe (CLI startup).
#ifndef KVTIER_TOOLS_KVTIER_CONTEXT_FLAGS_H_
#define KVTIER_TOOLS_KVTIER_CONTEXT_FLAGS_H_

#include <map>
#include <string>

#include "command_line.h"
#include "kvtier/kvtier.h"

namespace kvtier::cli {

class ContextFlags {
 public:
  // Adds one flag per context option to `command_line`; values land in this object.
  void AddTo(CommandLine* command_line);

  // Sets the options the command line gave (after SetCudaOptionsFromEnvironment, so a flag
  // overrides its environment variable). Returns "" or the failure, in flag terms.
  std::string Apply(kvt_options* options) const;

  // The value given for `key` ("" when not given).
  std::string Get(const std::string& key) const;

  // `message` with each context option key it names replaced by the key's flag:
  // "gpu_kv_bytes 0 needs gpu_mem_limit > 0" -> "--gpu-kv-bytes 0 needs --gpu-mem-limit > 0".
  // Keys that are plain words (backend, threads, preemption) only when quoted: 'backend'.
  static std::string InFlagTerms(const std::string& message);

  // "--gpu-mem-limit" for "gpu_mem_limit".
  static std::string FlagOf(const std::string& key);

 private:
  std::map<std::string, std::string> values_;  // key -> value as the library takes it
};

}  // namespace kvtier::cli

#endif  // KVTIER_TOOLS_KVTIER_CONTEXT_FLAGS_H_

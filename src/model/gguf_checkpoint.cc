// Checkpoint::OpenGguf: a GGUF file as a checkpoint (checkpoint.h): the config from its
// metadata, its tensors under their HF names, the Q/K rows of `llama` models put back in
// HF's order. Immutable after Open; thread-safe reads.
#include <memory>
#include <optional>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "model/checkpoint.h"
#include "model/gguf_file.h"
#include "model/gguf_model.h"

namespace kvtier {

absl::Status Checkpoint::OpenGguf(const ProgressFn& progress) {
  ProgressStage opening(progress, "files", 1);
  RETURN_IF_ERROR(opening.Begin());
  ASSIGN_OR_RETURN(gguf_, GgufFile::Open(path_));
  RETURN_IF_ERROR(opening.End());
  ASSIGN_OR_RETURN(config_, ModelConfigFromGguf(*gguf_));
  // Each block has at least nine tensors: a block count the file cannot hold is refused
  // before the expected tensors of so many blocks are listed.
  if (config_.num_layers > static_cast<int64_t>(gguf_->tensors().size()) / 9) {
    return absl::NotFoundError(absl::StrCat(path_, ": ", std::string(GgufArchitectureName(config_.architecture)), ".block_count is ",
                                            config_.num_layers, " but the file holds only ", gguf_->tensors().size(),
                                            " tensors"));
  }
  ASSIGN_OR_RETURN(std::optional<GenerationConfig> generation, GenerationConfigFromGguf(*gguf_));
  if (generation.has_value()) {
    generation_config_ = *std::move(generation);
    has_generation_config_ = true;
  }
  for (const GgufTensorInfo& t : gguf_->tensors()) {
    // Tensors kvtier does not read (rope_freqs.weight is read into the config) are skipped.
    const std::optional<std::string> name = HfTensorName(t.name);
    if (!name.has_value()) continue;
    if (!t.type->dtype.has_value()) {
      unsupported_[*name] = absl::StrCat(std::string(t.type->name), " (GGUF tensor ", t.name, ")");
      continue;
    }
    TensorView view;
    view.name = *name;
    view.dtype = *t.type->dtype;
    view.shape = t.Shape();
    view.data = t.data;
    const std::optional<int64_t> heads = RopePermutedHeads(config_, *name);
    const int64_t rows = view.shape.empty() ? 0 : view.shape[0];
    // A tensor of the wrong shape is left as it is: Validate names it.
    if (heads.has_value() && rows > 0 && rows % (2 * *heads) == 0 && t.nbytes % static_cast<size_t>(rows) == 0) {
      auto rows_in_hf_order = std::make_unique<uint8_t[]>(t.nbytes);
      PermuteRopeRows(t.data, rows_in_hf_order.get(), rows, t.nbytes / static_cast<size_t>(rows), *heads,
                      /*to_gguf=*/false);
      view.data = rows_in_hf_order.get();
      owned_.push_back(std::move(rows_in_hf_order));
    }
    tensors_.emplace(*name, std::move(view));
  }
  return Validate(SupportedGgmlTypeNames(), progress);
}

}  // namespace kvtier

// The stage description that `adagrouper-calib stages` measures: a decoder-only
// transformer (GPT-style: pre-LayerNorm, causal self-attention, GeLU MLP) cut into
// pipeline stages. docs/calibration.md, "Stage description", documents the file.
//
//   {"name": "gpt-small-4stage", "dtype": "fp16", "hidden": 1024, "heads": 16,
//    "sequence_length": 1024, "vocabulary": 50257, "global_batch_size": 64,
//    "stages": [{"embedding": true, "layers": 6}, {"layers": 6},
//               {"layers": 6}, {"layers": 6, "head": true}]}
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace adagrouper::calib {

enum class Dtype { fp16, fp32 };
std::string_view dtype_name(Dtype d);
std::size_t dtype_bytes(Dtype d);

enum class LayerKind { embedding, transformer, head };
std::string_view layer_kind_name(LayerKind k);

// One layer of the model. `index` numbers the layers of the whole model from 0, in
// pipeline order (stage 0's embedding is layer 0 when it has one).
struct LayerDesc {
  int index = 0;
  int stage = 0;
  LayerKind kind = LayerKind::transformer;
};

struct StageDescription {
  std::string name;
  std::string source;  // the file, for messages
  Dtype dtype = Dtype::fp16;
  int hidden = 0;           // h
  int heads = 0;            // a (divides h)
  int sequence_length = 0;  // s
  int ffn_hidden = 0;       // f (default 4h)
  int vocabulary = 0;       // V (required with an embedding or a head)
  std::optional<int> global_batch_size;
  std::optional<double> memory_limit_bytes;
  double static_overhead_bytes = 0;  // added to every stage's static bytes (context, workspaces)

  struct Stage {
    bool embedding = false;  // word and position embeddings before the layers (stage 0 only)
    int layers = 0;          // transformer layers
    bool head = false;       // final LayerNorm, LM head and cross-entropy loss (last stage only)
  };
  std::vector<Stage> stages;

  int num_stages() const { return static_cast<int>(stages.size()); }
  // The layers of stage s, in order, with their model-wide indices.
  std::vector<LayerDesc> layers_of(int stage) const;
  int num_layers() const;
};

StageDescription load_stage_description(const std::filesystem::path& path);
StageDescription parse_stage_description(const nlohmann::json& doc, const std::string& source);

// Sizes that follow from the shapes alone (the stage model measures what it keeps; these
// are the closed forms docs/calibration.md gives, used by tests and for messages).
struct LayerShape {
  std::uint64_t parameters = 0;      // number of parameters
  std::uint64_t output_bytes = 0;    // the tensor the layer passes on (0 for the head)
};
LayerShape layer_shape(const StageDescription& d, LayerKind kind, int micro_batch_size);

}  // namespace adagrouper::calib

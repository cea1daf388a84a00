// One pipeline stage of a stage description, built on a backend for one micro-batch
// size: parameters, gradients, Adam state, the activations each layer keeps for its
// backward, and workspaces, all allocated up front. forward(i) / backward(i) enqueue a
// layer's real work on a stream (the same code for every backend: GEMMs, LayerNorm,
// causal softmax attention, GeLU MLP, embeddings, LM head with cross-entropy).
//
// Activation bytes are what the forward pass actually keeps: the bytes of the buffers
// a layer's forward writes and its backward reads (its input included, its output not:
// the next layer keeps that, or it is the stage's message).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "backend.h"
#include "description.h"

namespace adagrouper::calib {

struct LayerSizes {
  std::uint64_t activation_bytes = 0;  // kept by forward for backward
  std::uint64_t output_bytes = 0;      // the tensor passed on (0 for the head)
  std::uint64_t parameter_bytes = 0;   // the layer's weights (activation dtype)
};

class StageModel {
 public:
  // Allocates and initializes stage `stage` at `micro_batch_size` (initialization runs on
  // `stream`). Throws InputError when a dimension does not fit the kernels (b * s rows
  // above 2^31), CalibError when memory runs out.
  StageModel(Backend& backend, Stream& stream, const StageDescription& d, int stage, int micro_batch_size,
             std::uint64_t seed);
  ~StageModel();
  StageModel(const StageModel&) = delete;
  StageModel& operator=(const StageModel&) = delete;

  int num_layers() const;
  const LayerDesc& layer(int i) const;
  LayerSizes sizes(int i) const;
  // Sum over the layers.
  std::uint64_t activation_bytes() const;
  std::uint64_t parameter_count() const;
  // What stays allocated across iterations: parameters, f32 gradients, Adam moments and
  // (fp16) f32 master weights, plus the description's static_overhead_bytes.
  std::uint64_t static_bytes() const;
  // The message the stage sends forward (0 on the last stage).
  std::uint64_t output_bytes() const;

  // Enqueue layer i's forward / backward on `stream`. Backward of layer i needs the
  // forward of layer i and the backward of layer i+1 before it (the gradient arriving
  // from the next stage is a filled buffer).
  void forward(Stream& stream, int i);
  void backward(Stream& stream, int i);
  // One Adam step over the stage's parameters (zeroes the gradients).
  void optimizer_step(Stream& stream);

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace adagrouper::calib

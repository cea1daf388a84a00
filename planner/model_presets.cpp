// The device and architecture presets of `adagrouper model`, with where their numbers come from.
#include <fmt/format.h>

#include "error.h"
#include "model.h"

namespace adagrouper::planner {

Device device_preset(std::string_view name, const std::string& what) {
  Device d;
  if (name == "v100-32gb") {
    d.name = "V100-SXM2-32GB";
    d.memory_bytes = 32.0 * (1ull << 30);
    d.peak_flops = 125e12;
    d.memory_bandwidth = 900e9;
    d.gemm_efficiency = 0.48;
    d.gemm_half_rows = 256;
    d.attention_efficiency = 0.25;
    d.memory_efficiency = 0.78;
    d.kernel_overhead_s = 4e-6;
    d.reserved_bytes = 1e9;
    d.source =
        "NVIDIA V100 datasheet: 125 TFLOP/s fp16 tensor core, 900 GB/s HBM2, 32 GB. Efficiencies as in "
        "configs/pipelines/derive_gpt.py and derive_unet.py: large fp16 GEMMs reach 48% of peak (falling as "
        "n/(n+256) with the rows n), fused attention 25%, elementwise kernels 700 GB/s (78%); 4 us per kernel "
        "launch; 1e9 bytes of CUDA context and workspaces";
  } else if (name == "a100-40gb" || name == "a100-80gb") {
    const bool big = name == "a100-80gb";
    d.name = big ? "A100-SXM4-80GB" : "A100-SXM4-40GB";
    d.memory_bytes = (big ? 80.0 : 40.0) * (1ull << 30);
    d.peak_flops = 312e12;
    d.memory_bandwidth = big ? 2039e9 : 1555e9;
    d.gemm_efficiency = 0.65;
    d.gemm_half_rows = 512;
    d.attention_efficiency = 0.35;
    d.memory_efficiency = 0.8;
    d.kernel_overhead_s = 3e-6;
    d.reserved_bytes = 1.5e9;
    d.source = fmt::format(
        "NVIDIA A100 datasheet: 312 TFLOP/s dense fp16/bf16 tensor core, {} GB/s HBM, {} GB. GEMM efficiency "
        "0.65 assumed from Narayanan et al. 2021 (163 TFLOP/s per GPU, 52% of peak, end to end on GPT-3 175B "
        "including communication and bubbles); attention 35%, memory 80%, 3 us per kernel: assumptions, "
        "override them with measured values",
        big ? 2039 : 1555, big ? 80 : 40);
  } else if (name == "h100-80gb") {
    d.name = "H100-SXM5-80GB";
    d.memory_bytes = 80.0 * (1ull << 30);
    d.peak_flops = 989e12;
    d.memory_bandwidth = 3350e9;
    d.gemm_efficiency = 0.55;
    d.gemm_half_rows = 1024;
    d.attention_efficiency = 0.35;
    d.memory_efficiency = 0.8;
    d.kernel_overhead_s = 2.5e-6;
    d.reserved_bytes = 2e9;
    d.source =
        "NVIDIA H100 SXM5 datasheet: 989 TFLOP/s dense fp16/bf16 tensor core, 3.35 TB/s HBM3, 80 GB. "
        "Efficiencies (GEMM 55% of peak, reached at larger GEMMs than on A100; attention 35%; memory 80%; "
        "2.5 us per kernel) are assumptions, not measurements: override them with measured values";
  } else {
    throw InputError(fmt::format("{}: unknown device '{}' (presets: {})", what, name, kDevicePresets));
  }
  return d;
}

Arch arch_preset(std::string_view name, const std::string& what) {
  Arch a;
  a.name = std::string(name);
  if (name == "gpt2-xl") {
    a.arch = "gpt";
    a.layers = 48, a.hidden = 1600, a.heads = 25, a.seq_len = 1024, a.vocab = 50257;
    a.global_batch_size = 64;
    a.source =
        "GPT-2 XL (Radford et al. 2019, 'Language Models are Unsupervised Multitask Learners', table 2): 48 "
        "layers, d_model 1600, 1.5B parameters; 25 heads of 64, context 1024 and the 50257-token BPE vocabulary "
        "from the released GPT-2 configuration";
  } else if (name == "gpt3-2.7b" || name == "gpt3-6.7b") {
    const bool big = name == "gpt3-6.7b";
    a.arch = "gpt";
    a.layers = 32, a.hidden = big ? 4096 : 2560, a.heads = 32, a.seq_len = 2048, a.vocab = 50257;
    a.global_batch_size = 64;
    a.source = fmt::format(
        "GPT-3 {} (Brown et al. 2020, 'Language Models are Few-Shot Learners', table 2.1): 32 layers, d_model {}, "
        "32 heads of {}, context 2048; GPT-2 BPE vocabulary (50257)",
        big ? "6.7B" : "2.7B", big ? 4096 : 2560, big ? 128 : 80);
  } else if (name == "bert-48") {
    a.arch = "bert";
    a.layers = 48, a.hidden = 1024, a.heads = 16, a.seq_len = 512, a.vocab = 30522;
    a.global_batch_size = 64;
    a.source =
        "BERT-48, one of DAPPLE's benchmarks (Fan et al. 2021, 'DAPPLE: A Pipelined Data Parallel Approach for "
        "Training Large Models'): BERT-Large (Devlin et al. 2019: hidden 1024, 16 heads, 30522-token WordPiece "
        "vocabulary) with 48 instead of 24 encoder layers; sequence length 512 (BERT's maximum) is our choice; "
        "pre-training heads (masked LM over every position, next-sentence prediction)";
  } else if (name == "sd-unet") {
    a.arch = "unet";
    a.latent = 64, a.in_channels = 4, a.channels = {320, 640, 1280, 1280}, a.attention = {1, 1, 1, 0};
    a.layers_per_block = 2, a.heads = 8, a.context_len = 77, a.context_dim = 768, a.time_embed_dim = 1280;
    a.global_batch_size = 128;
    a.source =
        "Stable Diffusion v1 U-Net (Rombach et al. 2022; the UNet2DConditionModel configuration of "
        "CompVis/stable-diffusion-v1-4): 64x64x4 latents (512x512 images), channels 320/640/1280/1280, 2 ResNet "
        "blocks per level, transformer blocks with 8 heads and cross-attention to the 77x768 CLIP text context on "
        "the first three levels, 860M parameters; the VAE and text encoder are frozen and precomputed";
  } else if (name == "gnmt-16") {
    a.arch = "gnmt";
    a.encoder_layers = 8, a.decoder_layers = 8, a.hidden = 1024, a.vocab = 32320, a.seq_len = 50, a.target_len = 50;
    a.global_batch_size = 256;
    a.source =
        "GNMT-16, the 16-LSTM-layer configuration of PipeDream (Narayanan et al. 2019) and DAPPLE (Fan et al. "
        "2021) after Wu et al. 2016 ('Google's Neural Machine Translation System'): 8 encoder layers (the first "
        "bidirectional), 8 decoder layers with additive attention computed from the first decoder layer and fed "
        "to the others, hidden 1024, residual connections from the third layer on; a shared 32320-token BPE "
        "vocabulary and 50-token source and target sentences (WMT16 En-De as in the MLPerf GNMT reference) are "
        "our choices";
  } else {
    throw InputError(fmt::format("{}: unknown model preset '{}' (presets: {})", what, name, kArchPresets));
  }
  return a;
}

}  // namespace adagrouper::planner

#!/usr/bin/env python3
"""Derives configs/pipelines/gpt-8stage-v100.json: a GPT-3 2.7B-shaped decoder cut
into 8 pipeline stages of 4 layers, one V100-SXM2-32GB per stage.

Run `python3 configs/pipelines/derive_gpt.py` to rewrite the JSON next to this
script (`--print` shows the table only). Every number comes from the constants
below; the model is analytic (no measurement), see DESCRIPTION.
"""
from derive_common import sig, write_here

# ---- model: GPT-3 2.7B shape (Brown et al. 2020, table 2.1) -------------------
LAYERS = 32
HIDDEN = 2560          # h
HEADS = 32             # a
SEQ = 2048             # s
VOCAB = 50257          # V (GPT-2 BPE)
STAGES = 8
LAYERS_PER_STAGE = LAYERS // STAGES
GLOBAL_BATCH = 64
MICRO_BATCHES = [1, 2, 4, 8]   # b = 8 already exceeds 32 GiB on stage 0; 16 is left out

# ---- device: V100-SXM2-32GB -----------------------------------------------------
PEAK_FLOPS = 125e12    # fp16 tensor-core peak
EFF_MAX = 0.48         # best achieved GEMM fraction of peak (large GEMMs)
EFF_HALF_TOKENS = 256  # eff(n) = EFF_MAX * n / (n + EFF_HALF_TOKENS), n = b*s tokens
HBM_BW = 700e9         # achieved HBM bandwidth for elementwise kernels (peak 900e9)
OP_OVERHEAD_S = 2e-4   # per forward or backward op: framework dispatch, launches
MEMORY_LIMIT = 32 * 2**30
STATIC_OVERHEAD = 1.0e9  # CUDA context, cuBLAS/NCCL workspaces, allocator slack
BYTES_PER_PARAM = 16   # fp16 weight 2 + fp16 grad 2 + fp32 master 4 + Adam m 4, v 4
OPT_BYTES_PER_PARAM = 38  # Adam step traffic: grads, master, m, v, fp16 copy, norm, zeroing

h, a, s, V = HIDDEN, HEADS, SEQ, VOCAB


def eff(b):
    n = b * s
    return EFF_MAX * n / (n + EFF_HALF_TOKENS)


# Per transformer layer, per sample.
LAYER_PARAMS = 12 * h * h + 13 * h
LAYER_FWD_FLOPS = 24 * s * h * h + 4 * s * s * h          # Narayanan et al. 2021
LAYER_RECOMP_FLOPS = 4 * s * s * h                        # QK^T and AV, recomputed
LAYER_ACT = 34 * s * h                                    # selective recompute: no s^2 terms
LAYER_ELEM_FWD = 46 * s * h + 9 * a * s * s               # LN, GeLU, dropout, residual; softmax+dropout
LAYER_ELEM_BWD = 2 * LAYER_ELEM_FWD + 9 * a * s * s       # 2x, plus recomputed softmax+dropout

# Embeddings (first stage) and head + loss (last stage), per sample.
EMB_PARAMS = V * h + s * h                    # word + learned position embeddings
EMB_ACT = s * h                               # embedding dropout mask (1 byte)
EMB_ELEM_FWD = 8 * s * h                      # gather, position add, dropout
EMB_ELEM_BWD_FIXED = 2 * 2 * V * h            # dense word-embedding grad: zero + accumulate (per op)
EMB_ELEM_BWD = 8 * s * h
HEAD_PARAMS = 2 * h + V * h                   # final LayerNorm + untied LM head
HEAD_FWD_FLOPS = 2 * s * h * V
HEAD_BWD_FLOPS = 4 * s * h * V
HEAD_ACT = 4 * s * h + 4 * s * V              # Korthikanti et al.: 4sbh(1 + V/h)
HEAD_ELEM_FWD = 4 * s * h + 20 * s * V        # final LN; fp32 softmax cross-entropy passes
HEAD_ELEM_BWD = 8 * s * h + 8 * s * V

MESSAGE = s * h * 2                           # fp16 hidden states [b, s, h]


def stage_numbers(stage, b):
    first, last = stage == 0, stage == STAGES - 1
    L = LAYERS_PER_STAGE
    gemm_f = L * LAYER_FWD_FLOPS
    gemm_b = L * (2 * LAYER_FWD_FLOPS + LAYER_RECOMP_FLOPS)
    elem_f = L * LAYER_ELEM_FWD
    elem_b = L * LAYER_ELEM_BWD
    act = L * LAYER_ACT
    fixed_b = 0.0
    if first:
        elem_f += EMB_ELEM_FWD
        elem_b += EMB_ELEM_BWD
        fixed_b += EMB_ELEM_BWD_FIXED / HBM_BW
        act += EMB_ACT
    if last:
        gemm_f += HEAD_FWD_FLOPS
        gemm_b += HEAD_BWD_FLOPS
        elem_f += HEAD_ELEM_FWD
        elem_b += HEAD_ELEM_BWD
        act += HEAD_ACT
    fwd = b * gemm_f / (PEAK_FLOPS * eff(b)) + b * elem_f / HBM_BW + OP_OVERHEAD_S
    bwd = b * gemm_b / (PEAK_FLOPS * eff(b)) + b * elem_b / HBM_BW + fixed_b + OP_OVERHEAD_S
    entry = {
        "micro_batch_size": b,
        "forward_s": round(fwd, 5),
        "backward_s": round(bwd, 5),
        "activation_bytes": int(sig(b * act)),
    }
    if not last:
        entry["output_bytes"] = b * MESSAGE
    return entry


def stage_params(stage):
    p = LAYERS_PER_STAGE * LAYER_PARAMS
    if stage == 0:
        p += EMB_PARAMS
    if stage == STAGES - 1:
        p += HEAD_PARAMS
    return p


DESCRIPTION = (
    "GPT-3 2.7B shape (32 layers, hidden 2560, 32 heads, sequence 2048, vocabulary 50257, "
    "untied input embedding and LM head) cut into 8 stages of 4 layers, one V100-SXM2-32GB each; "
    "stage 0 also holds the word and position embeddings, stage 7 the final LayerNorm, LM head and "
    "fp32 cross-entropy. Analytic estimates, written by configs/pipelines/derive_gpt.py (rerun it "
    "to reproduce). Compute: forward FLOPs per layer and sample 24*s*h^2 + 4*s^2*h (Narayanan et "
    "al. 2021), backward 2x forward plus the recomputed attention core 4*s^2*h (selective "
    "activation recomputation, Korthikanti et al. 2022); LM head 2*s*h*V forward, 4*s*h*V "
    "backward. GEMM throughput 125 TFLOP/s fp16 tensor-core peak x 0.48 x n/(n+256) with n = b*s "
    "tokens: 53 TFLOP/s (43%) at b=1, 59 TFLOP/s (47%) at b=8. Elementwise kernels (LayerNorm, "
    "GeLU, dropout, residual adds, the a*s^2 softmax and its dropout, cross-entropy passes) are "
    "memory-bound at 700 GB/s; each op also pays 0.2 ms of framework overhead. Memory: static = "
    "16 bytes per parameter (fp16 weight and gradient, fp32 master weight and Adam moments) plus "
    "1e9 bytes of CUDA context and workspaces; stage 0 holds 449M parameters, stages 1-6 315M, "
    "stage 7 443M. Activations per layer and sample: 34*s*h bytes in fp16 (Korthikanti et al.; the "
    "5*a*s^2 attention-score term is dropped by selective recomputation, without which one "
    "micro-batch of 1 sample would need 3.4 GB per stage and 1F1B would not fit); stage 0 adds the "
    "embedding dropout mask s*h, stage 7 the head and loss 4*s*h + 4*s*V. Messages: the fp16 "
    "hidden state b*s*h*2 bytes each way (gradients default to the same size). Optimizer: Adam "
    "step and gradient-norm work, 38 bytes of HBM traffic per parameter at 700 GB/s. The "
    "embedding gradient all-reduce of tied embeddings, data parallelism and transient backward "
    "workspaces are not modelled. b=8 is listed for the planner to rule out: with 8 stages every "
    "schedule keeps at least 8 micro-batches (46 GB) of activations on stage 0 at b=8."
)


def build():
    stages = []
    for st in range(STAGES):
        stages.append({
            "static_bytes": int(sig(stage_params(st) * BYTES_PER_PARAM + STATIC_OVERHEAD)),
            "optimizer_s": round(stage_params(st) * OPT_BYTES_PER_PARAM / HBM_BW, 5),
            "profile": [stage_numbers(st, b) for b in MICRO_BATCHES],
        })
    return {
        "name": "gpt-2.7b-8stage-v100",
        "description": DESCRIPTION,
        "global_batch_size": GLOBAL_BATCH,
        "memory_limit_bytes": MEMORY_LIMIT,
        "stages": stages,
    }


def table(doc):
    print(f"{'stage':>5} {'b':>2} {'fwd_s':>8} {'bwd_s':>8} {'act_GB':>7} {'out_MB':>7} {'static_GB':>9} {'opt_s':>7}")
    for i, st in enumerate(doc["stages"]):
        for e in st["profile"]:
            print(f"{i:>5} {e['micro_batch_size']:>2} {e['forward_s']:>8.5f} {e['backward_s']:>8.5f} "
                  f"{e['activation_bytes'] / 1e9:>7.3f} {e.get('output_bytes', 0) / 1e6:>7.2f} "
                  f"{st['static_bytes'] / 1e9:>9.3f} {st['optimizer_s']:>7.4f}")


def main():
    doc = build()
    table(doc)
    write_here(doc, "gpt-8stage-v100.json", width=140)


if __name__ == "__main__":
    main()

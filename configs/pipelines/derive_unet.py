#!/usr/bin/env python3
"""Derives configs/pipelines/unet-4stage-v100.json: the Stable Diffusion v1 U-Net
(860M parameters, 64x64x4 latents, 77x768 CLIP text context) cut into 4 pipeline
stages, one V100-SXM2-32GB per stage.

Run `python3 configs/pipelines/derive_unet.py` to rewrite the JSON next to this
script (`--print` shows the tables only). The estimates are rougher than the GPT
ones (see DESCRIPTION): the network is listed unit by unit (ResNet block,
transformer block, down/up-sampler), each unit gets FLOPs, weight and elementwise
traffic, saved activations and a kernel count, and the unit sequence is cut into
4 contiguous stages that minimise the slowest stage at b = 4. Skip connections
that cross a cut travel in that boundary's message.
"""
import sys

from derive_common import sig, write_here

# ---- model: Stable Diffusion v1 UNet2DConditionModel -----------------------------
LATENT = 64                     # 64x64x4 latents (512x512 images)
IN_CH = 4
CHANNELS = [320, 640, 1280, 1280]
ATTENTION = [True, True, True, False]
LAYERS_PER_BLOCK = 2
HEADS = 8
CONTEXT_LEN, CONTEXT_DIM = 77, 768
TEMB_DIM = 1280
STAGES = 4
GLOBAL_BATCH = 128     # gpipe keeps all 128 samples in flight (~36 GB on stage 0): over the limit
MICRO_BATCHES = [1, 2, 4, 8, 16]
BALANCE_AT_B = 4

# ---- device: V100-SXM2-32GB ------------------------------------------------------
PEAK_FLOPS = 125e12
EFF_MAX = 0.45          # convolutions and GEMMs, fp16 tensor cores, channels-last
EFF_HALF = 256          # eff(n) = EFF_MAX * n / (n + EFF_HALF), n = b*H*W rows
ATTN_EFF = 0.25         # memory-efficient attention kernels (xFormers/CUTLASS, sm70)
HBM_BW = 700e9
LAUNCH_S = 6e-6         # per kernel: launch gaps between small kernels
MEMORY_LIMIT = 32 * 2**30
STATIC_OVERHEAD = 1.0e9
BYTES_PER_PARAM = 20    # 16 for mixed-precision Adam + 4 for an fp32 EMA copy
OPT_BYTES_PER_PARAM = 50  # Adam (38) + EMA update (12) HBM traffic


class Unit:
    """One piece of the network, per sample; `push`: its output is also a skip
    tensor; `pop`: it concatenates the most recent skip tensor onto its input."""

    def __init__(self, name, hw, params, gemm_flops, attn_flops, elem_bytes, act_bytes,
                 kernels, out_ch, out_hw, push=False, pop=False):
        self.__dict__.update(locals())
        del self.__dict__["self"]

    def fwd(self, b):
        n = b * self.hw
        gemm = max(b * self.gemm_flops / (PEAK_FLOPS * EFF_MAX * n / (n + EFF_HALF)),
                   2 * self.params / HBM_BW)
        return (gemm + b * self.attn_flops / (PEAK_FLOPS * ATTN_EFF) + b * self.elem_bytes / HBM_BW
                + self.kernels * LAUNCH_S)

    def bwd(self, b):
        n = b * self.hw
        gemm = max(2 * b * self.gemm_flops / (PEAK_FLOPS * EFF_MAX * n / (n + EFF_HALF)),
                   3 * 2 * self.params / HBM_BW)   # read weights, write and accumulate grads
        # attention backward recomputes the scores: 2.5x the forward work
        return (gemm + 2.5 * b * self.attn_flops / (PEAK_FLOPS * ATTN_EFF)
                + 2 * b * self.elem_bytes / HBM_BW + 2 * self.kernels * LAUNCH_S)


def conv_params(cin, cout, k):
    return k * k * cin * cout + cout


def resnet(name, cin, cout, res, pop=False, push=False):
    hw = res * res
    params = (2 * cin + conv_params(cin, cout, 3) + TEMB_DIM * cout + cout + 2 * cout
              + conv_params(cout, cout, 3) + (conv_params(cin, cout, 1) if cin != cout else 0))
    flops = 2 * hw * (9 * cin * cout + 9 * cout * cout + (cin * cout if cin != cout else 0))
    # GroupNorm + SiLU (separate kernels) on cin and cout, time-embedding add, residual add;
    # up blocks also copy the concatenation.
    elem = hw * (8 * cin + 8 * cout + 4 * cout + 6 * cout + (4 * cin if pop else 0))
    act = hw * (6 * cin + 6 * cout)   # GN, SiLU and conv inputs, fp16; dropout p = 0
    return Unit(name, hw, params, flops, 0, elem, act, 14, cout, res, push=push, pop=pop)


def transformer(name, c, res, push=False):
    n = res * res
    params = (2 * c + (c * c + c)                         # GroupNorm, proj_in
              + 2 * c + 3 * c * c + c * c + c             # LN1, self-attention q k v o
              + 2 * c + c * c + 2 * CONTEXT_DIM * c + c * c + c   # LN2, cross-attention
              + 2 * c + c * 8 * c + 8 * c + 4 * c * c + c         # LN3, GEGLU feed-forward
              + c * c + c)                                # proj_out
    gemm = 2 * n * c * c * (1 + 4 + 2 + 12 + 1) + 2 * 2 * CONTEXT_LEN * CONTEXT_DIM * c
    attn = 4 * n * n * c + 4 * n * CONTEXT_LEN * c
    elem = 72 * n * c
    act = 58 * n * c + 4 * CONTEXT_LEN * c
    return Unit(name, n, params, gemm, attn, elem, act, 40, c, res, push=push)


def sampler(name, c, res_in, res_out, push=False):
    hw_out = res_out * res_out
    params = conv_params(c, c, 3)
    flops = 2 * hw_out * 9 * c * c
    elem = 2 * c * (res_in * res_in + hw_out) * (2 if res_out > res_in else 1)
    act = 2 * c * max(res_in, res_out) ** 2
    return Unit(name, hw_out, params, flops, 0, elem, act, 3, c, res_out, push=push)


def build_units():
    u = []
    temb_params = (CHANNELS[0] * TEMB_DIM + TEMB_DIM) + (TEMB_DIM * TEMB_DIM + TEMB_DIM)
    u.append(Unit("time embedding", 1, temb_params, 0, 0, 0, 0, 6, IN_CH, LATENT))
    hw = LATENT * LATENT
    u.append(Unit("conv_in", hw, conv_params(IN_CH, CHANNELS[0], 3), 2 * hw * 9 * IN_CH * CHANNELS[0],
                  0, 2 * hw * (IN_CH + CHANNELS[0]), 2 * hw * IN_CH, 1, CHANNELS[0], LATENT, push=True))
    res, c = LATENT, CHANNELS[0]
    for lvl, cl in enumerate(CHANNELS):
        for j in range(LAYERS_PER_BLOCK):
            attn = ATTENTION[lvl]
            u.append(resnet(f"down{lvl}.resnet{j}", c, cl, res, push=not attn))
            c = cl
            if attn:
                u.append(transformer(f"down{lvl}.attn{j}", c, res, push=True))
        if lvl < len(CHANNELS) - 1:
            u.append(sampler(f"down{lvl}.downsample", c, res, res // 2, push=True))
            res //= 2
    u.append(resnet("mid.resnet0", c, c, res))
    u.append(transformer("mid.attn", c, res))
    u.append(resnet("mid.resnet1", c, c, res))
    # skip channels, in the order they were pushed
    skips = [x.out_ch for x in u if x.push]
    for lvl in reversed(range(len(CHANNELS))):
        cl = CHANNELS[lvl]
        for j in range(LAYERS_PER_BLOCK + 1):
            cs = skips.pop()
            u.append(resnet(f"up{lvl}.resnet{j}", c + cs, cl, res, pop=True))
            c = cl
            if ATTENTION[lvl]:
                u.append(transformer(f"up{lvl}.attn{j}", c, res))
        if lvl > 0:
            u.append(sampler(f"up{lvl}.upsample", c, res, res * 2))
            res *= 2
    assert not skips
    u.append(Unit("out", hw, 2 * c + conv_params(c, IN_CH, 3),
                  2 * hw * 9 * c * IN_CH, 0, hw * (8 * c + 2 * IN_CH * 4), hw * 6 * c, 5, IN_CH, LATENT))
    return u


def boundary(units, cut):
    """Bytes per sample crossing the boundary after units[:cut]: forward (hidden state,
    live skips, time embedding, text context) and backward (the same but the context,
    which belongs to the frozen text encoder)."""
    live = []
    for x in units[:cut]:
        if x.pop:
            live.pop()
        if x.push:
            live.append(2 * x.out_ch * x.out_hw ** 2)
    last = units[cut - 1]
    hidden = 0 if last.push else 2 * last.out_ch * last.out_hw ** 2
    grad = hidden + sum(live) + 2 * TEMB_DIM
    return grad + 2 * CONTEXT_LEN * CONTEXT_DIM, grad, len(live)


def partition(units, stages, b):
    """Contiguous split minimising the slowest stage's fwd + bwd at micro-batch b."""
    n = len(units)
    cost = [x.fwd(b) + x.bwd(b) for x in units]
    pre = [0.0]
    for c in cost:
        pre.append(pre[-1] + c)
    best = {(0, 0): (0.0, [])}
    for k in range(1, stages + 1):
        for end in range(k, n - (stages - k) + 1):
            cands = []
            for start in range(k - 1, end):
                if (k - 1, start) in best:
                    m, cuts = best[(k - 1, start)]
                    cands.append((max(m, pre[end] - pre[start]), cuts + [end]))
            best[(k, end)] = min(cands)
    return best[(stages, n)][1]


def stage_summary(units, lo, hi):
    names = [x.name for x in units[lo:hi]]
    return f"{names[0]} .. {names[-1]} ({hi - lo} units)"


def build():
    units = build_units()
    total_params = sum(x.params for x in units)
    cuts = partition(units, STAGES, BALANCE_AT_B)
    bounds = [0] + cuts
    stages, parts, crossings = [], [], []
    for st in range(STAGES):
        lo, hi = bounds[st], bounds[st + 1]
        mine = units[lo:hi]
        params = sum(x.params for x in mine)
        parts.append(f"stage {st}: {stage_summary(units, lo, hi)}, {params / 1e6:.0f}M parameters")
        out_b, gout_b, nskip = boundary(units, hi) if st < STAGES - 1 else (0, 0, 0)
        if st < STAGES - 1:
            crossings.append(f"{st}->{st + 1}: {out_b / 1e6:.2f} MB forward, {gout_b / 1e6:.2f} MB "
                             f"backward per sample ({nskip} skip tensors)")
        _, gin_b, _ = boundary(units, lo) if st > 0 else (0, 0, 0)
        profile = []
        for b in MICRO_BATCHES:
            e = {
                "micro_batch_size": b,
                "forward_s": round(sum(x.fwd(b) for x in mine), 5),
                "backward_s": round(sum(x.bwd(b) for x in mine), 5),
                "activation_bytes": int(sig(b * sum(x.act_bytes for x in mine))),
            }
            if st < STAGES - 1:
                e["output_bytes"] = b * out_b
            if st > 0:
                e["grad_output_bytes"] = b * gin_b
            profile.append(e)
        stages.append({
            "static_bytes": int(sig(params * BYTES_PER_PARAM + STATIC_OVERHEAD)),
            "optimizer_s": round(params * OPT_BYTES_PER_PARAM / HBM_BW, 5),
            "profile": profile,
        })
    fwd_flops = sum(x.gemm_flops + x.attn_flops for x in units)
    description = (
        "Stable Diffusion v1 U-Net (UNet2DConditionModel: channels 320/640/1280/1280, 2 ResNet blocks "
        "per level, transformer blocks with 8 heads and cross-attention to the 77x768 CLIP text context on "
        f"the first three levels; {total_params / 1e6:.0f}M parameters) trained on 64x64x4 latents; the "
        "VAE and text encoder are frozen and their outputs precomputed, so only the U-Net is pipelined. "
        "Rough analytic estimates, written by configs/pipelines/derive_unet.py (rerun it to reproduce). "
        f"The network is listed as {len(units)} units (time embedding, conv_in, ResNet block, transformer block, down/up-sampler, out = GroupNorm + SiLU + conv_out + MSE loss) and cut "
        f"into 4 contiguous stages minimising the slowest stage at b={BALANCE_AT_B}: "
        + "; ".join(parts) + ". "
        f"Forward FLOPs per sample {fwd_flops / 1e9:.0f} G: convolutions 2*H*W*9*cin*cout, transformer "
        "GEMMs 40*N*C^2 (N = H*W tokens), attention cores 4*N^2*C + 4*N*77*C. Time per unit: "
        "convolutions and GEMMs at 125 TFLOP/s x 0.45 x n/(n+256) with n = b*H*W, but never faster than "
        "reading the weights at 700 GB/s (the 8x8 and 16x16 levels are weight- and launch-bound at small "
        "b); attention cores at 25% of peak (memory-efficient attention, which runs on V100); GroupNorm, "
        "SiLU, LayerNorm, GEGLU and residual traffic at 700 GB/s; 6 us per kernel launch. Backward: 2x "
        "forward GEMMs, 2.5x attention (scores recomputed), 2x elementwise. Activations: inputs saved "
        "for backward in fp16, 6*(cin+cout) bytes per pixel per ResNet block and 58*C per token per "
        "transformer block (no attention matrices). Messages: the hidden state plus every skip "
        "connection that crosses the cut, the time embedding and the text context, fp16; gradients "
        "are the same without the context (frozen encoder): "
        + "; ".join(crossings) + ". "
        "Static: 20 bytes per parameter (mixed-precision Adam 16 plus an fp32 EMA copy 4) plus 1e9 bytes "
        "of CUDA context and workspaces; optimizer step (Adam and EMA) 50 bytes of traffic per parameter "
        "at 700 GB/s. Expect errors of tens of percent: real kernels, cuDNN algorithm choice and "
        "fusion vary. With global batch 128, gpipe keeps every sample's activations on stage 0 "
        "(about 36 GB) and exceeds the 32 GiB limit at every b; 1F1B and small-group kFkB fit."
    )
    doc = {
        "name": "sd-unet-4stage-v100",
        "description": description,
        "global_batch_size": GLOBAL_BATCH,
        "memory_limit_bytes": MEMORY_LIMIT,
        "stages": stages,
    }
    return doc, units, cuts


def main():
    doc, units, cuts = build()
    if "--units" in sys.argv[1:]:
        for i, x in enumerate(units):
            print(f"{i:>2} {x.name:<24} params {x.params / 1e6:7.2f}M  fwd(b=4) {x.fwd(4) * 1e3:7.2f} ms  "
                  f"bwd(b=4) {x.bwd(4) * 1e3:7.2f} ms  act {x.act_bytes / 1e6:7.2f} MB/sample")
    print(f"total parameters {sum(x.params for x in units) / 1e6:.1f}M, cuts after units {cuts[:-1]}")
    print(f"{'stage':>5} {'b':>2} {'fwd_s':>8} {'bwd_s':>8} {'act_GB':>7} {'out_MB':>7} {'gout_MB':>7} "
          f"{'static_GB':>9} {'opt_s':>7}")
    for i, st in enumerate(doc["stages"]):
        for e in st["profile"]:
            print(f"{i:>5} {e['micro_batch_size']:>2} {e['forward_s']:>8.5f} {e['backward_s']:>8.5f} "
                  f"{e['activation_bytes'] / 1e9:>7.3f} {e.get('output_bytes', 0) / 1e6:>7.2f} "
                  f"{e.get('grad_output_bytes', 0) / 1e6:>7.2f} {st['static_bytes'] / 1e9:>9.3f} "
                  f"{st['optimizer_s']:>7.4f}")
    write_here(doc, "unet-4stage-v100.json", width=150)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Compares stage times measured on a GPU with a reference pipeline file scaled by the
two devices' peak throughput, and gives the measured GEMM throughput.

  gpu_compare.py --measured calib/pipeline.json --reference configs/pipelines/gpt-8stage-v100.json \
      --description configs/calib/gpt-2.7b-8stage.json --peak-tflops 989 [--reference-peak-tflops 125] \
      [--json OUT.json]

For each stage and micro-batch size present in both files: the reference forward and
backward times, the same divided by peak / reference peak, the measured times and their
ratio to the scaled ones, and the measured TFLOP/s of the transformer and head GEMMs
(forward 24 s h^2 + 4 s^2 h per layer and sample, the head 2 s h V; backward twice the
forward, as the harness runs it: no recomputation), against the peak.
"""
import argparse
import json
import os
import sys


def stage_flops(desc, index, b):
    """Forward GEMM FLOPs of stage `index` for a micro-batch of b sequences."""
    h, s = desc["hidden"], desc["sequence_length"]
    f = desc.get("ffn_hidden", 4 * h)
    st = desc["stages"][index]
    layer = 2 * s * h * 3 * h + 2 * s * h * h + 2 * 2 * s * h * f + 4 * s * s * h
    flops = st.get("layers", 0) * layer
    if st.get("head"):
        flops += 2 * s * h * desc["vocabulary"]
    return b * flops


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--measured", required=True)
    ap.add_argument("--reference", required=True)
    ap.add_argument("--description", required=True, help="the stage description that was measured")
    ap.add_argument("--peak-tflops", type=float, required=True, help="this GPU's dense fp16 tensor peak")
    ap.add_argument("--reference-peak-tflops", type=float, default=125.0, help="the reference's (V100: 125)")
    ap.add_argument("--json")
    a = ap.parse_args()
    measured = json.load(open(a.measured))
    reference = json.load(open(a.reference))
    desc = json.load(open(a.description))
    if len(measured["stages"]) != len(reference["stages"]):
        sys.exit(f"gpu_compare: {a.measured}: {len(measured['stages'])} stages, {a.reference} has "
                 f"{len(reference['stages'])}")
    scale = a.peak_tflops / a.reference_peak_tflops
    rows = []
    for i, (m, r) in enumerate(zip(measured["stages"], reference["stages"])):
        ref = {e["micro_batch_size"]: e for e in r["profile"]}
        for e in m["profile"]:
            b = e["micro_batch_size"]
            if b not in ref:
                continue
            fl = stage_flops(desc, i, b)
            rows.append({
                "stage": i, "micro_batch_size": b,
                "reference_forward_s": ref[b]["forward_s"], "reference_backward_s": ref[b]["backward_s"],
                "scaled_forward_s": ref[b]["forward_s"] / scale, "scaled_backward_s": ref[b]["backward_s"] / scale,
                "forward_s": e["forward_s"], "backward_s": e["backward_s"],
                "forward_tflops": fl / e["forward_s"] / 1e12, "backward_tflops": 2 * fl / e["backward_s"] / 1e12,
            })
    if not rows:
        sys.exit("gpu_compare: no micro-batch size is in both files")
    print(f"# reference times / {scale:.2f} (peak {a.peak_tflops:g} / {a.reference_peak_tflops:g} TFLOP/s) "
          "against the measured ones; TFLOP/s of the GEMMs as measured")
    print(f"{'stage':>5} {'b':>3} {'ref F ms':>9} {'scaled F':>9} {'meas F':>9} {'meas/scaled':>11} "
          f"{'ref B ms':>9} {'scaled B':>9} {'meas B':>9} {'meas/scaled':>11} {'F TFLOP/s':>9} {'B TFLOP/s':>9}")
    for r in rows:
        print(f"{r['stage']:>5} {r['micro_batch_size']:>3} {1e3 * r['reference_forward_s']:9.2f} "
              f"{1e3 * r['scaled_forward_s']:9.2f} {1e3 * r['forward_s']:9.2f} "
              f"{r['forward_s'] / r['scaled_forward_s']:11.2f} {1e3 * r['reference_backward_s']:9.2f} "
              f"{1e3 * r['scaled_backward_s']:9.2f} {1e3 * r['backward_s']:9.2f} "
              f"{r['backward_s'] / r['scaled_backward_s']:11.2f} {r['forward_tflops']:9.0f} {r['backward_tflops']:9.0f}")
    if a.json:
        with open(a.json + ".tmp", "w") as f:
            json.dump({"scale": scale, "peak_tflops": a.peak_tflops, "rows": rows}, f, indent=1)
        os.replace(a.json + ".tmp", a.json)


if __name__ == "__main__":
    main()

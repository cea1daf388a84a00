#!/usr/bin/env bash
# The first thing to run on a GPU node (docs/calibration.md, "GPU check"): builds
# adagrouper-calib with the local CUDA and NCCL for this node's GPU, runs `stages` on one
# GPU for two micro-batch sizes, and `bandwidth` and `p2p` between two GPUs where the node
# has two (else says it skips them). Prints short tables; exits non-zero on any failure.
# Takes under 5 minutes (most of it the build).
#
#   tools/scripts/gpu-check.sh [BUILD_DIR]      (default: build-gpu; outputs in BUILD_DIR/gpu-check)
#
# Needs nvidia-smi, CUDA (nvcc, cuBLAS; CUDA_HOME or /usr/local/cuda), NCCL (NCCL_HOME,
# CUDA_HOME or the system), Open MPI, Meson and ninja. A V100 (sm_70) needs CUDA <= 12.9.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
builddir=${1:-build-gpu}
out=$builddir/gpu-check
say() { echo "gpu-check: $*"; }
fail() {
  echo "gpu-check: FAILED: $*" >&2
  exit 1
}
started=$(date +%s)

command -v nvidia-smi >/dev/null || fail "nvidia-smi not found: no NVIDIA driver on this machine"
mapfile -t gpus < <(nvidia-smi -L 2>/dev/null | grep '^GPU ' || true)
[ ${#gpus[@]} -gt 0 ] || fail "nvidia-smi lists no GPU"
say "${#gpus[@]} GPU(s): ${gpus[0]}${gpus[1]:+, ...}"
cap=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader -i 0 2>/dev/null | tr -d ' .' || true)
[[ "$cap" =~ ^[0-9]+$ ]] || fail "cannot read the compute capability of GPU 0 (nvidia-smi --query-gpu=compute_cap)"
export PATH=${CUDA_HOME:-/usr/local/cuda}/bin:$PATH
command -v nvcc >/dev/null || fail "nvcc not found (set CUDA_HOME)"
nvcc_version=$(nvcc --version | sed -n 's/.*release \([0-9.]*\).*/\1/p')
if ! nvcc --list-gpu-arch 2>/dev/null | grep -qx "compute_${cap}"; then
  fail "nvcc ${nvcc_version} cannot build for this GPU (sm_${cap}); V100 (sm_70) needs CUDA <= 12.9"
fi
say "nvcc ${nvcc_version}, building for sm_${cap} in ${builddir}/"

# Build: only the calibration harness, only for this GPU.
if [ ! -f "$builddir/build.ninja" ]; then
  meson setup "$builddir" -Dcuda=enabled -Dnccl=enabled -Dmpi=enabled -Dtests=false -Dbenchmarks=false \
    "-Dcuda-arch=${cap}" >"$builddir.setup.log" 2>&1 || { cat "$builddir.setup.log" >&2; fail "meson setup"; }
else
  meson configure "$builddir" -Dcuda=enabled -Dnccl=enabled -Dmpi=enabled "-Dcuda-arch=${cap}" >/dev/null ||
    fail "meson configure"
fi
ninja -C "$builddir" adagrouper-calib >"$builddir/gpu-check-build.log" 2>&1 ||
  { tail -30 "$builddir/gpu-check-build.log" >&2; fail "build (log: $builddir/gpu-check-build.log)"; }
calib=$builddir/adagrouper-calib
rm -rf "$out"
mkdir -p "$out"
mpirun=(mpirun --oversubscribe)
[ "$(id -u)" -ne 0 ] || mpirun+=(--allow-run-as-root)

# 1. stages on GPU 0, two micro-batch sizes, every stage in turn on the one rank.
say "stages on 1 GPU, micro-batch sizes 1 and 4 (configs/calib/gpu-check.json)"
timeout 180 "${mpirun[@]}" -np 1 "$calib" stages --backend cuda --stages configs/calib/gpu-check.json \
  --min-micro-batch 1 --max-micro-batch 4 -f 4 --warmup 3 --repeat 10 --timeout 60 --output-dir "$out/stages" || fail "stages"
python3 - "$out/stages/pipeline.json" <<'EOF' || fail "the pipeline file stages wrote"
import json, sys
p = json.load(open(sys.argv[1]))
for s, st in enumerate(p["stages"]):
    prof = st["profile"]
    assert [e["micro_batch_size"] for e in prof] == [1, 4], f"stage {s}: sizes {prof}"
    for e in prof:
        assert e["forward_s"] > 0 and e["backward_s"] > 0, f"stage {s}: a time is not positive: {e}"
        assert e["activation_bytes"] > 0, f"stage {s}: no activation bytes"
    assert prof[1]["forward_s"] > prof[0]["forward_s"], f"stage {s}: forward does not grow with b"
    assert prof[1]["backward_s"] > prof[0]["backward_s"], f"stage {s}: backward does not grow with b"
    assert st["optimizer_s"] > 0, f"stage {s}: no optimizer time"
print("gpu-check: pipeline file OK: times grow with the micro-batch size on every stage")
EOF

# 2. Two GPUs: bandwidth and p2p through NCCL.
if [ ${#gpus[@]} -ge 2 ]; then
  say "bandwidth between GPU 0 and GPU 1 (NCCL send/recv)"
  timeout 120 "${mpirun[@]}" -np 2 "$calib" bandwidth --backend cuda -b 64K -e 256M -f 4 --iters 20 --timeout 60 \
    -o "$out/bandwidth" || fail "bandwidth"
  say "p2p between GPU 0 and GPU 1, both directions, 2 s"
  timeout 120 "${mpirun[@]}" -np 2 "$calib" p2p --backend cuda --bytes 64M,8M --duration 2 --interval 0.05 \
    --timeout 60 -o "$out/p2p" || fail "p2p"
else
  say "one GPU: skipping bandwidth and p2p (they need 2 GPUs)"
fi

say "all checks passed in $(($(date +%s) - started)) s; outputs in $out/"

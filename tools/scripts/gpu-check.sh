#!/usr/bin/env bash
# The first thing to run on a GPU node (docs/calibration.md, "GPU check"): builds the
# harness for this node's GPU, runs the CUDA test suite, measures stages, checks NCCL,
# replays plans on the GPU and holds the simulator's predictions against them. Goes on
# after a failed step, prints a summary, and exits non-zero if any step failed.
#
#   tools/scripts/gpu-check.sh [--prebuilt DIR] [--backend cuda|cpu [--ranks R]] [--peak-tflops T]
#                              [--iterations N] [--quick] [BUILD_DIR]
#
#   BUILD_DIR        where to build (default build-gpu); outputs in BUILD_DIR/gpu-check
#   --prebuilt DIR   use the binaries in DIR (adagrouper, adagrouper-calib, calib_cuda_test;
#                    tools/scripts/gpu-bundle.sh makes such a folder) and build nothing;
#                    outputs in DIR/../gpu-check unless --output-dir says where
#   --output-dir D   where the outputs go
#   --backend cpu    a dry run of the script on a machine without a GPU: the CPU backend,
#                    the toy stage descriptions, no CUDA test suite, no GPU comparison;
#                    --ranks 2 takes the path of a node with two GPUs (bandwidth, p2p and
#                    2-device replays, over MPI)
#   --peak-tflops T  the GPU's dense fp16 tensor peak, for the comparison with the V100
#                    figures (default: from the GPU's name: V100 125, A100 312, H100 and
#                    H200 989; unknown: the comparison is skipped)
#   --iterations N   measured iterations per replay (default 20)
#   --quick          micro-batch sizes 1 and 4 only for the GPT stages
#
# Steps (each prints what it does; outputs under the output folder):
#   device     nvidia-smi's GPU, driver and memory, nvcc's and NCCL's versions
#   build      meson setup -Dcuda=enabled -Dnccl=enabled -Dcuda-arch=<this GPU>, then
#              ninja adagrouper adagrouper-calib calib_cuda_test (not with --prebuilt)
#   cuda-test  the CUDA test suite (kernels against the CPU kernels, the busy kernel,
#              NCCL on one rank)
#   stages     configs/calib/gpu-check.json at b = 1 and 4, checked (times grow with b)
#   gpt        configs/calib/gpt-2.7b-8stage.json at b = 1, 2, 4, 8 on one GPU, against
#              configs/pipelines/gpt-8stage-v100.json scaled by the peak ratio
#   nccl       two GPUs: bandwidth and p2p; one GPU: two ranks on it, which the harness
#              (and NCCL) refuses, recorded
#   replay     a plan of the stages' pipeline on the GPUs (one per device, at most 2), the
#              chosen candidate and one of each family replayed, simulated, compared;
#              then simulated again with the replay's measured op durations (--stage-trace)
#
# Needs nvidia-smi, CUDA (nvcc, cuBLAS), NCCL, Open MPI, python3, and Meson and ninja to
# build. A V100 (sm_70) needs CUDA <= 12.9. Takes a few minutes.
set -uo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
builddir=build-gpu prebuilt="" backend=cuda peak="" iterations=20 quick=0 out="" ranks=1
usage() { sed -n '7,23p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
  case "$1" in
    --prebuilt) prebuilt=$2; shift 2 ;;
    --backend) backend=$2; shift 2 ;;
    --peak-tflops) peak=$2; shift 2 ;;
    --iterations) iterations=$2; shift 2 ;;
    --ranks) ranks=$2; shift 2 ;;
    --output-dir) out=$2; shift 2 ;;
    --quick) quick=1; shift ;;
    -h | --help) usage; exit 0 ;;
    -*) echo "gpu-check: unknown option $1 (see --help)" >&2; exit 2 ;;
    *) builddir=$1; shift ;;
  esac
done
case "$backend" in cuda | cpu) ;; *) echo "gpu-check: --backend: cuda or cpu" >&2; exit 2 ;; esac
[[ "$iterations" =~ ^[1-9][0-9]*$ ]] || { echo "gpu-check: --iterations: a positive integer" >&2; exit 2; }
case "$ranks" in 1 | 2) ;; *) echo "gpu-check: --ranks: 1 or 2" >&2; exit 2 ;; esac
[ "$ranks" -eq 1 ] || [ "$backend" = cpu ] || { echo "gpu-check: --ranks is for --backend cpu (the GPUs decide)" >&2; exit 2; }
if [ -n "$prebuilt" ]; then
  bin=$(cd "$prebuilt" && pwd) || exit 2
  out=${out:-$bin/../gpu-check}
else
  bin=$root/$builddir
  out=${out:-$builddir/gpu-check}
fi
say() { echo "gpu-check: $*"; }
failed=() passed=()
started=$(date +%s)
# step NAME COMMAND...: runs it, records whether it passed.
step() {
  local name=$1 t0 rc
  shift
  t0=$(date +%s)
  echo
  say "== $name"
  "$@"
  rc=$?
  if [ $rc -eq 0 ]; then passed+=("$name"); else failed+=("$name (status $rc)"); fi
  say "== $name: $([ $rc -eq 0 ] && echo ok || echo FAILED) in $(($(date +%s) - t0)) s"
  return 0
}
mpirun=(mpirun --oversubscribe)
[ "$(id -u)" -ne 0 ] || mpirun+=(--allow-run-as-root)
ngpus=0 cap="" gpu_name=""

device() {
  if [ "$backend" = cpu ]; then
    ngpus=$ranks
    say "backend cpu: a dry run without a GPU, as a node with $ranks GPU(s)"
    return 0
  fi
  command -v nvidia-smi >/dev/null || { say "nvidia-smi not found: no NVIDIA driver on this machine"; return 1; }
  nvidia-smi --query-gpu=index,name,driver_version,memory.total,compute_cap,clocks.max.sm,power.limit \
    --format=csv | tee "$out/device.csv"
  ngpus=$(($(wc -l <"$out/device.csv") - 1))
  [ "$ngpus" -gt 0 ] || { say "nvidia-smi lists no GPU"; return 1; }
  cap=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader -i 0 | tr -d ' .')
  gpu_name=$(nvidia-smi --query-gpu=name --format=csv,noheader -i 0)
  nvidia-smi | sed -n 's/.*\(Driver Version: [0-9.]*\).*\(CUDA Version: [0-9.]*\).*/\1, \2/p' | head -1
  if command -v nvcc >/dev/null; then nvcc --version | grep release; else say "no nvcc on PATH"; fi
  return 0
}

build() {
  export PATH=${CUDA_HOME:-/usr/local/cuda}/bin:$PATH
  command -v nvcc >/dev/null || { say "nvcc not found (set CUDA_HOME)"; return 1; }
  if ! nvcc --list-gpu-arch 2>/dev/null | grep -qx "compute_${cap}"; then
    say "nvcc cannot build for this GPU (sm_${cap}); V100 (sm_70) needs CUDA <= 12.9"
    return 1
  fi
  local opts=(-Dcuda=enabled -Dnccl=enabled -Dmpi=enabled -Dtests=true -Dbenchmarks=false -Dpython=disabled
              "-Dcuda-arch=${cap}")
  if [ ! -f "$builddir/build.ninja" ]; then
    meson setup "$builddir" "${opts[@]}" >"$out/setup.log" 2>&1 || { tail -30 "$out/setup.log"; return 1; }
  else
    meson configure "$builddir" "${opts[@]}" >"$out/setup.log" 2>&1 || { tail -30 "$out/setup.log"; return 1; }
  fi
  ninja -C "$builddir" adagrouper adagrouper-calib tests/calib/calib_cuda_test >"$out/build.log" 2>&1 ||
    { tail -30 "$out/build.log"; return 1; }
}

cuda_test() {
  local exe=$bin/calib_cuda_test
  [ -x "$exe" ] || exe=$bin/tests/calib/calib_cuda_test
  [ -x "$exe" ] || { say "calib_cuda_test not built (-Dtests=true)"; return 1; }
  timeout 300 "$exe" 2>&1 | tee "$out/cuda-test.log"
  return "${PIPESTATUS[0]}"
}

# calib MODE ARGS...: adagrouper-calib under mpirun -np 1 with this backend.
calib1() { timeout 300 "${mpirun[@]}" -np 1 "$bin/adagrouper-calib" "$@" --backend "$backend" --timeout 120; }

stages() {
  local desc=configs/calib/gpu-check.json
  [ "$backend" = cpu ] && desc=configs/calib/tiny-2stage.json
  calib1 stages --stages "$desc" --min-micro-batch 1 --max-micro-batch 4 -f 4 --warmup 3 --repeat 10 \
    --output-dir "$out/stages" || return 1
  python3 - "$out/stages/pipeline.json" <<'EOF'
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
}

gpt() {
  if [ -z "$peak" ]; then
    case "$gpu_name" in
      *V100*) peak=125 ;; *A100*) peak=312 ;; *H100* | *H200* | *H800* | *GH200*) peak=989 ;;
    esac
  fi
  local max=8 f=2
  [ "$quick" -eq 1 ] && max=4 f=4
  calib1 stages --stages configs/calib/gpt-2.7b-8stage.json --min-micro-batch 1 --max-micro-batch "$max" -f "$f" \
    --warmup 2 --repeat 10 --output-dir "$out/gpt" || return 1
  if [ -z "$peak" ]; then
    say "no peak known for '$gpu_name' (--peak-tflops T): the comparison with the V100 figures is skipped"
    return 0
  fi
  python3 tools/scripts/gpu_compare.py --measured "$out/gpt/pipeline.json" \
    --reference configs/pipelines/gpt-8stage-v100.json --description configs/calib/gpt-2.7b-8stage.json \
    --peak-tflops "$peak" --json "$out/gpt/compare-v100.json" | tee "$out/gpt/compare-v100.txt"
}

nccl() {
  if [ "$ngpus" -ge 2 ]; then
    timeout 120 "${mpirun[@]}" -np 2 "$bin/adagrouper-calib" bandwidth --backend "$backend" -b 64K -e 256M -f 4 --iters 20 \
      --timeout 60 -o "$out/bandwidth" || return 1
    timeout 120 "${mpirun[@]}" -np 2 "$bin/adagrouper-calib" p2p --backend "$backend" --bytes 64M,8M --duration 2 \
      --interval 0.05 --timeout 60 -o "$out/p2p" || return 1
    return 0
  fi
  say "one GPU: two ranks on it must be refused with one line (NCCL allows one rank per GPU)"
  local rc
  timeout 120 "${mpirun[@]}" -np 2 "$bin/adagrouper-calib" bandwidth --backend cuda -b 64K -e 64K --iters 2 \
    --timeout 60 -o "$out/bandwidth" >"$out/two-ranks-one-gpu.log" 2>&1
  rc=$?
  cat "$out/two-ranks-one-gpu.log"
  [ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -q "start at most 1 ranks per host" "$out/two-ranks-one-gpu.log" ||
    { say "expected the refusal of a second rank on the GPU, got status $rc"; return 1; }
  say "refused (status $rc), as expected; NCCL's own refusal: the cuda-test step's NcclTwoRanksOnOneGpu"
}

replay() {
  local d=$out/replay devices=1 net=configs/networks/eth-25g.json pipe=$out/stages/pipeline.json i n t
  [ "$ngpus" -ge 2 ] && devices=2 net=$out/p2p/network.json
  [ -f "$pipe" ] || { say "no pipeline file: the stages step failed"; return 1; }
  mkdir -p "$d"
  local mem=()
  [ "$backend" = cpu ] && mem=(--memory-limit 8e9)
  "$bin/adagrouper" plan --pipeline "$pipe" --network "$net" --devices "$devices" --families all "${mem[@]}" \
    --iterations "$iterations" --output "$d/plan.json" >"$d/plan.txt" || { cat "$d/plan.txt"; return 1; }
  tail -1 "$d/plan.txt"
  # The chosen candidate, then one of each family that was evaluated, at the chosen
  # micro-batch size where it has one (with static W fill: the plan records the order of
  # dynamic W fill for its chosen candidate only).
  python3 - "$d/plan.json" >"$d/picks.txt" <<'EOF' || return 1
import json, sys
p = json.load(open(sys.argv[1]))
cands = p["candidates"]
chosen = next(i for i, c in enumerate(cands) if c["status"] == "chosen")
b = cands[chosen]["micro_batch_size"]
picks = [chosen]
def of(name, k, v, same_b):
    for i, c in enumerate(cands):
        if (c["schedule"] == name and (k is None or c["k"] == k) and c["virtual_stages"] == v
                and (not same_b or c["micro_batch_size"] == b) and c["status"] in ("lost", "chosen")
                and c.get("w_fill") != "dynamic" and i not in picks):
            return i
    return None
for name, k, v in (("1f1b", 1, 1), ("gpipe", None, 1), ("kfkb", 2, 1), ("interleaved-1f1b", 1, 2),
                   ("interleaved-zb", 1, 2), ("zbv", 1, 2), ("dualpipev", 1, 2)):
    i = of(name, k, v, True)
    if i is None:
        i = of(name, k, v, False)
    if i is not None:
        picks.append(i)
print(" ".join(map(str, picks)))
EOF
  : >"$d/pairs.txt"
  : >"$d/pairs-stage-trace.txt"
  for i in $(cat "$d/picks.txt"); do
    timeout 300 "${mpirun[@]}" -np "$devices" "$bin/adagrouper-calib" replay --backend "$backend" --plan "$d/plan.json" \
      --candidate "$i" --iterations "$iterations" --warmup 3 --timeout 60 --output "$d/run-$i.json" \
      --timeline "$d/run-$i.trace.json" --stage-trace "$d/stages-$i.csv" >"$d/replay-$i.log" 2>&1 ||
      { cat "$d/replay-$i.log"; return 1; }
    # The candidate as the plan evaluated it, over the measured span; then with the
    # replay's measured op durations.
    read -r n t < <(python3 -c 'import json,sys; r=json.load(open(sys.argv[1]))
print(r["iterations"], repr(r["start_time_s"]))' "$d/run-$i.json") || return 1
    local sim=("$bin/adagrouper" simulate --plan "$d/plan.json" --candidate "$i" --pipeline "$pipe" --network "$net"
               --iterations "$n" --start-time "$t")
    "${sim[@]}" --output "$d/sim-$i.json" >/dev/null || return 1
    "${sim[@]}" --stage-trace "$d/stages-$i.csv" --output "$d/sim-st-$i.json" >/dev/null || return 1
    echo "sim-$i.json run-$i.json" >>"$d/pairs.txt"
    echo "sim-st-$i.json run-$i.json" >>"$d/pairs-stage-trace.txt"
  done
  say "predicted from the profile (the stages step's medians)"
  "$bin/adagrouper" compare --pairs "$d/pairs.txt" --plan "$d/plan.json" --output "$d/compare.json" |
    tee "$d/compare.txt" || return 1
  say "predicted with the replay's measured op durations (simulate --stage-trace)"
  "$bin/adagrouper" compare --pairs "$d/pairs-stage-trace.txt" --plan "$d/plan.json" \
    --output "$d/compare-stage-trace.json" | tee "$d/compare-stage-trace.txt"
}

rm -rf "$out"
mkdir -p "$out"
out=$(cd "$out" && pwd)
step device device
[ -z "$prebuilt" ] && [ "$backend" = cuda ] && step build build
[ "$backend" = cuda ] && step cuda-test cuda_test
step stages stages
[ "$backend" = cuda ] && step gpt gpt
{ [ "$backend" = cuda ] || [ "$ngpus" -ge 2 ]; } && step nccl nccl
step replay replay
echo
say "passed: ${passed[*]:-none}"
[ ${#failed[@]} -eq 0 ] || say "FAILED: ${failed[*]}"
say "$((${#passed[@]} + ${#failed[@]})) steps in $(($(date +%s) - started)) s; outputs in $out/"
[ ${#failed[@]} -eq 0 ]

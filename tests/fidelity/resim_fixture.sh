#!/usr/bin/env bash
# A fidelity run made by hand for fidelity_resim.py: the toy pipeline planned, its chosen
# candidate simulated, and that simulation taken as the measurement too (so the run's
# own prediction is exact), with the profile's op durations as its measured ones, except
# that stage 0's first forward took SLOW_F seconds. Then fidelity_resim.py with ARGS.
# With NET_LATENCY set, the network's latency is that many seconds (toy-net-2s's is 0).
# With COMPUTE_CALIBRATION set, the run's own prediction is its compute calibration too
# (calib/ beside the run: ops that cost nothing beyond their profile).
# Usage: [NET_LATENCY=L] resim_fixture.sh SOURCE_ROOT ADAGROUPER OUT SLOW_F ARGS...
set -e
root=$1 A=$2 out=$3 slow_f=$4
shift 4
d=$out/run
mkdir -p "$d"
cp "$root/configs/examples/toy-4.json" "$d/pipeline.json"
cp "$root/configs/examples/toy-net-2s.json" "$d/net-sim-0.json"
if [ -n "${NET_LATENCY:-}" ]; then
  python3 -c "import json, sys; n = json.load(open(sys.argv[1])); n['latency_s'] = float(sys.argv[2])
json.dump(n, open(sys.argv[1], 'w'))" "$d/net-sim-0.json" "$NET_LATENCY"
fi
"$A" plan --pipeline "$d/pipeline.json" --network "$d/net-sim-0.json" --output "$d/plan.json" >/dev/null
i=$(python3 -c "import json, sys; c = json.load(open(sys.argv[1]))['candidates']; print([j for j, x in enumerate(c) if x['status'] == 'chosen'][0])" "$d/plan.json")
mv "$d/net-sim-0.json" "$d/net-sim-$i.json"
echo "--iterations 2 --start-time 0" >"$d/sim-$i.args"
"$A" simulate --plan "$d/plan.json" --candidate "$i" --pipeline "$d/pipeline.json" --network "$d/net-sim-$i.json" \
  --iterations 2 --start-time 0 --output "$d/sim-$i.json" --timeline "$d/sim-$i.trace.json" >/dev/null
cp "$d/sim-$i.json" "$d/run-$i.json"
echo "sim-$i.json run-$i.json" >"$d/pairs.txt"
printf 'iteration,stage,micro_batch,phase,duration_s\n0,0,0,F,%s\n' "$slow_f" >"$d/stages-$i.csv"
if [ -n "${COMPUTE_CALIBRATION:-}" ]; then
  mkdir -p "$out/calib"
  cp "$d/sim-$i.trace.json" "$out/calib/run-compute.trace.json"
  echo '{"micro_batch_size": 1}' >"$out/calib/compute.json"
fi
"$root/tools/scripts/fidelity_resim.py" --adagrouper "$A" "$@" "$out"

#!/usr/bin/env bash
# Three fidelity runs of one scenario made by hand for fidelity_noise.py, laid out as
# fidelity.sh --random-scenarios 1 --repeats 3 lays them out (OUT/random-0/run-J/preempted):
# the toy pipeline planned, its chosen candidate simulated as every run's prediction (its
# latency 0.25 s in run 2, else none), and simulated again as run J's measurement with
# every message 0.05, 0.1 and 0.4 s late in runs 1, 2 and 3; compare.json as fidelity.sh
# writes it.
# Usage: noise_fixture.sh SOURCE_ROOT ADAGROUPER OUT
set -e
root=$1 A=$2 out=$3
d=$out/random-0
mkdir -p "$d"
cp "$root/configs/examples/toy-4.json" "$d/pipeline.json"
cp "$root/configs/examples/toy-net-2s.json" "$d/net.json"
"$A" plan --pipeline "$d/pipeline.json" --network "$d/net.json" --output "$d/plan.json" >/dev/null
i=$(python3 -c "import json, sys; c = json.load(open(sys.argv[1]))['candidates']; print([j for j, x in enumerate(c) if x['status'] == 'chosen'][0])" "$d/plan.json")
net() {  # net LATENCY FILE
  python3 -c "import json, sys; n = json.load(open(sys.argv[1])); n['latency_s'] = float(sys.argv[2]); json.dump(n, open(sys.argv[3], 'w'))" \
    "$d/net.json" "$1" "$2"
}
for j in 1 2 3; do
  r=$d/run-$j/preempted
  mkdir -p "$r"
  late=(0 0.05 0.1 0.4)
  net "$([ "$j" = 2 ] && echo 0.25 || echo 0)" "$r/net-sim.json"
  net "${late[$j]}" "$r/net-run.json"
  for what in sim run; do
    "$A" simulate --plan "$d/plan.json" --candidate "$i" --pipeline "$d/pipeline.json" --network "$r/net-$what.json" \
      --iterations 3 --start-time 0 --output "$r/$what-$i.json" >/dev/null
  done
  "$A" compare --pair "$r/sim-$i.json=$r/run-$i.json" --output "$r/compare.json" >/dev/null
done

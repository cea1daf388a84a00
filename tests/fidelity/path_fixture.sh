#!/usr/bin/env bash
# A fidelity run made by hand for fidelity_path.py: the toy pipeline planned, its chosen
# candidate simulated as the prediction, and simulated again with one thing changed as
# the measurement (MODE latency: every message 0.25 s later; compute: stage 0's
# forwards 1.5 s instead of 1 s). Then fidelity_path.py --iterations --json OUT/path.json.
# Usage: path_fixture.sh SOURCE_ROOT ADAGROUPER OUT MODE
set -e
root=$1 A=$2 out=$3 mode=$4
d=$out/run
mkdir -p "$d"
cp "$root/configs/examples/toy-4.json" "$d/pipeline.json"
cp "$root/configs/examples/toy-net-2s.json" "$d/net.json"
"$A" plan --pipeline "$d/pipeline.json" --network "$d/net.json" --output "$d/plan.json" >/dev/null
i=$(python3 -c "import json, sys; c = json.load(open(sys.argv[1]))['candidates']; print([j for j, x in enumerate(c) if x['status'] == 'chosen'][0])" "$d/plan.json")
cp "$d/pipeline.json" "$d/measured-pipeline.json"
cp "$d/net.json" "$d/measured-net.json"
python3 - "$d" "$mode" <<'PY'
import json, sys
d, mode = sys.argv[1], sys.argv[2]
if mode == "latency":
    n = json.load(open(f"{d}/measured-net.json"))
    n["latency_s"] = 0.25
    json.dump(n, open(f"{d}/measured-net.json", "w"))
else:
    p = json.load(open(f"{d}/measured-pipeline.json"))
    for x in p["stages"][0]["profile"]:
        x["forward_s"] *= 1.5
    json.dump(p, open(f"{d}/measured-pipeline.json", "w"))
PY
sim() {  # sim NAME PIPELINE NETWORK
  "$A" simulate --plan "$d/plan.json" --candidate "$i" --pipeline "$2" --network "$3" --iterations 2 --start-time 0 \
    --output "$d/$1-$i.json" --timeline "$d/$1-$i.trace.json" >/dev/null
}
sim sim "$d/pipeline.json" "$d/net.json"
sim run "$d/measured-pipeline.json" "$d/measured-net.json"
echo "sim-$i.json run-$i.json" >"$d/pairs.txt"
"$root/tools/scripts/fidelity_path.py" "$d" --iterations --json "$out/path.json"

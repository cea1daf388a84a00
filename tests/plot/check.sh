#!/bin/bash
# CLI check of tools/scripts/plot.py: a bad column or value exits 2 with one line naming the file
# and the column, and writes no figure; a good input exits 0 and writes PNG + SVG.
# Needs /usr/bin/python3 with Debian's python3-matplotlib. Usage: tests/plot/check.sh
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
plot="$root/tools/scripts/plot.py"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
expect() {  # expect STATUS PATTERN -- ARGS...: exit status and a stderr line matching PATTERN
    local want=$1 pattern=$2; shift 3
    "$plot" "$@" >"$tmp/out" 2>"$tmp/err"; local rc=$?
    if [ "$rc" != "$want" ] || ! grep -q -- "$pattern" "$tmp/err"; then
        echo "FAIL: plot.py $* -> exit $rc (want $want), stderr: $(head -c 300 "$tmp/err")"; fail=1
    else
        echo "ok: plot.py $1 ... -> exit $rc"
    fi
}
cat >"$tmp/sweep.csv" <<'CSV'
id,index,pipeline,network,trace,schedule,k,micro_batch_size,iterations,start_time_s,seed,trace.severity,micro_batches,group_size,mean_iteration_time_s,p50_iteration_time_s,p99_iteration_time_s,total_time_s,throughput_samples_per_s,bubble_fraction,peak_memory_bytes,memory_limit_bytes,fits_memory,error
a,0,p.json,n.json,periodic,1f1b,,1,2,0,,0,8,1,41,41,41,82,0.19,0.4,1,,true,
b,1,p.json,n.json,periodic,kfkb,2,1,2,0,,0,8,2,36,36,36,72,0.22,0.3,1,,true,
c,2,p.json,n.json,periodic,1f1b,,1,2,0,,0.5,8,1,44,44,44,88,0.18,0.4,1,,true,
d,3,p.json,n.json,periodic,kfkb,2,1,2,0,,0.5,8,2,x37,37,37,74,0.21,0.3,1,,true,
CSV
expect 2 "sweep.csv: column 'no_such': not in the file" -- heatmap "$tmp/sweep.csv" --value no_such -o "$tmp/f1"
expect 2 "sweep.csv:5: column 'mean_iteration_time_s': 'x37' is not a number" -- severity "$tmp/sweep.csv" -o "$tmp/f2"
expect 2 "sweep.csv: column 'policy': not in the file" -- adapt "$tmp/sweep.csv" -o "$tmp/f3"
for f in f1 f2 f3; do
    if ls "$tmp/$f".* >/dev/null 2>&1; then echo "FAIL: a figure $f was written for a bad input"; fail=1; fi
done
expect 0 "wrote" -- heatmap "$tmp/sweep.csv" --where trace.severity=0 -o "$tmp/good"
[ -s "$tmp/good.png" ] && [ -s "$tmp/good.svg" ] || { echo "FAIL: good.png / good.svg missing"; fail=1; }
cat >"$tmp/families.csv" <<'CSV'
severity,period_s,family,label,micro_batch_size,iteration_time_s,peak_memory_bytes,chosen,speedup_over_1f1b
0,5,1f1b,1f1b b=2,2,12.3,2e10,false,1.0
0,5,zbv,zbv b=2,2,9.4,2e10,true,1.31
0.5,5,1f1b,1f1b b=2,2,12.5,2e10,false,1.0
0.5,5,zbv,zbv b=2,2,slow,2e10,true,1.31
CSV
expect 2 "families.csv:5: column 'iteration_time_s': 'slow' is not a number" -- families "$tmp/families.csv" -o "$tmp/f4"
sed -i 's/,slow,/,9.5,/' "$tmp/families.csv"
expect 0 "wrote" -- families "$tmp/families.csv" -o "$tmp/fam"
[ -s "$tmp/fam.png" ] && [ -s "$tmp/fam.svg" ] && [ ! -e "$tmp/f4.png" ] || { echo "FAIL: families figures"; fail=1; }
[ $fail = 0 ] && echo "plot checks passed"
exit $fail

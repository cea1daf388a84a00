#!/usr/bin/env bash
# adagrouper's one entry point: installs what is missing (Debian packages), configures
# build/ with Meson, builds, then runs what was asked.
#
#   tools/run.sh plan [ARGS]       build/adagrouper plan ARGS (default: the GPT example)
#   tools/run.sh simulate [ARGS]   build/adagrouper simulate ARGS (default: the toy example)
#   tools/run.sh test       every test; ends with "N passed, N failed"
#   tools/run.sh test-sanitize   the test suite built with clang's ASan+UBSan in build-sanitize/ (two binaries at a time)
#   tools/run.sh bench      the benchmarks of docs/performance.md
#   tools/run.sh fuzz [SECONDS]    the loaders' fuzz targets (clang >= 16, libFuzzer; build-sanitize/) on their corpora
#   tools/run.sh build      configure and build only
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

packages=(meson ninja-build g++ pkg-config libboost-graph-dev libboost-program-options-dev
          nlohmann-json3-dev libfmt-dev libgtest-dev libgmock-dev libbenchmark-dev libssl-dev zlib1g-dev
          openmpi-bin libopenmpi-dev python3-matplotlib iproute2 pybind11-dev python3-dev help2man)

install_missing() {
  local missing=()
  for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  echo "run.sh: installing missing Debian packages: ${missing[*]}" >&2
  local sudo=()
  [ "$(id -u)" -eq 0 ] || sudo=(sudo)
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
}

# build DIR [meson options...]
build() {
  local dir=$1
  shift
  install_missing
  if [ ! -f "$dir/build.ninja" ]; then
    meson setup "$dir" "$@" >&2
  elif [ $# -gt 0 ]; then
    # A directory configured earlier, by hand or by an older run.sh, gets this command's
    # options too (build-sanitize without MPI: Open MPI's own allocations leak at exit).
    meson configure "$dir" "$@" >&2
  fi
  ninja -C "$dir" >&2
}

# Runs the Python module's unittest suite (DIR/tools/python/run-python-tests, written by
# Meson when the module is built) and adds its counts to the named totals: unittest's
# "Ran N tests" less its failures, errors and skips passed, failures and errors failed.
# A run that ends badly without saying why counts as one failure.
run_python_tests() {
  local script=$1/tools/python/run-python-tests out rc ran bad=0 skipped n
  local -n pass_total=$2 fail_total=$3
  [ -x "$script" ] || { echo "== python: not built (feature python; pybind11-dev, python3-dev)" >&2; return 0; }
  echo "== python (unittest)" >&2
  set +e
  out=$("$script" 2>&1)
  rc=$?
  set -e
  printf '%s\n' "$out" >&2
  ran=$(printf '%s\n' "$out" | sed -n 's/^Ran \([0-9]*\) tests\{0,1\} in .*/\1/p' | tail -1)
  # The last line: "OK", "OK (skipped=1)" or "FAILED (failures=1, errors=2, skipped=1)".
  for n in $(printf '%s\n' "$out" | sed -n 's/^\(OK\|FAILED\) (\(.*\))$/\2/p' | tail -1 |
             sed -n 's/\(failures\|errors\)=\([0-9]*\)/\n\2\n/gp' | grep -E '^[0-9]+$'); do
    bad=$((bad + n))
  done
  skipped=$(printf '%s\n' "$out" | sed -n 's/^\(OK\|FAILED\) (.*skipped=\([0-9]*\).*/\2/p' | tail -1)
  ran=${ran:-0} skipped=${skipped:-0}
  if [ "$rc" -ne 0 ] && [ "$bad" -eq 0 ]; then bad=1; fi
  n=$((ran - bad - skipped))
  pass_total=$((pass_total + (n > 0 ? n : 0)))
  fail_total=$((fail_total + bad))
}

# Runs every GoogleTest binary under DIR/tests, JOBS of them at a time (default 1), then
# the Python tests, and prints "N passed, N failed". Each binary's output is printed when
# all have run, in name order, so the log reads the same whatever finished first.
run_tests() {
  local dir=$1 jobs=${2:-1} passed=0 failed=0 bin out rc n p s f i running=0 outs
  local bins=()
  while IFS= read -r bin; do bins+=("$bin"); done < <(find "$dir/tests" -type f -name '*_test' -perm -u+x | sort)
  if [ ${#bins[@]} -eq 0 ]; then
    echo "run.sh: no test binaries in $dir/tests" >&2
    echo "0 passed, 1 failed"
    return 1
  fi
  outs=$(mktemp -d)
  [ "$jobs" -le 1 ] || echo "run.sh: ${#bins[@]} test binaries in $dir, $jobs at a time; their output follows when all have run" >&2
  for i in "${!bins[@]}"; do
    if [ "$running" -ge "$jobs" ]; then
      wait -n || true
      running=$((running - 1))
    fi
    (
      set +e
      "${bins[$i]}" --gtest_brief=1 >"$outs/$i.out" 2>&1
      echo $? >"$outs/$i.rc"
    ) &
    running=$((running + 1))
  done
  wait
  for i in "${!bins[@]}"; do
    echo "== $(basename "${bins[$i]}")" >&2
    out=$(cat "$outs/$i.out")
    rc=$(cat "$outs/$i.rc" 2>/dev/null || echo 1)
    printf '%s\n' "$out" >&2
    # --gtest_brief prints no count of failures: they are the cases run less those passed.
    n=$(printf '%s\n' "$out" | sed -n 's/^\[==========\] \([0-9]*\) tests\{0,1\} from.*ran.*/\1/p' | tail -1)
    p=$(printf '%s\n' "$out" | sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' | tail -1)
    s=$(printf '%s\n' "$out" | sed -n 's/^\[  SKIPPED \] \([0-9]*\) test.*/\1/p' | tail -1)
    p=${p:-0}
    f=$((${n:-0} - p - ${s:-0}))
    # A binary that crashed or failed without a summary still counts as a failure.
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then f=1; fi
    passed=$((passed + p))
    failed=$((failed + f))
  done
  rm -rf "$outs"
  run_python_tests "$dir" passed failed
  echo "$passed passed, $failed failed"
  [ "$failed" -eq 0 ]
}

cmd=${1:-help}
[ $# -gt 0 ] && shift

case "$cmd" in
  build)
    build build
    ;;
  plan)
    build build
    if [ $# -eq 0 ]; then
      set -- --pipeline configs/pipelines/gpt-8stage-v100.json --network configs/networks/preempted-25g.json \
        --iterations 3 --output build/plan.json
      echo "run.sh plan: no arguments; planning the default example (GPT 2.7B in 8 stages on a preempted" \
           "25 Gb/s network) and writing build/plan.json: adagrouper plan $*" >&2
    fi
    exec build/adagrouper plan "$@"
    ;;
  simulate)
    build build
    if [ $# -eq 0 ]; then
      set -- --pipeline configs/examples/toy-4.json --network configs/examples/toy-net-0.5s.json \
        --schedule kfkb --k 2 --micro-batch-size 1
      echo "run.sh simulate: no arguments; running the worked example of docs/model.md: adagrouper simulate $*" >&2
    fi
    exec build/adagrouper simulate "$@"
    ;;
  test)
    build build
    run_tests build
    ;;
  test-sanitize)
    # clang with ASan+UBSan, unoptimized, line tables only: build-sanitize/, the build the
    # fuzz targets use too (tools/scripts/sanitize-build.sh).
    packages+=(clang-16 libclang-rt-16-dev)
    install_missing
    tools/scripts/sanitize-build.sh --optimization 0
    # Two binaries at a time: under ASan the suite is CPU-bound and a binary uses one core.
    # (The release suite runs them one by one: its testbed tests measure shaped links.)
    UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 ASAN_OPTIONS=detect_leaks=1 run_tests build-sanitize 2
    ;;
  bench)
    build build
    for n in 20 200; do
      echo "== sim_bench --iterations $n (dataflow evaluator, what simulate uses)"
      build/tools/bench/sim_bench --iterations "$n" "$@"
    done
    echo "== sim_bench kfkb k=4 against the speed-of-light yardstick, interleaved rounds"
    tools/bench/yardstick.sh build || [ $? -eq 77 ]
    echo "== sim_bench --iterations 20 --evaluator events (the event engine)"
    build/tools/bench/sim_bench --iterations 20 --evaluator events "$@"
    # The schedules of today's runtimes on the same 64 model stages (docs/performance.md).
    for family in "1f1b" "interleaved-1f1b -v 2" "interleaved-zb -v 2" "zbv" "dualpipev"; do
      echo "== sim_bench --iterations 20 --schedule $family"
      # shellcheck disable=SC2086  # the family's options are words
      build/tools/bench/sim_bench --iterations 20 --schedule $family "$@"
    done
    echo "== sim_bench --iterations 20 kfkb k=4 with split backward and dynamic W fill (event engine)"
    build/tools/bench/sim_bench --iterations 20 --schedule kfkb --k 4 --split-backward --w-fill dynamic \
      --evaluator events "$@"
    echo "== plan_bench"
    build/tools/bench/plan_bench
    echo "== partition_bench (200 layers into 32 stages)"
    build/tools/bench/partition_bench
    echo "== trace_bench"
    build/tools/bench/trace_bench
    echo "== sweep bench (1,000 runs: --jobs 1, --jobs 2, mpirun -np 2)"
    tools/bench/sweep_bench.sh build
    ;;
  fuzz)
    # The loaders' libFuzzer targets (tests/fuzz/), each run on its corpus for ${1:-30}
    # seconds; `fuzz findings` replays the saved findings instead.
    # They build in build-sanitize/, the sanitizer suite's build, which configures the tests too.
    packages+=(clang-16 libclang-rt-16-dev)
    install_missing
    exec tests/fuzz/run.sh "${1:-30}"
    ;;
  help | -h | --help)
    sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'
    ;;
  *)
    echo "run.sh: unknown command '$cmd' (plan, simulate, test, test-sanitize, bench, fuzz, build)" >&2
    exit 2
    ;;
esac

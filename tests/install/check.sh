#!/usr/bin/env bash
# meson install of BUILD_ROOT into a temporary DESTDIR, then: every installed file that
# should be there is, a ten-line C++ program builds against the installed libraries with
# `pkg-config --cflags --libs adagrouper` and runs, and so do the installed programs, the
# Python module and the bash completion. The layout comes from the environment
# (tests/install/meson.build passes Meson's directories). Prints "install checks passed".
set -euo pipefail

dest=$(mktemp -d)
trap 'rm -rf "$dest"' EXIT
fail() { echo "check.sh: $*" >&2; exit 1; }

# Installed paths: absolute directories as they are, relative ones under the prefix.
under() { case "$1" in /*) echo "$dest$1" ;; *) echo "$dest$PREFIX/$1" ;; esac; }
bin=$(under "$BINDIR"); lib=$(under "$LIBDIR"); inc=$(under "$INCLUDEDIR")
share=$(under "$DATADIR"); man=$(under "$MANDIR")

meson install -C "$BUILD_ROOT" --no-rebuild --destdir "$dest" --quiet >/dev/null \
  || fail "meson install -C $BUILD_ROOT --destdir failed"

expect=("$bin/adagrouper" "$lib/pkgconfig/adagrouper.pc"
        "$lib/libadagrouper_sim.a" "$lib/libadagrouper_traces.a" "$lib/libadagrouper_planner.a"
        "$lib/libadagrouper_sweep.a"
        "$inc/adagrouper/sim/sim.h" "$inc/adagrouper/sim/simulate.h" "$inc/adagrouper/traces/traces.h"
        "$inc/adagrouper/planner/planner.h" "$inc/adagrouper/sweep/sweep.h"
        "$share/adagrouper/configs/examples/toy-4.json" "$share/adagrouper/configs/pipelines/gpt-8stage-v100.json"
        "$share/adagrouper/traces/data/bursty-onoff-25g.csv"
        "$share/bash-completion/completions/adagrouper.bash")
[ "$CALIB_BUILT" = 1 ] && expect+=("$bin/adagrouper-calib" "$share/bash-completion/completions/adagrouper-calib.bash")
[ "$MAN_BUILT" = 1 ] && expect+=("$man/man1/adagrouper.1" "$man/man1/adagrouper-simulate.1"
                                 "$man/man1/adagrouper-trace-stats.1")
[ "$MAN_BUILT" = 1 ] && [ "$CALIB_BUILT" = 1 ] && expect+=("$man/man1/adagrouper-calib-stages.1")
for f in "${expect[@]}"; do [ -e "$f" ] || fail "not installed: ${f#"$dest"}"; done
for h in "$inc"/adagrouper/*/*.h; do
  case "$(basename "$h")" in detail.h | runner.h | *_internal.h | plan_steps.h | model_generator.h)
    fail "an internal header was installed: ${h#"$dest"}" ;;
  esac
done

# The installed programs, on the installed example data (the worked example of docs/model.md: 49 s).
data=$share/adagrouper/configs
out=$("$bin/adagrouper" simulate --pipeline "$data/examples/toy-4.json" --network "$data/examples/toy-net-2s.json" \
        --schedule kfkb --k 2 -b 1) || fail "installed adagrouper simulate failed: $out"
grep -q "^iteration time   49 s" <<<"$out" || fail "installed adagrouper simulate: $out"
"$bin/adagrouper" simulate --pipeline "$data/pipelines/gpt-8stage-v100.json" \
  --network "$data/networks/bursty-25g.json" --schedule 1f1b -b 4 >/dev/null \
  || fail "installed configs do not find the installed traces (networks/bursty-25g.json)"

# A ten-line program against the installed libraries, through pkg-config.
work=$dest/prog
mkdir -p "$work"
cat >"$work/prog.cpp" <<'CPP'
#include <planner.h>
#include <sweep.h>
#include <traces.h>
#include <iostream>
using namespace adagrouper;
int main(int, char** argv) {
  const sim::Pipeline p = sim::load_pipeline(argv[1]);
  const sim::Network n = sim::load_network(argv[2], p.num_stages(), traces::TraceRates());
  const auto sc = sim::make_scenario(p, n, sim::make_named("kfkb", p.num_stages(), 8, 2), 1, 1);
  std::cout << sim::simulate(sc).mean_iteration_time_s() << "\n"
            << planner::make_plan(p, n, {.memory_limit_bytes = 4e9, .global_batch_size = 8}).chosen_schedule.spec.label() << "\n";
}
CPP
pc=(env PKG_CONFIG_PATH="$lib/pkgconfig" pkg-config --define-variable=prefix="$dest$PREFIX")
flags=$("${pc[@]}" --cflags --libs adagrouper) || fail "pkg-config --cflags --libs adagrouper failed"
[ "$SANITIZE" = none ] || flags="-fsanitize=$SANITIZE $flags"
# shellcheck disable=SC2086  # the flags are words
$CXX -std=c++20 -o "$work/prog" "$work/prog.cpp" $flags || fail "the program does not build with: $flags"
got=$("$work/prog" "$data/examples/toy-4.json" "$data/examples/toy-net-2s.json") || fail "the program failed: $got"
[ "$(head -1 <<<"$got")" = 49 ] && [ -n "$(sed -n 2p <<<"$got")" ] \
  || fail "the program printed '$got', not 49 and the planned schedule"

# The Python module from the installed site-packages.
if [ -n "$PYTHON" ]; then
  pydir=$(under "$PYTHON_DIR")
  ls "$pydir"/adagrouper*.so >/dev/null 2>&1 || fail "the Python module is not in ${pydir#"$dest"}"
  got=$(cd "$work" && PYTHONPATH="$pydir" "$PYTHON" -c "import adagrouper as ag, sys
s = ag.simulate(sys.argv[1], sys.argv[2], schedule='kfkb', k=2, micro_batch_size=1)
print(ag.__file__.startswith(sys.argv[3]), s['mean_iteration_time_s'])" \
        "$data/examples/toy-4.json" "$data/examples/toy-net-2s.json" "$pydir") || fail "import adagrouper failed: $got"
  [ "$got" = "True 49.0" ] || fail "the installed Python module gave '$got', not 'True 49.0'"
fi

# The completion loads and completes.
got=$(bash -c 'source "$1"; COMP_WORDS=(adagrouper sim); COMP_CWORD=1; _adagrouper_complete; echo "${COMPREPLY[*]}"' \
        _ "$share/bash-completion/completions/adagrouper.bash") || fail "the completion does not load"
[ "$got" = simulate ] || fail "the completion of 'adagrouper sim' gave '$got'"

echo "install checks passed (DESTDIR $dest, prefix $PREFIX)"

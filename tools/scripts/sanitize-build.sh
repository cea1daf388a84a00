#!/usr/bin/env bash
# Configures build-sanitize/ and builds TARGETs in it (default: everything): clang with
# ASan+UBSan and libFuzzer's coverage, the one sanitizer build behind both the ASan+UBSan
# test suite (tools/run.sh test-sanitize) and the loaders' fuzz targets (`fuzz`,
# tests/fuzz/run.sh). One build serves both: the libraries compile once, not once per
# compiler (docs/performance.md, "CI").
#
#   tools/scripts/sanitize-build.sh [--optimization L] [TARGET...]
#
#   --optimization L   0 (default), 1, 2, 3, g or s; changing it rebuilds everything
#
# Needs clang++ >= 16 with its sanitizer and libFuzzer runtimes (Debian: clang-16,
# libclang-rt-16-dev; `tools/run.sh test-sanitize` and `tools/run.sh fuzz` install them);
# $CXX picks another clang. No Python module (an ASan-built extension cannot be loaded
# into an uninstrumented python3), no MPI (Open MPI's own allocations leak at exit), no
# CUDA, no benchmarks. A build-sanitize/ configured with another compiler (gcc, or an
# older clang) is removed and configured again.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
dir=build-sanitize

opt=0
targets=()
while [ $# -gt 0 ]; do
  case "$1" in
    --optimization) [ $# -ge 2 ] || { echo "sanitize-build.sh: --optimization needs a level" >&2; exit 2; }
                    opt=$2; shift 2 ;;
    -h | --help) sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "sanitize-build.sh: unknown option '$1' (--optimization L, then targets)" >&2; exit 2 ;;
    *) targets+=("$1"); shift ;;
  esac
done
case "$opt" in 0 | 1 | 2 | 3 | g | s) ;; *) echo "sanitize-build.sh: --optimization: 0, 1, 2, 3, g or s, got '$opt'" >&2; exit 2 ;; esac

# clang >= 16 (C++20 lambdas that capture structured bindings); $CXX when it is set.
cxx=${CXX:-}
if [ -z "$cxx" ]; then
  for c in clang++-19 clang++-18 clang++-17 clang++-16; do
    if command -v "$c" >/dev/null; then cxx=$c; break; fi
  done
fi
if [ -z "$cxx" ] || ! command -v "$cxx" >/dev/null; then
  echo "sanitize-build.sh: clang++ >= 16 is missing (apt-get install clang-16 libclang-rt-16-dev)" >&2
  exit 1
fi
# The compiler a directory was configured with starts each of its compile commands.
if [ -f "$dir/build.ninja" ] && ! grep -q -m1 "\"command\": \"$cxx " "$dir/compile_commands.json" 2>/dev/null; then
  echo "sanitize-build.sh: $dir/ was configured with another compiler; configuring it again with $cxx" >&2
  rm -rf "$dir"
fi
options=(-Dfuzz=true -Db_sanitize=address,undefined -Db_lundef=false -Doptimization="$opt" -Ddebug=false
         -Db_ndebug=false -Dbenchmarks=false -Dcuda=disabled -Dnccl=disabled -Dmpi=disabled -Dpython=disabled)
if [ ! -f "$dir/build.ninja" ]; then
  CXX=$cxx meson setup "$dir" "${options[@]}" >&2
else
  meson configure "$dir" "${options[@]}" >&2
fi
ninja -C "$dir" "${targets[@]}" >&2

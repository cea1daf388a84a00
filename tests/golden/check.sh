#!/usr/bin/env bash
# Byte-exact regression check of the command line: runs the cases of cases.txt and
# compares exit status, stdout, stderr (of failing runs) and every written file with
# tests/golden/expected/NAME/.
#
#   tests/golden/check.sh [--build DIR] [--update] [--list] [CASE ...]
#
# --update rewrites the expected outputs (do that only when an output is meant to
# change, and say why in the commit). --list prints the case names. Exit status 0 when
# every case matches, 1 when one differs (the diff is printed), 2 for a bad command line.
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
build="$root/build"
update=0
list=0
wanted=()
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build=$(cd "$2" && pwd) || exit 2; shift 2 ;;
    --update) update=1; shift ;;
    --list) list=1; shift ;;
    -h|--help) sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "check.sh: unknown option $1" >&2; exit 2 ;;
    *) wanted+=("$1"); shift ;;
  esac
done

# "NAME|ARGS" per case, comments and blank lines dropped.
mapfile -t cases < <(grep -v '^[[:space:]]*\(#\|$\)' "$here/cases.txt" | sed 's/[[:space:]]*|[[:space:]]*/|/')
if [ "$list" -eq 1 ]; then
  for c in "${cases[@]}"; do echo "${c%%|*}"; done
  exit 0
fi

exe="$build/adagrouper"
[ -x "$exe" ] || { echo "check.sh: $exe not built" >&2; exit 2; }

# Writes the record of one case into directory $2: rc, stdout, stderr if it failed,
# files/ with what it wrote under $OUT. The temporary directory's name is replaced by
# the literal $OUT wherever it appears.
record() {
  local args=$1 dest=$2 out rc
  out=$(mktemp -d "${TMPDIR:-/tmp}/adagrouper-golden.XXXXXX")
  mkdir -p "$dest/files"
  local expanded=${args//\$OUT/$out}
  # shellcheck disable=SC2086 # the arguments are split on spaces, as written in cases.txt
  (cd "$root" && "$exe" $expanded >"$dest/stdout" 2>"$dest/stderr")
  rc=$?
  echo "$rc" >"$dest/rc"
  [ "$rc" -eq 0 ] && rm -f "$dest/stderr"
  (cd "$out" && find . -type f -print0 | xargs -0 -r cp --parents -t "$dest/files")
  # git keeps no empty directory: a case that writes no file has no files/ at all.
  rmdir --ignore-fail-on-non-empty "$dest/files"
  find "$dest" -type f -exec sed -i "s#$out#\$OUT#g" {} +
  rm -rf "$out"
}

failed=0
matched=0
for c in "${cases[@]}"; do
  name=${c%%|*}
  args=${c#*|}
  if [ ${#wanted[@]} -gt 0 ] && [[ ! " ${wanted[*]} " == *" $name "* ]]; then continue; fi
  expected="$here/expected/$name"
  if [ "$update" -eq 1 ]; then
    rm -rf "$expected"
    record "$args" "$expected"
    echo "updated $name (exit $(cat "$expected/rc"))"
    continue
  fi
  got=$(mktemp -d "${TMPDIR:-/tmp}/adagrouper-golden-got.XXXXXX")
  record "$args" "$got"
  if [ ! -d "$expected" ]; then
    echo "$name: no expected output (run check.sh --update $name)"
    failed=$((failed + 1))
  elif ! diff -r "$expected" "$got" >"$got.diff" 2>&1; then
    echo "$name: differs from tests/golden/expected/$name:"
    head -n 40 "$got.diff"
    failed=$((failed + 1))
  else
    matched=$((matched + 1))
  fi
  rm -rf "$got" "$got.diff"
done
[ "$update" -eq 1 ] && exit 0
echo "golden: $matched matched, $failed differ"
[ "$failed" -eq 0 ]

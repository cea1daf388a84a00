#!/usr/bin/env bash
# Measures what a rate change does to the shaper's bucket: one saturating TCP stream over
# link 0 of a two-namespace chain made and shaped by tools/scripts/netns.sh (as the
# fidelity testbed makes and shapes its links), first left alone, then changed to the
# same rate and bucket every PERIOD seconds with the tc call the preemption driver of
# tools/scripts/fidelity.sh makes; prints both throughputs and the bytes each change let through
# beyond the rate. Linux's tbf refills its bucket at every `tc qdisc change` (tbf_change
# sets the tokens to the whole bucket), so a link whose rate changes passes up to one
# bucket more per change than its rate allows (docs/fidelity.md, "What a rate change
# does to the bucket").
#
#   tools/scripts/tbf_refill.sh [--shaper tbf|htb] [--rate R] [--burst B] [--period S]
#                               [--seconds T] [--gso BYTES]
#
#   --shaper S    tbf (default; `tc qdisc change`) or htb (one class, `tc class change`)
#   --rate R      tc's rate (default 20mbit)
#   --burst B     the bucket in bytes (default 125000)
#   --period S    seconds between two changes (default 0.1; each change also takes the
#                 few ms of its tc call)
#   --seconds T   how long each stream is measured (default 4)
#   --gso BYTES   the largest packet the link takes (`netns.sh gso`; default 65536, TCP's
#                 own; the testbed caps it at 4096 unless its bucket never shrinks)
#
# Needs root and network namespaces (exit 77 without them); uses a chain of its own
# (`netns.sh --prefix agr`: namespaces agr0, agr1) and removes it at the end. Bad
# options: one line, exit 2; a stream that never connects or stalls: one line, exit 1.
set -euo pipefail

die() {
  echo "tbf_refill.sh: $*" >&2
  exit 2
}

shaper=tbf rate=20mbit burst=125000 period=0.1 seconds=4 gso=65536
while [ $# -gt 0 ]; do
  case "$1" in
    --shaper) shaper=${2:-}; shift 2 || die "--shaper: needs a value" ;;
    --rate) rate=${2:-}; shift 2 || die "--rate: needs a value" ;;
    --burst) burst=${2:-}; shift 2 || die "--burst: needs a value" ;;
    --period) period=${2:-}; shift 2 || die "--period: needs a value" ;;
    --seconds) seconds=${2:-}; shift 2 || die "--seconds: needs a value" ;;
    --gso) gso=${2:-}; shift 2 || die "--gso: needs a value" ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown option $1 (--help lists them)" ;;
  esac
done
case "$shaper" in tbf | htb) ;; *) die "--shaper: tbf or htb, got '$shaper'" ;; esac
[[ "$rate" =~ ^[0-9]+(\.[0-9]+)?[kmg]?(bit|bps)$ ]] || die "--rate: tc's form, such as 20mbit, got '$rate'"
[[ "$burst" =~ ^[1-9][0-9]*$ ]] || die "--burst: a positive whole number of bytes, got '$burst'"
[[ "$period" =~ ^[0-9]*\.?[0-9]+$ ]] || die "--period: seconds, such as 0.1, got '$period'"
[[ "$seconds" =~ ^[1-9][0-9]*$ ]] || die "--seconds: a positive whole number, got '$seconds'"
[[ "$gso" =~ ^[1-9][0-9]*$ ]] || die "--gso: a positive whole number of bytes, got '$gso'"

netns=("$(dirname "${BASH_SOURCE[0]}")/netns.sh" --prefix agr)
if [ "$(id -u)" -ne 0 ] || ! "${netns[@]}" check >/dev/null 2>&1; then
  echo "tbf_refill.sh: SKIP: needs root and network namespaces"
  exit 77
fi
"${netns[@]}" destroy >/dev/null 2>&1 || true  # left over from an interrupted run
work=$(mktemp -d)
trap '"${netns[@]}" destroy >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
"${netns[@]}" create 2 >/dev/null
"${netns[@]}" gso "$gso" >/dev/null
# The shaper on link 0's forward direction (agr0 -> agr1, device `next`), as netns.sh
# sets it; a change is the driver's tc call: tbf's `qdisc change`, htb's `class change`
# (its leaf queue stays), straight through `tc -n`.
"${netns[@]}" rate 0 "$rate" --dir forward --burst "$burst" --shaper "$shaper" >/dev/null
change() {
  if [ "$shaper" = tbf ]; then
    tc -n agr0 qdisc change dev next root tbf rate "$rate" burst "$burst" latency 50ms
  else
    tc -n agr0 class change dev next parent 1: classid 1:1 htb rate "$rate" ceil "$rate" burst "$burst" \
      cburst "$burst" quantum 65536
  fi
}

# The receiver counts the bytes of T seconds from the first one, and marks that first one
# by creating the file it is given; the sender writes 64 KiB blocks for T + 1 seconds.
# Neither waits for ever: the sender retries its connect for 10 s (a slow host may start
# it before the receiver listens), and the receiver gives up, with one line and exit 1,
# after 20 s without a connection or 10 s without a byte.
cat >"$work/rx.py" <<'PY'
import socket, sys, time
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("10.77.1.2", 5001))
s.listen(1)
s.settimeout(20)
c = None
try:
    c, _ = s.accept()
    c.settimeout(10)
    n, t0, dur = 0, None, float(sys.argv[1])
    while True:
        b = c.recv(1 << 20)
        if not b:
            break
        if t0 is None:
            t0 = time.monotonic()
            open(sys.argv[2], "w").close()
        n += len(b)
        if time.monotonic() - t0 > dur:
            break
except socket.timeout:
    sys.exit("tbf_refill.sh: the receiver timed out: the sender " +
             ("never connected" if c is None else "stopped sending"))
if t0 is None:
    sys.exit("tbf_refill.sh: the sender closed without sending a byte")
print(n, time.monotonic() - t0)
PY
cat >"$work/tx.py" <<'PY'
import socket, sys, time
deadline = time.monotonic() + 10
while True:
    try:
        s = socket.create_connection(("10.77.1.2", 5001), timeout=2)
        break
    except OSError:
        if time.monotonic() > deadline:
            sys.exit("tbf_refill.sh: the sender could not connect to the receiver in 10 s")
        time.sleep(0.1)
s.settimeout(None)
buf, end = b"x" * 65536, time.monotonic() + float(sys.argv[1]) + 1
try:
    while time.monotonic() < end:
        s.sendall(buf)
except OSError:
    pass
PY

# stream MODE: prints "BYTES SECONDS CHANGES".
stream() {
  rm -f "$work/started"
  "${netns[@]}" exec 1 python3 "$work/rx.py" "$seconds" "$work/started" >"$work/rx.out" &
  local rx=$! changes=0
  sleep 0.3
  "${netns[@]}" exec 0 python3 "$work/tx.py" "$seconds" &
  local tx=$!
  if [ "$1" = changes ]; then
    # Only the changes within the measured seconds count: from the first byte received.
    while [ ! -e "$work/started" ] && kill -0 "$rx" 2>/dev/null; do sleep 0.01; done
    while kill -0 "$rx" 2>/dev/null; do
      change
      changes=$((changes + 1))
      sleep "$period"
    done
  fi
  local rc=0
  wait "$rx" || rc=$?
  kill "$tx" 2>/dev/null || true
  wait "$tx" 2>/dev/null || true
  [ "$rc" -eq 0 ] || return 1
  echo "$(cat "$work/rx.out") $changes"
}

# A stream that failed has said why on stderr; its line is missing, and so is the report.
steady=$(stream steady) || exit 1
changed=$(stream changes) || exit 1
read -r b0 s0 _ <<<"$steady"
read -r b1 s1 n1 <<<"$changed"
python3 - "$rate" "$burst" "$b0" "$s0" "$b1" "$s1" "$n1" "$shaper" <<'PY'
import sys
rate, burst = sys.argv[1], int(sys.argv[2])
b0, s0, b1, s1, n1 = int(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5]), float(sys.argv[6]), int(sys.argv[7])
r0, r1 = b0 / s0, b1 / s1
print(f"{sys.argv[8]} rate {rate}, bucket {burst} bytes")
print(f"  left alone:             {8 * r0 / 1e6:8.2f} Mbit/s received")
print(f"  changed {n1:3d} times:      {8 * r1 / 1e6:8.2f} Mbit/s received ({n1 / s1:.1f} changes/s)")
if n1:
    extra = (r1 - r0) * s1 / n1
    print(f"  beyond the rate, per change: {extra:.0f} bytes ({extra / burst:.2f} of the bucket)")
PY

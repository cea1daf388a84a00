#!/usr/bin/env bash
# A chain of network namespaces joined by shaped veth links, and an mpirun that runs
# MPI rank r in namespace r: a one-host testbed for the calibration harness and for
# fidelity experiments on preempted links (docs/calibration.md, "Testing on shaped links").
#
#   tools/scripts/netns.sh [--prefix P] check              can this machine create namespaces?
#   tools/scripts/netns.sh [--prefix P] create N [--ring]  namespaces P0 .. P(N-1) in a chain;
#                                                  --ring (N >= 3) closes it: link N-1
#                                                  joins P(N-1) and P0
#   tools/scripts/netns.sh [--prefix P] destroy            remove them (and the control bridge)
#   tools/scripts/netns.sh [--prefix P] rate I RATE [--dir both|forward|backward]
#                                       [--burst BYTES] [--latency MS] [--shaper tbf|htb]
#                                       [--acks shaped|free]
#                                                  shape link I (P<I> <-> P<I+1>, or
#                                                  P<N-1> <-> P0 for a ring's link N-1) with tbf
#                                                  (default) or htb (see shape() below);
#                                                  --acks free: TCP's pure ACKs pass the
#                                                  shaper (they take no data's rate);
#                                                  RATE is tc's (200mbit, 1gbit) or `none`;
#                                                  run again to change the rate in place
#   tools/scripts/netns.sh [--prefix P] rate-all RATE [...]   the same for every link
#   tools/scripts/netns.sh [--prefix P] gso BYTES          the largest packet the data devices
#                                                  take (gso_max_size, default 4096): at
#                                                  most the smallest tbf bucket to be set
#   tools/scripts/netns.sh [--prefix P] tcp [CC|host] [--idle-restart on|off|host]
#                                       [--autocork on|off|host] [--pacing-ratio PCT|host]
#                                                  TCP in every namespace: the congestion
#                                                  control (net.ipv4.tcp_congestion_control,
#                                                  one of tcp_available_congestion_control),
#                                                  whether a connection idle for an RTO
#                                                  restarts from its initial window
#                                                  (tcp_slow_start_after_idle), whether a
#                                                  socket holds back a packet shorter than
#                                                  its size goal while earlier ones wait in
#                                                  a qdisc (tcp_autocorking), and the
#                                                  pacing ratios (tcp_pacing_ss_ratio and
#                                                  _ca_ratio, 100 .. 1000 per cent), which
#                                                  also set how many bytes a socket may
#                                                  keep in the qdiscs (TCP's small queues);
#                                                  host (the default) keeps what a new
#                                                  namespace has; prints the settings in
#                                                  effect
#   tools/scripts/netns.sh [--prefix P] exec R CMD ...     run CMD in namespace P<R>
#   tools/scripts/netns.sh [--prefix P] mpirun -np N [MPIRUN-OPTION ...] -- PROGRAM [ARG ...]
#                                                  mpirun with rank r in namespace P<r>
#   tools/scripts/netns.sh [--prefix P] status             namespaces, addresses and qdiscs
#
# Layout (prefix P, default "agc"):
#   control: bridge Pbr in the root namespace, 10.77.C.254/24; namespace r has `ctl`,
#            10.77.C.(r+1)/24, unshaped. mpirun's daemon and PMIx talk over it. C is 0,
#            or, when another chain's bridge has that subnet already, the highest free C
#            above the data subnets (chains with different prefixes coexist).
#   data:    link i joins namespace i (`next`, 10.77.(i+1).1/24) and namespace i+1
#            (`prev`, 10.77.(i+1).2/24); ranks that are not neighbours reach each other
#            through the chain (forwarding and routes are set up). A ring's link N-1 joins
#            namespace N-1 (`next`, 10.77.N.1/24) and namespace 0 (`prev`, 10.77.N.2/24),
#            so that a pipeline whose last rank sends to its first (the loop placement of
#            interleaved schedules) has a link of its own for it; a rank reaches another
#            the shorter way round (at equal distance, along the chain).
#   MPI:     namespace r also has one address of its own, 10.78.0.(r+1)/32, on `host`
#            (one end of a veth pair that stays in the namespace: a dummy device without
#            the dummy module), routed over the data links with that address as source.
#            MPI's tcp transport uses only `host` (--mca btl tcp,self: without it, ranks
#            on one host use shared memory and bypass the shaped links), so every rank
#            has exactly one address and every connection, neighbour or not, comes from
#            the address its peer advertised. (With the link addresses themselves, a
#            middle rank connects from one link's address and Open MPI's tcp transport
#            drops the connection: "inbound connection from unexpected IP"; 3 or more
#            ranks then hang.)
#   shaping: `tc qdisc add dev next|prev root tbf rate RATE burst B latency L` on the
#            sending side of the link; `rate` later uses `tc qdisc change`, so a
#            preemption driver can change rates in place while traffic flows. The data
#            devices take packets of at most 4 KiB (gso_max_size), so that a packet
#            queued before a change always fits the bucket after it (B >= 4 KiB; a
#            smaller --burst can stall a link at a change). A driver that passes the same
#            --burst at every change (a bucket that never shrinks) can lift the cap (gso
#            65536): tbf splits a larger packet at enqueue into packets of at most the
#            bucket, which every later change keeps. With --shaper htb: a root htb
#            with one class whose rate `rate` changes (`tc class change`) and a bfifo
#            leaf as large as tbf's queue; htb cannot strand a large packet, so the cap
#            can be lifted (gso 65536). With --acks free the shaper sits in class 1:1 of
#            a root htb (tbf as its leaf 10:) and TCP's pure ACKs go to an unlimited
#            class 1:9, so that they take none of the shaped rate.
# Needs root (or CAP_NET_ADMIN) and iproute2. At most 250 namespaces.
set -euo pipefail

prefix=agc
die() {
  echo "netns.sh: $*" >&2
  exit 2
}

while [ $# -gt 0 ]; do
  case "$1" in
    --prefix)
      [ $# -ge 2 ] || die "--prefix needs a value"
      prefix=$2
      shift 2
      ;;
    --prefix=*)
      prefix=${1#--prefix=}
      shift
      ;;
    *) break ;;
  esac
done
[[ "$prefix" =~ ^[a-z][a-z0-9]{0,7}$ ]] || die "--prefix: 1 to 8 lower-case letters and digits, starting with a letter, got '$prefix'"

cmd=${1:-help}
[ $# -gt 0 ] && shift

# Namespaces of this prefix, in rank order.
namespaces() {
  ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^${prefix}[0-9]+$" | sed "s/^${prefix}//" | sort -n |
    sed "s/^/${prefix}/" || true
}
count() { namespaces | wc -l; }

# Whether the namespaces of this prefix form a ring (namespace 0 has a `prev` link).
is_ring() { ip -n "${prefix}0" link show prev >/dev/null 2>&1; }

# links N: the number of data links of N namespaces: N - 1, or N in a ring.
links() { if is_ring; then echo "$1"; else echo $(($1 - 1)); fi; }

need_ns() {
  local n
  n=$(count)
  [ "$n" -ge 2 ] || die "no chain with prefix '$prefix' (run: tools/scripts/netns.sh --prefix $prefix create N)"
  echo "$n"
}

# rate_bytes RATE: tc's rate string in bytes per second (integer), or dies.
rate_bytes() {
  local r=$1 num unit
  [[ "$r" =~ ^([0-9]+)(bit|kbit|mbit|gbit|tbit|bps|kbps|mbps|gbps)?$ ]] ||
    die "rate: '$r' is not a rate like 200mbit, 1gbit or 500kbit"
  num=${BASH_REMATCH[1]}
  unit=${BASH_REMATCH[2]:-bit}
  case "$unit" in
    bit) echo $((num / 8)) ;;
    kbit) echo $((num * 1000 / 8)) ;;
    mbit) echo $((num * 1000000 / 8)) ;;
    gbit) echo $((num * 1000000000 / 8)) ;;
    tbit) echo $((num * 1000000000000 / 8)) ;;
    bps) echo "$num" ;;
    kbps) echo $((num * 1000)) ;;
    mbps) echo $((num * 1000000)) ;;
    gbps) echo $((num * 1000000000)) ;;
  esac
}

# layout NS DEV: the shaping on DEV's egress, as shape() builds it: none; tbf (a root
# tbf); htb (a root htb whose class 1:1 has the bfifo leaf 10:); htb-tbf (a root htb whose
# class 1:1, unlimited, has the tbf leaf 10:); the last two with +acks where the class
# 1:9 for TCP's pure ACKs exists.
layout() {
  local ns=$1 dev=$2 root leaf acks=""
  root=$(ip netns exec "$ns" tc qdisc show dev "$dev" root | awk 'NR == 1 { print $2 }')
  case "$root" in
    tbf) echo tbf ;;
    htb)
      leaf=$(ip netns exec "$ns" tc qdisc show dev "$dev" parent 1:1 | awk 'NR == 1 { print $2 }')
      [ -z "$(ip netns exec "$ns" tc class show dev "$dev" classid 1:9)" ] || acks=+acks
      if [ "$leaf" = tbf ]; then echo "htb-tbf$acks"; else echo "htb$acks"; fi
      ;;
    *) echo none ;;
  esac
}

# shape NS DEV RATE BURST LATENCY_MS SHAPER ACKS: tbf, or htb, on DEV's egress, added or
# changed in place (a different layout is replaced).
#   tbf: rate RATE, bucket BURST, queue of LATENCY_MS at RATE (plus the bucket).
#   htb: root htb 1: (default class 1:1), one class 1:1 with rate = ceil = RATE, burst =
#        cburst = BURST, and a leaf bfifo 10: of the same size as tbf's queue (RATE x
#        LATENCY_MS + BURST bytes), recomputed at each change. htb sends a packet whenever
#        its class's tokens are not negative and lets them go negative, so a packet larger
#        than the bucket leaves late, never not at all (tbf strands it; see gso below).
#   ACKS shaped (default): every packet takes the shaper's tokens, TCP's pure ACKs of the
#        other direction's data too; free: a u32 filter sends pure ACKs (TCP, flags ACK
#        only, shorter than 64 bytes) to an unlimited class 1:9 of a root htb, so the
#        shaper passes only data and a direction's rate does not depend on whether the
#        other carries data (with tbf: the tbf becomes the leaf 10: of an unlimited class
#        1:1). On a link shaped both ways, the ACKs of one direction's data take about
#        2% of the other's rate (docs/fidelity.md, "The other direction's ACKs").
shape() {
  local ns=$1 dev=$2 rate=$3 burst=$4 latency=$5 shaper=${6:-tbf} acks=${7:-shaped}
  local tcn=(ip netns exec "$ns" tc)
  if [ "$rate" = none ]; then
    "${tcn[@]}" qdisc del dev "$dev" root 2>/dev/null || true
    return 0
  fi
  local cur want limit=""
  cur=$(layout "$ns" "$dev")
  want=$shaper
  [ "$shaper$acks" != tbffree ] || want=htb-tbf
  [ "$acks" = shaped ] || want=$want+acks
  if [ "$shaper" = htb ]; then
    # At least two 64 KiB packets (bfifo drops a packet larger than its room, and TCP's
    # offload builds 64 KiB ones: below about 20 Mbit/s, 50 ms would hold none).
    limit=$(($(rate_bytes "$rate") * latency / 1000 + burst))
    [ "$limit" -ge 131072 ] || limit=131072
  fi
  local verb=change
  if [ "$cur" != "$want" ]; then
    [ "$cur" = none ] || "${tcn[@]}" qdisc del dev "$dev" root
    verb=add
  fi
  if [ "$want" = tbf ]; then
    "${tcn[@]}" qdisc "$verb" dev "$dev" root tbf rate "$rate" burst "$burst" latency "${latency}ms"
    return 0
  fi
  if [ "$verb" = add ]; then
    # A class that never holds a packet back (the ACKs', or the one above tbf).
    local unlimited=(htb rate 100gbit ceil 100gbit burst 256k cburst 256k quantum 65536)
    "${tcn[@]}" qdisc add dev "$dev" root handle 1: htb default 1
    if [ "$acks" = free ]; then
      "${tcn[@]}" class add dev "$dev" parent 1: classid 1:9 "${unlimited[@]}"
      "${tcn[@]}" filter add dev "$dev" parent 1: protocol ip prio 1 u32 match ip protocol 6 0xff \
        match u8 0x05 0x0f at 0 match u16 0x0000 0xffc0 at 2 match u8 0x10 0xff at 33 flowid 1:9
    fi
    if [ "$shaper" = tbf ]; then
      "${tcn[@]}" class add dev "$dev" parent 1: classid 1:1 "${unlimited[@]}"
    else
      "${tcn[@]}" class add dev "$dev" parent 1: classid 1:1 htb rate "$rate" ceil "$rate" \
        burst "$burst" cburst "$burst" quantum 65536
    fi
  elif [ "$shaper" = htb ]; then
    "${tcn[@]}" class change dev "$dev" parent 1: classid 1:1 htb rate "$rate" ceil "$rate" \
      burst "$burst" cburst "$burst" quantum 65536
  fi
  if [ "$shaper" = tbf ]; then
    "${tcn[@]}" qdisc "$verb" dev "$dev" parent 1:1 handle 10: tbf rate "$rate" burst "$burst" latency "${latency}ms"
  else
    "${tcn[@]}" qdisc "$verb" dev "$dev" parent 1:1 handle 10: bfifo limit "$limit"
  fi
}

do_rate() {
  local link=$1 rate=$2
  shift 2
  local dir=both burst="" latency=50 shaper=tbf acks=shaped
  while [ $# -gt 0 ]; do
    case "$1" in
      --dir) dir=${2:-}; shift 2 ;;
      --acks) acks=${2:-}; shift 2 ;;
      --burst) burst=${2:-}; shift 2 ;;
      --latency) latency=${2:-}; shift 2 ;;
      --shaper) shaper=${2:-}; shift 2 ;;
      *) die "rate: unknown option '$1' (--dir, --burst, --latency, --shaper, --acks)" ;;
    esac
  done
  case "$dir" in both | forward | backward) ;; *) die "rate: --dir must be both, forward or backward, got '$dir'" ;; esac
  case "$shaper" in tbf | htb) ;; *) die "rate: --shaper must be tbf or htb, got '$shaper'" ;; esac
  case "$acks" in shaped | free) ;; *) die "rate: --acks must be shaped or free, got '$acks'" ;; esac
  [[ "$latency" =~ ^[0-9]+$ ]] || die "rate: --latency is in whole milliseconds, got '$latency'"
  if [ "$rate" != none ]; then
    local bps
    bps=$(rate_bytes "$rate")
    [ "$bps" -gt 0 ] || die "rate: must be > 0 (use 'none' to remove the shaping), got '$rate'"
    if [ -z "$burst" ]; then
      # At least 32 kbit (4 KiB) and one millisecond of traffic: tbf needs a bucket of at
      # least rate / HZ to reach its rate.
      burst=$((bps / 1000))
      [ "$burst" -ge 4096 ] || burst=4096
    fi
    [[ "$burst" =~ ^[0-9]+$ ]] || die "rate: --burst is in bytes, got '$burst'"
  fi
  local n
  n=$(need_ns)
  [[ "$link" =~ ^[0-9]+$ ]] && [ "$link" -lt "$(links "$n")" ] ||
    die "rate: link '$link' does not exist (links 0 .. $(($(links "$n") - 1)) join namespace i and i+1$(is_ring && echo ", the last namespace $((n - 1)) and 0"))"
  if [ "$dir" != backward ]; then shape "${prefix}${link}" next "$rate" "$burst" "$latency" "$shaper" "$acks"; fi
  if [ "$dir" != forward ]; then shape "${prefix}$(((link + 1) % n))" prev "$rate" "$burst" "$latency" "$shaper" "$acks"; fi
}

do_create() {
  local n=${1:-} ring=0
  [ "${2:-}" != --ring ] || ring=1
  if [ $# -gt 2 ] || { [ $# -eq 2 ] && [ "$ring" -eq 0 ]; }; then die "create: N [--ring], got '$*'"; fi
  [[ "$n" =~ ^[0-9]+$ ]] && [ "$n" -ge 2 ] && [ "$n" -le 250 ] || die "create: N must be 2 .. 250, got '${n}'"
  [ "$ring" -eq 0 ] || [ "$n" -ge 3 ] || die "create: --ring needs N >= 3 (2 namespaces are one link)"
  local nlinks=$((n - 1 + ring))
  [ "$(count)" -eq 0 ] || die "create: namespaces with prefix '$prefix' exist already (tools/scripts/netns.sh --prefix $prefix destroy)"
  # Undo a half-made chain on any failure.
  trap 'echo "netns.sh: create failed; removing what it made" >&2; do_destroy >/dev/null 2>&1 || true' ERR
  local br=${prefix}br r i c=""
  # The control subnet: 10.77.0.0/24 unless another chain uses it (then the highest free
  # 10.77.C.0/24 above this chain's data subnets 10.77.1 .. N-1, or .. N in a ring).
  local used
  used=$(ip -4 -o addr show 2>/dev/null | awk '{print $4}' | sed -n 's/^10\.77\.\([0-9]*\)\..*/\1/p' | sort -u)
  for cand in 0 $(seq 254 -1 $((nlinks + 1))); do
    if ! grep -qx "$cand" <<<"$used"; then
      c=$cand
      break
    fi
  done
  [ -n "$c" ] || die "create: no free 10.77.C.0/24 control subnet"
  ip link add "$br" type bridge
  ip addr add "10.77.${c}.254/24" dev "$br"
  ip link set "$br" up
  for ((r = 0; r < n; r++)); do
    local ns=${prefix}${r}
    ip netns add "$ns"
    ip -n "$ns" link set lo up
    ip netns exec "$ns" sh -c 'echo 1 > /proc/sys/net/ipv4/ip_forward'
    ip link add "${prefix}c${r}" type veth peer name "${prefix}x${r}"
    ip link set "${prefix}c${r}" master "$br" up
    ip link set "${prefix}x${r}" netns "$ns"
    ip -n "$ns" link set "${prefix}x${r}" name ctl
    ip -n "$ns" addr add "10.77.${c}.$((r + 1))/24" dev ctl
    ip -n "$ns" link set ctl up
  done
  for ((i = 0; i < nlinks; i++)); do
    local a=${prefix}${i} b=${prefix}$(((i + 1) % n))
    ip link add "${prefix}a${i}" type veth peer name "${prefix}b${i}"
    ip link set "${prefix}a${i}" netns "$a"
    ip link set "${prefix}b${i}" netns "$b"
    ip -n "$a" link set "${prefix}a${i}" name next
    ip -n "$b" link set "${prefix}b${i}" name prev
    ip -n "$a" addr add "10.77.$((i + 1)).1/24" dev next
    ip -n "$b" addr add "10.77.$((i + 1)).2/24" dev prev
    # Packets of at most 4 KiB on the shaped devices (TCP's segmentation offload builds
    # them up to 64 KiB): tbf checks a packet against its bucket when it is queued, and
    # one queued under a larger bucket that `rate` later shrinks below it never leaves
    # (the link passes nothing until the bucket grows again). 4 KiB is the smallest
    # bucket `rate` sets (docs/fidelity.md, "Rate changes that stalled a link").
    ip -n "$a" link set next gso_max_size 4096 gro_max_size 4096 2>/dev/null &&
      ip -n "$b" link set prev gso_max_size 4096 gro_max_size 4096 2>/dev/null ||
      echo "netns.sh: warning: cannot cap the packet size on link $i (iproute2 or kernel too old): a rate change can stall it" >&2
    ip -n "$a" link set next up
    ip -n "$b" link set prev up
  done
  # Each namespace's own address, on a device that only it uses.
  for ((r = 0; r < n; r++)); do
    local ns=${prefix}${r}
    ip -n "$ns" link add host type veth peer name hostpeer
    ip -n "$ns" addr add "10.78.0.$((r + 1))/32" dev host
    ip -n "$ns" link set hostpeer up
    ip -n "$ns" link set host up
  done
  # Routes along the chain, so that ranks that are not neighbours reach each other
  # over the data links (MPI's collectives need every pair).
  for ((r = 0; r < n; r++)); do
    local ns=${prefix}${r} j
    for ((j = 1; j < n; j++)); do
      # Subnet 10.77.j.0/24 is link j-1 (namespaces j-1 and j).
      if [ $((j - 1)) -gt "$r" ]; then
        ip -n "$ns" route add "10.77.${j}.0/24" via "10.77.$((r + 1)).2" dev next
      elif [ "$j" -lt "$r" ]; then
        ip -n "$ns" route add "10.77.${j}.0/24" via "10.77.${r}.1" dev prev
      fi
    done
    # Link r's subnet is 10.77.(r+1); the link before namespace r is link r-1, or in a
    # ring for namespace 0 link N-1.
    local prev_subnet=$r
    [ "$r" -gt 0 ] || prev_subnet=$n
    for ((j = 0; j < n; j++)); do
      [ "$j" -ne "$r" ] || continue
      local ahead=$(((j - r + n) % n)) behind=$(((r - j + n) % n)) way=prev
      if [ "$ring" -eq 1 ]; then
        # The shorter way round; at equal distance along the chain, so that both ways of
        # a pair take the same links.
        if [ "$ahead" -lt "$behind" ] || { [ "$ahead" -eq "$behind" ] && [ "$j" -gt "$r" ]; }; then way=next; fi
      elif [ "$j" -gt "$r" ]; then
        way=next
      fi
      if [ "$way" = next ]; then
        ip -n "$ns" route add "10.78.0.$((j + 1))/32" via "10.77.$((r + 1)).2" dev next src "10.78.0.$((r + 1))"
      else
        ip -n "$ns" route add "10.78.0.$((j + 1))/32" via "10.77.${prev_subnet}.1" dev prev src "10.78.0.$((r + 1))"
      fi
    done
  done
  trap - ERR
  echo "netns.sh: made namespaces ${prefix}0 .. ${prefix}$((n - 1)), links 0 .. $((nlinks - 1))$([ "$ring" -eq 0 ] || echo ", a ring") (unshaped), control 10.77.${c}.0/24"
}

do_destroy() {
  local ns
  for ns in $(namespaces); do ip netns del "$ns"; done
  if ip link show "${prefix}br" >/dev/null 2>&1; then ip link del "${prefix}br"; fi
  # Control veths whose namespace side was never moved (a failed create).
  local l
  for l in $(ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | sed 's/@.*//' |
    grep -E "^${prefix}[acbx][0-9]+$" || true); do
    ip link del "$l" 2>/dev/null || true
  done
}

do_check() {
  [ -x "$(command -v ip)" ] || { echo "netns.sh: iproute2 (ip) is not installed" >&2; exit 1; }
  [ -x "$(command -v tc)" ] || { echo "netns.sh: tc (iproute2) is not installed" >&2; exit 1; }
  local probe=${prefix}probe$$
  if ! ip netns add "$probe" 2>/dev/null; then
    echo "netns.sh: cannot create network namespaces here (needs root or CAP_NET_ADMIN)" >&2
    exit 1
  fi
  local ok=0
  if ip link add "${prefix}pa$$" type veth peer name "${prefix}pb$$" 2>/dev/null; then
    ip link set "${prefix}pa$$" netns "$probe" 2>/dev/null &&
      ip -n "$probe" link set "${prefix}pa$$" up 2>/dev/null &&
      ip netns exec "$probe" tc qdisc add dev "${prefix}pa$$" root tbf rate 200mbit burst 32kbit latency 50ms \
        2>/dev/null && ok=1
    ip link del "${prefix}pb$$" 2>/dev/null || true
  fi
  ip netns del "$probe" 2>/dev/null || true
  if [ "$ok" -ne 1 ]; then
    echo "netns.sh: namespaces work, but veth pairs or tbf shaping do not (kernel modules veth, sch_tbf?)" >&2
    exit 1
  fi
  echo "netns.sh: network namespaces, veth pairs and tbf shaping work"
}

# do_tcp [CC|host] [--idle-restart on|off|host] [--autocork on|off|host]
# [--pacing-ratio PCT|host]: set TCP's congestion control, its restart after idle, its
# autocorking and its pacing ratios in every namespace of the chain, then print what is
# in effect (one line, the same in every namespace).
do_tcp() {
  local cc=host idle=host cork=host pacing=host n r ns
  while [ $# -gt 0 ]; do
    case "$1" in
      --idle-restart | --autocork)
        [ $# -ge 2 ] || die "tcp: $1 needs on, off or host"
        if [ "$1" = --idle-restart ]; then idle=$2; else cork=$2; fi
        shift 2
        ;;
      --pacing-ratio)
        [ $# -ge 2 ] || die "tcp: --pacing-ratio needs per cent (100 .. 1000) or host"
        pacing=$2
        shift 2
        ;;
      -*) die "tcp: unknown option '$1' (--idle-restart, --autocork, --pacing-ratio)" ;;
      *)
        cc=$1
        shift
        ;;
    esac
  done
  case "$idle" in on) idle=1 ;; off) idle=0 ;; host) ;; *) die "tcp: --idle-restart: on, off or host, got '$idle'" ;; esac
  case "$cork" in on) cork=1 ;; off) cork=0 ;; host) ;; *) die "tcp: --autocork: on, off or host, got '$cork'" ;; esac
  [ "$pacing" = host ] || { [[ "$pacing" =~ ^[0-9]{3,4}$ ]] && [ "$pacing" -ge 100 ] && [ "$pacing" -le 1000 ]; } ||
    die "tcp: --pacing-ratio: per cent, 100 .. 1000, or host, got '$pacing'"
  n=$(need_ns)
  if [ "$cc" != host ]; then
    grep -qwF -- "$cc" /proc/sys/net/ipv4/tcp_available_congestion_control ||
      die "tcp: congestion control '$cc' is not available here ($(cat /proc/sys/net/ipv4/tcp_available_congestion_control); modprobe tcp_$cc?)"
    # A namespace other than the host's may only choose an allowed one.
    grep -qwF -- "$cc" /proc/sys/net/ipv4/tcp_allowed_congestion_control ||
      die "tcp: congestion control '$cc' is not allowed in namespaces (allowed: $(cat /proc/sys/net/ipv4/tcp_allowed_congestion_control)); the host's root can allow it: sysctl -w net.ipv4.tcp_allowed_congestion_control=\"$(cat /proc/sys/net/ipv4/tcp_allowed_congestion_control) $cc\""
  fi
  for ((r = 0; r < n; r++)); do
    ns=${prefix}${r}
    [ "$cc" = host ] || ip netns exec "$ns" sysctl -q -w "net.ipv4.tcp_congestion_control=$cc"
    [ "$idle" = host ] || ip netns exec "$ns" sysctl -q -w "net.ipv4.tcp_slow_start_after_idle=$idle"
    [ "$cork" = host ] || ip netns exec "$ns" sysctl -q -w "net.ipv4.tcp_autocorking=$cork" 2>/dev/null ||
      die "tcp: --autocork: this kernel does not let a namespace set net.ipv4.tcp_autocorking"
    [ "$pacing" = host ] || ip netns exec "$ns" sysctl -q -w "net.ipv4.tcp_pacing_ss_ratio=$pacing" \
      "net.ipv4.tcp_pacing_ca_ratio=$pacing" >/dev/null 2>&1 ||
      die "tcp: --pacing-ratio: this kernel does not let a namespace set net.ipv4.tcp_pacing_ss_ratio and _ca_ratio"
  done
  ip netns exec "${prefix}0" sh -c 'cd /proc/sys/net/ipv4 && echo "congestion control $(cat tcp_congestion_control), slow start after idle $(cat tcp_slow_start_after_idle), autocorking $(cat tcp_autocorking), pacing ratios $(cat tcp_pacing_ss_ratio)/$(cat tcp_pacing_ca_ratio)"'
}

do_mpirun() {
  local np=""
  local args=()
  while [ $# -gt 0 ]; do
    case "$1" in
      --) shift; break ;;
      -np | -n | --np)
        np=${2:-}
        args+=("$1" "$np")
        shift 2
        ;;
      *) args+=("$1"); shift ;;
    esac
  done
  [ $# -gt 0 ] || die "mpirun: give the program after --: tools/scripts/netns.sh mpirun -np N -- PROGRAM ARGS"
  local n
  n=$(need_ns)
  [[ "$np" =~ ^[0-9]+$ ]] || die "mpirun: give -np N"
  [ "$np" -le "$n" ] || die "mpirun: -np $np, but the chain has only $n namespaces"
  local ctl
  ctl=$(ip -4 -o addr show dev "${prefix}br" 2>/dev/null | awk '{print $4}' | sed -n 's/^\(10\.77\.[0-9]*\)\.254\/24$/\1.0\/24/p')
  [ -n "$ctl" ] || die "mpirun: the control bridge ${prefix}br has no 10.77.C.254/24 address (tools/scripts/netns.sh --prefix $prefix create N)"
  local self
  self=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/$(basename "${BASH_SOURCE[0]}")
  local root=()
  [ "$(id -u)" -ne 0 ] || root=(--allow-run-as-root)
  # btl_tcp_if_include=host is set per rank by rank-exec.
  PMIX_MCA_ptl_tcp_if_include=$ctl exec mpirun "${root[@]}" --oversubscribe \
    -x PMIX_MCA_ptl_tcp_if_include \
    --mca oob_tcp_if_include "$ctl" \
    --mca btl tcp,self \
    "${args[@]}" "$self" --prefix "$prefix" rank-exec "$@"
}

do_rank_exec() {
  local r=${OMPI_COMM_WORLD_RANK:-${PMIX_RANK:-}}
  [ -n "$r" ] || die "rank-exec: not started by mpirun (no OMPI_COMM_WORLD_RANK)"
  local n
  n=$(count)
  [ "$r" -lt "$n" ] || die "rank-exec: rank $r, but the chain has only $n namespaces"
  ip -n "${prefix}${r}" -4 -o addr show dev host 2>/dev/null | grep -q ' 10\.78\.0\.' ||
    die "rank-exec: namespace ${prefix}${r} has no 'host' address (a chain made by an older netns.sh? destroy and create it again)"
  OMPI_MCA_btl_tcp_if_include=host exec ip netns exec "${prefix}${r}" "$@"
}

case "$cmd" in
  check) do_check ;;
  create) do_create "$@" ;;
  destroy) do_destroy ;;
  rate)
    [ $# -ge 2 ] || die "rate: give LINK RATE (e.g. rate 0 200mbit)"
    do_rate "$@"
    ;;
  rate-all)
    [ $# -ge 1 ] || die "rate-all: give RATE (e.g. rate-all 200mbit)"
    n=$(need_ns)
    for ((i = 0; i < $(links "$n"); i++)); do do_rate "$i" "$@"; done
    ;;
  exec)
    [ $# -ge 2 ] || die "exec: give R CMD ..."
    r=$1
    shift
    exec ip netns exec "${prefix}${r}" "$@"
    ;;
  gso)
    [ $# -ge 1 ] && [[ "$1" =~ ^[0-9]+$ ]] && [ "$1" -ge 1500 ] && [ "$1" -le 65536 ] ||
      die "gso: give BYTES, 1500 .. 65536 (the largest packet the shaped devices take)"
    n=$(need_ns)
    for ((i = 0; i < $(links "$n"); i++)); do
      ip -n "${prefix}${i}" link set next gso_max_size "$1" gro_max_size "$1"
      ip -n "${prefix}$(((i + 1) % n))" link set prev gso_max_size "$1" gro_max_size "$1"
    done
    ;;
  mpirun) do_mpirun "$@" ;;
  rank-exec) do_rank_exec "$@" ;;
  tcp) do_tcp "$@" ;;
  status)
    for ns in $(namespaces); do
      echo "== $ns"
      ip -n "$ns" -br addr
      ip netns exec "$ns" tc qdisc show | grep -v 'noqueue' || true
    done
    ;;
  help | -h | --help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0" ;;
  *) die "unknown command '$cmd' (check, create, destroy, rate, rate-all, gso, tcp, exec, mpirun, status)" ;;
esac

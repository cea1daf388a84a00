#!/usr/bin/env bash
# The fidelity testbed (docs/fidelity.md): how close is the simulator to a real run?
#
# On one machine, N ranks (2 to 4) in network namespaces joined by veth pairs shaped with
# tc tbf (tools/scripts/netns.sh) run the pipeline for real (adagrouper-calib replay, CPU/MPI
# backend), and the simulator predicts the same runs on the conditions recorded while
# they ran. For each scenario (a constant shaped link; a link whose rate a preemption
# driver changes over time following a trace):
#
#   1. calibrate   each channel's effective rate and latency on the shaped links, and
#                  the ops' cost beyond their profile (once, before the scenarios)
#   2. plan        adagrouper plan on the calibrated network (and the trace)
#   3. replay      several candidate plans, one after the other, each for --iterations
#                  measured iterations; in the preempted scenario each starts at the
#                  beginning of the trace, which a driver plays on the links, recording
#                  when each rate change took effect
#   4. simulate    each candidate on the recorded conditions (the recorded rate changes,
#                  scaled by the calibrated efficiency), starting where its replay did
#   5. compare     adagrouper compare: per-candidate error, MAPE, ranking; a table.
#                  Preempted, also against each iteration simulated on its own from
#                  the measured iteration's start ("aligned": no drift between the two)
#
# Usage: tools/scripts/fidelity.sh [OPTIONS]
#   --ranks N          stages and ranks, 2 .. 4 (default 2)
#   --rate RATE        tc rate of every link when not preempted (default 200mbit)
#   --scenario S       constant, preempted or both (default both)
#   --trace FILE       preemption trace (rate in bytes/s over time, any format of
#                      `adagrouper trace`, looped); default: periodic, the full rate for
#                      2 s, then a quarter of it for 2 s
#   --iterations n     measured iterations per replay (default 8)
#   --warmup w         warm-up iterations per replay (default 1)
#   --candidates K     replay at most K evaluated candidates: the chosen one, then the
#                      others by predicted time (default 0: all of them)
#   --calibrate M      replay (default) or p2p: how the links' effective rate is
#                      measured (see step 1 below)
#   --priority P       the ranks' scheduling priority: rt (chrt -f 10, SCHED_FIFO; their
#                      threads sleep while they wait), compute-rt (nice -n -10, and each
#                      rank's compute thread SCHED_FIFO 10: replay --compute-fifo), nice
#                      (nice -n -10) or none; default auto, where SCHED_FIFO is
#                      permitted: rt with fewer ranks than cores, compute-rt with as
#                      many, else nice (each drawn scenario by its own ranks)
#   --streams S        replay streams: plan (one send and one recv stream per stage) or
#                      channel (one per channel end) (default plan). With plan, a stage
#                      that receives from two peers posts its receives in the order its
#                      ops consume them, and a message that arrived while the stream
#                      waited on the other peer is measured as ending when the stream
#                      reached it (no iteration time lost; fidelity_attribution.py counts
#                      them as "held by the receive stream"; docs/fidelity.md, "The
#                      ring's stall was the receive stream")
#   --pipeline FILE    pipeline (default configs/fidelity/pipeline-N.json; with
#                      --families configs/fidelity/pipeline-2N.json)
#   --families LIST    plan across schedule families too (adagrouper plan --devices N
#                      --families LIST, N the ranks) and replay the chosen candidate and
#                      the fastest of each family in LIST at each of its virtual stage
#                      counts (static W fill; those that lost too; for kfkb-dynamic,
#                      the fastest by each --rank-by, after the others). On 3 or 4
#                      ranks a family whose model stages at v = 2 go from the last
#                      stage to the first (the loop placement of interleaved-1f1b,
#                      looped-bfs, interleaved-zb) runs on a ring of namespaces
#                      (netns.sh create N --ring), whose link N-1 the calibration
#                      gives the mean of the chain's channels (its 1F1B replays do not
#                      use it); the other families (zbv, dualpipev, kfkb-dynamic) on
#                      the chain
#   --rank-by R        auto (default), predicted or deployed: how the plan ranks
#                      candidates with dynamic W fill (adagrouper plan --rank-by);
#                      deployed ranks them by the order their programs fix, which the
#                      replay runs under --w-fill recorded; predicted by the fill's own
#                      prediction, which --w-fill runtime follows. auto: the one that
#                      matches --w-fill, so that the pick is judged as it is run
#   --w-fill F         recorded (default) or runtime: how a candidate with dynamic W fill
#                      is replayed and predicted. recorded: the replay runs the order
#                      its programs fix, predicted with simulate --recorded-order.
#                      runtime: the replay's compute streams place the W ops as the run
#                      goes (replay --w-fill runtime), predicted by the simulator's fill
#                      (docs/fidelity.md, "Dynamic W fill at run time")
#   --memory-limit B   plan's memory limit per stage in bytes (default: the pipeline's;
#                      with --families and the default pipeline 8e9, two model stages of
#                      pipeline-4 on each stage)
#   --build DIR        where adagrouper and adagrouper-calib are (default build)
#   --out DIR          outputs (default fidelity-out)
#   --prefix P         namespace prefix (default agf)
#   --random-scenarios N
#                      instead of one scenario, N drawn from --seed: per scenario 2 to 4
#                      ranks, an uneven pipeline (per stage its own forward, backward and
#                      message size), a shaped rate and a preemption trace (periodic,
#                      steps or on/off) written to --out/random-I/; each run --repeats
#                      times (preempted scenario), then a table of every candidate's
#                      MAPE over the repeats (random-summary.txt, random-summary.json)
#                      and, with 2 repeats or more, how far each candidate's measured
#                      runs are from each other beside its predictions' MAPE
#                      (tools/scripts/fidelity_noise.py: noise.txt, noise.json)
#   --seed S           seed of --random-scenarios (default 1)
#   --repeats R        runs of each drawn scenario (default 3)
#   --ci               reduced run for CI: 2 ranks (unless --ranks says), the preempted scenario (the constant
#                      one is the same without the driver), 2 candidates, 2 measured
#                      iterations, a short calibration (the largest messages only)
#   --keep             leave the namespaces in place afterwards
#   --shaper S         tbf (default) or htb: the shaping qdisc of the links. tbf, with the
#                      packets capped at the smallest bucket the run sets (a larger
#                      packet queued before a fall would stall the link; but see
#                      --bucket fixed); htb (one class whose rate/ceil each change
#                      sets, a bfifo leaf as large as tbf's queue: 50 ms of the rate
#                      plus the burst), with packets uncapped
#                      (htb lets its tokens go negative: a large packet leaves late, never
#                      not at all). Experimental: no stall, but a larger error than tbf
#                      on the seeds measured (its bucket is in effect one 64 KiB
#                      packet); docs/fidelity.md, "Shaping with HTB"
#   --bucket B         auto (default), per-rate, fixed or lowest: the shaper's bucket
#                      (burst) at each rate. auto: fixed with tbf, per-rate with htb.
#                      per-rate: 1 ms of the rate, at least 4096 bytes, recomputed at
#                      every change, with the packets capped at the smallest bucket the
#                      run sets (see --shaper). fixed: the bucket of the run's highest
#                      rate (--bucket-ms of it, at least 4096 bytes) at every rate, in
#                      bytes, as a real shaper keeps one, with no cap needed against a
#                      stall: tbf splits a larger packet at enqueue to at most the
#                      bucket, and the bucket never shrinks, so no queued packet can be
#                      stranded (--packet-cap caps them at 16 KiB for another reason).
#                      At a lower rate the bucket is more than 1 ms of tokens
#                      (a larger burst after idle), which the model then holds
#                      (--model-bucket). lowest: fixed with the bucket of the run's
#                      lowest rate (1 ms of it, at least 4096 bytes): no more than 1 ms
#                      of tokens at any rate. fixed and lowest: tbf only. fixed became
#                      the default when it and per-rate, alternated on unseen seeds,
#                      gave 26 and 24 of 26 candidates within 3%; docs/fidelity.md,
#                      "Keeping the bucket constant", "The bucket in the model, with
#                      Reno", "The numbers with today's defaults, three times"
#   --acks A           free (default) or shaped: whether TCP's pure ACKs pass the shaper
#                      (netns.sh rate --acks). shaped: they take the tokens of the link
#                      they leave on, so the ACKs of one direction's data take about 2%
#                      of the other direction's rate while both carry data, and a
#                      transfer's rate depends on the other direction's traffic, which
#                      the model's channels do not have; free: a link passes its data at
#                      one rate whatever the other direction does; docs/fidelity.md,
#                      "The other direction's ACKs"
#   --queue Q          auto (default), per-rate or fixed: the shaper's queue limit. auto:
#                      fixed with --bucket fixed or lowest, else per-rate. per-rate: 50
#                      ms of the rate plus the bucket, recomputed at every change (tbf's
#                      latency 50ms), so a fall shrinks the queue under what it holds
#                      and what arrives next is dropped. fixed: 50 ms of the run's
#                      highest rate plus its bucket, at least 128 KiB, in bytes at every
#                      rate, as a switch's buffer; docs/fidelity.md, "A queue that
#                      shrinks at a fall"
#   --packet-cap P     auto (default) or bytes from 1500 to 65536: the largest packet the
#                      shaped links' devices take (netns.sh gso). auto: with tbf, 16384
#                      under --bucket fixed or lowest and the smallest bucket the run
#                      sets under per-rate (see --shaper); with htb 65536 (uncapped:
#                      TCP's offload builds packets of up to 64 KiB). A message's last bytes
#                      may leave in one packet with the next message's first ones (on 4
#                      ranks at the lowest rate even with --tcp-push eager), and tbf
#                      sends a packet only when it has the tokens for all of it: the cap
#                      bounds how far that holds a message back (16 KiB: 2.6 ms at 50
#                      Mbit/s, where 64 KiB take 10.5); docs/fidelity.md, "A message's
#                      last packet", "Packets capped at 16 KiB by default"
#   --bucket-ms MS     the bucket's length in ms of the rate it is taken from: each
#                      rate's (per-rate), the highest (fixed) or the lowest (lowest); at
#                      least 4096 bytes. auto (default): 3 with --bucket fixed, else 1.
#                      With 1 ms of the highest rate, the host delivered messages late
#                      where both directions of a link were busy; docs/fidelity.md,
#                      "Where the waiting messages' delay is". 5 came closer still but
#                      sends most of a 160 kB message at once, untested by the rate;
#                      "A 5 ms bucket: closer, and why it is not the default"
#   --model-bucket M   auto (default), on or off: whether the model holds tbf's bucket.
#                      on: the calibration's fit knows the bucket (a message on an idle
#                      link gets it at once, fidelity_calib.py fit --bucket-bytes) and
#                      every simulated channel has it (burst_bytes, docs/model.md "Shaped
#                      links"), in a message's bytes: the payload of the whole frames
#                      tbf's bucket holds (docs/fidelity.md, "The bucket in the model's
#                      bytes"); needs a bucket that never changes (--bucket fixed or
#                      lowest) and --calibrate replay. off: the fit clamps the head start
#                      into the rate, no bucket in the model. auto: on where it can be;
#                      docs/fidelity.md, "The bucket in the model, with Reno"
#   --calib-latency L  auto (default), fit or tiny: where each channel's latency comes
#                      from. fit: the line through the small and large messages' times.
#                      tiny (needs the model's bucket): a third calibration replay of
#                      messages of half the bucket, with ops long enough for the bucket
#                      to refill between them, so that a message leaves at once and its
#                      time is the latency; the rate then comes from the large messages.
#                      auto: tiny with the model's bucket, else fit
#   --tiny-quantile Q  with --calib-latency tiny, which quantile of the tiny messages'
#                      times is the latency, 0 to 1 (default 0.1: a message the host did
#                      not delay; on a noisy host the median ran 0.04 to 0.27 ms from run
#                      to run, on a quiet one it came closer to the runs than the 10th
#                      percentile; docs/fidelity.md, "The ring's stall was the receive
#                      stream")
#   --calib-compute C  on (default) or off: whether the simulated pipeline is the one the
#                      ranks run (off) or that one with each stage's op overhead as a
#                      1F1B replay measured it (on): every op's cost beyond its profile,
#                      from the instant the model would start it to its end (a rank's
#                      wake-up on a shared core, a busy loop that ends late). The plan
#                      and the simulations read it (pipeline-sim.json), the ranks run the
#                      profile; docs/fidelity.md, "Calibrating the ops"
#   --calib-compute-iterations N
#                      measured iterations of the compute calibration's 1F1B replay
#                      (default 30, about 950 ops per stage; about 10 s). On this
#                      2-core host the overhead drifts by a third between blocks of 3
#                      iterations: with 3 the op overhead and the latency in situ of
#                      three runs of one scenario spread over a factor of three to five,
#                      with 10 under two; with 30 their standard deviation over five
#                      runs is 0.5 to 0.7 times that with 10, and the same candidate's
#                      predictions in different runs are closer (docs/fidelity.md,
#                      "Stalls in the compute calibration", "How far the runs are from
#                      each other")
#   --calib-compute-spread N
#                      auto (default), 0 or measured iterations: after each candidate's
#                      replay, at the constant rate, one more replay of the compute
#                      calibration's 1F1B plan with N measured iterations
#                      (calib/run-compute-K, about 6 s each with 10), so that the
#                      calibration samples the host over the whole run and not only in
#                      its first minute; 0: none, the candidates are predicted from the
#                      first replay alone. auto: 10 with --calib-compute on (1 with
#                      --ci), 0 without. The plan is
#                      made from the first replay alone (it comes before the
#                      candidates); the candidates are predicted from all of them
#                      pooled: the ops' overhead (calib/compute-pooled.json,
#                      pipeline-sim-pooled.json), their spread (calib/op-costs-pooled.json)
#                      and the latency in situ (calib/situ-pooled.json,
#                      calibration-pooled.json, and the networks net-sim-I.json made
#                      again from it); compute-replays.json in the scenario's directory
#                      says how many replays its predictions pooled. docs/fidelity.md,
#                      "The compute calibration spread over the run"
#   --stall-fence K    with --calib-compute on: an op of the compute calibration that
#                      cost more than K interquartile ranges above its stage's third
#                      quartile counts as stalled by the host and is left out of the
#                      stage's mean (default inf: every op counts, as the runs pay for
#                      their stalls too; 3 is Tukey's far-out fence, a diagnostic).
#                      Whatever K, an iteration in which an op cost more than 20 ms
#                      beyond its profile (the host froze) is left out of the ops'
#                      overhead, their spread and the latency in situ, and printed
#                      (docs/fidelity.md, "A host that froze during the calibration")
#   --op-spread N      auto (default), 0 or a number of draws (1 to 1000): each candidate
#                      predicted as the mean of N predictions, each with every op's cost
#                      beyond its profile drawn from the compute calibration's ops (less
#                      their mean, so that the mean stays the op overhead; the stall
#                      fence's ops left out), given to the simulator as a stage timing
#                      trace (tools/scripts/fidelity_spread.py). On a shared host most
#                      ops cost less than the mean and a few much more, and where an op
#                      waits for the later of two others that spread lengthens the wait;
#                      0: every op at the mean. auto: 16 with --calib-compute on, 0
#                      without. The prediction at the mean is kept (sim-point-I.json,
#                      compare-point.txt; op-spread.json holds N for
#                      fidelity_resim.py); the timelines and the aligned predictions are
#                      at the mean; docs/fidelity.md, "The ops' spread"
#   --message-spread M on or off (default off): with the ops' spread and the latency in
#                      situ, each draw also gives every message a latency of its own,
#                      its channel's plus a lag drawn from the compute calibration's
#                      transfers on its critical paths less their mean (calib/situ.json's
#                      lags_s; simulate --message-trace). None where the latency in situ
#                      was not measured; message-spread.json marks the runs predicted
#                      with it; docs/fidelity.md, "The messages' spread"
#   --latency-situ L   auto (default), on or off: whether every channel's latency also
#                      gets the latency in situ, what the messages an op waited for took
#                      beyond the calibrated links along the compute calibration's
#                      critical paths (tools/scripts/fidelity_situ.py; the receiving
#                      thread's wake-up on a busy host, which the links' calibration,
#                      each message alone on its link, leaves out). on needs
#                      --calib-compute on; auto: on with it, off without. None is added
#                      where the compute calibration's host warning fires; docs/
#                      fidelity.md, "The critical path, step by step" and "The latency
#                      in situ by default"
#   --compute-spin US  microseconds at the end of each compute op that the ranks spin
#                      rather than sleep (replay --compute-spin; default 200); 0 sleeps
#                      to the end (late by a wake-up instead)
#   --mpi-poll US      period of MPI_Test on a transfer in flight, in microseconds
#                      (replay --mpi-poll; default 20): a transfer ends up to one
#                      period late, and a shorter one wakes the ranks' send and recv
#                      threads more often. Both: with more ranks than cores a spin or
#                      a poll takes a core another rank wants; docs/fidelity.md, "The
#                      ranks' own CPU load"
#   --tcp CC           TCP congestion control in the namespaces (netns.sh tcp): reno
#                      (default: it keeps a shaped link busy at the shaper's rate whatever
#                      the traffic, as the model's channel is; with BBR and CUBIC the
#                      iterations at the lowest rate of a 3-rank scenario ran 1.6 to 5.8%
#                      slower than predicted, with Reno 0.1 to 0.3%; docs/fidelity.md,
#                      "TCP's congestion control"),
#                      another one the kernel allows in a namespace
#                      (tcp_allowed_congestion_control), or host (what a new namespace
#                      gets, e.g. this machine's bbr)
#   --tcp-idle-restart on|off|host
#                      whether a connection idle for an RTO restarts from its initial
#                      window (tcp_slow_start_after_idle; default host, which is on in
#                      Linux's default). The run writes the settings in effect to tcp.txt
#   --tcp-push eager|host
#                      eager (default): TCP hands each packet it builds to the shaper at
#                      once (net.ipv4.tcp_autocorking 0, pacing ratios 1000% so that TCP's
#                      small queues let a socket keep a whole message in the qdisc);
#                      host: as a new namespace has it, where a socket keeps a message's
#                      last, short packet back while earlier ones wait in tbf and appends
#                      the next message's first bytes to it, and tbf sends that packet
#                      only when it has the tokens for all of it: a message followed
#                      closely by another arrived up to 64 KiB of the next one's bytes
#                      late, and the next one as much early (docs/fidelity.md, "A
#                      message's last packet")
#   --net-log          at every rate change, snapshot the links' counters (tc -s) and
#                      TCP's (nstat) 60 ms before it and after it, into netstat-I.txt
#                      (diagnosis: tools/scripts/fidelity_attribution.py); the snapshots
#                      take CPU from the driver and delay its changes on a loaded host
#
# Outputs in --out: calibration.json and calib/ (its runs), pipeline-sim.json and
# calib/compute.json (--calib-compute on: the simulated pipeline and the ops' overhead
# measured), calib/op-costs.json (--op-spread: the costs the predictions draw from),
# calib/situ.json (--latency-situ on: the latency in situ and the lags --message-spread
# draws from), the same pooled over the compute calibration's replays
# (--calib-compute-spread: pipeline-sim-pooled.json, calibration-pooled.json,
# calib/compute-pooled.json, op-costs-pooled.json, situ-pooled.json),
# trace-unrolled.csv, and per
# scenario plan.json, net-plan.json, run-I.json / sim-I.json (measured / predicted
# summaries of candidate I), run-I.trace.json / sim-I.trace.json (timelines),
# raw-I.jsonl (the replay's --raw lines: every op's and transfer's start and end),
# recorded-I.csv and net-sim-I.json (preempted: the rates the driver applied during
# candidate I's run, and the network simulated from them), tc-calls-I.csv,
# tc-batch-I.log and netstat-I.txt (preempted: each tc call's start and end; what the
# driver's tc said, nothing when every change applied; the qdiscs' and TCP's counters
# before and after the replay, see --net-log), pairs.txt, compare.json and
# compare.txt. Exit status: 0 done (whatever the errors are), 77 skipped
# (no adagrouper-calib, not root, or network namespaces not permitted), 1 failure,
# 2 bad options.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
ranks=2 rate=200mbit scenario=both trace="" iterations=8 warmup=1 candidates=0 streams=plan
shaper=tbf acks=free bucket=auto bucket_ms=auto pipeline="" build="$root/build" out="fidelity-out" prefix=agf ci=0 keep=0 calib_it=3 calib_sizes="small large" startup_s=4 calibrate=replay priority=auto model_bucket=auto calib_latency=auto tiny_quantile=0.1 queue_kind=auto calib_compute=on calib_compute_it=30 calib_compute_spread=auto stall_fence=inf compute_spin=200 mpi_poll=20 packet_cap=auto latency_situ=auto op_spread=auto message_spread=off
families="" rank_by=auto w_fill=recorded memory_limit="" random_n=0 seed=1 repeats=3 net_log=0 tcp_cc=reno tcp_idle=host tcp_push=eager

die() {
  echo "fidelity.sh: $*" >&2
  exit 2
}
skip() {
  echo "fidelity.sh: SKIP: $*"
  exit 77
}

# draw_scenario SEED INDEX DIR: writes DIR/pipeline.json and DIR/trace.json and prints
# "RANKS RATE" (a tc rate): one scenario drawn from (SEED, INDEX) with Python's Mersenne
# Twister seeded by the string "SEED-INDEX" (the same scenario on every machine).
draw_scenario() {
  python3 - "$@" <<'EOF'
import json, random, sys
seed, index, d = sys.argv[1], int(sys.argv[2]), sys.argv[3]
rng = random.Random(f"{seed}-{index}")
ranks = rng.choice([2, 3, 4])
mbit = rng.choice([100, 150, 200, 300])
high = mbit * 1e6 / 8
base_f = rng.uniform(0.003, 0.009)           # forward of one sample at b = 1, s
stages = []
for s in range(ranks):
    f = base_f * rng.uniform(0.6, 1.6)          # uneven stages
    bw = 2 * f * rng.uniform(0.8, 1.2)
    msg = rng.choice([80e3, 120e3, 160e3, 240e3])  # bytes per sample each way
    prof = []
    for b in (1, 2, 4):
        e = {"micro_batch_size": b, "forward_s": round(f * (0.4 + 0.6 * b), 6),
             "backward_s": round(bw * (0.4 + 0.6 * b), 6), "activation_bytes": 1e8 * b}
        if s + 1 < ranks: e["output_bytes"] = msg * b
        if s > 0: e["grad_output_bytes"] = stages[-1]["_msg"] * b
        prof.append(e)
    stages.append({"static_bytes": 1e9, "optimizer_s": 0.002, "profile": prof, "_msg": msg})
for st in stages: del st["_msg"]
json.dump({"name": f"random-{seed}-{index}", "description": f"fidelity.sh --random-scenarios, seed {seed}, "
           f"scenario {index}: {ranks} uneven stages, links shaped to {mbit} Mbit/s",
           "global_batch_size": 16, "memory_limit_bytes": 2.2e9, "stages": stages},
          open(f"{d}/pipeline.json", "w"), indent=1)
low = high * rng.uniform(0.15, 0.5)
kind = rng.choice(["periodic", "steps", "onoff"])
if kind == "periodic":
    tr = {"pattern": "periodic", "high": high, "low": low, "period_s": round(rng.uniform(2, 6), 3),
          "low_fraction": round(rng.uniform(0.3, 0.6), 3)}
elif kind == "steps":
    mid = (high + low) / 2
    tr = {"pattern": "steps", "levels": [high, low, high, mid],
          "durations_s": [round(rng.uniform(1, 4), 3) for _ in range(4)], "repeat": True}
else:
    tr = {"pattern": "onoff", "high": high, "low": low, "mean_high_s": round(rng.uniform(2, 4), 3),
          "mean_low_s": round(rng.uniform(1, 2), 3), "duration_s": 600, "seed": rng.randrange(1 << 30)}
json.dump(tr, open(f"{d}/trace.json", "w"), indent=1)
print(ranks, f"{mbit}mbit", kind)
EOF
}

# --random-scenarios: each drawn scenario run --repeats times, then the summary.
run_random_scenarios() {
  mkdir -p "$out"
  out=$(cd "$out" && pwd)
  local i j ranks_i rate_i kind_i dir rc
  for ((i = 0; i < random_n; i++)); do
    dir="$out/random-$i"
    mkdir -p "$dir"
    read -r ranks_i rate_i kind_i < <(draw_scenario "$seed" "$i" "$dir")
    echo "== random scenario $i (seed $seed): $ranks_i ranks, $rate_i, $kind_i trace"
    for ((j = 1; j <= repeats; j++)); do
      set +e
      "$0" --ranks "$ranks_i" --rate "$rate_i" --pipeline "$dir/pipeline.json" --trace "$dir/trace.json" \
        --scenario preempted --iterations "$iterations" --warmup "$warmup" --candidates "$candidates" \
        --streams "$streams" --priority "$priority" --build "$build" --prefix "$prefix" --shaper "$shaper" --acks "$acks" \
        --bucket "$bucket" --bucket-ms "$bucket_ms" --packet-cap "$packet_cap" --model-bucket "$model_bucket" --tcp "$tcp_cc" \
        --calib-latency "$calib_latency" --tiny-quantile "$tiny_quantile" --calib-compute "$calib_compute" --queue "$queue_kind" \
        --stall-fence "$stall_fence" --op-spread "$op_spread" --message-spread "$message_spread" --latency-situ "$latency_situ" --calib-compute-iterations "$calib_compute_it" --calib-compute-spread "$calib_compute_spread" --compute-spin "$compute_spin" --mpi-poll "$mpi_poll" \
        --tcp-idle-restart "$tcp_idle" --tcp-push "$tcp_push" --rank-by "$rank_by" --w-fill "$w_fill" \
        $([ "$net_log" -eq 0 ] || echo --net-log) \
        --out "$dir/run-$j" >"$dir/run-$j.log" 2>&1
      rc=$?
      set -e
      [ "$rc" -eq 77 ] && { cat "$dir/run-$j.log"; exit 77; }
      [ "$rc" -eq 0 ] || { cat "$dir/run-$j.log" >&2; exit 1; }
      echo "   run $j: $(grep -m1 'MAPE of iteration time' "$dir/run-$j.log" | sed 's/^ *//')"
    done
  done
  python3 - "$out" "$random_n" "$repeats" <<'EOF'
import json, os, statistics, sys
out, n, reps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rows, lines = [], []
lines.append("| scenario | candidate | MAPE per run (free-running) | MAPE per run (aligned) | worst |")
lines.append("|---|---|---|---|---|")
for i in range(n):
    d = os.path.join(out, f"random-{i}")
    per = {}
    for j in range(1, reps + 1):
        for kind, name in (("free", "compare.json"), ("aligned", "compare-aligned.json")):
            doc = json.load(open(os.path.join(d, f"run-{j}", "preempted", name)))
            for c in doc["comparisons"]:
                per.setdefault(c["label"], {"free": [], "aligned": []})[kind].append(c["mape_pct"])
    for label, m in per.items():
        worst = max(m["free"])
        rows.append({"scenario": i, "candidate": label, "mape_free_pct": m["free"], "mape_aligned_pct": m["aligned"]})
        lines.append(f"| {i} | {label} | {' / '.join(f'{x:.2f}%' for x in m['free'])} | "
                     f"{' / '.join(f'{x:.2f}%' for x in m['aligned'])} | {worst:.2f}% |")
allf = [x for r in rows for x in r["mape_free_pct"]]
alla = [x for r in rows for x in r["mape_aligned_pct"]]
lines.append("")
lines.append(f"{len(rows)} candidates in {n} scenarios, {reps} runs each: MAPE free-running median "
             f"{statistics.median(allf):.2f}%, worst {max(allf):.2f}%; aligned median {statistics.median(alla):.2f}%, "
             f"worst {max(alla):.2f}%; candidates within 3% in every run: "
             f"{sum(max(r['mape_free_pct']) <= 3 for r in rows)} of {len(rows)} (aligned "
             f"{sum(max(r['mape_aligned_pct']) <= 3 for r in rows)})")
open(os.path.join(out, "random-summary.txt"), "w").write("\n".join(lines) + "\n")
json.dump(rows, open(os.path.join(out, "random-summary.json"), "w"), indent=1)
print("\n".join(lines))
EOF
  if [ "$repeats" -ge 2 ]; then
    echo
    python3 "$root/tools/scripts/fidelity_noise.py" --adagrouper "$build/adagrouper" --json "$out/noise.json" "$out" \
      >"$out/noise.txt.tmp"  # renamed when complete
    mv "$out/noise.txt.tmp" "$out/noise.txt"
    cat "$out/noise.txt"
  fi
}

while [ $# -gt 0 ]; do
  case "$1" in
    --ci | --keep | --net-log | -h | --help) ;;
    --*) [ $# -ge 2 ] || die "$1: needs a value (see tools/scripts/fidelity.sh --help)" ;;
  esac
  case "$1" in
    --ranks) ranks=${2:-} ranks_given=1; shift 2 ;;
    --rate) rate=${2:-}; shift 2 ;;
    --scenario) scenario=${2:-}; shift 2 ;;
    --trace) trace=${2:-}; shift 2 ;;
    --iterations) iterations=${2:-}; shift 2 ;;
    --warmup) warmup=${2:-}; shift 2 ;;
    --candidates) candidates=${2:-}; shift 2 ;;
    --streams) streams=${2:-}; shift 2 ;;
    --calibrate) calibrate=${2:-}; shift 2 ;;
    --priority) priority=${2:-}; shift 2 ;;
    --pipeline) pipeline=${2:-}; shift 2 ;;
    --families) families=${2:-}; shift 2 ;;
    --memory-limit) memory_limit=${2:-}; shift 2 ;;
    --rank-by) rank_by=${2:-}; shift 2 ;;
    --w-fill) w_fill=${2:-}; shift 2 ;;
    --random-scenarios) random_n=${2:-}; shift 2 ;;
    --seed) seed=${2:-}; shift 2 ;;
    --repeats) repeats=${2:-}; shift 2 ;;
    --build) build=${2:-}; shift 2 ;;
    --out) out=${2:-}; shift 2 ;;
    --prefix) prefix=${2:-}; shift 2 ;;
    --ci) ci=1; shift ;;
    --keep) keep=1; shift ;;
    --net-log) net_log=1; shift ;;
    --shaper) shaper=${2:-}; shift 2 ;;
    --acks) acks=${2:-}; shift 2 ;;
    --bucket) bucket=${2:-}; shift 2 ;;
    --bucket-ms) bucket_ms=${2:-}; shift 2 ;;
    --packet-cap) packet_cap=${2:-}; shift 2 ;;
    --queue) queue_kind=${2:-}; shift 2 ;;
    --model-bucket) model_bucket=${2:-}; shift 2 ;;
    --calib-latency) calib_latency=${2:-}; shift 2 ;;
    --tiny-quantile) tiny_quantile=${2:-}; shift 2 ;;
    --calib-compute) calib_compute=${2:-}; shift 2 ;;
    --stall-fence) stall_fence=${2:-}; shift 2 ;;
    --op-spread) op_spread=${2:-}; shift 2 ;;
    --message-spread) message_spread=${2:-}; shift 2 ;;
    --latency-situ) latency_situ=${2:-}; shift 2 ;;
    --calib-compute-iterations) calib_compute_it=${2:-}; shift 2 ;;
    --calib-compute-spread) calib_compute_spread=${2:-}; shift 2 ;;
    --compute-spin) compute_spin=${2:-}; shift 2 ;;
    --mpi-poll) mpi_poll=${2:-}; shift 2 ;;
    --tcp) tcp_cc=${2:-}; shift 2 ;;
    --tcp-idle-restart) tcp_idle=${2:-}; shift 2 ;;
    --tcp-push) tcp_push=${2:-}; shift 2 ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown option '$1' (see tools/scripts/fidelity.sh --help)" ;;
  esac
done
if [ "$ci" -eq 1 ]; then
  [ "${ranks_given:-0}" -eq 1 ] || ranks=2
  iterations=2 warmup=1 candidates=2 calib_it=1 calib_compute_it=1 calib_sizes=large scenario=preempted startup_s=2
fi
[[ "$ranks" =~ ^[2-4]$ ]] || die "--ranks: 2 .. 4, got '$ranks'"
[[ "$iterations" =~ ^[1-9][0-9]*$ ]] || die "--iterations: a positive integer, got '$iterations'"
[[ "$warmup" =~ ^[0-9]+$ ]] || die "--warmup: an integer >= 0, got '$warmup'"
[[ "$candidates" =~ ^[0-9]+$ ]] || die "--candidates: an integer >= 0, got '$candidates'"
[[ "$rate" =~ ^[0-9]+(bit|kbit|mbit|gbit)$ ]] || die "--rate: a tc rate like 200mbit, got '$rate'"
case "$scenario" in constant | preempted | both) ;; *) die "--scenario: constant, preempted or both" ;; esac
case "$streams" in plan | channel) ;; *) die "--streams: plan or channel" ;; esac
case "$rank_by" in auto | predicted | deployed) ;; *) die "--rank-by: auto, predicted or deployed, got '$rank_by'" ;; esac
case "$w_fill" in recorded | runtime) ;; *) die "--w-fill: recorded or runtime, got '$w_fill'" ;; esac
# The ranking that matches how a dynamic candidate is run: its recorded order, or the fill.
[ "$rank_by" != auto ] || { [ "$w_fill" = recorded ] && rank_by=deployed || rank_by=predicted; }
case "$calibrate" in replay | p2p) ;; *) die "--calibrate: replay or p2p" ;; esac
case "$shaper" in tbf | htb) ;; *) die "--shaper: tbf or htb" ;; esac
case "$acks" in free | shaped) ;; *) die "--acks: free or shaped, got '$acks'" ;; esac
case "$bucket" in auto | per-rate | fixed | lowest) ;; *) die "--bucket: auto, per-rate, fixed or lowest, got '$bucket'" ;; esac
# A bucket that never changes needs tbf; htb has its own (one packet, in effect).
[ "$bucket" != auto ] || { [ "$shaper" = tbf ] && bucket=fixed || bucket=per-rate; }
[ "$bucket" = per-rate ] || [ "$shaper" = tbf ] || die "--bucket $bucket: tbf only (drop --shaper $shaper)"
if [ "$bucket_ms" = auto ]; then [ "$bucket" = fixed ] && bucket_ms=3 || bucket_ms=1; fi
[[ "$bucket_ms" =~ ^[0-9]*\.?[0-9]+$ ]] && awk -v m="$bucket_ms" 'BEGIN { exit !(m > 0 && m <= 1000) }' ||
  die "--bucket-ms: auto, or milliseconds more than 0 and at most 1000, got '$bucket_ms'"
[ "$packet_cap" = auto ] || { [[ "$packet_cap" =~ ^[0-9]+$ ]] && [ "$packet_cap" -ge 1500 ] && [ "$packet_cap" -le 65536 ]; } ||
  die "--packet-cap: auto, or bytes from 1500 to 65536, got '$packet_cap'"
case "$model_bucket" in
  auto) { [ "$bucket" != per-rate ] && [ "$calibrate" = replay ]; } && model_bucket=on || model_bucket=off ;;
  on) [ "$bucket" != per-rate ] && [ "$calibrate" = replay ] ||
        die "--model-bucket on: needs a bucket that never changes (--bucket fixed or lowest) and --calibrate replay" ;;
  off) ;;
  *) die "--model-bucket: auto, on or off, got '$model_bucket'" ;;
esac
[ "$calib_latency" != auto ] || { [ "$model_bucket" = on ] && calib_latency=tiny || calib_latency=fit; }
case "$calib_latency" in
  fit) ;;
  tiny) [ "$model_bucket" = on ] || die "--calib-latency tiny: needs the model's bucket (--bucket fixed or lowest)"
        calib_sizes="$calib_sizes tiny" ;;
  *) die "--calib-latency: auto, fit or tiny, got '$calib_latency'" ;;
esac
[[ "$tiny_quantile" =~ ^(0(\.[0-9]+)?|1(\.0+)?|\.[0-9]+)$ ]] ||
  die "--tiny-quantile: a number from 0 to 1, got '$tiny_quantile'"
case "$calib_compute" in on | off) ;; *) die "--calib-compute: on or off, got '$calib_compute'" ;; esac
case "$latency_situ" in auto | on | off) ;; *) die "--latency-situ: auto, on or off, got '$latency_situ'" ;; esac
[ "$latency_situ" != auto ] || { [ "$calib_compute" = on ] && latency_situ=on || latency_situ=off; }
[ "$latency_situ" = off ] || [ "$calib_compute" = on ] ||
  die "--latency-situ on: needs --calib-compute on (it is measured on the compute calibration's replay)"
[[ "$calib_compute_it" =~ ^[1-9][0-9]*$ ]] && [ "$calib_compute_it" -le 1000 ] ||
  die "--calib-compute-iterations: an integer from 1 to 1000, got '$calib_compute_it'"
if [ "$calib_compute_spread" = auto ]; then
  calib_compute_spread=0
  [ "$calib_compute" = off ] || calib_compute_spread=$([ "$ci" -eq 1 ] && echo 1 || echo 10)
fi
[[ "$calib_compute_spread" =~ ^[0-9]+$ ]] && [ "$calib_compute_spread" -le 1000 ] ||
  die "--calib-compute-spread: auto, 0 or measured iterations up to 1000, got '$calib_compute_spread'"
[ "$calib_compute_spread" -eq 0 ] || [ "$calib_compute" = on ] ||
  die "--calib-compute-spread $calib_compute_spread: needs --calib-compute on (it replays the compute calibration again)"
[[ "$stall_fence" =~ ^(inf|[0-9]*\.?[0-9]+)$ ]] && ! [[ "$stall_fence" =~ ^0*\.?0*$ ]] ||
  die "--stall-fence: a number of interquartile ranges > 0, or inf, got '$stall_fence'"
[ "$op_spread" != auto ] || { [ "$calib_compute" = on ] && op_spread=16 || op_spread=0; }
[[ "$op_spread" =~ ^[0-9]+$ ]] && [ "$op_spread" -le 1000 ] ||
  die "--op-spread: auto, or a number of draws from 0 to 1000, got '$op_spread'"
[ "$op_spread" -eq 0 ] || [ "$calib_compute" = on ] ||
  die "--op-spread $op_spread: needs --calib-compute on (the costs are the compute calibration's ops')"
case "$message_spread" in on | off) ;; *) die "--message-spread: on or off, got '$message_spread'" ;; esac
[ "$message_spread" = off ] || { [ "$op_spread" -gt 0 ] && [ "$latency_situ" = on ]; } ||
  die "--message-spread on: needs the ops' spread (--op-spread N > 0) and --latency-situ on (the lags it draws from)"
[[ "$compute_spin" =~ ^[0-9]+$ ]] && [ "$compute_spin" -le 100000 ] ||
  die "--compute-spin: microseconds, an integer from 0 to 100000, got '$compute_spin'"
[[ "$mpi_poll" =~ ^[0-9]+$ ]] && [ "$mpi_poll" -ge 1 ] && [ "$mpi_poll" -le 100000 ] ||
  die "--mpi-poll: microseconds, an integer from 1 to 100000, got '$mpi_poll'"
[[ "$tcp_cc" =~ ^[a-z0-9_]+$ ]] || die "--tcp: a congestion control's name (reno, cubic, bbr) or host, got '$tcp_cc'"
case "$tcp_idle" in on | off | host) ;; *) die "--tcp-idle-restart: on, off or host, got '$tcp_idle'" ;; esac
case "$tcp_push" in eager | host) ;; *) die "--tcp-push: eager or host, got '$tcp_push'" ;; esac
case "$queue_kind" in auto | per-rate | fixed) ;; *) die "--queue: auto, per-rate or fixed, got '$queue_kind'" ;; esac
[ "$queue_kind" != auto ] || { [ "$bucket" = per-rate ] && queue_kind=per-rate || queue_kind=fixed; }
case "$priority" in auto | none | nice | rt | compute-rt) ;; *) die "--priority: auto, rt, compute-rt, nice or none" ;; esac
if [ -n "$families" ]; then
  [[ "$families" =~ ^[a-z0-9,-]+$ ]] || die "--families: a comma-separated list of families, got '$families'"
  if [ -z "$pipeline" ]; then
    pipeline="$root/configs/fidelity/pipeline-$((2 * ranks)).json"
    [ -n "$memory_limit" ] || memory_limit=8e9
  fi
fi
[ -z "$memory_limit" ] || [[ "$memory_limit" =~ ^[0-9.]+(e[0-9]+)?$ ]] || die "--memory-limit: bytes, got '$memory_limit'"
[[ "$random_n" =~ ^[0-9]+$ ]] || die "--random-scenarios: an integer >= 0, got '$random_n'"
[[ "$seed" =~ ^[0-9]+$ ]] || die "--seed: an integer >= 0, got '$seed'"
[[ "$repeats" =~ ^[1-9][0-9]*$ ]] || die "--repeats: a positive integer, got '$repeats'"
if [ "$random_n" -gt 0 ]; then
  [ -z "$pipeline$trace$families" ] || die "--random-scenarios draws the pipeline and the trace: drop --pipeline, --trace, --families"
  run_random_scenarios
  exit 0
fi
if [ "$priority" = auto ]; then
  # SCHED_FIFO only for threads that each have a core of their own: MPI's collectives
  # poll, and a polling SCHED_FIFO thread never yields its core to one of the same
  # priority (4 ranks on 2 cores livelocked under rt, and stalled under compute-rt).
  # With a core left over the whole rank (rt); with one core per rank its compute
  # thread alone (compute-rt: docs/fidelity.md, "The host's CPU, op by op").
  if ! chrt -f 10 true 2>/dev/null || [ "$ranks" -gt "$(nproc)" ]; then priority=nice
  elif [ "$ranks" -lt "$(nproc)" ]; then priority=rt
  else priority=compute-rt; fi
fi
replay_prio=()
case "$priority" in
  none) prio=() ;;
  nice) prio=(nice -n -10) ;;
  rt) prio=(chrt -f 10) ;;
  compute-rt) prio=(nice -n -10) replay_prio=(--compute-fifo 10) ;;
esac
replay_prio+=(--compute-spin "$compute_spin" --mpi-poll "$mpi_poll")
[ -n "$pipeline" ] || pipeline="$root/configs/fidelity/pipeline-$ranks.json"
[ -f "$pipeline" ] || die "--pipeline: no file $pipeline"
[ -z "$trace" ] || [ -f "$trace" ] || die "--trace: no file $trace"

adagrouper="$build/adagrouper"
calib="$build/adagrouper-calib"
[ -x "$calib" ] || calib="$build/calib/adagrouper-calib"
[ -x "$adagrouper" ] || skip "$build/adagrouper is not built"
[ -x "$calib" ] || skip "adagrouper-calib is not built in $build (Meson found no MPI)"

# On more than 2 ranks, --families takes families whose model stages follow each other
# on the same or neighbouring stages at every v they run (2 model stages per rank: v = 1
# or 2), the neighbours of a ring included: the chain of namespaces links neighbours. A
# V placement (zbv, dualpipev) needs nothing more; a loop (interleaved families at v = 2)
# sends from the last stage to the first, and then the namespaces form a ring (ring=1).
# Each family's placement is the one `adagrouper schedule` prints.
ring=0
if [ -n "$families" ] && [ "$ranks" -gt 2 ]; then
  for f in ${families//,/ }; do
    [ "$f" != all ] || die "--families all: on $ranks ranks, list the families (each one's placement is checked)"
    [ "$f" != kfkb-dynamic ] || continue  # kFkB with split backward: one model stage per stage
    hop=$("$adagrouper" schedule "$f" --stages "$ranks" --micro-batches $((2 * ranks)) --virtual-stages 2 \
      --output-format json 2>&1 | python3 -c '
import json, sys
text = sys.stdin.read()
try:
    p = json.loads(text)["placement"]
except ValueError:
    # Refused at v = 2 because it runs one model stage per stage: v = 1 only.
    if "runs 1 model stage per stage" not in text:
        print(text.strip())
        sys.exit(1)
    p = []
last = max(p, default=0)
hops = {(a, b) for a, b in zip(p, p[1:]) if abs(a - b) > 1}
far = sorted(h for h in hops if set(h) != {0, last})
print(f"{far[0][0]} to {far[0][1]}" if far else "ring" if hops else "")') ||
      die "--families: $f: $hop"
    if [ "$hop" = ring ]; then
      ring=1
    elif [ -n "$hop" ]; then
      die "--families: $f at v = 2 sends from stage $hop, which neither a chain nor a ring of namespaces links on $ranks ranks (neighbours only)"
    fi
  done
fi
[ "$ring" -eq 0 ] || [ "$calibrate" = replay ] || die "--calibrate p2p: not with a ring of namespaces (the families $families need one on $ranks ranks): p2p measures the chain's channels only"

[ "$(id -u)" -eq 0 ] || skip "network namespaces and tc need root"
netns=("$root/tools/scripts/netns.sh" --prefix "$prefix")
"${netns[@]}" check >/dev/null 2>&1 || skip "network namespaces, veth pairs or tc shaping are not permitted here ($("${netns[@]}" check 2>&1 | tail -1))"
command -v python3 >/dev/null || skip "python3 is not installed"

mkdir -p "$out"
out=$(cd "$out" && pwd)
pipeline=$(cd "$(dirname "$pipeline")" && pwd)/$(basename "$pipeline")
rate_bytes=$(python3 -c "
import re,sys
n,u=re.fullmatch(r'(\d+)([a-z]*)','$rate').groups()
print(int(n)*{'bit':1,'kbit':1e3,'mbit':1e6,'gbit':1e9}[u]/8)")

driver_pid=""
cleanup() {
  if [ -n "$driver_pid" ]; then kill "$driver_pid" 2>/dev/null || true; wait "$driver_pid" 2>/dev/null || true; fi
  if [ "$keep" -eq 0 ]; then "${netns[@]}" destroy >/dev/null 2>&1 || true; fi
}
trap cleanup EXIT
"${netns[@]}" destroy >/dev/null 2>&1 || true
"${netns[@]}" create "$ranks" $([ "$ring" -eq 0 ] || echo --ring) >/dev/null
# TCP as asked (--tcp, --tcp-idle-restart, --tcp-push); what is in effect goes with the results.
tcp_push_args=()
[ "$tcp_push" = host ] || tcp_push_args=(--autocork off --pacing-ratio 1000)
tcp_now=$("${netns[@]}" tcp "$tcp_cc" --idle-restart "$tcp_idle" "${tcp_push_args[@]}") || exit 2
echo "$tcp_now" >"$out/tcp.txt"
echo "fidelity.sh: TCP in the namespaces: $tcp_now"
echo "fidelity.sh: priority $priority ($ranks ranks, $(nproc) cores); ops spin their last $compute_spin us, MPI_Test every $mpi_poll us"

# The ranks run at a higher priority than the rest of the machine (--priority), so that
# other work on the host delays their wake-ups less. Every message goes eagerly: above
# its eager limit (64 KiB), Open MPI's TCP transport first sends a request and waits for
# the receiver's clear-to-send, which on a shaped link queues behind the data going the
# other way (up to the tbf queue's 50 ms) and, with both directions busy, slowed the
# transfers by a third (docs/fidelity.md).
eager=$(python3 -c "
import json, sys
p = json.load(open(sys.argv[1]))
m = max([e.get(k, 0) for st in p['stages'] for e in st['profile'] for k in ('output_bytes', 'grad_output_bytes')] + [0])
print(max(65536, int(m) + 65536))" "$pipeline")
mca=(--mca btl_tcp_eager_limit "$eager" --mca btl_tcp_rndv_eager_limit "$eager" --mca btl_tcp_max_send_size "$eager"
     --mca mpi_yield_when_idle 1)
# Every run is bounded: a job that hangs is killed after 10 minutes.
mpi() { timeout --kill-after=10 600 "${netns[@]}" mpirun -np "$ranks" "${mca[@]}" -- "${prio[@]}" "$@"; }

# The preemption trace (nominal bytes/s), unrolled over an hour.
if [ -z "$trace" ]; then
  trace_spec=$(python3 -c "import json; print(json.dumps({'pattern': 'periodic', 'high': $rate_bytes, 'low': $rate_bytes / 4, 'period_s': 4, 'low_fraction': 0.5}))")
else
  trace_spec=$(python3 -c "import json,sys; print(json.dumps({'file': sys.argv[1], 'repeat': True}))" "$(cd "$(dirname "$trace")" && pwd)/$(basename "$trace")")
fi
"$adagrouper" trace slice --spec "$trace_spec" --start-time 0 --end-time 3600 --output-format csv \
  --output "$out/trace-unrolled.csv" >/dev/null

# The largest packet the shaped devices take: TCP's offload builds packets of up to 64 KiB,
# and tbf checks a packet against its bucket (burst) when it queues it; a packet queued
# under a larger bucket than a later change sets never leaves, and the link stalls until
# the next change (docs/fidelity.md, "Rate changes that stalled a link"). So packets of at
# most the smallest bucket the run sets (95% of it in whole 1514-byte frames, as TCP
# counts a packet of n segments: n x (1448 + 66) bytes on the link). Also the bucket of
# the run's highest rate (--bucket fixed: every change keeps it) and of its lowest
# (--bucket lowest); and the queue of --queue fixed: 50 ms of the highest rate plus its
# bucket, at least two 64 KiB packets.
read -r gso_bytes fixed_burst lowest_burst fixed_queue < <(python3 - "$out/trace-unrolled.csv" "$rate_bytes" "$scenario" "$bucket_ms" <<'EOF'
import csv, sys
vals = [float(sys.argv[2])]
if sys.argv[3] != "constant":
    vals += [float(r[1]) for r in csv.reader(open(sys.argv[1])) if r and r[0][:1].isdigit()]
vals = [v for v in vals if v > 0]
ms = float(sys.argv[4])
burst = max(4096, int(min(vals) * ms / 1000))
segs = max(1, int(0.95 * burst / 1514))
top = max(4096, int(max(vals) * ms / 1000))
print(segs * 1448 + 321, top, burst, max(131072, int(max(vals) * 0.05) + top))
EOF
)
if [ "$bucket" = lowest ]; then fixed_burst=$lowest_burst; fi
# The model's bucket (--model-bucket on): the fit's and every network's, in the bytes the
# model counts, a message's: tbf counts whole frames on the link, so its bucket sends at
# once the payload of the full 1514-byte frames it holds (1448 bytes each, as above);
# docs/fidelity.md, "The bucket in the model's bytes".
model_burst=$((fixed_burst / 1514 * 1448))
model_bucket_args=()
[ "$model_bucket" = off ] || model_bucket_args=(--bucket-bytes "$model_burst")
# htb sends a packet larger than its bucket late (its tokens go negative): no cap. tbf whose
# bucket never changes (--bucket fixed, lowest) splits a larger packet at enqueue to at most the
# bucket that every later change keeps, so no cap is needed against a stall; but a socket
# may keep a message's last packet back and append the next message's first bytes to it,
# and tbf sends that packet only when it has the tokens for all of it: 16 KiB bounds the
# delay to 2.6 ms at 50 Mbit/s (docs/fidelity.md, "Packets capped at 16 KiB by default").
if [ "$shaper" = htb ]; then
  gso_bytes=65536
elif [ "$bucket" != per-rate ]; then
  gso_bytes=16384
fi
[ "$packet_cap" = auto ] || gso_bytes=$packet_cap
# rate_awk PROGRAM [AWK OPTIONS]: awk with the functions that say how a rate is shaped:
# per_rate_burst(v), tbf's bucket of v bytes/s under --bucket per-rate (--bucket-ms of
# it, at least 4096 bytes: tbf needs at least rate / HZ to reach its rate), and
# rate_params(v), "bits burst limit" as set_rate applies v: the run's bucket, and the
# htb path's bfifo limit (50 ms of the rate plus the burst, at least 128 KiB; with
# --queue fixed, $fixed_queue).
rate_awk() {
  local prog=$1
  shift
  awk -v ms="$bucket_ms" -v bucket="$bucket" -v fb="$fixed_burst" -v qk="$queue_kind" -v fq="$fixed_queue" "$@" '
function per_rate_burst(v,   b) { b = int(v * ms / 1000); return b < 4096 ? 4096 : b }
function rate_params(v,   b, l) {
  b = bucket == "per-rate" ? per_rate_burst(v) : fb
  l = int(v * 0.05) + b
  if (l < 131072) l = 131072
  if (qk != "per-rate") l = fq
  return sprintf("%d %d %d", v * 8, b, l)
}
'"$prog"
}
# burst_of BYTES_PER_S: tbf's bucket of that rate under --bucket per-rate.
burst_of() { rate_awk 'BEGIN { printf "%d", per_rate_burst(v) }' -v v="$1"; }
burst_args=(--burst "$fixed_burst")
[ "$bucket" != per-rate ] ||
  burst_args=(--burst "$(burst_of "$rate_bytes")")
"${netns[@]}" rate-all "$rate" --shaper "$shaper" --acks "$acks" "${burst_args[@]}" >/dev/null
echo "== shaper $shaper, TCP's ACKs $acks, bucket $bucket$([ "$bucket" = per-rate ] || echo " ($fixed_burst bytes at every rate)"), $bucket_ms ms, packets of at most $gso_bytes bytes on the shaped links; queue $queue_kind$([ "$queue_kind" = per-rate ] || echo " ($fixed_queue bytes)"); the model's bucket $model_bucket$([ "$model_bucket" = off ] || echo " ($model_burst bytes: the payload of its whole frames)"), latency $calib_latency$([ "$calib_latency" != tiny ] || echo " (quantile $tiny_quantile)")"
"${netns[@]}" gso "$gso_bytes" ||
  echo "fidelity.sh: warning: could not cap the shaped links' packets at $gso_bytes bytes: a rate fall can stall a link (--bucket per-rate), and a message's last packet can arrive late" >&2

# set_rate BYTES_PER_S: every link, both directions, to that rate, in place (tc qdisc
# change, as tools/scripts/netns.sh rate does, with its burst and 50 ms queue), straight
# through `tc -n` (tc_run) so that a change takes a few milliseconds, in the driver less
# than one. With --bucket fixed (lowest), the burst is the run's highest (lowest) rate's
# at every rate; with --queue fixed, the queue is $fixed_queue bytes at every rate.
# With TC_LOG set (a file), appends "link,dev,start,end" (Unix times of each tc call,
# from $EPOCHREALTIME: no fork) to it, for the fidelity attribution.
# With --shaper htb, each device's class rate/ceil/burst and its bfifo's limit (tbf's
# queue: 50 ms of the rate plus the burst, at least two 64 KiB packets, as netns.sh), in
# one `tc -batch` call per device.
set_rate() {
  local bits burst limit
  read -r bits burst limit < <(rate_awk 'BEGIN { print rate_params(v) }' -v v="$1")
  apply_rate "$bits" "$burst" "$limit"
}

# apply_rate BITS_PER_S BURST LIMIT: set_rate's tc calls, with no process but tc's (the
# driver runs it above the ranks, and every fork there takes a core from them); in the
# driver, none at all (tc_run).
apply_rate() {
  local bits=$1 burst=$2 limit=$3 i a
  local queue=(latency 50ms) tbf_at=root
  [ "$acks" = shaped ] || tbf_at="parent 1:1 handle 10:"
  [ "$queue_kind" = per-rate ] || queue=(limit "$fixed_queue")
  if [ "$shaper" = htb ]; then
    local d ns
    for ((i = 0; i + 1 < ranks + ring; i++)); do
      for d in next prev; do
        ns=$i
        [ "$d" = next ] || ns=$(((i + 1) % ranks))
        a=$EPOCHREALTIME
        tc_run "$ns" "class change dev $d parent 1: classid 1:1 htb rate ${bits}bit ceil ${bits}bit burst $burst cburst $burst quantum 65536
qdisc change dev $d parent 1:1 handle 10: bfifo limit $limit"
        [ -z "${TC_LOG:-}" ] || echo "$i,$d,$a,$EPOCHREALTIME" >>"$TC_LOG"
      done
    done
    return 0
  fi
  for ((i = 0; i + 1 < ranks + ring; i++)); do
    a=$EPOCHREALTIME
    tc_run "$i" "qdisc change dev next $tbf_at tbf rate ${bits}bit burst $burst ${queue[*]}"
    [ -z "${TC_LOG:-}" ] || echo "$i,next,$a,$EPOCHREALTIME" >>"$TC_LOG"
    a=$EPOCHREALTIME
    tc_run "$(((i + 1) % ranks))" "qdisc change dev prev $tbf_at tbf rate ${bits}bit burst $burst ${queue[*]}"
    [ -z "${TC_LOG:-}" ] || echo "$i,prev,$a,$EPOCHREALTIME" >>"$TC_LOG"
  done
}

# tc_run NS LINES: tc commands (one per line, as `tc -batch` reads them) in namespace NS:
# written to the long-lived `tc -batch` that tc_open started there, where there is one
# (the driver's: a change then starts no process, and tc, above the ranks like the
# driver, applies it as soon as it reads the line), else run by one `tc -batch` of their own.
declare -A tc_fd=()
tc_run() {
  if [ -n "${tc_fd[$1]:-}" ]; then
    echo "$2" >&"${tc_fd[$1]}"
  else
    tc -n "${prefix}$1" -batch - <<<"$2"
  fi
}

# tc_open DIR LOG: a long-lived `tc -force -batch` per namespace, each reading the named
# pipe DIR/tc-NS (tc_fd[NS] its write end), its output and errors appended to LOG. They
# end when the calling shell does (their pipes' only writer).
tc_open() {
  local dir=$1 log=$2 r fd
  for ((r = 0; r < ranks; r++)); do
    rm -f "$dir/tc-$r"
    mkfifo "$dir/tc-$r"
    tc -n "${prefix}$r" -force -batch "$dir/tc-$r" >>"$log" 2>&1 &
    exec {fd}<>"$dir/tc-$r"
    tc_fd[$r]=$fd
  done
}

# net_snapshot FILE LABEL: appends, for every namespace, its qdiscs' counters (tc -s:
# sent, dropped, overlimits, backlog) and TCP's (nstat: retransmissions, timeouts, loss
# probes), under a line "## LABEL <Unix time>", for the fidelity attribution.
net_snapshot() {
  local f=$1 label=$2 r
  {
    echo "## $label $EPOCHREALTIME"
    for ((r = 0; r < ranks; r++)); do
      echo "# ns $r qdisc"
      tc -s -n "${prefix}$r" qdisc show 2>/dev/null | grep -v '^ *$' || true
      echo "# ns $r nstat"
      ip netns exec "${prefix}$r" nstat -asz 2>/dev/null |
        grep -E '^(TcpRetransSegs|TcpExtTCPTimeouts|TcpExtTCPLossProbes|TcpExtTCPLostRetransmit|TcpExtTCPFastRetrans|TcpExtTCPSlowStartRetrans|TcpExtTCPSpuriousRTOs|TcpOutSegs|TcpExtTCPLossProbeRecovery|TcpExtTCPSackRecovery|TcpExtTCPRenoRecovery|TcpExtTCPLossUndo|TcpExtTCPTSReorder) ' || true
    done
  } >>"$f"
}

# --- 1. calibrate ----------------------------------------------------------------
# Per channel and shaped rate (the constant rate, and every level of the trace, at most
# four, else its lowest and highest): the effective rate R and the per-message latency L
# (transfer time = L + bytes / R). `replay` (default) measures them with the mechanism
# the replays use: 1F1B replays of the pipeline with its ops shrunk to 50 us, so that
# both directions of every link carry messages back to back (the regime in which the
# link's rate matters), one with every message of the pipeline's smallest size and one
# of its largest; each gives a channel's median time per message (from the measured
# timeline), and the two sizes give L and R. With the model's bucket (--model-bucket on)
# a message of x bytes takes L + (x - B) / R, B tbf's bucket: most of these messages
# start on an idle link and get the bucket at once; and with --calib-latency tiny a
# third replay, of messages of B / 2 spaced for the bucket to refill, gives L directly
# (they leave at once), R then coming from the largest size. `p2p` uses adagrouper-calib p2p's
# samples instead (at the constant rate only). Rates between calibrated levels
# interpolate the efficiency R / shaped rate linearly.
if [ "$scenario" = constant ]; then
  levels=$rate_bytes
else
  levels=$(python3 - "$out/trace-unrolled.csv" "$rate_bytes" <<'EOF'
import csv, sys
vals = sorted({float(r[1]) for r in csv.reader(open(sys.argv[1])) if r and r[0][:1].isdigit()} | {float(sys.argv[2])})
vals = [v for v in vals if v > 0]
print(" ".join(repr(v) for v in (vals if len(vals) <= 4 else [vals[0], vals[-1]])))
EOF
)
fi
echo "== calibrate ($calibrate): $ranks ranks; shaped rates (B/s): $levels"
mkdir -p "$out/calib"
if [ "$calibrate" = replay ]; then
  for size in $calib_sizes; do
    python3 - "$pipeline" "$out/calib/pipeline-$size.json" "$size" "$ranks" "$fixed_burst" $levels <<'EOF'
import json, sys
p = json.load(open(sys.argv[1]))
sizes = sorted({e[k] for st in p["stages"] for e in st["profile"] for k in ("output_bytes", "grad_output_bytes")
                if k in e and e[k] > 0})
size = sizes[0] if sys.argv[3] == "small" else sizes[-1]
op_s = 50e-6
p["description"] = f"50 us ops and messages of {size} bytes: both directions of every link busy"
if sys.argv[3] == "tiny":
    # Half the bucket, and ops as long as the bucket takes to refill at the lowest rate:
    # every message finds the bucket full and leaves at once.
    bucket = float(sys.argv[5])
    size, op_s = int(bucket / 2), bucket / min(float(x) for x in sys.argv[6:])
    p["description"] = f"ops of {op_s * 1e3:.3g} ms and messages of {size} bytes, half tbf's bucket: the latency"
p["name"] += "-calibration-" + sys.argv[3]
p["global_batch_size"] = 8
p.pop("memory_limit_bytes", None)
p.pop("partition", None)
p["stages"] = p["stages"][:int(sys.argv[4])]  # one stage per rank (a pipeline of more model stages: its first)
for st in p["stages"]:
    st["optimizer_s"] = 0.0
    st["profile"] = [{"micro_batch_size": 1, "forward_s": op_s, "backward_s": op_s, "activation_bytes": 0,
                      "output_bytes": size, "grad_output_bytes": size}]
json.dump(p, open(sys.argv[2], "w"), indent=1)
EOF
    "$adagrouper" plan --pipeline "$out/calib/pipeline-$size.json" \
      --network "$root/configs/examples/toy-net-free.json" --memory-limit 1e15 \
      --output "$out/calib/plan-$size.json" >/dev/null
  done
  for level in $levels; do
    set_rate "$level"
    for size in $calib_sizes; do
      one_f_one_b=$(python3 -c "import json,sys; print([i for i, c in enumerate(json.load(open(sys.argv[1]))['candidates'])
                                                        if c['schedule'] == '1f1b'][0])" "$out/calib/plan-$size.json")
      mpi "$calib" replay --backend cpu "${replay_prio[@]}" --plan "$out/calib/plan-$size.json" --candidate "$one_f_one_b" \
        --pipeline "$out/calib/pipeline-$size.json" --iterations "$calib_it" --warmup 1 \
        --output "$out/calib/run-$level-$size.json" --timeline "$out/calib/run-$level-$size.trace.json" \
        >"$out/calib/replay-$level-$size.log" 2>&1 ||
        { cat "$out/calib/replay-$level-$size.log" >&2; exit 1; }
    done
  done
  set_rate "$rate_bytes"
  python3 "$root/tools/scripts/fidelity_calib.py" fit "$out/calib" "$calib_sizes" $levels "${model_bucket_args[@]}" \
    $([ "$ring" -eq 0 ] || echo "--ring $ranks") --tiny-quantile "$tiny_quantile" \
    >"$out/calibration.json"
else
  mpi "$calib" p2p --backend cpu --pipeline "$pipeline" --duration "$calib_it" --interval 0.02 \
    --warmup 2 --output-dir "$out/calib" >"$out/calib.log" 2>&1 || { cat "$out/calib.log" >&2; exit 1; }
  # bytes over transfer time minus latency, over every sample (as `plan --comm-profile`).
  python3 - "$out/calib" "$rate_bytes" >"$out/calibration.json" <<'EOF'
import csv, json, os, sys
d, nominal = sys.argv[1], float(sys.argv[2])
net = json.load(open(os.path.join(d, "network.json")))
out = []
for ch in net["channels"]:
    f, t = ch["from"], ch["to"]
    lat = ch.get("latency_s", net.get("latency_s", 0.0))
    rows = [r for r in csv.reader(open(os.path.join(d, "samples", f"{f}-{t}.csv"))) if r and r[0][0].isdigit()]
    b = sum(float(r[1]) for r in rows)
    s = sum(float(r[2]) - lat for r in rows)
    out.append({"from": f, "to": t, "latency_s": lat, "rate": b / s, "efficiency": b / s / nominal,
                "samples": len(rows)})
json.dump({"method": "p2p", "levels": [{"nominal_bytes_per_s": nominal, "channels": out}]}, sys.stdout, indent=1)
EOF
fi
python3 - "$out/calibration.json" <<'EOF'
import json, sys
for lv in json.load(open(sys.argv[1]))["levels"]:
    for ch in lv["channels"]:
        print(f"   {lv['nominal_bytes_per_s'] / 1e6:g} MB/s shaped, channel {ch['from']}->{ch['to']}: "
              f"{ch['rate'] / 1e6:.2f} MB/s effective ({100 * ch['efficiency']:.1f}%), "
              f"latency {1e6 * ch['latency_s']:.0f} us, "
              + (f"{ch['samples']} transfers" if ch["samples"] else "the chain's mean (a ring's link: no replay of the calibration uses it)"))
EOF

# report_compute FILE: the compute calibration's overhead per stage (fidelity_calib.py
# compute's measurement), and the host's warning where it fires.
report_compute() {
  python3 - "$1" "$root/tools/scripts" <<'EOF'
import json, sys
sys.path.insert(0, sys.argv[2])
import fidelity_calib
m = json.load(open(sys.argv[1]))
pooled = f", {m['replays']} replays pooled" if m.get("replays", 1) > 1 else ""
print(f"== calibrate compute{pooled}: 1F1B at b = {m['micro_batch_size']}, each op's cost beyond its profile "
      f"(start latency + duration excess, us):")
for r in m["stages"]:
    print(f"   stage {r['stage']}: {1e6 * r['op_overhead_s']:.1f} ({1e6 * r['start_latency_s']:.1f} + "
          f"{1e6 * r['duration_excess_s']:.1f}) over {r['ops']} ops, {100 * r['overhead_share']:.1f}% of a forward"
          + (f"; {r['stalls']} stalled ({1e6 * r['stall_mean_s']:.0f} us each on average) left out"
             if r.get("stalls") else ""))
frozen = [(k, its) for k, its in enumerate(m.get("frozen_iterations", []), 1) if its]
if frozen:
    print(f"   left out, the host froze (an op held more than {1e3 * m['freeze_s']:g} ms beyond its profile): "
          + "; ".join(f"replay {k}, iteration{'s' * (len(its) > 1)} {', '.join(map(str, its))}" for k, its in frozen))
warning = fidelity_calib.host_warning(m)
if warning:
    print(f"   warning: {warning}")
    print(f"fidelity.sh: warning: {warning}", file=sys.stderr)
EOF
}

# report_costs FILE: the ops' costs the predictions draw from (fidelity_spread.py costs).
report_costs() {
  python3 - "$1" "$op_spread" <<'EOF'
import json, statistics, sys
c = sorted(json.load(open(sys.argv[1]))["costs_s"])
q = lambda f: 1e6 * c[round(f * (len(c) - 1))]
print(f"== the ops' spread: {len(c)} costs, mean {1e6 * statistics.mean(c):.1f} us, median {q(0.5):.1f}, "
      f"90th percentile {q(0.9):.1f}, largest {q(1):.0f}; each candidate predicted as the mean of {sys.argv[2]} draws")
EOF
}

# report_situ FILE: the latency in situ (fidelity_situ.py's measurement).
report_situ() {
  python3 - "$1" <<'EOF'
import json, sys
m = json.load(open(sys.argv[1]))
if "not_measured" in m:
    print(f"== latency in situ: none, {m['not_measured']}")
else:
    k = m.get("replays", 1)
    print(f"== latency in situ: {1e6 * m['situ_latency_s']:+.0f} us on every channel, from {m['transfers']} transfers "
          f"on the critical paths of the compute calibration's {m['iterations']} iterations"
          + (f" in {k} replays" if k > 1 else ""))
EOF
}

# message_lags_from FILE: the messages' spread from the lags of a latency in situ's
# measurement (its lags_s) into message_lags, or none where it was not measured.
message_lags_from() {
  message_lags=()
  if python3 - "$1" <<'EOF'; then
import json, statistics, sys
lags = sorted(json.load(open(sys.argv[1])).get("lags_s") or [])
if not lags:
    print("== the messages' spread: none, the latency in situ was not measured")
    sys.exit(1)
q = lambda f: 1e6 * lags[round(f * (len(lags) - 1))]
print(f"== the messages' spread: {len(lags)} lags, mean {1e6 * statistics.mean(lags):+.1f} us, "
      f"median {q(0.5):+.1f}, 10th and 90th percentiles {q(0.1):+.1f} and {q(0.9):+.1f}, largest {q(1):+.0f}")
EOF
    message_lags=(--messages "$1")
  fi
}

# The ops: a 1F1B replay of the pipeline (its first N model stages, one per rank) at its
# smallest micro-batch size, with its own messages on the links at the constant shaped
# rate (the regime of the candidates' runs: ops that wait for a message wake up when it
# arrives), measures per stage each op's cost beyond its profile from the instant the
# model would start it to its end (fidelity_calib.py compute); the simulated pipeline
# gives it as each stage's op_overhead_s (the model adds it to every op, once per op of
# model stages merged).
sim_pipeline=$pipeline
if [ "$calib_compute" = on ]; then
  python3 - "$pipeline" "$out/calib/pipeline-compute.json" "$ranks" <<'EOF'
import json, sys
p = json.load(open(sys.argv[1]))
p["name"] += "-calibration-compute"
p.pop("memory_limit_bytes", None)
p.pop("partition", None)
p["stages"] = p["stages"][:int(sys.argv[3])]
json.dump(p, open(sys.argv[2], "w"), indent=1)
EOF
  "$adagrouper" plan --pipeline "$out/calib/pipeline-compute.json" \
    --network "$root/configs/examples/toy-net-free.json" --memory-limit 1e15 \
    --output "$out/calib/plan-compute.json" >/dev/null
  read -r compute_cand compute_b < <(python3 -c "import sys
sys.path.insert(0, sys.argv[1])
import fidelity_situ
print(*fidelity_situ.compute_candidate(sys.argv[2]))" "$root/tools/scripts" "$out/calib/plan-compute.json")
  mpi "$calib" replay --backend cpu "${replay_prio[@]}" --plan "$out/calib/plan-compute.json" \
    --candidate "$compute_cand" --pipeline "$out/calib/pipeline-compute.json" --iterations "$calib_compute_it" --warmup 1 \
    --output "$out/calib/run-compute.json" --timeline "$out/calib/run-compute.trace.json" \
    >"$out/calib/replay-compute.log" 2>&1 || { cat "$out/calib/replay-compute.log" >&2; exit 1; }
  python3 "$root/tools/scripts/fidelity_calib.py" compute "$out/calib/run-compute.trace.json" "$pipeline" \
    "$compute_b" "$out/pipeline-sim.json" --stall-fence "$stall_fence" >"$out/calib/compute.json"
  sim_pipeline="$out/pipeline-sim.json"
  report_compute "$out/calib/compute.json"
fi
if [ "$op_spread" -gt 0 ]; then
  python3 "$root/tools/scripts/fidelity_spread.py" costs "$out/calib/run-compute.trace.json" "$pipeline" "$compute_b" \
    "$out/calib/op-costs.json" --stall-fence "$stall_fence"
  report_costs "$out/calib/op-costs.json"
fi

# The messages' latency in a pipeline (--latency-situ on): the compute calibration's
# replay simulated on the calibrated links, and what the messages its ops waited for took
# beyond them along its critical paths, added to every channel's latency from here on
# (calibration.json's situ_latency_s, which every network below reads).
if [ "$latency_situ" = on ]; then
  python3 "$root/tools/scripts/fidelity_situ.py" "$out" --adagrouper "$adagrouper" --apply >"$out/calib/situ.json"
  report_situ "$out/calib/situ.json"
fi
# The messages' spread (--message-spread on): the predictions draw each message's latency
# around its channel's from the lags of those transfers (calib/situ.json's lags_s).
message_lags=()
[ "$message_spread" = off ] || message_lags_from "$out/calib/situ.json"
# What the predictions read: the first replay's calibration, or with
# --calib-compute-spread every replay's pooled (pool_compute).
pred_pipeline=$sim_pipeline pred_calibration="$out/calibration.json" op_costs="$out/calib/op-costs.json"
compute_replays=1

# network FILE KIND [RATES_CSV [per-channel]]: a network file with the calibrated
# channels. KIND constant: each channel's effective rate at the constant shaped rate;
# trace: RATES_CSV (time_s,shaped bytes/s; with per-channel, RATES_CSV-F-T.csv for
# channel F->T where it exists) with every value times the channel's efficiency at that
# rate, written beside FILE as FILE-F-T.csv.
# The calibration it reads is $calibration: calibration.json, but for the predictions
# pooled over the compute calibration's replays (pool_compute) calibration-pooled.json.
calibration="$out/calibration.json"
network() {
  python3 "$root/tools/scripts/fidelity_calib.py" network "$calibration" "$rate_bytes" "$@" "${model_bucket_args[@]}"
}

# compute_replay: one more replay of the compute calibration's 1F1B plan, at the constant
# rate, with --calib-compute-spread measured iterations (calib/run-compute-K, K from 2).
compute_replay() {
  local k=$((compute_replays + 1))
  mpi "$calib" replay --backend cpu "${replay_prio[@]}" --plan "$out/calib/plan-compute.json" \
    --candidate "$compute_cand" --pipeline "$out/calib/pipeline-compute.json" --iterations "$calib_compute_spread" \
    --warmup 1 --output "$out/calib/run-compute-$k.json" --timeline "$out/calib/run-compute-$k.trace.json" \
    >"$out/calib/replay-compute-$k.log" 2>&1 || { cat "$out/calib/replay-compute-$k.log" >&2; exit 1; }
  compute_replays=$k
}

# pool_compute: what the predictions read, from every replay of the compute calibration so
# far pooled (--calib-compute-spread): the ops' overhead (pred_pipeline), their spread
# (op_costs), the latency in situ (pred_calibration) and the messages' spread.
pool_compute() {
  local timelines="$out/calib/run-compute.trace.json" k
  for ((k = 2; k <= compute_replays; k++)); do timelines+=",$out/calib/run-compute-$k.trace.json"; done
  python3 "$root/tools/scripts/fidelity_calib.py" compute "$timelines" "$pipeline" "$compute_b" \
    "$out/pipeline-sim-pooled.json" --stall-fence "$stall_fence" >"$out/calib/compute-pooled.json"
  report_compute "$out/calib/compute-pooled.json" | sed 's/^== //; s/^/   /'
  pred_pipeline="$out/pipeline-sim-pooled.json"
  if [ "$op_spread" -gt 0 ]; then
    python3 "$root/tools/scripts/fidelity_spread.py" costs "$timelines" "$pipeline" "$compute_b" \
      "$out/calib/op-costs-pooled.json" --stall-fence "$stall_fence"
    report_costs "$out/calib/op-costs-pooled.json" | sed 's/^== //; s/^/   /'
    op_costs="$out/calib/op-costs-pooled.json"
  fi
  if [ "$latency_situ" = on ]; then
    python3 "$root/tools/scripts/fidelity_situ.py" "$out" --adagrouper "$adagrouper" --pooled --apply \
      >"$out/calib/situ-pooled.json"
    report_situ "$out/calib/situ-pooled.json" | sed 's/^== //; s/^/   /'
    pred_calibration="$out/calibration-pooled.json"
    [ "$message_spread" = off ] || message_lags_from "$out/calib/situ-pooled.json"
  fi
}

# drive UNROLLED LOG ORIGIN TC_OUTPUT: the preemption driver. From ORIGIN (a Unix time)
# on, applies each (time, bytes/s) of UNROLLED to every link at ORIGIN + time, and
# appends to LOG when each change took effect (the middle of its tc calls, from ORIGIN);
# its tc processes' output and errors go to TC_OUTPUT (empty when every change applied).
drive() {
  local unrolled=$1 log=$2 origin=$3 tc_output=$4 t_us v bits burst limit a b m sleeper=""
  # Above the ranks (nice -10 or SCHED_FIFO 10): on a loaded host, a driver at the
  # default priority waited tens of ms for a core between its tc calls, and a change
  # took effect on the links one after the other over 30 to 80 ms (docs/fidelity.md).
  # It sleeps between changes, so SCHED_FIFO takes no core from the ranks for long; a
  # change starts no process: the times and each row's tc parameters are worked out
  # before the run, and the commands go to a long-lived tc per namespace (tc_open):
  # every process started there (awk, date, a tc per link) delayed the ranks' ops,
  # docs/fidelity.md "The driver's own processes".
  chrt -f -p 20 "$BASHPID" >/dev/null 2>&1 || renice -n -15 -p "$BASHPID" >/dev/null 2>&1 || true
  # Stop between tc changes, never in the middle of one.
  trap '[ -z "$sleeper" ] || kill "$sleeper" 2>/dev/null; exit 0' TERM
  echo "time_s,value" >"$log"
  tc_open "${log%/*}" "$tc_output"
  local origin_us t
  us_of origin_us "$origin"
  while read -r t t_us v bits burst limit; do
    # The links' state 60 ms before the change (a snapshot takes a few tc calls).
    if [ -n "${NET_LOG:-}" ] && [ "$net_log" -eq 1 ]; then
      sleep_until $((origin_us + t_us - 60000))
      net_snapshot "$NET_LOG" "before-change $t $v"
    fi
    sleep_until $((origin_us + t_us))
    us_of a "$EPOCHREALTIME"
    apply_rate "$bits" "$burst" "$limit"
    us_of b "$EPOCHREALTIME"
    [ -z "${NET_LOG:-}" ] || [ "$net_log" -eq 0 ] || net_snapshot "$NET_LOG" "after-change $t $v"
    # The first value holds from time 0 (the rate before it is the same, or was set
    # a moment before).
    m=$(((a + b) / 2 - origin_us))
    ((t_us > 0 && m > 0)) || m=0
    printf '%d.%06d,%s\n' $((m / 1000000)) $((m % 1000000)) "$v" >>"$log"
  done < <(rate_awk '/^[0-9]/ { printf "%s %.0f %s %s\n", $1, $1 * 1e6, $2, rate_params($2) }' -F, <"$unrolled")
  sleep 100000 &
  sleeper=$!
  wait "$sleeper" || true
}

# us_of VAR SECONDS: VAR = a Unix time with six decimals ($EPOCHREALTIME's form, a comma
# in some locales) in whole microseconds; no fork (a $(...) would be one).
us_of() {
  local -n us_out=$1
  local s=${2//,/.}
  us_out=$((10#${s%.*}${s#*.}))
}

# sleep_until US: sleeps until that Unix time in microseconds (at once when it passed).
sleep_until() {
  local now w pause
  us_of now "$EPOCHREALTIME"
  w=$(($1 - now))
  ((w > 0)) || return 0
  printf -v pause '%d.%06d' $((w / 1000000)) $((w % 1000000))
  sleep "$pause" &
  sleeper=$!
  wait "$sleeper" || true
  sleeper=""
}

# late_warning RECORDED UNROLLED I: a warning when the driver made a change of candidate I
# more than 0.1 s after it was due (fidelity_attribution.py late_changes): the candidate
# then played other rates than the scenario's. Its prediction is still fair (the
# simulation reads the rates the driver applied, RECORDED), but the scenario is not.
late_warning() {
  # A diagnostic: where it cannot be made, the run goes on.
  { python3 - "$root/tools/scripts" "$@" 2>/dev/null <<'EOF'; } >&2 ||
import sys
sys.path.insert(0, sys.argv[1])
import fidelity_attribution as f
late = f.late_changes(f.read_rates(sys.argv[2]), f.read_rates(sys.argv[3]))
if late:
    due, made = max(late, key=lambda x: x[1] - x[0])
    print(f"fidelity.sh: warning: candidate {sys.argv[4]}: the rate driver made {len(late)} change(s) more than "
          f"0.1 s late (the worst due at {due:.3f} s, made at {made:.3f} s): the candidate ran on other rates "
          f"than the scenario's; its prediction uses the rates the driver applied (recorded-{sys.argv[4]}.csv)")
EOF
    echo "fidelity.sh: warning: candidate $3: could not compare the driver's changes with the trace" >&2
}

# per_channel RECORDED TC_CALLS ORIGIN RANKS: beside RECORDED (time_s,value: the driver's
# changes, each at the middle of its tc calls), RECORDED-F-T.csv per channel F->T with
# each change at the end of the tc call that changed the sending side of its link (the
# calls come in the order of set_rate, one group per row of RECORDED; a ring's link
# RANKS-1 joins the last rank and the first).
per_channel() {
  python3 - "$@" <<'EOF'
import csv, sys
rec_path, calls_path, origin, ranks = sys.argv[1], sys.argv[2], float(sys.argv[3]), int(sys.argv[4])
rec = [r for r in csv.reader(open(rec_path)) if r and r[0][:1].isdigit()]
calls = list(csv.DictReader(open(calls_path)))
per = 2 * len({c["link"] for c in calls}) if calls else 0
if not per or len(calls) < per * len(rec):
    sys.exit(0)  # an incomplete record: the simulation uses RECORDED for every channel
chans = {}
for k, (t, v) in enumerate(rec):
    for c in calls[k * per:(k + 1) * per]:
        link = int(c["link"])
        f, to = (link, (link + 1) % ranks) if c["dev"] == "next" else ((link + 1) % ranks, link)
        when = 0.0 if float(t) == 0 else max(float(c["end"]) - origin, 0.0)
        chans.setdefault((f, to), []).append((when, v))
for (f, to), rows in chans.items():
    with open(f"{rec_path[:-4]}-{f}-{to}.csv", "w") as out:
        out.write("time_s,value\n")
        for when, v in rows:
            out.write(f"{when:.6f},{v}\n")
EOF
}

run_scenario() {
  local sc=$1 dir="$out/$1"
  rm -rf "$dir"
  mkdir -p "$dir"
  echo "== scenario $sc"
  if [ "$sc" = constant ]; then
    network "$dir/net-plan.json" constant
  else
    network "$dir/net-plan.json" trace "$out/trace-unrolled.csv"
  fi
  local eval_it=$((iterations > 3 ? iterations : 3))
  local plan_args=()
  [ -z "$memory_limit" ] || plan_args+=(--memory-limit "$memory_limit")
  [ -z "$families" ] || plan_args+=(--devices "$ranks" --families "$families")
  "$adagrouper" plan --pipeline "$sim_pipeline" --network "$dir/net-plan.json" --iterations "$eval_it" \
    "${plan_args[@]}" --rank-by "$rank_by" --output "$dir/plan.json" >"$dir/plan.txt"
  # The evaluated candidates: the chosen one, then the others by predicted time; with
  # --families the chosen one and the fastest of each family listed.
  local picks
  picks=$(python3 - "$dir/plan.json" "$candidates" "$families" <<'EOF'
import json, sys
plan = json.load(open(sys.argv[1]))
k, families = int(sys.argv[2]), [f for f in sys.argv[3].split(",") if f]
ev = [(c["status"] != "chosen", c["predicted_iteration_time_s"], i) for i, c in enumerate(plan["candidates"])
      if c["predicted_iteration_time_s"] is not None]
ev.sort()
if families:
    cands = plan["candidates"]
    picked = [ev[0][2]]
    for f in families:
        for v in sorted({c.get("virtual_stages", 1) for c in cands if c["schedule"] == f}):
            same = [(t, i) for chosen, t, i in ev if cands[i]["schedule"] == f and cands[i].get("w_fill") != "dynamic"
                    and cands[i].get("virtual_stages", 1) == v]
            if same and min(same)[1] not in picked:
                picked.append(min(same)[1])
    # kfkb-dynamic: the fastest dynamic candidate by each ranking (--rank-by), after the
    # families: the fill's own prediction, and the order its programs would fix.
    if "kfkb-dynamic" in families:
        dyn = [i for _, _, i in ev if cands[i].get("w_fill") == "dynamic"]
        for key in ("predicted_iteration_time_s", "deployed_iteration_time_s"):
            best = min(dyn, key=lambda i: (cands[i].get(key, cands[i]["predicted_iteration_time_s"]), i), default=None)
            if best is not None and best not in picked:
                picked.append(best)
    ev = [(0, 0, i) for i in picked]
print(" ".join(str(i) for _, _, i in (ev[:k] if k > 0 else ev)))
EOF
)
  echo "   plan (--rank-by $rank_by): $(tail -1 "$dir/plan.txt")"
  echo "   replaying candidates $picks ($warmup warm-up + $iterations measured iterations each)"

  # Preempted: every candidate starts at the beginning of the trace. The driver starts
  # its clock a few seconds ahead (mpirun's start-up), stage 0 waits for it
  # (--start-at), and the run is simulated on the rates that driver applied.
  local i origin
  for i in $picks; do
    local timing=()
    if [ "$sc" = preempted ]; then
      set_rate "$(awk -F, 'NR > 1 && $1 ~ /^[0-9]/ { print $2; exit }' "$out/trace-unrolled.csv")"
      origin=$(python3 -c "import time; print(f'{time.time() + $startup_s:.6f}')")
      # The testbed's own record for the attribution (tools/scripts/fidelity_attribution.py):
      # each tc call's start and end, and the links' and TCP's counters around each change.
      echo "link,dev,start,end" >"$dir/tc-calls-$i.csv"
      echo "origin $origin" >"$dir/netstat-$i.txt"
      net_snapshot "$dir/netstat-$i.txt" "replay-start"
      TC_LOG="$dir/tc-calls-$i.csv" NET_LOG="$dir/netstat-$i.txt" \
        drive "$out/trace-unrolled.csv" "$dir/recorded-$i.csv" "$origin" "$dir/tc-batch-$i.log" &
      driver_pid=$!
      timing=(--start-at "$origin" --time-origin "$origin")
    fi
    local fill=()  # --w-fill runtime: for the candidates with dynamic W fill
    if [ "$w_fill" = runtime ] && python3 -c 'import json, sys
sys.exit(json.load(open(sys.argv[1]))["candidates"][int(sys.argv[2])].get("w_fill") != "dynamic")' "$dir/plan.json" "$i"; then
      fill=(--w-fill runtime)
    fi
    mpi "$calib" replay --backend cpu "${replay_prio[@]}" --plan "$dir/plan.json" --candidate "$i" --pipeline "$pipeline" \
      --iterations "$iterations" --warmup "$warmup" --streams "$streams" "${timing[@]}" "${fill[@]}" \
      --output "$dir/run-$i.json" --timeline "$dir/run-$i.trace.json" --stage-trace "$dir/stages-$i.csv" \
      --raw "$dir/raw-$i.jsonl" >"$dir/replay-$i.log" 2>&1 || { cat "$dir/replay-$i.log" >&2; exit 1; }
    if [ -n "$driver_pid" ]; then
      kill "$driver_pid" 2>/dev/null || true
      wait "$driver_pid" 2>/dev/null || true
      driver_pid=""
      rm -f "$dir"/tc-[0-9]*  # the driver's pipes to its tc processes (tc_open)
      net_snapshot "$dir/netstat-$i.txt" "replay-end"
      set_rate "$rate_bytes"
      # Each channel changes when the tc call on its link's sending side ended (the
      # middle of all of a change's calls, recorded-I.csv, is up to half their span off
      # for the first and last link).
      per_channel "$dir/recorded-$i.csv" "$dir/tc-calls-$i.csv" "$origin" "$ranks"
      late_warning "$dir/recorded-$i.csv" "$out/trace-unrolled.csv" "$i"
      network "$dir/net-sim-$i.json" trace "$dir/recorded-$i.csv" per-channel
    else
      cp "$dir/net-plan.json" "$dir/net-sim-$i.json"
    fi
    [ "$calib_compute_spread" -eq 0 ] || compute_replay
  done

  # With --calib-compute-spread the predictions read the compute calibration's replays
  # pooled, and each candidate's network is made again from that calibration.
  rm -f "$dir/compute-replays.json"
  if [ "$compute_replays" -gt 1 ]; then
    echo "   the compute calibration pooled over its $compute_replays replays (one after each candidate):"
    pool_compute
    for i in $picks; do
      if [ "$sc" = preempted ]; then
        calibration=$pred_calibration network "$dir/net-sim-$i.json" trace "$dir/recorded-$i.csv" per-channel
      else
        calibration=$pred_calibration network "$dir/net-sim-$i.json" constant
      fi
    done
    echo "{\"replays\": $compute_replays}" >"$dir/compute-replays.json"
  fi

  : >"$dir/pairs.txt"
  : >"$dir/pairs-aligned.txt"
  rm -f "$dir/pairs-point.txt" "$dir/op-spread.json" "$dir/message-spread.json"
  [ "$op_spread" -eq 0 ] || echo "{\"draws\": $op_spread}" >"$dir/op-spread.json"
  [ "${#message_lags[@]}" -eq 0 ] || echo "{\"lags\": \"$out/calib/situ.json\"}" >"$dir/message-spread.json"
  for i in $picks; do
    # The candidate as the plan evaluated it (simulate --plan), over the measured span;
    # one with dynamic W fill as the replay runs it: in the order of the plan's programs
    # every iteration (simulate --recorded-order; docs/fidelity.md, "Dynamic W fill,
    # replayed"), or with --w-fill runtime by the simulator's fill.
    python3 - "$dir/run-$i.json" "$dir/plan.json" "$i" "$w_fill" <<'EOF' >"$dir/sim-$i.args"
import json, sys
r = json.load(open(sys.argv[1]))
dynamic = json.load(open(sys.argv[2]))["candidates"][int(sys.argv[3])].get("w_fill") == "dynamic"
print(" ".join(["--iterations", str(r["iterations"]), "--start-time", repr(r["start_time_s"])] +
               (["--recorded-order"] if dynamic and sys.argv[4] == "recorded" else [])))
EOF
    # shellcheck disable=SC2046
    local simulate=("$adagrouper" simulate --plan "$dir/plan.json" --candidate "$i" --pipeline "$pred_pipeline"
      --network "$dir/net-sim-$i.json")
    # shellcheck disable=SC2046
    "${simulate[@]}" $(cat "$dir/sim-$i.args") --output "$dir/sim-$i.json" --timeline "$dir/sim-$i.trace.json" >/dev/null
    if [ "$op_spread" -gt 0 ]; then
      # The prediction: the mean over draws of the ops' costs, each op drawn around its
      # duration at the mean (the timeline just written).
      mv "$dir/sim-$i.json" "$dir/sim-point-$i.json"
      echo "sim-point-$i.json run-$i.json" >>"$dir/pairs-point.txt"
      # shellcheck disable=SC2046
      python3 "$root/tools/scripts/fidelity_spread.py" predict "$op_costs" "$dir/sim-$i.trace.json" \
        "$op_spread" "$i" "$dir/sim-$i.json" "${message_lags[@]}" -- "${simulate[@]}" $(cat "$dir/sim-$i.args")
    fi
    echo "sim-$i.json run-$i.json" >>"$dir/pairs.txt"
    # Aligned: each iteration simulated on its own from the moment the measured one
    # started, so that a measured iteration and its prediction see the same rates even
    # after the two runs have drifted apart.
    python3 - "$adagrouper" "$pred_pipeline" "$dir/net-sim-$i.json" "$dir/run-$i.json" "$dir/sim-aligned-$i.json" \
      "$dir/plan.json" "$i" "$dir/sim-$i.args" <<'EOF'
import json, subprocess, sys
exe, pipe, net, run_path, out, plan, candidate, args = sys.argv[1:9]
run = json.load(open(run_path))
base = ["simulate", "--plan", plan, "--candidate", candidate, "--pipeline", pipe, "--network", net,
        "--iterations", "1", "--json"]
base += [a for a in open(args).read().split() if a == "--recorded-order"]  # as the free-running prediction
t, parts = run["start_time_s"], []
for measured in run["iteration_times_s"]:
    parts.append(json.loads(subprocess.run([exe] + base + ["--start-time", repr(t)], check=True,
                                           capture_output=True, text=True).stdout))
    t += measured
r = dict(parts[0])
r["start_time_s"] = run["start_time_s"]
r["iterations"] = len(parts)
r["iteration_times_s"] = [p["iteration_times_s"][0] for p in parts]
r["total_time_s"] = sum(r["iteration_times_s"])
r["mean_iteration_time_s"] = r["total_time_s"] / len(parts)
r["throughput_samples_per_s"] = r["global_batch_size"] * len(parts) / r["total_time_s"]
for k, st in enumerate(r["per_stage"]):
    st["busy_s"] = sum(p["per_stage"][k]["busy_s"] for p in parts)
    st["optimizer_s"] = sum(p["per_stage"][k]["optimizer_s"] for p in parts)
    st["bubble_s"] = r["total_time_s"] - st["busy_s"]
    st["peak_inflight"] = max(p["per_stage"][k]["peak_inflight"] for p in parts)
    st["peak_memory_bytes"] = max(p["per_stage"][k]["peak_memory_bytes"] for p in parts)
r["bubble_fraction"] = 1 - sum(st["busy_s"] for st in r["per_stage"]) / (len(r["per_stage"]) * r["total_time_s"])
for k, ch in enumerate(r["channels"]):
    for f in ("busy_s", "messages", "bytes"):
        ch[f] = sum(p["channels"][k][f] for p in parts)
    ch["peak_queue_depth"] = max(p["channels"][k]["peak_queue_depth"] for p in parts)
r["compute_ops"] = sum(p["compute_ops"] for p in parts)
r["transfers"] = sum(p["transfers"] for p in parts)
json.dump(r, open(out, "w"), indent=2)
EOF
    echo "sim-aligned-$i.json run-$i.json" >>"$dir/pairs-aligned.txt"
  done
  echo "   predicted: one simulation of the whole run from its start$([ "$op_spread" -eq 0 ] || echo ", the mean of $op_spread draws of the ops' costs")$([ "${#message_lags[@]}" -eq 0 ] || echo " and the messages' latencies")"
  "$adagrouper" compare --pairs "$dir/pairs.txt" --plan "$dir/plan.json" --output "$dir/compare.json" |
    tee "$dir/compare.txt" | sed 's/^/   /'
  if [ "$op_spread" -gt 0 ]; then
    echo "   with every op$([ "${#message_lags[@]}" -eq 0 ] || echo " and message") at the mean (--op-spread 0): $("$adagrouper" compare --pairs "$dir/pairs-point.txt" \
      --plan "$dir/plan.json" --output "$dir/compare-point.json" | tee "$dir/compare-point.txt" | grep '^MAPE')"
  fi
  if [ "$sc" = preempted ]; then
    echo "   predicted: each iteration simulated from the measured iteration's start (aligned)"
    "$adagrouper" compare --pairs "$dir/pairs-aligned.txt" --plan "$dir/plan.json" \
      --output "$dir/compare-aligned.json" | tee "$dir/compare-aligned.txt" | sed 's/^/   /'
  fi
}

case "$scenario" in
  constant) run_scenario constant ;;
  preempted) run_scenario preempted ;;
  both) run_scenario constant; run_scenario preempted ;;
esac
echo "== done: $out"

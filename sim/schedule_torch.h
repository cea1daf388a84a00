// The schedules of PyTorch's torch.distributed.pipelining as schedule families: the device
// orders of ScheduleInterleaved1F1B, ScheduleLoopedBFS, ScheduleInterleavedZeroBubble,
// ScheduleZBVZeroBubble and ScheduleDualPipeV (docs/model.md, "Schedules").
//
// Each builder returns, for D = `stages` ranks, v = spec.virtual_stages model stages per
// rank and M micro-batches, exactly PyTorch's compute-only pipeline_order[d] as stages[d]:
// idle steps dropped, an overlapped pair (a;b)OVERLAP_F_B run as a then b, every op with
// its model stage (PyTorch's stage index) set, and k = 1. Where PyTorch refuses (D, v, M)
// (its constructor raises, or its lowering finds the orders malformed or waiting on each
// other), the builder throws InputError with the reason, naming --stages, --virtual-stages
// or --micro-batches. The reference is torch/distributed/pipelining/schedules.py at
// pytorch/pytorch commit 1f1416a34fd869bab1df91ac807ced3e3f11c722.
#pragma once

#include "schedule.h"

namespace adagrouper::sim {

// Megatron-LM's interleaved 1F1B, loop placement, any v. M runs in rounds of
// max(1, floor(M / D)) micro-batches; M must be a multiple of the rounds.
Schedule build_interleaved_1f1b(const ScheduleSpec& spec, int stages, int micro_batches);
// Breadth-first: each model stage in turn runs every forward, then backwards in reverse
// (model stages and micro-batches both last first); loop placement, any v.
Schedule build_looped_bfs(const ScheduleSpec& spec, int stages, int micro_batches);
// Zero bubble (ZB1P; ZB-H1 with v = 1): interleaved 1F1B with I and W ops, rank d
// deferring its W ops by d; loop placement, any v; the same rounds as interleaved-1f1b.
Schedule build_interleaved_zb(const ScheduleSpec& spec, int stages, int micro_batches);
// ZB-V: V placement, v = 2, I and W ops.
Schedule build_zbv(const ScheduleSpec& spec, int stages, int micro_batches);
// DualPipeV: V placement, v = 2, M >= 2D. Mixes B ops (those of overlapped pairs and of
// the first half of its cool-down) with I and W ops (warm-up and the rest of cool-down).
Schedule build_dualpipev(const ScheduleSpec& spec, int stages, int micro_batches);

}  // namespace adagrouper::sim

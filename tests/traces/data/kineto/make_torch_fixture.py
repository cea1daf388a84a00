#!/usr/bin/env python3
"""Writes torch-rank0.json and torch-rank1.json: PyTorch profiler traces of a real
2-stage pipeline run on the CPU, the fixtures of `trace import-kineto`'s tests.

Two processes (gloo), one stage each (a small MLP), 1F1B over 4 micro-batches for 2
steps. Every action runs inside record_function("PP:<stage><type><micro-batch>") as
torch.distributed.pipelining's runtime names them (PP:0F1, PP:1B0, PP:0SEND_F1,
PP:1RECV_F1, ...), so the files have the layout torch.profiler writes for such a run.
The durations are whatever this machine measured: the tests compare the importer with
medians computed from the files themselves, not with fixed numbers.

Needs PyTorch (Debian: python3-torch); run from this directory:
    python3 make_torch_fixture.py
"""
import os
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.profiler import ProfilerActivity, profile, record_function

MICRO_BATCHES, STEPS, HIDDEN, ROWS = 4, 2, 256, 64


def one_f_one_b(stage, stages):
    """The 1F1B order of one stage: ("F" | "B", micro-batch)."""
    warmup = min(stages - 1 - stage, MICRO_BATCHES)
    order = [("F", m) for m in range(warmup)]
    f, b = warmup, 0
    while b < MICRO_BATCHES:
        if f < MICRO_BATCHES:
            order.append(("F", f))
            f += 1
        order.append(("B", b))
        b += 1
    return order


def run(rank, world, out_dir):
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", "29533"
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(rank)
    torch.set_num_threads(1)
    model = torch.nn.Sequential(torch.nn.Linear(HIDDEN, 4 * HIDDEN), torch.nn.GELU(),
                                torch.nn.Linear(4 * HIDDEN, HIDDEN))
    last = rank == world - 1
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(STEPS):
            inputs, outputs, sends = {}, {}, []  # sends do not wait for their receiver
            for kind, m in one_f_one_b(rank, world):
                if kind == "F":
                    x = torch.randn(ROWS, HIDDEN)
                    if rank > 0:
                        with record_function(f"PP:{rank}RECV_F{m}"):
                            dist.recv(x, src=rank - 1)
                    x.requires_grad_(rank > 0)
                    with record_function(f"PP:{rank}F{m}"):
                        y = model(x)
                    inputs[m], outputs[m] = x, y
                    if not last:
                        with record_function(f"PP:{rank}SEND_F{m}"):
                            sends.append(dist.isend(y.detach(), dst=rank + 1))
                else:
                    grad = torch.ones(ROWS, HIDDEN)
                    if not last:
                        with record_function(f"PP:{rank}RECV_B{m}"):
                            dist.recv(grad, src=rank + 1)
                    with record_function(f"PP:{rank}B{m}"):
                        outputs[m].backward(grad)
                    if rank > 0:
                        with record_function(f"PP:{rank}SEND_B{m}"):
                            sends.append(dist.isend(inputs[m].grad, dst=rank - 1))
            for s in sends:
                s.wait()
            dist.barrier()
    prof.export_chrome_trace(os.path.join(out_dir, f"torch-rank{rank}.json"))
    dist.destroy_process_group()


if __name__ == "__main__":
    out = os.path.dirname(os.path.abspath(sys.argv[0]))
    mp.spawn(run, args=(2, out), nprocs=2, join=True)
    print(f"torch {torch.__version__}: wrote torch-rank0.json and torch-rank1.json in {out}")

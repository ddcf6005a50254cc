"""Why an event-timed training step can take longer than its host time: each call of the suite's flushed loop taken
apart, for ours and eager.

    python benchmarks/flushed_step_timeline.py [--rows 0,1] [--iters 60]

The suite times a call between two CUDA events after writing a 256 MB buffer (the L2 flush). Where the kernels
of a step take tens of microseconds, the event time is the host's: the GPU idles until the host has queued the
step's last kernel. For every call this records
  - on the GPU: the flush (event before it to the event after it) and the step (after the flush to after the step);
  - on the host: the time to queue the flush, and the step's own time (perf_counter around it);
and prints medians, beside the back-to-back host time per call without any flush. Then one flushed call of each
provider runs under torch.profiler (CPU and CUDA), and every CUDA runtime call of the step that took 10 us or more
on the host is listed: a call that waits for the GPU (a synchronisation, an allocation that has to free cached
blocks) shows up there as a long call, as does a launch the driver makes wait.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(__file__))
from providers import group_norm_functions  # noqa: E402
from report import save_log  # noqa: E402
from timing import L2Flusher, host_us_per_call  # noqa: E402

# (shape, groups, dtype, channels_last): the two training rows flagged on 2026-12-01, their channels-last twins
# and a small row whose step is all host time.
ROWS = [
    ((2, 320, 128, 128), 32, torch.float16, False),
    ((2, 640, 64, 64), 32, torch.bfloat16, False),
    ((2, 640, 64, 64), 32, torch.bfloat16, True),
    ((2, 320, 128, 128), 32, torch.float16, True),
    ((64, 32, 16, 16), 32, torch.float16, False),
]
LOG: list[str] = []


def log(text: str = "") -> None:
    print(text, flush=True)
    LOG.append(text)


def make_step(gn, x, w, b, dy):
    def step():
        y = gn(x, w, b)
        return (y, *torch.autograd.grad(y, (x, w, b), dy))
    return step


def flushed_calls(step, flusher, iters: int) -> dict[str, float]:
    """Medians over `iters` flushed calls, us: GPU flush, GPU step, host flush queueing, host step."""
    for _ in range(3):
        step()
    torch.cuda.synchronize()
    ev = [[torch.cuda.Event(enable_timing=True) for _ in range(3)] for _ in range(iters)]
    host_flush, host_step = [], []
    for e0, e1, e2 in ev:
        t0 = time.perf_counter()
        e0.record()
        flusher()
        e1.record()
        t1 = time.perf_counter()
        step()
        t2 = time.perf_counter()
        e2.record()
        host_flush.append((t1 - t0) * 1e6)
        host_step.append((t2 - t1) * 1e6)
    torch.cuda.synchronize()
    return {
        "gpu flush": statistics.median(e0.elapsed_time(e1) * 1e3 for e0, e1, _ in ev),
        "gpu step (event time)": statistics.median(e1.elapsed_time(e2) * 1e3 for _, e1, e2 in ev),
        "host flush queueing": statistics.median(host_flush),
        "host step in the flushed loop": statistics.median(host_step),
    }


def long_runtime_calls(step, flusher) -> list[str]:
    """CUDA runtime calls of one flushed step that took >= 10 us on the host, with the op they ran under."""
    from torch.profiler import ProfilerActivity, profile

    step()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        flusher()
        step()
        torch.cuda.synchronize()
    lines = []
    for e in prof.events():
        if e.device_type != torch.autograd.DeviceType.CPU:
            continue
        dur = e.time_range.end - e.time_range.start
        if e.name.startswith("cuda") and dur >= 10:
            lines.append(f"      {dur:8.1f} us  {e.name}")
    return lines or ["      (none)"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", default="", help="indices into ROWS (all by default)")
    ap.add_argument("--iters", type=int, default=60)
    args = ap.parse_args()
    picks = [int(i) for i in args.rows.split(",") if i.strip()] or range(len(ROWS))
    flusher = L2Flusher(torch.device("cuda"))
    log(f"# flushed_step_timeline on {torch.cuda.get_device_name()}, torch {torch.__version__}")
    for i in picks:
        shape, groups, dtype, cl = ROWS[i]
        gen = torch.Generator(device="cuda").manual_seed(i)
        x = torch.randn(shape, device="cuda", dtype=dtype, generator=gen) * 1.3 + 0.2
        if cl:
            x = x.contiguous(memory_format=torch.channels_last)
        x.requires_grad_()
        w = (torch.rand(shape[1], device="cuda", dtype=dtype, generator=gen) + 0.5).requires_grad_()
        b = torch.randn(shape[1], device="cuda", dtype=dtype, generator=gen).requires_grad_()
        dy = torch.randn_like(x)
        log(f"\n## {shape} G{groups} {str(dtype)[6:]} {'channels_last' if cl else 'NCHW'}")
        ours, eager = group_norm_functions(groups, 1e-5)
        steps = {"ours": make_step(ours, x, w, b, dy), "eager": make_step(eager, x, w, b, dy)}
        # Two rounds, alternating, so that a drift of the host's speed shows as a change between rounds.
        for rnd in range(2):
            for name, step in steps.items():
                parts = flushed_calls(step, flusher, args.iters)
                b2b = host_us_per_call(step, calls=100, warmup=3)
                log(f"  round {rnd} {name:5s}: " + ", ".join(f"{k} {v:.1f}" for k, v in parts.items())
                    + f", back-to-back host {b2b:.1f} us/call")
        for name, step in steps.items():
            log(f"  {name}: CUDA runtime calls of one flushed step taking >= 10 us:")
            for line in long_runtime_calls(step, flusher):
                log(line)
    save_log("flushed_step_timeline.txt", LOG)


if __name__ == "__main__":
    main()

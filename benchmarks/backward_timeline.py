"""GPU timeline of one training step's backward, ours against torch.compile's: each kernel's start, duration and
the gap before it, from the PyTorch profiler's CUDA activity records (CUPTI), with the clocks as the timed suite
runs them (Nsight Compute locks them and serialises kernels; this does neither).

    python benchmarks/backward_timeline.py [--shape 16,64,256,256 --groups 8] [--dtype float32]

Both backwards are warmed up, then each is profiled over 5 calls of `torch.autograd.grad(y, (x, w, b), dy,
retain_graph=True)` (the suite's backward-only timing); the last call's kernels are printed with offsets from
its first kernel's start, and the span from the call's first kernel start to its last kernel end is summarised
over the 5 calls, beside CUDA-event times of the same calls.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys

import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(__file__))
import groupnorm_inline  # noqa: E402
from providers import retained_graph_compile_config  # noqa: E402

CALLS = 5


def kernel_events(prof) -> list[tuple[float, float, str]]:
    """(start us, duration us, name) of every GPU kernel and memset/memcpy the profiler recorded, by start."""
    out = []
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            out.append((e.time_range.start, e.time_range.end - e.time_range.start, e.name))
    return sorted(out)


def profile_backward(name: str, y, x, w, b, dy) -> None:
    def call():
        return torch.autograd.grad(y, (x, w, b), dy, retain_graph=True)

    for _ in range(3):
        call()
    torch.cuda.synchronize()
    event_ms = []
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(CALLS):
            torch.cuda.synchronize()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            call()
            end.record()
            torch.cuda.synchronize()
            event_ms.append(start.elapsed_time(end))
    events = kernel_events(prof)
    # Calls are separated by synchronisations: split the kernels where the gap exceeds 50 us.
    calls, current, last_end = [], [], None
    for ev in events:
        if last_end is not None and ev[0] - last_end > 50:
            calls.append(current)
            current = []
        current.append(ev)
        last_end = ev[0] + ev[1]
    if current:
        calls.append(current)
    spans = [c[-1][0] + c[-1][1] - c[0][0] for c in calls]
    busy = [sum(e[1] for e in c) for c in calls]
    print(f"== {name}: {len(calls)} calls seen; span first kernel start -> last kernel end "
          f"median {statistics.median(spans):.1f} us, kernels busy {statistics.median(busy):.1f} us, "
          f"CUDA events {1e3 * statistics.median(event_ms):.1f} us")
    t0 = calls[-1][0][0]
    prev_end = None
    for start, dur, kname in calls[-1]:
        gap = "" if prev_end is None else f"gap {start - prev_end:6.1f}"
        print(f"   +{start - t0:8.1f} us  {dur:8.1f} us  {gap:10s}  {kname[:90]}")
        prev_end = start + dur


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", default="16,64,256,256")
    ap.add_argument("--groups", type=int, default=8)
    ap.add_argument("--dtype", default="float32")
    args = ap.parse_args()
    shape = tuple(int(v) for v in args.shape.split(","))
    dtype = getattr(torch, args.dtype)
    g = args.groups
    x = (torch.randn(shape, device="cuda") * 1.3 + 0.2).to(dtype).requires_grad_()
    w = (torch.rand(shape[1], device="cuda") + 0.5).to(dtype).requires_grad_()
    b = (torch.rand(shape[1], device="cuda") - 0.5).to(dtype).requires_grad_()
    dy = torch.randn(shape, device="cuda").to(dtype)
    print(f"# backward timeline, {torch.cuda.get_device_name()}, torch {torch.__version__}, {shape} G={g} {dtype}")
    with retained_graph_compile_config():
        compiled = torch.compile(lambda t, ww, bb: F.group_norm(t, g, ww, bb, 1e-5), dynamic=False)
        y_compile = compiled(x, w, b)
        y_ours = groupnorm_inline.group_norm(x, g, w, b, 1e-5)
        profile_backward("compile", y_compile, x, w, b, dy)
        profile_backward("ours", y_ours, x, w, b, dy)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Where the time of a row goes: GPU kernels of one call (torch.profiler) against the wall time per call.

    python benchmarks/profile_rows.py                  # the rows below
    python benchmarks/profile_rows.py --rows 0,3       # some of them (indices)
    python benchmarks/profile_rows.py --set flagged    # the rows random_rows.py flagged as slower

For each row and provider (ours, eager, compile): the kernels one call launches with their mean GPU time (from
20 profiled calls), their sum, the event-timed median with L2 flushed before each call, and the host time per
call when calls are queued back to back without a flush (if that exceeds the kernel sum the row is bound by
the host: Python, dispatch, allocations, launches). Log to $OUT/profile_rows.txt when OUT is set.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from collections import defaultdict

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(__file__))
from report import save_log  # noqa: E402
from timing import L2Flusher, TimingPlan, host_us_per_call, time_cuda  # noqa: E402

# (shape, groups, dtype, channels_last, activation, direction)
ROWS = [
    ((2, 320, 128, 128), 32, torch.float16, True, None, "fwd"),
    ((64, 32, 16, 16), 32, torch.float16, True, None, "fwd"),
    ((1, 128, 8, 128, 128), 32, torch.bfloat16, False, None, "fwd"),
    ((2, 320, 128, 128), 32, torch.float16, False, "silu", "fwd"),
    ((2, 320, 128, 128), 32, torch.float16, False, None, "fwd"),
    ((2, 1280, 32, 32), 32, torch.float16, True, None, "fwd"),
    ((1, 128, 512, 512), 32, torch.float16, True, None, "fwd"),
    ((2, 320, 128, 128), 32, torch.bfloat16, True, None, "train"),
    ((64, 32, 16, 16), 32, torch.float16, True, None, "train"),
    ((2, 320, 128, 128), 32, torch.float16, False, None, "train"),
    ((128, 64, 126, 126), 16, torch.float32, False, None, "bwd"),
    ((16, 64, 256, 256), 8, torch.float32, False, None, "bwd"),
    ((2, 640, 64, 64), 32, torch.bfloat16, False, None, "train"),  # below eager on an H200 (2026-12-01 suite)
]
# Rows `random_rows.py` flagged (ours over 3% slower than the faster baseline, H200, 2026-11-27, seeds 1 and 2)
# that the changes of that day did not mend: small training steps, two fused-SiLU rows, one single-group row.
FLAGGED_ROWS = [
    ((64, 512, 1, 3), 32, torch.float32, False, None, "train"),
    ((64, 96, 10, 15), 32, torch.float32, True, None, "train"),
    ((8, 16, 51, 45), 1, torch.bfloat16, True, None, "train"),
    ((8, 320, 104, 55), 16, torch.float16, True, None, "train"),
    ((1, 640, 33, 22), 32, torch.float16, False, None, "train"),
    ((4, 96), 32, torch.float32, False, None, "train"),
    ((4, 1, 1, 181, 180), 1, torch.float32, True, "silu", "fwd"),
    ((1, 160, 1488), 32, torch.float16, False, "silu", "fwd"),
    ((8, 64, 38555), 1, torch.float32, False, None, "fwd"),
    # seed 3 (H200, 2026-11-29): a small channels-last training step, and a fused SiLU on 256 slices of 66 floats
    ((2, 20, 118, 121), 2, torch.float32, True, None, "train"),
    ((8, 32, 11, 6), 32, torch.float32, False, "silu", "fwd"),
    # seeds 5 and 6 (H200, 2026-12-02): two training steps of tensors under 150 KB
    ((2, 96), 32, torch.float32, False, None, "train"),
    ((1, 64, 1123), 32, torch.bfloat16, False, None, "train"),
    # seed 20261206 (H100, 2026-12-06): a 43 KB training step; rows of odd length (27117 floats) in training; 128
    # slices of 308226 bf16 elements (odd HW: no slice starts at a 16-byte boundary)
    ((4, 10, 31, 35), 2, torch.float32, False, None, "train"),
    ((32, 8, 207, 131), 8, torch.float32, False, None, "train"),
    ((64, 4, 154113), 2, torch.bfloat16, False, None, "fwd"),
    # seed 61207 (H200, 2026-12-07): 256 slices of one channel of 16168 bf16 elements in training (2.1x eager)
    ((32, 8, 172, 94), 8, torch.bfloat16, False, None, "train"),
]
LOG: list[str] = []


def log(text=""):
    print(text, flush=True)
    LOG.append(text)


def make(row):
    shape, groups, dtype, cl, act, direction = row
    x = torch.randn(shape, device="cuda", dtype=dtype) * 1.7 + 0.3
    if cl and len(shape) in (4, 5):
        x = x.contiguous(memory_format=torch.channels_last if len(shape) == 4 else torch.channels_last_3d)
    w = torch.randn(shape[1], device="cuda", dtype=dtype) * 0.5 + 1
    b = torch.randn(shape[1], device="cuda", dtype=dtype) * 0.5
    return x, w, b


def providers(row, x, w, b):
    from groupnorm_inline import group_norm

    shape, groups, dtype, cl, act, direction = row
    act_fn = {None: lambda t: t, "silu": F.silu}[act]

    def ours_fwd(t, ww, bb):
        return group_norm(t, groups, ww, bb, 1e-5, activation=act)

    def eager_fwd(t, ww, bb):
        return act_fn(F.group_norm(t, groups, ww, bb, 1e-5))

    compiled = torch.compile(eager_fwd)
    fns = {"ours": ours_fwd, "eager": eager_fwd, "compile": compiled}
    if direction == "fwd":
        return {k: (lambda f=f: f(x, w, b)) for k, f in fns.items()}
    grad = torch.randn_like(x)
    leaves = [x.detach().requires_grad_(), w.detach().requires_grad_(), b.detach().requires_grad_()]
    if direction == "train":
        return {k: (lambda f=f: torch.autograd.grad(f(*leaves), leaves, grad)) for k, f in fns.items()}
    outs = {k: f(*leaves) for k, f in fns.items()}  # bwd alone: the graph kept, backward timed
    return {k: (lambda o=o: torch.autograd.grad(o, leaves, grad, retain_graph=True)) for k, o in outs.items()}


def kernel_times(fn, calls=20):
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    per = defaultdict(float)
    count = defaultdict(int)
    for ev in prof.events():
        if ev.device_type == torch.autograd.DeviceType.CUDA:
            per[ev.name] += ev.device_time_total if hasattr(ev, "device_time_total") else ev.cuda_time_total
            count[ev.name] += 1
    return {k: (v / calls, count[k] // calls) for k, v in per.items()}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", default="", help="indices into the row set (all of it by default)")
    ap.add_argument("--set", choices=("suite", "flagged"), default="suite",
                    help="suite: rows of the benchmark families; flagged: rows random_rows.py flagged")
    args = ap.parse_args()
    rows = FLAGGED_ROWS if args.set == "flagged" else ROWS
    picks = [int(i) for i in args.rows.split(",") if i.strip()] or range(len(rows))
    flusher = L2Flusher(torch.device("cuda"))
    plan = TimingPlan(warmup=5, min_iters=50, max_iters=200, target_s=0.5)
    log(f"# profile_rows on {torch.cuda.get_device_name()}, torch {torch.__version__}")
    for i in picks:
        row = rows[i]
        x, w, b = make(row)
        shape, groups, dtype, cl, act, direction = row
        copy_ms = time_cuda(lambda: x.clone(memory_format=torch.preserve_format), plan, flusher).median_ms
        log(f"\n## row {i}: {shape} G{groups} {str(dtype)[6:]} {'CL' if cl else 'NCHW'} act={act} {direction}; "
            f"copy {copy_ms * 1e3:.1f} us")
        for name, fn in providers(row, x, w, b).items():
            try:
                med = time_cuda(fn, plan, flusher).median_ms * 1e3
                host = host_us_per_call(fn, warmup=1)
                kt = kernel_times(fn)
            except Exception as exc:  # report, go on
                log(f"  {name}: ERROR {type(exc).__name__}: {str(exc).splitlines()[0][:200]}")
                continue
            total = sum(v for v, _ in kt.values())
            log(f"  {name}: median (L2 flushed) {med:.1f} us, back-to-back {host:.1f} us/call, kernels {total:.1f} us "
                f"in {sum(c for _, c in kt.values())} launches")
            for k, (v, c) in sorted(kt.items(), key=lambda kv: -kv[1][0])[:8]:
                log(f"      {v:8.1f} us x{c}  {k[:110]}")
        torch._dynamo.reset()
    save_log("profile_rows.txt", LOG)


if __name__ == "__main__":
    main()

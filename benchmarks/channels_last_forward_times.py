"""Times the channels-last forward of this checkout on a fixed set of rows, for comparing two builds run one after
the other on the same machine (a kernel change against the commit before it).

    python benchmarks/channels_last_forward_times.py --label after [--out DIR]

Per row: a copy of the tensor (channels-last in and out), our public op and eager F.group_norm, timed round-robin
(one call of each in turn, L2 flushed before every call by writing 256 MB, CUDA events), medians of `--iters`;
then the plan our forward took. `--plans fused,three` adds our op with GROUPNORM_INLINE_CL_FORWARD_PLAN set to each
(read by the op on every call) to the same round-robin, `--envs NAME=VALUE,...` our op under each setting;
`--rows block` times the rows the block plan takes (`all`: both sets; `large`: inputs larger than shared
memory; `samples`: several samples each too large for the block plan; `held`: inputs of a few MB to ~30 MB, where
the block plan holds rows in shared memory); `--kernels` adds each provider's GPU
kernel time per call (torch.profiler), which a slow host cannot inflate. Inputs are random normal values; weight
and bias in the input's dtype. Appends to DIR/channels_last_forward_times.txt, so that both builds' tables land in
one file.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys

import torch
import torch.nn.functional as F

try:  # the package on PYTHONPATH if there is one (another build to compare), else this checkout's
    import groupnorm_inline  # noqa: F401
except ImportError:
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

ROWS = [  # (shape, groups, dtype): channels-last rows from 1 MB to 256 MB, narrow and wide C, 4-D and 5-D
    ((64, 32, 16, 16), 32, torch.float16),
    ((1, 320, 64, 64), 32, torch.float16),
    ((2, 1280, 32, 32), 32, torch.float16),
    ((2, 640, 64, 64), 32, torch.float16),
    ((2, 320, 128, 128), 32, torch.float16),
    ((1, 512, 128, 128), 32, torch.float16),
    ((8, 320, 64, 64), 32, torch.float32),
    ((1, 128, 8, 128, 128), 32, torch.bfloat16),
    ((4, 64, 64, 64), 32, torch.float32),
    ((32, 64, 32, 32), 8, torch.float16),
    ((1, 128, 512, 512), 32, torch.float16),
    ((16, 64, 256, 256), 8, torch.float32),
]
LARGE_ROWS = [  # inputs larger than the GPU's shared memory (the single launch reads part of x twice), 32-256 MB
    ((1, 128, 512, 512), 32, torch.float16),
    ((16, 64, 256, 256), 8, torch.float32),
    ((8, 320, 64, 64), 32, torch.float32),
    ((1, 128, 8, 128, 128), 32, torch.bfloat16),
    ((1, 256, 256, 256), 32, torch.float16),
    ((2, 512, 128, 128), 32, torch.float32),
    ((1, 64, 16, 128, 128), 32, torch.float16),
]
SAMPLE_ROWS = [  # several samples, each too large for the block plan: the single launch with few tiles a sample
    ((16, 320, 64, 64), 32, torch.float16),
    ((32, 128, 64, 64), 32, torch.float16),
    ((16, 640, 32, 32), 32, torch.bfloat16),
    ((8, 512, 64, 64), 32, torch.float32),
    ((12, 256, 64, 64), 32, torch.float16),
    ((64, 64, 64, 64), 32, torch.float16),
    ((16, 128, 128, 128), 32, torch.float16),
    ((4, 512, 64, 64), 32, torch.float16),
    ((8, 320, 64, 64), 32, torch.float32),
]
BLOCK_ROWS = [  # inputs of many small samples, whose channel tiles fit one CTA (the block plan), 0.1-34 MB
    ((64, 32, 16, 16), 32, torch.float16),
    ((32, 64, 32, 32), 8, torch.float16),
    ((4, 64, 64, 64), 32, torch.float32),
    ((128, 64, 8, 8), 32, torch.float32),
    ((16, 512, 32, 32), 32, torch.bfloat16),
    ((8, 32, 32, 32), 8, torch.float32),
    ((64, 128, 16, 16), 32, torch.float16),
    ((256, 32, 32, 32), 8, torch.float32),
    ((1024, 32, 8, 8), 32, torch.float16),
    ((2, 320, 16, 16), 32, torch.float16),
    ((4, 128, 4, 16, 16), 32, torch.bfloat16),
    ((16, 256, 16, 16), 32, torch.float32),
]


def round_robin(fns: dict, iters: int) -> dict:
    """Median us per call of each fn: CUDA events, L2 flushed before every call, the fns called in turn in an
    order rotated every round (on one H200 host the first of a fixed order measured 15-30 us slow against the
    same kernel timed later in the round)."""
    flush = torch.empty(256 * 1024 * 1024 // 4, device="cuda")
    for fn in fns.values():
        for _ in range(3):
            fn()
    torch.cuda.synchronize()
    times = {name: [] for name in fns}
    names = list(fns)
    for i in range(iters):
        for name in names[i % len(names):] + names[:i % len(names)]:
            fn = fns[name]
            flush.fill_(1.0)
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize()
            times[name].append(start.elapsed_time(end) * 1000.0)
    return {name: statistics.median(t) for name, t in times.items()}


def kernel_us(fn, iters: int) -> float:
    """GPU kernel time of one call of fn, in us: the kernels' durations summed (torch.profiler), averaged over
    iters calls, each after an L2 flush (whose fill kernel is left out). Host time and launch gaps are not in it:
    where the host is slower than the GPU (few-MB inputs on a slow host) the event timings above measure the host,
    this measures the kernels."""
    from torch.profiler import ProfilerActivity, profile
    flush = torch.empty(256 * 1024 * 1024 // 4, device="cuda")
    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(iters):
            flush.fill_(1.0)
            fn()
        torch.cuda.synchronize()
    total = 0.0
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA and "fill" not in e.name.lower():
            total += e.device_time
    return total / iters


def with_envs(settings: dict, fn):
    """fn with the environment variables of `settings` (name: value) set for the length of each call."""
    def call():
        os.environ.update(settings)
        try:
            return fn()
        finally:
            for name in settings:
                os.environ.pop(name, None)
    return call


HELD_ROWS = [  # a few MB to ~30 MB, one or two samples: the block plan holding rows in shared memory where it fits
    ((1, 320, 64, 64), 32, torch.float16),
    ((2, 320, 128, 128), 32, torch.float16),
    ((2, 320, 128, 128), 32, torch.bfloat16),
    ((2, 320, 128, 128), 32, torch.float32),
    ((1, 512, 128, 128), 32, torch.float16),
    ((2, 640, 64, 64), 32, torch.float16),
    ((1, 320, 96, 96), 32, torch.float16),
    ((4, 256, 64, 64), 32, torch.float16),
    ((1, 128, 256, 256), 32, torch.float16),
    ((2, 512, 64, 64), 32, torch.bfloat16),
    ((1, 256, 128, 128), 32, torch.float32),
    ((1, 64, 16, 64, 64), 32, torch.float16),
    ((3, 640, 48, 48), 32, torch.float16),
    ((2, 96, 50, 50), 32, torch.float64),
]


def parse_settings(column: str) -> dict:
    """`A=1+B=x` -> {"A": "1", "B": "x"}: one column's settings."""
    return dict(part.split("=", 1) for part in column.split("+"))


def forced(plan: str, fn):
    """fn with GROUPNORM_INLINE_CL_FORWARD_PLAN=plan for the length of the call."""
    return with_envs({"GROUPNORM_INLINE_CL_FORWARD_PLAN": plan}, fn)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--label", default="this build")
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--iters", type=int, default=40)
    ap.add_argument("--plans", default="", help="comma-separated forced plans to time beside the automatic one")
    ap.add_argument("--envs", default="", help="comma-separated NAME=VALUE settings, each timed as a column of its "
                    "own (our op with that variable set for the call); NAME=VALUE+NAME2=VALUE2 sets both")
    ap.add_argument("--rows", default="main", choices=["main", "block", "all", "large", "samples", "held"])
    ap.add_argument("--kernels", action="store_true", help="also the kernels' GPU time per call (torch.profiler)")
    args = ap.parse_args()
    import groupnorm_inline as gn
    from groupnorm_inline.functional import forward_plan
    print(f"package: {os.path.dirname(gn.__file__)}", flush=True)
    plans = [p for p in args.plans.split(",") if p]
    envs = [e for e in args.envs.split(",") if e]
    plans += envs
    lines = [f"## {args.label}: {torch.cuda.get_device_name()}, torch {torch.__version__}, round-robin medians of "
             f"{args.iters} (us)", "| row | copy | ours | " + "".join(f"{p} | " for p in plans) +
             "eager | ours/copy | plan |", "|---|--:|--:|" + "--:|" * len(plans) + "--:|--:|---|"]
    rows = {"main": ROWS, "block": BLOCK_ROWS, "all": ROWS + BLOCK_ROWS, "large": LARGE_ROWS,
            "samples": SAMPLE_ROWS, "held": HELD_ROWS}[args.rows]
    for shape, G, dtype in rows:
        fmt = torch.channels_last if len(shape) == 4 else torch.channels_last_3d
        x = torch.randn(shape, device="cuda").to(dtype).contiguous(memory_format=fmt)
        w = torch.rand(shape[1], device="cuda", dtype=dtype) + 0.5
        b = torch.rand(shape[1], device="cuda", dtype=dtype) - 0.5
        out = torch.empty_like(x)
        fns = {"copy": lambda: out.copy_(x), "ours": lambda: gn.group_norm(x, G, w, b)}
        for p in plans:
            if "=" in p:
                fns[p] = with_envs(parse_settings(p), lambda: gn.group_norm(x, G, w, b))
            else:
                fns[p] = forced(p, lambda: gn.group_norm(x, G, w, b))
        fns["eager"] = lambda: F.group_norm(x, G, w, b)
        t = round_robin(fns, args.iters)
        plan = forward_plan(x, G).split(":")[0]
        for p in envs:  # the plan under each setting, where it differs
            with_plan = with_envs(parse_settings(p), lambda: forward_plan(x, G).split(":")[0])()
            if with_plan != plan:
                plan += f" · {p}: {with_plan}"
        if args.kernels:
            k = {name: kernel_us(fn, 20) for name, fn in fns.items()}
            plan += " · kernels (us): " + ", ".join(f"{name} {v:.1f}" for name, v in k.items())
        lines.append(f"| {tuple(shape)} G{G} {str(dtype).split('.')[-1]} | {t['copy']:.1f} | {t['ours']:.1f} | " +
                     "".join(f"{t[p]:.1f} | " for p in plans) +
                     f"{t['eager']:.1f} | {t['ours'] / t['copy']:.2f}x | {plan} |")
        print(lines[-1], flush=True)
        del x, out
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "channels_last_forward_times.txt"), "a") as f:
        f.write("\n".join(lines) + "\n\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

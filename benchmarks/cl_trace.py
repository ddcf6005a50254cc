"""Where the channels-last single launches (cl_block, cl_fused) spend their time, phase by phase, from %globaltimer
stamps.

    python benchmarks/cl_trace.py [--runs 30] [--rows '2,320,128,128:32:fp16;...'] [--plan auto|fused]

`group_norm_channels_last_trace` runs the channels-last forward once as the op would (`--plan fused`: never the
block plan) and returns, per CTA, thread 0's stamps at seven points. The single cooperative launch (cl_fused):
entry, its own loads and sums done, the CTA's partial sums written, past grid barrier 1, finalize (or fold) done,
past grid barrier 2, the whole CTA's normalisation done. The block plan (cl_block): entry, its own rows loaded and
summed, every thread's sums in shared memory, the CTA's channel sums done and past the first cluster barrier, its
groups finalised, past the second cluster barrier, every thread's stores issued. L2 is flushed before every run
(log to $OUT when set). Per row this prints, as medians over the runs:

  at      each point's time after the first CTA's entry (the kernel's start): earliest CTA, median, latest;
  phase   each CTA's time from one point to the next (median over CTAs, and the slowest CTA);

so that a phase's length (what a CTA spends in it) and its skew (how far apart CTAs reach it, which a grid
barrier turns into waiting for every CTA) read apart. The plan (forward_plan with the block plan off) heads each
row. Weight and bias in the input's dtype, random normal inputs.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys

import torch

try:  # the package on PYTHONPATH if there is one (another build to compare), else this checkout's
    import groupnorm_inline  # noqa: F401
except ImportError:
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(__file__))
from groupnorm_inline import extension  # noqa: E402
from report import save_log  # noqa: E402
from timing import L2Flusher  # noqa: E402

DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16, "fp64": torch.float64}
# The few-MB and large channels-last rows of the suite (unet, vae, video): the ones furthest above the copy.
DEFAULT_ROWS = ("1,320,64,64:32:fp16;2,640,64,64:32:fp16;2,320,128,128:32:fp16;1,512,128,128:32:fp16;"
                "2,1280,32,32:32:fp16;1,128,8,128,128:32:bf16;1,128,512,512:32:fp16")
POINTS = ["entry", "loads summed", "partials written", "barrier 1", "finalized", "barrier 2", "normalised"]
BLOCK_POINTS = ["entry", "loads summed", "sums in smem", "channels+barrier 1", "finalized", "barrier 2",
                "stores issued"]
LOG: list[str] = []


def log(text: str = "") -> None:
    print(text, flush=True)
    LOG.append(text)


def parse_rows(text: str):
    rows = []
    for item in text.split(";"):
        if not item:
            continue
        shape, groups, dtype = item.split(":")
        rows.append((tuple(int(v) for v in shape.split(",")), int(groups), DTYPES[dtype]))
    return rows


def trace_row(ops, shape, groups, dtype, runs: int, flush: L2Flusher) -> None:
    """The row's trace under the plan setting of the caller's environment."""
    from groupnorm_inline.functional import forward_plan
    fmt = torch.channels_last if len(shape) == 4 else torch.channels_last_3d
    x = torch.randn(shape, device="cuda", dtype=torch.float32).mul_(1.7).add_(0.3).to(dtype)
    x = x.contiguous(memory_format=fmt)
    w = torch.randn(shape[1], device="cuda").mul_(0.5).add_(1).to(dtype)
    b = torch.randn(shape[1], device="cuda").mul_(0.5).to(dtype)
    plan = forward_plan(x, groups)
    points = BLOCK_POINTS if plan.startswith("channels_last block") else POINTS
    mb = x.numel() * x.element_size() / 2**20
    log(f"{shape} G{groups} {str(dtype).replace('torch.', '')} ({mb:.1f} MB): {plan}")
    ops.group_norm_channels_last_trace(x, groups, w, b)  # warm-up
    at = [[[] for _ in range(3)] for _ in points]      # point -> (earliest, median, latest) over runs, us
    phase = [[[] for _ in range(2)] for _ in points[1:]]  # phase -> (median CTA, slowest CTA) over runs, us
    total = []
    for _ in range(runs):
        flush()
        t = ops.group_norm_channels_last_trace(x, groups, w, b).cpu().double()
        t = t[(t > 0).all(dim=1)]
        t0 = float(t[:, 0].min())
        rel = (t - t0) / 1e3
        for k in range(len(points)):
            col = rel[:, k]
            at[k][0].append(float(col.min()))
            at[k][1].append(float(col.median()))
            at[k][2].append(float(col.max()))
        for k in range(1, len(points)):
            d = rel[:, k] - rel[:, k - 1]
            phase[k - 1][0].append(float(d.median()))
            phase[k - 1][1].append(float(d.max()))
        total.append(float(rel[:, -1].max()))
    log(f"  {t.shape[0]} CTAs; first entry to last CTA done: median {statistics.median(total):.2f} us over {runs} "
        "runs (L2 flushed)")
    log(f"  {'point':<17s} {'earliest':>9s} {'median':>9s} {'latest':>9s}   phase to it: median CTA, slowest CTA")
    for k, name in enumerate(points):
        e, m, l_ = (statistics.median(v) for v in at[k])
        tail = ""
        if k > 0:
            pm, px = (statistics.median(v) for v in phase[k - 1])
            tail = f"   {pm:9.2f} {px:9.2f}"
        log(f"  {name:<17s} {e:9.2f} {m:9.2f} {l_:9.2f}{tail}")
    del x
    torch.cuda.empty_cache()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", default=DEFAULT_ROWS, help="';'-separated N,C,H,W[,D]:G:dtype (fp32, fp16, bf16, fp64)")
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--plan", choices=["auto", "fused"], default="auto",
                    help="auto: the plan the op takes (the block plan where it fits); fused: never the block plan")
    args = ap.parse_args()
    if args.plan == "fused":  # read by the op on every call, the trace's and forward_plan's alike
        os.environ["GROUPNORM_INLINE_CL_FORWARD_PLAN"] = "fused"
    if not torch.cuda.is_available():
        print("cl_trace.py needs a CUDA device (the trace is of a CUDA kernel)")
        return 0
    ops = extension.load()
    log(f"{torch.cuda.get_device_name()}, torch {torch.__version__}")
    flush = L2Flusher(torch.device("cuda"))
    for shape, groups, dtype in parse_rows(args.rows):
        try:
            trace_row(ops, shape, groups, dtype, args.runs, flush)
        except RuntimeError as err:
            log(f"{shape} G{groups} {dtype}: {str(err).splitlines()[0]}")
    path = save_log("cl_trace.txt", LOG)
    if path:
        print(f"log: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

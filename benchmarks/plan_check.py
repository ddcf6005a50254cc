"""GPU check of each forward launch plan forced by name, then timings of plan variants side by side.

    python benchmarks/plan_check.py [--out DIR] [--small] [--no-timing] [--rows 35] [--trace PLAN;PLAN] [--compile]

1. Correctness per plan: `group_norm_forward_with_plan` on shapes picked so the plan's edge cases run
   (parts that end mid-vector-row, empty trailing cluster ranks, shared-memory/register/L2 splits of a
   part forced small, many slices per persistent cluster, |mean| >> std, every dtype, affine or not).
   Random inputs, output memory poisoned with NaN first, compared with a float64 reference; the
   statistics (mean, rstd) are checked too.
2. Timings (CUDA events, median of 20, L2 flushed when the working set is under 200 MB): for each row,
   a copy of the tensor, the automatic plan and each named variant, in this one process.
3. `--trace`: per streamed-plan variant, where a slice round's time goes at the #35 shape (thread 0's
   %globaltimer stamps per phase from `group_norm_streamed_trace`).
`--small` runs only a few small cases (for compute-sanitizer). A log goes to DIR/plan_check.txt.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from forward_check import log, poison_allocator, reference, time_fn, write_log  # noqa: E402

TOL = {torch.float32: 1e-4, torch.float64: 1e-9, torch.float16: 1e-2, torch.bfloat16: 6e-2}


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).split(".")[-1]


def check(ops, plan, shape, G, dtype, affine=True, mean_offset=0.0):
    x = (torch.rand(shape, device="cuda") * 2 - 1 + mean_offset).to(dtype)
    C = shape[1]
    acc = torch.float64 if dtype == torch.float64 else torch.float32
    w = (torch.rand(C, device="cuda", dtype=acc) + 0.5) if affine else None
    b = (torch.rand(C, device="cuda", dtype=acc) - 0.5) if affine else None
    x_before = x.clone()
    poison_allocator(x.numel() * x.element_size() * 2)
    try:
        y, mean, rstd = ops.group_norm_forward_with_plan(x, G, w, b, 1e-5, plan)
    except RuntimeError as error:
        log(f"FAIL {plan:34s} {str(tuple(shape)):22s} G={G:<3d} {dtype_name(dtype):9s} raised: "
            f"{str(error).splitlines()[0]}")
        return False
    torch.cuda.synchronize()
    # float64 reference a few samples at a time (the #35 shape would need 15 GB at once)
    step = max(1, (1 << 27) // max(1, x[0].numel()))
    err, scale, nan, ref_mean, ref_rstd = 0.0, 1.0, 0, [], []
    for n0 in range(0, shape[0], step):
        xs, ys = x[n0:n0 + step], y[n0:n0 + step]
        ref = reference(xs, G, w, b, 1e-5)
        nan += int(torch.isnan(ys).sum())
        scale = max(scale, ref.abs().max().item())
        err = max(err, (ys.double() - ref).abs().max().item())
        xd = xs.double().reshape(xs.shape[0], G, -1)
        ref_mean.append(xd.mean(-1))
        ref_rstd.append((xd.var(-1, unbiased=False) + 1e-5).rsqrt())
        del ref, xd
    ref_mean, ref_rstd = torch.cat(ref_mean), torch.cat(ref_rstd)
    stat_tol = 1e-9 if dtype == torch.float64 else 1e-5
    mean_err = ((mean.double() - ref_mean).abs() / ref_mean.abs().clamp_min(1)).max().item()
    rstd_err = ((rstd.double() - ref_rstd).abs() / ref_rstd).max().item()
    ok = (nan == 0 and err <= TOL[dtype] * scale and mean_err <= stat_tol and rstd_err <= stat_tol * 10
          and torch.equal(x, x_before))
    log(f"{'ok  ' if ok else 'FAIL'} {plan:34s} {str(tuple(shape)):22s} G={G:<3d} {dtype_name(dtype):9s} "
        f"affine={int(affine)} off={mean_offset:<6g} max_err={err:.2e} mean_err={mean_err:.1e} "
        f"rstd_err={rstd_err:.1e} nan={nan}")
    return ok


# (plan, shape, G): shapes on which the plan's own edge cases run.
STREAMED_FORCED_SMALL = "streamed:smem_kb=16,reg_vecs=2"  # parts of 64 KB split over smem, registers and L2
CASES = [
    ("small", (7, 6, 1), 3), ("small", (64, 8192), 256),
    ("resident", (3, 8, 100, 100), 2), ("resident", (2, 64, 40, 40), 8),
    ("streamed", (3, 8, 100, 100), 2),          # whole part in shared memory
    ("streamed", (5, 6, 37, 20), 3),            # parts of 96 elements, the last one shorter
    ("streamed", (3, 10, 4), 1),                # D = 40: trailing ranks own nothing
    ("streamed", (200, 4, 32, 32), 2),          # 400 slices: many per persistent group
    (STREAMED_FORCED_SMALL, (4, 8, 256, 256), 2),
    (STREAMED_FORCED_SMALL, (33, 6, 128, 129), 3),
    ("streamed:smem_kb=1,reg_vecs=0", (6, 8, 256, 100), 4),   # mostly L2 tail
    ("streamed:reg_vecs=0", (4, 16, 512, 512), 2),
    ("streamed:cluster=8", (10, 8, 300, 300), 2),
    (STREAMED_FORCED_SMALL + "", (33, 6, 128, 129), 3),
    ("fused", (3, 8, 100, 100), 2), ("split", (3, 8, 100, 100), 2), ("split", (1, 4, 3000, 3000), 1),
    ("split:l2_keep_pct=0", (1, 4, 3000, 3000), 1),     # no L2 hints
    ("split:l2_keep_pct=100", (2, 6, 999, 1001), 3),    # every item kept; D odd: element-wise heads and tails
    ("held", (3, 8, 100, 100), 2),                     # whole items in shared memory, one round
    ("held:held_kb=4", (4, 8, 256, 256), 2),           # several rounds, the first held, slices repeating
    ("held:held_kb=2", (1, 4, 300, 300), 1),           # one slice of many items: folded once, two grid barriers
    ("held", (2, 6, 999, 1001), 3),                    # D odd: element-wise (VEC 1)
    ("auto", (16, 64, 512, 512), 8),
    ("streamed:cluster=16", (200, 4, 32, 32), 2),      # thread-block clusters (the automatic plan takes groups)
    ("streamed:groups=8", (200, 4, 32, 32), 2),        # no clusters: sums through global memory, many rounds
    ("streamed:groups=2", (9, 8, 300, 300), 2),        # > 32 CTAs per slice
    ("streamed:groups=7,smem_kb=16,reg_vecs=2", (33, 6, 128, 129), 3),  # vectors straddle channels, L2 tails
]
# The cases --small runs (for compute-sanitizer): two small, two streamed, one forced-small streamed, the splits,
# the held ones, the grouped streamed ones.
SMALL_CASES = [0, 1, 4, 5, 8, 15, 16, 17, 18, 19, 20, 21, 22, 24, 25, 26, 27]


def correctness(ops, small: bool) -> bool:
    ok = True
    cases = [CASES[i] for i in SMALL_CASES] if small else CASES
    for plan, shape, G in cases:
        dtypes = [torch.float32] if small else [torch.float32, torch.bfloat16, torch.float16]
        if plan.startswith(("small", "fused", "split", "held", "resident", "auto")) and not small:
            dtypes.append(torch.float64)
        for dtype in dtypes:
            ok &= check(ops, plan, shape, G, dtype)
        if not small:
            ok &= check(ops, plan, shape, G, torch.float32, affine=False)
            ok &= check(ops, plan, shape, G, torch.float32, mean_offset=1e4)
    if not small:  # the #35 shape itself through the streamed plan
        ok &= check(ops, "streamed", (112, 64, 512, 512), 8, torch.float32)
        ok &= check(ops, "streamed", (112, 64, 512, 512), 8, torch.bfloat16)
        ok &= check(ops, "streamed:cluster=16", (112, 64, 512, 512), 8, torch.float32)
        ok &= check(ops, "streamed:groups=16", (112, 64, 512, 512), 8, torch.bfloat16)
    log("correctness: " + ("ALL PASS" if ok else "FAILURES"))
    return ok


TIMING_ROWS = {
    "35": [((112, 64, 512, 512), 8, torch.float32), ((112, 64, 512, 512), 8, torch.bfloat16)],
    "mid": [((16, 64, 256, 256), 8, torch.float32), ((16, 64, 256, 256), 8, torch.bfloat16),
            ((2, 64, 1000, 1000), 8, torch.float32), ((1, 32, 2048, 2048), 1, torch.float32)],
    # Slices of 0.3-2 MB in numbers that fill 1-2 waves of resident clusters (the resident plan's wave rule).
    "waves": [((1, 128, 8, 128, 128), 32, torch.bfloat16), ((1, 512, 128, 128), 32, torch.float16),
              ((2, 320, 128, 128), 32, torch.float16), ((1, 256, 256, 256), 32, torch.bfloat16),
              ((4, 512, 64, 64), 32, torch.float32), ((3, 640, 64, 64), 32, torch.float16),
              ((1, 128, 512, 512), 32, torch.float16), ((8, 320, 64, 64), 32, torch.float32)],
    # Few slices too large for the resident plan, no more than the streamed plan's clusters resident at once (one
    # round of it): random problems where the automatic plan was slower than torch.compile ((8,64,38555) G1) or
    # close to it, and one of two rounds.
    "one-round": [((8, 64, 38555), 1, torch.float32), ((1, 32, 564, 606), 4, torch.float16),
                  ((4, 64, 27124), 1, torch.float16), ((4, 4, 1070, 1588), 4, torch.float16)],
    # The suite's NCHW rows of few slices that neither of the above holds (the held plan's candidates), and the
    # small ones where one cooperative launch might not pay.
    "held": [((2, 320, 128, 128), 32, torch.float32), ((2, 640, 64, 64), 32, torch.float16),
             ((1, 320, 64, 64), 32, torch.float16), ((2, 1280, 32, 32), 32, torch.float16),
             ((1, 128, 1024, 1024), 32, torch.float16)],
    # Few slices of 3 to 4 rounds of the held plan in half precision (bfloat16 runs 2 CTAs per SM, float16 3): the
    # random row (32,16,94230) G8 bf16 that trailed torch.compile, its aligned twin and float16 twins.
    "held-half": [((32, 16, 94230), 8, torch.bfloat16), ((32, 16, 94232), 8, torch.bfloat16),
                  ((32, 16, 94232), 8, torch.float16), ((64, 4, 154112), 2, torch.bfloat16),
                  ((64, 4, 154112), 2, torch.float16)],
    # Inputs the split plan takes, 14 MB to 512 MB (L2: 50 MB on the H100 and H200): its L2 hints against none.
    "split": [((4, 64, 27124), 1, torch.float16), ((1, 256, 256, 256), 32, torch.bfloat16),
              ((4, 4, 1070, 1588), 4, torch.float16), ((8, 64, 38555), 1, torch.float32),
              ((2, 32, 1024, 1024), 4, torch.float16), ((4, 8, 2000, 1000), 2, torch.float32),
              ((2, 64, 1000, 1000), 8, torch.float32), ((1, 32, 2048, 2048), 1, torch.float32)],
}
VARIANTS = ["auto", "split", "resident", "streamed", "streamed:cluster=16", "streamed:reg_vecs=0",
            "streamed:reg_vecs=8", "streamed:smem_kb=160", "streamed:smem_kb=96", "streamed:cluster=8",
            "streamed:smem_kb=128", "streamed:smem_kb=64", "streamed:smem_kb=225", "streamed:cluster=8,smem_kb=225"]


def timings(ops, row_sets: list[str], variants: list[str], with_compile: bool = False) -> None:
    for key in row_sets:
        for shape, G, dtype in TIMING_ROWS[key]:
            x = torch.rand(shape, device="cuda").to(dtype)
            acc = torch.float32
            w = torch.rand(shape[1], device="cuda", dtype=acc) + 0.5
            b = torch.rand(shape[1], device="cuda", dtype=acc) - 0.5
            out = torch.empty_like(x)
            flush = 2 * x.numel() * x.element_size() < 200e6
            copy_first = time_fn(lambda: out.copy_(x), 20, flush)
            times = {}  # variant -> ms (None: the plan cannot take this input)
            for plan in variants:
                print(f"  timing {plan}", flush=True)
                try:
                    ops.group_norm_forward_with_plan(x, G, w, b, 1e-5, plan)
                except RuntimeError:
                    times[plan] = None
                    continue
                times[plan] = time_fn(lambda: ops.group_norm_forward_with_plan(x, G, w, b, 1e-5, plan), 20, flush)
            try:  # the streamed plan without weight and bias: what the affine part of the write phase costs
                times["streamed(no affine)"] = time_fn(
                    lambda: ops.group_norm_forward_with_plan(x, G, None, None, 1e-5, "streamed"), 20, flush)
            except RuntimeError:
                pass
            # The copy is timed before and after the variants and the faster one is the reference: a copy
            # timed right after the inputs were generated ran up to 15% slow on the H100.
            copy = min(copy_first, time_fn(lambda: out.copy_(x), 20, flush))
            line = [f"{str(tuple(shape)):20s} G={G:<3d} {dtype_name(dtype):9s} copy={copy:.4f} (first {copy_first:.4f})"]
            line += [f"{plan}=n/a" if t is None else f"{plan}={t:.4f} ({t / copy:.2f}x copy)" for plan, t in times.items()]
            if dtype == torch.float32 or dtype == torch.bfloat16:
                t_eager = time_fn(lambda: F.group_norm(x, G, w.to(dtype), b.to(dtype), 1e-5), 20, flush)
                line.append(f"eager={t_eager:.4f}")
            if with_compile:
                compiled = torch.compile(lambda t, ww, bb: F.group_norm(t, G, ww, bb, 1e-5))
                wc, bc = w.to(dtype), b.to(dtype)
                line.append(f"compile={time_fn(lambda: compiled(x, wc, bc), 20, flush):.4f}")
                torch._dynamo.reset()
            log(" | ".join(line))
            log("    auto plan: " + ops.group_norm_forward_plan(x, G, True))
            del x, out
            torch.cuda.empty_cache()


# Stamps of group_norm_streamed_trace, in kernel order (kTracePoints in csrc/group_norm_streamed_cuda.py).
TRACE_POINTS = ["start", "chunks summed", "registers summed", "tail summed", "CTA sums reduced",
                "slice sums exchanged", "tail written", "registers written", "chunks written"]


def trace_report(ops, plan: str, shape=(112, 64, 512, 512), G=8, dtype=torch.float32) -> None:
    """Where one streamed round's time goes: thread 0's phase durations (mean over CTAs and rounds, first round
    left out), how far apart the 16 CTAs of a cluster reach the exchange, and how far apart clusters run."""
    x = torch.rand(shape, device="cuda").to(dtype)
    ops.group_norm_streamed_trace(x, G, plan)  # warm-up
    trace = ops.group_norm_streamed_trace(x, G, plan).cpu().double()  # (SMs, rounds, points), ns
    ctas = int((trace[:, 0, 0] > 0).sum())
    t = trace[:ctas]
    rounds = int((t[0, :, 0] > 0).sum())
    t = t[:, 1:rounds]  # the first round fills the pipeline
    t0 = float(t[t > 0].min())
    total_us = (float(trace[:ctas, :rounds].max()) - float(trace[:ctas, 0, 0].min())) / 1e3
    log(f"trace {plan} {tuple(shape)} {dtype_name(dtype)}: {ctas} CTAs, {rounds} rounds traced, "
        f"first stamp to last {total_us:.0f} us")
    valid = (t > 0).all(dim=-1)
    if int(valid.sum()) == 0:
        log("  no complete rounds traced")
        return
    order = sorted(range(1, len(TRACE_POINTS)), key=lambda k: float(t[..., k][valid].mean()))
    prev = 0
    for k in order:
        d = (t[..., k] - t[..., prev])[valid] / 1e3
        log(f"  {TRACE_POINTS[prev]:>22s} -> {TRACE_POINTS[k]:<22s} mean {float(d.mean()):7.2f} us  "
            f"p10 {float(d.quantile(0.1)):7.2f}  p90 {float(d.quantile(0.9)):7.2f}")
        prev = k
    nxt = t[:, 1:, 0] - t[:, :-1, 0]
    nxt = nxt[(t[:, 1:, 0] > 0) & (t[:, :-1, 0] > 0)] / 1e3
    log(f"  round (start to next start): mean {float(nxt.mean()):.2f} us, p10 {float(nxt.quantile(0.1)):.2f}, "
        f"p90 {float(nxt.quantile(0.9)):.2f}")
    groups = [int(item.split("=")[1]) for item in plan.partition(":")[2].split(",") if item.startswith("groups=")]
    csize = ctas // groups[0] if groups else 16 if ctas % 16 == 0 and "cluster=8" not in plan else 8
    arrive = t[..., 4].reshape(ctas // csize, csize, -1)  # CTA sums reduced, per cluster
    ok = (arrive > 0).all(dim=1)
    skew = (arrive.max(dim=1).values - arrive.min(dim=1).values)[ok] / 1e3
    log(f"  spread of the {csize} CTAs of a cluster (or group) reaching the exchange: mean {float(skew.mean()):.2f} us, "
        f"p90 {float(skew.quantile(0.9)):.2f}")
    starts = t[::csize, :, 0]
    ok = (starts > 0).all(dim=0)
    spread = (starts.max(dim=0).values - starts.min(dim=0).values)[ok] / 1e3
    log(f"  spread of round starts across clusters (same round index): mean {float(spread.mean()):.2f} us "
        f"(0: lockstep; about one round: out of phase); t0 {t0:.0f}")
    del x
    torch.cuda.empty_cache()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--small", action="store_true")
    ap.add_argument("--no-timing", action="store_true")
    ap.add_argument("--no-check", action="store_true")
    ap.add_argument("--profile", metavar="PLAN",
                    help="run PLAN twice on (16, 64, 512, 512) G=8 float32 and exit (for ncu: the second call "
                    "is the one to read, e.g. ncu --launch-skip 1 ...)")
    ap.add_argument("--trace", metavar="PLANS", default="",
                    help="semicolon-separated streamed plans: phase trace of each at the #35 shape (fp32 and bf16)")
    ap.add_argument("--variants", default=";".join(VARIANTS), help="semicolon-separated plans to time")
    ap.add_argument("--rows", default="35,mid", help="comma-separated timing row sets: " + ",".join(TIMING_ROWS))
    ap.add_argument("--compile", action="store_true", help="time torch.compile of F.group_norm beside the plans")
    args = ap.parse_args()
    t0 = time.time()
    import groupnorm_inline as gn
    ops = gn.extension.load()
    if args.profile:
        x = torch.rand(16, 64, 512, 512, device="cuda")
        for _ in range(2):
            ops.group_norm_forward_with_plan(x, 8, None, None, 1e-5, args.profile)
        torch.cuda.synchronize()
        return 0
    log(f"device {torch.cuda.get_device_name()} torch {torch.__version__} import+build {time.time() - t0:.1f} s")
    ok = True if args.no_check else correctness(ops, args.small)
    for plan in [p for p in args.trace.split(";") if p]:
        for dtype in (torch.float32, torch.bfloat16):
            trace_report(ops, plan, dtype=dtype)
    if not (args.small or args.no_timing):
        timings(ops, [r for r in args.rows.split(",") if r], [v for v in args.variants.split(";") if v], args.compile)
    write_log(args.out, "plan_check.txt")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

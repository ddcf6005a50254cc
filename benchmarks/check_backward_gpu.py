"""GPU check of the GroupNorm backward in one process: correctness over many shapes, then side-by-side timings.

    python benchmarks/check_backward_gpu.py [--out DIR] [--quick] [--no-compile]

1. Correctness: random inputs and output gradients (never zeros), the caching allocator's free blocks poisoned
   with NaN before each backward (an element the kernels never write stays NaN), gradients of input, weight and
   bias against float64 autograd of F.group_norm computed sample by sample (so the (56, 64, 512, 512) case fits).
   Errors are reported relative to the size of what each gradient sums (as tests/test_backward.py does):
   rstd * |w| * |dy| for grad_input, sum |dy| (|xhat| + rstd |x|) and sum |dy| per channel for grad_weight /
   grad_bias. Shapes cover both CUDA paths (lane segments for HW < 1024, CTAs per row chunk above), scalar and
   16-byte accesses, split rows, unaligned pointers, channels_last gradients, every dtype, |mean| >> std, more
   than 2^31 elements (64-bit offsets), a 64-bit-index segment-path case, and the resident (cluster) path:
   channel boundaries inside a warp's step, one group, many channels per slice.
2. Timings (CUDA events, median of 20, L2 flushed when the working set is under 200 MB): backward alone of
   ours (autograd, and the operator called directly), eager PyTorch, torch.compile, and the traffic floor: one
   pass that reads x and dy and writes dx (torch.add(x, dy, out=dx)). Our peak scratch memory is reported too.
A log goes to DIR/check_backward_gpu.txt and the timings to DIR/check_backward_gpu.csv.
"""

from __future__ import annotations

import argparse
import csv
import os
import sys
import time
from contextlib import nullcontext

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from forward_check import log, time_fn, write_log  # noqa: E402

TOL = {torch.float64: 1e-9, torch.float32: 2e-5, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}


def poison_allocator(nbytes: int, copies: int = 3) -> None:
    """Leave `copies` NaN-filled (0xFF) free blocks of `nbytes` in the caching allocator for the next allocations."""
    blocks = [torch.full((nbytes,), 0xFF, dtype=torch.uint8, device="cuda") for _ in range(copies)]
    del blocks
    torch.cuda.synchronize()


def compare(x, G, w, b, dy, grads, eps=1e-5):
    """Our gradients (dx[, dw, db]) against float64 autograd of F.group_norm, a few samples at a time (bounded
    memory): returns per gradient (max of |ours - ref| / (scale + |ref|), NaN count)."""
    n, c = x.shape[0], x.shape[1]
    dw = torch.zeros(c, dtype=torch.float64, device=x.device)
    db = torch.zeros(c, dtype=torch.float64, device=x.device)
    scale_w = torch.zeros(c, dtype=torch.float64, device=x.device)
    scale_b = torch.zeros(c, dtype=torch.float64, device=x.device)
    w64 = None if w is None else w.detach().double()
    b64 = None if b is None else b.detach().double()
    dx_err, dx_nan = 0.0, 0
    step = max(1, (1 << 25) // max(1, x[0].numel()))
    for n0 in range(0, n, step):
        xs = x[n0:n0 + step].detach().double().requires_grad_()
        gs = dy[n0:n0 + step].double()
        wl = None if w64 is None else w64.clone().requires_grad_()
        bl = None if b64 is None else b64.clone().requires_grad_()
        out = F.group_norm(xs, G, wl, bl, eps)
        leaves = [t for t in (xs, wl, bl) if t is not None]
        ref = torch.autograd.grad(out, leaves, gs)
        if wl is not None:
            dw += ref[1]
        if bl is not None:
            db += ref[-1]
        with torch.no_grad():
            flat = xs.reshape(xs.shape[0], G, -1)
            var, mean = torch.var_mean(flat, dim=2, unbiased=False, keepdim=True)
            rstd = (var + eps).rsqrt()
            xhat = ((flat - mean) * rstd).reshape(xs.shape[0], c, -1)
            rstd_c = rstd.repeat_interleave(c // G, dim=1)
            wabs = torch.ones(c, dtype=torch.float64, device=x.device) if w64 is None else w64.abs()
            g = gs.reshape(xs.shape[0], c, -1).abs()
            scale_x = (rstd_c * wabs.view(1, c, 1) * g).max().item()
            scale_w += (g * (xhat.abs() + rstd_c * xs.reshape(xs.shape[0], c, -1).abs())).sum(dim=(0, 2))
            scale_b += g.sum(dim=(0, 2))
            ours = grads[0][n0:n0 + step].double()
            dx_nan += int(torch.isnan(ours).sum())
            dx_err = max(dx_err, ((ours - ref[0]).abs() / (scale_x + ref[0].abs())).max().item())
        del xs, gs, out, ref
    results = [(dx_err, dx_nan)]
    for got, ref, scale in zip(grads[1:], (dw, db), (scale_w.max().item(), scale_b.max().item())):
        results.append((((got.double() - ref).abs() / (scale + ref.abs())).max().item(), int(torch.isnan(got).sum())))
    return results


def make_case(shape, dtype, affine, layout, mean_offset, param_dtype=None):
    x = (torch.randn(shape, device="cuda") * 2 + 0.5 + mean_offset).to(dtype)
    dy = torch.randn(shape, device="cuda").to(dtype)
    if layout == "channels_last grad":
        dy = dy.contiguous(memory_format=torch.channels_last)
    elif layout == "offset1":  # data pointers not 16-byte aligned: the kernels take scalar accesses
        def shifted(t):
            flat = torch.empty(t.numel() + 1, device="cuda", dtype=dtype)
            flat[1:].copy_(t.reshape(-1))
            return flat[1:].view(shape)
        x, dy = shifted(x), shifted(dy)
    C = shape[1]
    pdt = param_dtype or dtype
    w = (torch.rand(C, device="cuda") + 0.5).to(pdt).requires_grad_() if affine else None
    b = (torch.rand(C, device="cuda") - 0.5).to(pdt).requires_grad_() if affine else None
    return x, dy, w, b


def check(gn, shape, G, dtype, affine=True, layout="contiguous", mean_offset=0.0, param_dtype=None):
    x, dy, w, b = make_case(shape, dtype, affine, layout, mean_offset, param_dtype)
    xl = x.detach().requires_grad_()
    y = gn.group_norm(xl, G, w, b, 1e-5)
    leaves = [t for t in (xl, w, b) if t is not None]
    poison_allocator(x.numel() * x.element_size())
    grads = torch.autograd.grad(y, leaves, dy)
    torch.cuda.synchronize()
    del y
    tol = TOL[dtype]
    ok, parts = True, []
    for name, got, leaf, (err, nan) in zip(("dx", "dw", "db"), grads, leaves, compare(x, G, w, b, dy, grads)):
        good = nan == 0 and err <= tol and got.dtype == leaf.dtype
        ok &= good
        notes = ("" if nan == 0 else f" NaN={nan}") + ("" if got.dtype == leaf.dtype else f" dtype={got.dtype}")
        parts.append(f"{name}: err={err:.2e}{notes}")
    log(f"{'ok  ' if ok else 'FAIL'} {str(tuple(shape)):26s} G={G:<4d} {str(dtype).split('.')[-1]:9s} "
        f"affine={int(affine)} {layout:18s} off={mean_offset:<6g} tol={tol:.0e} | " + "  ".join(parts))
    del grads
    torch.cuda.empty_cache()
    return ok


def bench(gn, shape, G, dtype, with_compile, rows_out):
    from groupnorm_inline.csrc.group_norm_cpu import OP_NAMESPACE

    x = torch.rand(shape, device="cuda").to(dtype).requires_grad_()
    C = shape[1]
    w = (torch.rand(C, device="cuda") + 0.5).to(dtype).requires_grad_()
    b = (torch.rand(C, device="cuda") - 0.5).to(dtype).requires_grad_()
    dy = torch.randn(shape, device="cuda").to(dtype)
    nbytes = x.numel() * x.element_size()
    flush = 3 * nbytes < 200e6
    dx_buf = torch.empty_like(x)
    t_floor = time_fn(lambda: torch.add(x.detach(), dy, out=dx_buf), flush=flush)
    del dx_buf

    y = gn.group_norm(x, G, w, b, 1e-5)
    t_ours = time_fn(lambda: torch.autograd.grad(y, (x, w, b), dy, retain_graph=True), flush=flush)
    _, mean, rstd = gn.group_norm_with_stats(x.detach(), G, w.detach(), b.detach(), 1e-5)
    op = getattr(torch.ops, OP_NAMESPACE).group_norm_backward
    xd, wd = x.detach(), w.detach()
    t_op = time_fn(lambda: op(dy, xd, mean, rstd, wd, G, [True, True, True]), flush=flush)
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    out = op(dy, xd, mean, rstd, wd, G, [True, True, True])
    torch.cuda.synchronize()
    scratch = torch.cuda.max_memory_allocated() - base - sum(t.numel() * t.element_size() for t in out)
    del out, y

    y_e = F.group_norm(x, G, w, b, 1e-5)
    t_eager = time_fn(lambda: torch.autograd.grad(y_e, (x, w, b), dy, retain_graph=True), flush=flush)
    del y_e
    t_comp = float("nan")
    if with_compile:
        torch._dynamo.reset()
        # The compiled backward frees ("donates") its saved buffers by default, which forbids retain_graph=True.
        import torch._functorch.config as config

        no_donation = config.patch(donated_buffer=False) if hasattr(config, "donated_buffer") else nullcontext()
        with no_donation:
            comp = torch.compile(lambda t, ww, bb: F.group_norm(t, G, ww, bb, 1e-5), dynamic=False)
            y_c = comp(x, w, b)
            t_comp = time_fn(lambda: torch.autograd.grad(y_c, (x, w, b), dy, retain_graph=True), flush=flush)
        del y_c
    log(f"{str(tuple(shape)):24s} G={G:<4d} {str(dtype).split('.')[-1]:9s} floor={t_floor:8.4f} ours={t_ours:8.4f} "
        f"op={t_op:8.4f} eager={t_eager:8.4f} compile={t_comp:8.4f} | ours/floor={t_ours / t_floor:5.2f} "
        f"eager/ours={t_eager / t_ours:5.2f} compile/ours={t_comp / t_ours:5.2f} scratch={scratch / 2**20:.1f} MiB")
    rows_out.append({"shape": "x".join(map(str, shape)), "groups": G, "dtype": str(dtype).split(".")[-1],
                     "floor_ms": t_floor, "ours_ms": t_ours, "op_ms": t_op, "eager_ms": t_eager,
                     "compile_ms": t_comp, "scratch_mib": scratch / 2**20})
    del x, w, b, dy, mean, rstd
    torch.cuda.empty_cache()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--quick", action="store_true", help="correctness on a few shapes, the main timing row only")
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--timing-only", action="store_true", help="skip the correctness sweep")
    args = ap.parse_args()
    t0 = time.time()
    import groupnorm_inline as gn

    log(f"device {torch.cuda.get_device_name()} torch {torch.__version__} import+build {time.time() - t0:.1f} s "
        f"{time.strftime('%Y-%m-%d %H:%M')}")
    f32, f16, bf16, f64 = torch.float32, torch.float16, torch.bfloat16, torch.float64
    cases = [  # (shape, G, dtype, options)
        ((2, 6, 5, 7), 3, f32, {}), ((1, 3, 11), 1, f32, {}), ((5, 48), 48, f32, {}), ((3, 48, 9, 7), 1, f32, {}),
        ((4, 15, 3, 3), 5, f32, {}), ((2, 9, 1, 1), 3, f32, {}), ((1024, 8192), 256, f32, {}),
        ((2, 8, 33, 35), 4, f32, {}), ((2, 64, 40, 40), 8, f32, {}), ((1, 4, 3, 70001), 2, f32, {}),
        ((4, 128, 16, 32, 32), 32, f32, {}), ((128, 64, 126, 126), 16, f32, {}), ((16, 64, 256, 256), 8, f32, {}),
        ((1, 2, 1 << 22), 1, f32, {}), ((8, 32, 31, 33), 32, f32, {}), ((1, 64, 30, 30), 1, f32, {}),
        # resident (cluster) path: channel boundaries inside a warp's step (HW = 1600), many channels per
        # slice (cpg = 40, 64), one group, clusters of 1..16 CTAs
        ((3, 12, 40, 40), 4, f32, {}), ((2, 1280, 32, 32), 32, f32, {}), ((2, 320, 64, 64), 32, f32, {}),
        ((1, 64, 128, 128), 1, f32, {}), ((2, 128, 48, 48), 2, f32, {}),
    ]
    if args.quick:
        cases = cases[:3] + cases[6:10] + cases[-1:]
    ok = True
    if args.timing_only:
        cases = []
    for shape, G, dtype, opts in cases:
        for dt in ((dtype, f16, bf16, f64) if not args.quick else (dtype, bf16)):
            ok &= check(gn, shape, G, dt, **opts)
    for layout in ("channels_last grad", "offset1"):
        ok &= check(gn, (3, 12, 17, 19), 4, f32, layout=layout)
        ok &= check(gn, (2, 64, 40, 40), 8, bf16, layout=layout)
    ok &= check(gn, (2, 16, 64, 64), 4, f32, affine=False)
    ok &= check(gn, (2, 16, 5, 5), 4, f32, affine=False)
    ok &= check(gn, (2, 32, 64, 64), 8, f16, param_dtype=f32)
    ok &= check(gn, (4, 32, 9, 9), 8, bf16, param_dtype=f32)
    ok &= check(gn, (2, 8, 300, 300), 2, f32, mean_offset=1e4)
    ok &= check(gn, (4, 8, 20, 20), 2, f32, mean_offset=1e4)
    if not args.quick and not args.timing_only:
        ok &= check(gn, (1100000, 1024), 8, f32)          # 1.1e9 elements, HW = 1: 64-bit segment path
    if not args.timing_only:
        ok &= check(gn, (56, 64, 512, 512), 8, f32)        # the (112, 64, 512, 512)-class shape, 3.8e9 elements
    log("correctness: " + ("ALL PASS" if ok else "FAILURES"))

    rows = [((56, 64, 512, 512), 8, f32), ((56, 64, 512, 512), 8, bf16), ((16, 64, 256, 256), 8, f32),
            ((32, 256, 64, 64), 32, f32), ((8, 320, 64, 64), 32, f32), ((8, 1280, 16, 16), 32, f32),
            ((1024, 8192), 256, f32), ((128, 64, 126, 126), 16, f32), ((4, 128, 16, 64, 64), 32, f32),
            ((16, 64, 256, 256), 8, bf16), ((2, 320, 128, 128), 32, f16), ((2, 1280, 32, 32), 32, bf16),
            ((8, 320, 64, 64), 32, f16), ((1, 128, 256, 256), 32, f16)]
    if args.quick:
        rows = rows[:1]
    results = []
    for shape, G, dtype in rows:
        bench(gn, shape, G, dtype, not args.no_compile, results)
    write_log(args.out, "check_backward_gpu.txt")
    with open(os.path.join(args.out, "check_backward_gpu.csv"), "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=["device", "torch", "date"] + list(results[0]))
        writer.writeheader()
        for r in results:
            writer.writerow({"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                             "date": time.strftime("%Y-%m-%d"), **r})
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

"""GPU check of the forward kernels in one process: build once, then correctness and timings over many shapes.

    python benchmarks/forward_check.py [--out DIR] [--quick] [--small]

1. Correctness: random inputs (never zeros), output memory poisoned with NaN through the caching
   allocator before each call, result against a float64 reference; max abs error and any unwritten
   (NaN) element reported per shape/dtype.
2. Timings, side by side in this process: ours, eager F.group_norm, torch.compile, and a plain copy
   of the same tensor (median of 20 CUDA-event timed calls, L2 flushed between calls when the
   working set is under 200 MB). Ratios to the copy are the figures of merit.
`--small` runs one small case only (for compute-sanitizer). A log is written to DIR/forward_check.txt.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

LOG: list[str] = []


def log(msg: str = "") -> None:
    print(msg, flush=True)
    LOG.append(msg)


def write_log(out_dir: str, name: str) -> None:
    """Everything `log` printed, to out_dir/name."""
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, name), "w") as f:
        f.write("\n".join(LOG) + "\n")


def poison_allocator(nbytes: int) -> None:
    """Leave a NaN-filled block of `nbytes` in the caching allocator so the next allocation reuses it."""
    t = torch.full((nbytes // 4 + 1024,), float("nan"), device="cuda")
    del t


def reference(x, G, w, b, eps):
    """float64 GroupNorm, slice by slice along N to bound memory."""
    out = torch.empty(x.shape, dtype=torch.float64, device=x.device)
    step = max(1, (1 << 28) // max(1, x[0].numel()))
    for n0 in range(0, x.shape[0], step):
        xs = x[n0:n0 + step].double()
        out[n0:n0 + step] = F.group_norm(xs, G, None if w is None else w.double(), None if b is None else b.double(), eps)
    return out


def check(gn, shape, G, dtype, affine=True, layout="contiguous", mean_offset=0.0):
    x = (torch.rand(shape, device="cuda") * 2 - 1 + mean_offset).to(dtype)
    if layout == "channels_last":
        x = x.to(memory_format=torch.channels_last if x.dim() == 4 else torch.channels_last_3d)
    elif layout == "transposed":
        x = x.transpose(0, 1).contiguous().transpose(0, 1)
    elif layout == "offset1":  # data pointer not 16-byte aligned
        flat = torch.empty(x.numel() + 1, device="cuda", dtype=dtype)
        flat[1:].copy_(x.reshape(-1))
        x = flat[1:].view(shape)
    C = shape[1]
    wdt = dtype
    w = (torch.rand(C, device="cuda", dtype=wdt) + 0.5) if affine else None
    b = (torch.rand(C, device="cuda", dtype=wdt) - 0.5) if affine else None
    x_before = x.clone()
    poison_allocator(x.numel() * x.element_size() * 2)
    y = gn.group_norm(x, G, w, b, 1e-5)
    torch.cuda.synchronize()
    unchanged = torch.equal(x, x_before)
    ref = reference(x, G, w, b, 1e-5)
    nan = int(torch.isnan(y).sum())
    err = (y.double() - ref).abs().max().item() if y.numel() else 0.0
    tol = {torch.float32: 1e-4, torch.float64: 1e-9, torch.float16: 1e-2, torch.bfloat16: 6e-2}[dtype]
    scale = max(1.0, ref.abs().max().item() if ref.numel() else 1.0)
    ok = nan == 0 and err <= tol * scale and unchanged
    log(f"{'ok  ' if ok else 'FAIL'} {str(tuple(shape)):26s} G={G:<5d} {str(dtype).split('.')[-1]:9s} "
        f"affine={int(affine)} {layout:13s} off={mean_offset:<8g} max_err={err:.3e} nan={nan} "
        f"input_unchanged={unchanged}")
    return ok


def time_fn(fn, iters=20, flush=False):
    flush_buf = torch.empty(256 * 1024 * 1024 // 4, device="cuda") if flush else None
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        if flush_buf is not None:
            flush_buf.fill_(1.0)
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        torch.cuda.synchronize()
        times.append(s.elapsed_time(e))
    return statistics.median(times)


def bench(gn, shape, G, dtype, with_compile=True, iters=20):
    x = torch.rand(shape, device="cuda", dtype=torch.float32).to(dtype)
    C = shape[1]
    w = torch.rand(C, device="cuda", dtype=dtype) + 0.5
    b = torch.rand(C, device="cuda", dtype=dtype) - 0.5
    y = torch.empty_like(x)
    flush = 2 * x.numel() * x.element_size() < 200e6
    t_copy = time_fn(lambda: y.copy_(x), iters, flush)
    t_ours = time_fn(lambda: gn.group_norm(x, G, w, b, 1e-5), iters, flush)
    t_eager = time_fn(lambda: F.group_norm(x, G, w, b, 1e-5), iters, flush)
    t_comp = float("nan")
    if with_compile:
        torch._dynamo.reset()
        comp = torch.compile(lambda t: F.group_norm(t, G, w, b, 1e-5), dynamic=False)
        t_comp = time_fn(lambda: comp(x), iters, flush)
    log(f"{str(tuple(shape)):24s} G={G:<4d} {str(dtype).split('.')[-1]:9s} copy={t_copy:8.4f} ours={t_ours:8.4f} "
        f"eager={t_eager:8.4f} compile={t_comp:8.4f} | ours/copy={t_ours / t_copy:5.2f} "
        f"eager/ours={t_eager / t_ours:5.2f} compile/ours={t_comp / t_ours:5.2f}")
    return t_ours / t_copy, t_comp / t_ours


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--small", action="store_true")
    ap.add_argument("--no-compile", action="store_true")
    args = ap.parse_args()
    t0 = time.time()
    import groupnorm_inline as gn
    log(f"device {torch.cuda.get_device_name()} torch {torch.__version__} import+build {time.time() - t0:.1f} s")
    if args.small:
        ok = all([check(gn, (2, 6, 5, 7), 3, torch.float32), check(gn, (3, 8, 64), 4, torch.float16),
                  check(gn, (2, 64, 40, 40), 8, torch.float32), check(gn, (2, 4, 33), 2, torch.float32, layout="offset1"),
                  check(gn, (1, 8, 70000), 2, torch.bfloat16, affine=False)])
        log("small: " + ("PASS" if ok else "FAIL"))
        return 0 if ok else 1
    cases = [((2, 6, 5, 7), 3), ((1, 3, 11), 1), ((5, 48, 13), 1), ((3, 48, 9, 7), 48), ((4, 15, 3, 3), 5),
             ((2, 64, 100, 100), 8), ((1, 32, 513, 257), 32), ((4, 128, 6, 10, 10), 32), ((64, 8192), 256),
             ((3, 8192), 256), ((16, 64, 256, 256), 8), ((2, 64, 1000, 1000), 8), ((1, 32, 1024, 1024), 1),
             ((128, 64, 126, 126), 16), ((7, 6, 1), 3)]
    ok = True
    for shape, G in cases:
        for dtype in (torch.float32, torch.float16, torch.bfloat16, torch.float64):
            ok &= check(gn, shape, G, dtype)
    for layout in ("channels_last", "transposed", "offset1"):
        ok &= check(gn, (3, 12, 17, 19), 4, torch.float32, layout=layout)
        ok &= check(gn, (2, 64, 40, 40), 8, torch.bfloat16, layout=layout)
    ok &= check(gn, (2, 16, 64, 64), 4, torch.float32, affine=False)
    ok &= check(gn, (2, 8, 300, 300), 2, torch.float32, mean_offset=1e4)
    ok &= check(gn, (1, 4, 3000, 3000), 1, torch.float32, mean_offset=1e4)
    ok &= check(gn, (112, 64, 512, 512), 8, torch.float32)
    log("correctness: " + ("ALL PASS" if ok else "FAILURES"))
    rows = [((112, 64, 512, 512), 8, torch.float32), ((112, 64, 512, 512), 8, torch.bfloat16),
            ((112, 64, 512, 512), 8, torch.float16), ((16, 64, 256, 256), 8, torch.float32),
            ((32, 256, 64, 64), 32, torch.float32), ((8, 320, 64, 64), 32, torch.float32),
            ((8, 1280, 16, 16), 32, torch.float32), ((4, 128, 16, 64, 64), 32, torch.float32),
            ((1024, 8192), 256, torch.float32), ((128, 64, 126, 126), 16, torch.float32),
            ((2, 64, 1000, 1000), 8, torch.float32), ((1, 32, 2048, 2048), 1, torch.float32),
            ((16, 64, 256, 256), 8, torch.bfloat16), ((32, 256, 64, 64), 32, torch.bfloat16)]
    if args.quick:
        rows = rows[:1] + rows[3:5]
    ratios = []
    for shape, G, dtype in rows:
        ratios.append(bench(gn, shape, G, dtype, with_compile=not args.no_compile))
    if not args.no_compile:
        gm = math.exp(sum(math.log(r[1]) for r in ratios) / len(ratios))
        log(f"geomean speedup over compile: {gm:.2f}")
    write_log(args.out, "forward_check.txt")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

"""CPU GroupNorm: ours against PyTorch's CPU kernel, forward and forward + backward, as a markdown table.

Rows: (4,64,128,128), (2,320,64,64), (1,128,256,256), (8,32,32,32), (2,512,16,16) and the 5-D (1,64,8,64,64), each
in float32 / bfloat16 / float16 / float64, NCHW and channels-last (channels_last_3d for 5-D), at 2 threads and at
all threads. Forward: `groupnorm_inline.group_norm` against `F.group_norm` (affine, 32 groups; 8 for C = 32).
Forward + backward: autograd (`torch.autograd.grad` of input, weight and bias) through each. Every timing is the
median of --reps calls after 3 warm-up calls; ours and PyTorch alternate call by call in one process, and the
minor page faults of each call are counted (getrusage) into the last column. Before timing, each row's outputs are
checked against float64 (the check's worst error goes into the check column).

    python benchmarks/cpu_kernels_check.py                       # table to stdout
    python benchmarks/cpu_kernels_check.py --out results/cpu.md  # and to a file
    python benchmarks/cpu_kernels_check.py --quick               # two rows, for a smoke test

Run it alone on the machine (no builds or other benchmarks beside it): the rows are 0.05-30 ms, and a second
process on a 2-core machine doubles them.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

try:
    import resource  # Unix: getrusage's fault counts
except ImportError:  # pragma: no cover - Windows
    resource = None

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout this script sits in

import groupnorm_inline  # noqa: E402

ROWS = [((4, 64, 128, 128), 32), ((2, 320, 64, 64), 32), ((1, 128, 256, 256), 32), ((8, 32, 32, 32), 8),
        ((2, 512, 16, 16), 32), ((1, 64, 8, 64, 64), 32)]
DTYPES = [torch.float32, torch.bfloat16, torch.float16, torch.float64]
# Output error allowed against float64, relative to 1 + |ref| (plain GroupNorm, O(1) outputs; the gradient's
# against its largest element).
FWD_TOL = {torch.float32: 1e-4, torch.bfloat16: 3e-2, torch.float16: 4e-3, torch.float64: 1e-9}
BWD_TOL = {torch.float32: 1e-3, torch.bfloat16: 1e-1, torch.float16: 2e-2, torch.float64: 1e-8}


def minor_faults() -> int:
    """Minor page faults of this process so far, all threads (0 where the platform does not count them)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt if resource is not None else 0


def median_ms_pair(fn_a, fn_b, reps: int) -> tuple[float, float, float, float]:
    """Medians of reps calls of fn_a and of fn_b, called alternately (a, b, a, b, ...) after 3 warm-up calls
    each: a burst of load from elsewhere on the machine then slows both, not whichever ran during it (on a shared
    2-core machine, two back-to-back blocks of calls differed by up to 3x on the same kernel). Returns (ms of a,
    ms of b, minor page faults per call of a, of b). The faults are there because they can set a row's time: an
    output of several MB lands in heap memory that glibc may trim and regrow between calls, and every 4 KB page
    of it then faults again on its first write (the first row of a fresh process measured 4096 per call for a
    16 MB output, and none once past that phase), whatever the kernel."""
    for _ in range(3):
        fn_a()
        fn_b()
    times_a, times_b, faults_a, faults_b = [], [], [], []
    for _ in range(reps):
        for fn, times, faults in ((fn_a, times_a, faults_a), (fn_b, times_b, faults_b)):
            first_fault = minor_faults()
            start = time.perf_counter()
            fn()
            times.append(time.perf_counter() - start)
            faults.append(minor_faults() - first_fault)
    return (statistics.median(times_a) * 1e3, statistics.median(times_b) * 1e3, statistics.median(faults_a),
            statistics.median(faults_b))


def make_case(shape, dtype, channels_last, requires_grad):
    gen = torch.Generator().manual_seed(0)
    layout = (torch.channels_last if len(shape) == 4 else torch.channels_last_3d) if channels_last \
        else torch.contiguous_format
    x = torch.randn(shape, generator=gen).to(dtype).contiguous(memory_format=layout)
    w = (1 + 0.5 * torch.randn(shape[1], generator=gen)).to(dtype)
    b = torch.randn(shape[1], generator=gen).to(dtype)
    grad = torch.randn(shape, generator=gen).to(dtype).contiguous(memory_format=layout)  # the output's layout
    for t in (x, w, b):
        t.requires_grad_(requires_grad)
    return x, w, b, grad


def check_row(x, groups, w, b, grad) -> float:
    """Worst error of our forward and gradients against float64 (relative to the tolerance: <= 1 passes)."""
    x64, w64, b64 = (t.detach().double().requires_grad_() for t in (x, w, b))
    ref = F.group_norm(x64, groups, w64, b64)
    ref_grads = torch.autograd.grad(ref, (x64, w64, b64), grad.double())
    out = groupnorm_inline.group_norm(x, groups, w, b)
    grads = torch.autograd.grad(out, (x, w, b), grad)
    worst = ((out.double() - ref).abs() / (1 + ref.abs())).max().item() / FWD_TOL[x.dtype]
    for got, want in zip(grads, ref_grads):
        scale = 1 + want.abs().max().item()
        worst = max(worst, ((got.double() - want).abs().max().item() / scale) / BWD_TOL[x.dtype])
    if out.stride() != F.group_norm(x.detach(), groups, w.detach(), b.detach()).stride():
        raise AssertionError(f"output layout {out.stride()} differs from PyTorch's")
    return worst


def run(threads: int, rows, reps: int, log) -> list[str]:
    torch.set_num_threads(threads)
    lines = []
    for shape, groups in rows:
        for dtype in DTYPES:
            for channels_last in (False, True):
                x, w, b, grad = make_case(shape, dtype, channels_last, requires_grad=True)
                worst = check_row(x, groups, w, b, grad)
                cells, fault_cells = [], []
                for backward in (False, True):
                    if backward:
                        def job(fn):
                            return lambda: torch.autograd.grad(fn(x, groups, w, b), (x, w, b), grad)
                    else:
                        xd, wd, bd = (t.detach() for t in (x, w, b))

                        def job(fn):
                            return lambda: fn(xd, groups, wd, bd)
                    ours, theirs, ours_faults, their_faults = median_ms_pair(
                        job(groupnorm_inline.group_norm), job(F.group_norm), reps)
                    cells += [f"{ours:.3f}", f"{theirs:.3f}", f"**{theirs / ours:.2f}**" if theirs < ours
                              else f"{theirs / ours:.2f}"]
                    fault_cells.append(f"{ours_faults:.0f} / {their_faults:.0f}")
                layout = ("CL3d" if len(shape) == 5 else "CL") if channels_last else "NCHW"
                line = (f"| {threads} | {tuple(shape)} | {str(dtype).replace('torch.', '')} | {layout} | "
                        + " | ".join(cells) + f" | {worst:.2f} | " + "; ".join(fault_cells) + " |")
                lines.append(line)
                log(line)
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--reps", type=int, default=21)
    parser.add_argument("--threads", type=int, nargs="*", default=None,
                        help="thread counts (default: 2 and all threads)")
    parser.add_argument("--quick", action="store_true", help="two small rows only")
    parser.add_argument("--out", type=Path, default=None, help="also write the table to this file")
    parser.add_argument("--machine", default=None, help="machine description for the header")
    args = parser.parse_args()
    groupnorm_inline.extension.load()
    all_threads = os.cpu_count() or 1
    threads = args.threads or sorted({min(2, all_threads), all_threads})
    rows = [((8, 32, 32, 32), 8), ((2, 512, 16, 16), 32)] if args.quick else ROWS
    header = [
        f"# CPU GroupNorm: groupnorm_inline against PyTorch {torch.__version__}",
        "",
        f"Machine: {args.machine or platform.processor() or platform.machine()}; ATen CPU capability "
        f"{torch.backends.cpu.get_cpu_capability()}; threads {threads}. Median of {args.reps} calls in ms; ratio = "
        "PyTorch / ours (> 1: ours faster; bold where PyTorch is faster). Forward: affine, output allocated per "
        "call; fwd+bwd: autograd of input, weight and bias. check: worst error against float64 over the "
        "tolerance (<= 1 passes). faults: median minor page faults per call, ours / PyTorch, forward; forward + "
        "backward (a row whose outputs fault on every call times the page faults as much as the kernels).",
        "",
        "| threads | shape | dtype | layout | fwd ours | fwd torch | fwd ratio | fwd+bwd ours | fwd+bwd torch | "
        "fwd+bwd ratio | check | faults |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for line in header:
        print(line, flush=True)
    lines = []
    for t in threads:
        lines += run(t, rows, args.reps, lambda s: print(s, flush=True))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text("\n".join(header + lines) + "\n")


if __name__ == "__main__":
    main()

"""NCHW forward kernels of one build, row by row: for an A/B of two builds run it once with each on one machine.

    python benchmarks/nchw_forward_ab.py --label this [--rows 0,3] [--out DIR]
    PYTHONPATH=<other checkout> GROUPNORM_INLINE_CACHE_DIR=<its cache> python benchmarks/nchw_forward_ab.py --label base

Rows: every NCHW forward plan (small, resident, held, split, fused) in float32, float16 and bfloat16, slices
aligned to 16 bytes and not, with and without SiLU. For each: the plan the op picks, a float64 reference check
(output memory poisoned first; max error scaled by the reference's largest value, against the dtype's
tolerance), the kernels' GPU time of one call (torch.profiler, L2 flushed before each call) and the copy's.
Appends one table to DIR/nchw_forward_ab.md; the package is the one on PYTHONPATH if there is one.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import torch

sys.path.insert(0, os.path.dirname(__file__))
from channels_last_forward_times import kernel_us  # noqa: E402
from forward_check import poison_allocator, reference  # noqa: E402

try:  # the package on PYTHONPATH if there is one (another build to compare), else this checkout's
    import groupnorm_inline as gn
except ImportError:
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
    import groupnorm_inline as gn  # noqa: E402
from groupnorm_inline.functional import forward_plan  # noqa: E402

TOL = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}

# (shape, groups, dtype, activation): one line each; the comment names the plan the rule picked when written.
ROWS = [
    ((128, 64, 7, 7), 32, torch.float16, None),          # small, HW < 64
    ((32, 1024, 4, 2), 32, torch.bfloat16, "silu"),     # small, HW = 8 = VEC
    ((64, 32, 31, 31), 32, torch.float16, None),         # small/resident, unaligned
    ((2, 1280, 32, 32), 32, torch.bfloat16, None),       # resident
    ((2, 640, 64, 64), 32, torch.float16, "silu"),       # resident
    ((8, 320, 33, 33), 32, torch.bfloat16, None),        # resident, unaligned (channels cross vectors)
    ((8, 64, 255, 255), 32, torch.float32, None),        # resident, unaligned
    ((2, 320, 128, 128), 32, torch.float16, None),       # held
    ((2, 320, 128, 128), 32, torch.float32, None),       # held
    ((1, 256, 256, 256), 32, torch.bfloat16, None),      # held, 2 rounds
    ((1, 128, 512, 512), 32, torch.float16, "silu"),     # held
    ((2, 320, 127, 129), 32, torch.float32, None),       # held, unaligned
    ((32, 16, 94230), 8, torch.bfloat16, None),          # held, 4 rounds, unaligned
    ((32, 16, 94232), 8, torch.bfloat16, None),          # held, 4 rounds
    ((64, 4, 154113), 2, torch.bfloat16, None),          # held, unaligned
    ((2, 8, 1803, 1402), 4, torch.bfloat16, "silu"),     # unaligned, few slices
    ((4, 4, 1070, 1588), 4, torch.float16, None),        # held
    ((2, 32, 1024, 1024), 4, torch.float16, None),       # split (5 rounds of the held plan)
    ((1, 32, 2048, 2048), 1, torch.float32, None),       # split, one slice
    ((16, 64, 256, 256), 8, torch.bfloat16, None),       # streamed
    ((16, 64, 256, 256), 8, torch.float32, None),        # streamed
]


def check_and_time(shape, groups, dtype, act) -> str:
    torch.manual_seed(0)
    x = ((torch.rand(shape, device="cuda") * 2 - 1) * 3 + 0.5).to(dtype)
    C = shape[1]
    w = (torch.rand(C, device="cuda") + 0.5).to(dtype)
    b = (torch.rand(C, device="cuda") - 0.5).to(dtype)
    x_before = x.clone()
    poison_allocator(2 * x.numel() * x.element_size())
    y = gn.group_norm(x, groups, w, b, 1e-5, activation=act)
    torch.cuda.synchronize()
    ref = reference(x, groups, w, b, 1e-5)
    if act == "silu":
        ref = torch.nn.functional.silu(ref)
    scale = max(1.0, ref.abs().max().item())
    err = (y.double() - ref).abs().max().item() / scale
    ok = err <= TOL[dtype] and torch.equal(x, x_before) and not torch.isnan(y).any().item()
    del ref
    plan = forward_plan(x, groups, True).split(":")[0]
    ours = kernel_us(lambda: gn.group_norm(x, groups, w, b, 1e-5, activation=act), 20)
    out = torch.empty_like(x)
    copy = kernel_us(lambda: out.copy_(x), 20)
    return (f"| {shape} | {groups} | {str(dtype).split('.')[-1]} | {act or '-'} | {plan} | {err:.1e} "
            f"{'ok' if ok else 'FAIL'} | {ours:.1f} | {copy:.1f} | {ours / copy:.2f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--label", default="this")
    parser.add_argument("--rows", default="", help="indices into ROWS (all by default)")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    rows = [ROWS[int(i)] for i in args.rows.split(",") if i.strip()] or ROWS
    lines = [f"## {args.label}: {gn.__file__}, {torch.cuda.get_device_name()}", "",
             "| shape | G | dtype | act | plan | err | kernels us | copy us | / copy |",
             "|---|--:|---|---|---|---|--:|--:|--:|"]
    print("\n".join(lines), flush=True)
    failures = 0
    for shape, groups, dtype, act in rows:
        line = check_and_time(shape, groups, dtype, act)
        failures += "FAIL" in line
        lines.append(line)
        print(line, flush=True)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        with open(args.out / "nchw_forward_ab.md", "a") as f:
            f.write("\n".join(lines) + "\n\n")
    print(f"{args.label}: {len(rows) - failures} of {len(rows)} rows correct")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()

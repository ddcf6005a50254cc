"""NCHW inputs whose slices are not a whole number of 16-byte vectors (D = C/G * HW not a multiple of 4 float /
8 half elements): ours with 16-byte vectors and element-wise heads and tails (the default) against ours
element-wise (GROUPNORM_INLINE_EDGE_VECTORS=0, the earlier path), eager, torch.compile and a copy.

    python benchmarks/unaligned_check.py [--no-compile] [--kernels] [--backward] [--out DIR]

--backward adds the backward alone (graph kept, retain_graph) of rows whose HW is not a multiple of the vector
(the row path's rows start at every offset from a 16-byte boundary), the same settings against eager,
torch.compile and the backward's floor (dx = x + dy: two reads and a write).

Each row: the plan of each setting, median ms of CUDA-event-timed calls (L2 flushed before each, settings
interleaved call by call in an order rotated every round, so that drift and position hit all alike), and ours/copy. Correctness of both settings against
float64 is checked first (max |error| / (1 + max |ref|)). --kernels adds the GPU kernel time per call of the
two settings (torch.profiler, flush kernels left out): on a host slower than the GPU the event times of rows of
a few MB measure the host (an aligned row timed twice under the two settings, the same kernel, differed by
10-30 us in event time on an H200).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

try:  # the package on PYTHONPATH if there is one (another build to compare), else this checkout's
    import groupnorm_inline  # noqa: F401
except ImportError:
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(__file__))
import groupnorm_inline  # noqa: E402
from groupnorm_inline.functional import forward_plan  # noqa: E402
from providers import _backward_only, compiled_group_norm, fresh_compile, retained_graph_compile_config  # noqa: E402
from channels_last_forward_times import kernel_us, round_robin, with_envs  # noqa: E402

ENV = "GROUPNORM_INLINE_EDGE_VECTORS"
# (shape, groups, dtype, activation): the random-problem rows that were slower than torch.compile, then
# unaligned slices from short (many slices of ~1-50 K elements) to few of several MB.
ROWS = [
    ((32, 16, 94230), 8, torch.bfloat16, None),
    ((2, 8, 1803, 1402), 4, torch.bfloat16, "silu"),
    ((32, 1, 545, 1022), 1, torch.float32, None),
    ((64, 32, 31, 31), 32, torch.float16, None),
    ((128, 64, 7, 7), 32, torch.float32, None),  # D = 98: the small plan, element-wise either way
    ((16, 96, 45, 45), 32, torch.float16, None),
    ((8, 320, 33, 33), 32, torch.bfloat16, None),
    ((8, 320, 33, 33), 32, torch.float16, "silu"),
    ((4, 64, 127, 127), 32, torch.float32, None),
    ((2, 256, 135, 95), 64, torch.float16, None),
    ((1, 128, 511, 511), 32, torch.float16, None),
    ((8, 64, 255, 255), 32, torch.float32, None),
    ((1, 5, 2047, 2047), 5, torch.float16, None),
    ((64, 4, 154113), 2, torch.bfloat16, None),  # a random row 1.13x torch.compile's time (clusters in waves)
    ((2, 320, 127, 129), 32, torch.float32, None),
    ((4, 32, 255, 257), 32, torch.float16, "silu"),
    # aligned controls (both settings take the same plan): a row of the random problems that was slower than eager
    # with SiLU, and two suite rows of the resident plan
    ((1, 160, 1488), 32, torch.float16, "silu"),
    ((2, 320, 128, 128), 32, torch.float16, None),
    ((1, 512, 128, 128), 32, torch.float16, "silu"),
]


# Training rows of HW >= 1024 not a multiple of the vector (the backward's row path), (shape, groups, dtype).
BACKWARD_ROWS = [
    ((32, 8, 207, 131), 8, torch.float32),  # a random row 1.07x eager's training step
    ((64, 4, 154113), 2, torch.bfloat16),
    ((8, 64, 127, 127), 32, torch.float16),
    ((2, 320, 63, 65), 32, torch.float32),
    ((4, 128, 255, 255), 32, torch.bfloat16),
    ((16, 32, 45, 45), 8, torch.float32),
]


def pick(rows: list, indices: str) -> list:
    """The rows at the comma-separated indices, or all of them."""
    return [rows[int(i)] for i in indices.split(",") if i.strip()] or rows


def with_env(name: str, value: str, fn):
    return with_envs({name: value}, fn)


def finish_line(args, line: str, fns: dict, lines: list) -> None:
    """Ends a table line with the kernel-time column (vectors / element-wise, or "-"), keeps and prints it."""
    if args.kernels:
        line += f"{kernel_us(fns['vectors'], 20):.1f} / {kernel_us(fns['element-wise'], 20):.1f} |"
    else:
        line += "- |"
    lines.append(line)
    print(line, flush=True)


def backward_rows(args, lines: list) -> None:
    """The backward alone of BACKWARD_ROWS, the settings side by side (see the module docstring)."""
    head = ["", "## Backward (graph kept, retain_graph): rows of HW not a multiple of the vector", "",
            "| row | vectors ms | element-wise ms | eager ms | compile ms | floor ms | vectors/floor | elem/vectors "
            "| best baseline/vectors | dx err vec / elem | kernel us vec / elem |",
            "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|"]
    lines += head
    print("\n".join(head), flush=True)
    for shape, groups, dtype in pick(BACKWARD_ROWS, args.backward_rows):
        gen = torch.Generator(device="cuda").manual_seed(0)
        x = torch.randn(shape, device="cuda", dtype=dtype, generator=gen).requires_grad_()
        w = (torch.rand(shape[1], device="cuda", generator=gen) + 0.5).to(dtype).requires_grad_()
        b = torch.randn(shape[1], device="cuda", generator=gen).to(dtype).requires_grad_()
        dy = torch.randn(shape, device="cuda", dtype=dtype, generator=gen)
        x64 = x.detach().double().requires_grad_()
        ref = torch.autograd.grad(F.group_norm(x64, groups, w.double(), b.double(), 1e-5), x64, dy.double())[0]
        y_ours = groupnorm_inline.group_norm(x, groups, w, b, 1e-5)
        errs = []
        for value in ("1", "0"):
            dx = with_env(ENV, value, lambda: torch.autograd.grad(y_ours, x, dy, retain_graph=True)[0])()
            errs.append(((dx.double() - ref).abs().max() / (1 + ref.abs().max())).item())
        del ref
        y_eager = F.group_norm(x, groups, w, b, 1e-5)
        fns = {"vectors": with_env(ENV, "1", lambda: _backward_only(y_ours, x, w, b, dy)),
               "element-wise": with_env(ENV, "0", lambda: _backward_only(y_ours, x, w, b, dy)),
               "eager": lambda: _backward_only(y_eager, x, w, b, dy)}
        if not args.no_compile:
            with retained_graph_compile_config():
                y_comp = compiled_group_norm(groups, 1e-5)(x, w, b)
            fns["compile"] = lambda: _backward_only(y_comp, x, w, b, dy)
        x_plain, dx_floor = x.detach(), torch.empty_like(x.detach())
        fns["floor"] = lambda: torch.add(x_plain, dy, out=dx_floor)
        with retained_graph_compile_config():
            t = {name: us / 1000.0 for name, us in round_robin(fns, 30).items()}  # ms
        vec, elem, floor = t["vectors"], t["element-wise"], t["floor"]
        comp = t.get("compile", float("nan"))
        best = min(t["eager"], comp) if not args.no_compile else t["eager"]
        line = (f"| {shape} G{groups} {str(dtype).replace('torch.', '')} | {vec:.4f} | {elem:.4f} | {t['eager']:.4f} "
                f"| {comp:.4f} | {floor:.4f} | {vec / floor:.2f} | {elem / vec:.2f} | {best / vec:.2f} "
                f"| {errs[0]:.1e} / {errs[1]:.1e} | ")
        finish_line(args, line, fns, lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--no-compile", action="store_true")
    parser.add_argument("--kernels", action="store_true", help="also the kernels' GPU time (torch.profiler)")
    parser.add_argument("--backward", action="store_true", help="also the backward of unaligned rows")
    parser.add_argument("--no-forward", action="store_true", help="skip the forward rows")
    parser.add_argument("--rows", default="", help="indices into the forward rows (all by default)")
    parser.add_argument("--backward-rows", default="", help="indices into the backward rows (all by default)")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    lines = [f"# Unaligned NCHW slices on {torch.cuda.get_device_name()}, torch {torch.__version__}", "",
             "| row | plan (vectors) | plan (element-wise) | vectors ms | element-wise ms | eager ms | compile ms "
             "| copy ms | vectors/copy | elem/vectors | best baseline/vectors | err vec / elem | kernel us vec / elem |",
             "|---|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|"]
    print("\n".join(lines), flush=True)
    for shape, groups, dtype, act in ([] if args.no_forward else pick(ROWS, args.rows)):
        gen = torch.Generator(device="cuda").manual_seed(0)
        x = torch.randn(shape, device="cuda", dtype=dtype, generator=gen)
        w = (torch.rand(shape[1], device="cuda", generator=gen) + 0.5).to(dtype)
        b = torch.randn(shape[1], device="cuda", generator=gen).to(dtype)
        ours = lambda: groupnorm_inline.group_norm(x, groups, w, b, 1e-5, activation=act)  # noqa: E731

        def eager():
            y = F.group_norm(x, groups, w, b, 1e-5)
            return F.silu(y) if act else y
        ref = F.group_norm(x.double(), groups, w.double(), b.double(), 1e-5)
        ref = F.silu(ref) if act else ref
        errs = []
        for value in ("1", "0"):
            y = with_env(ENV, value, ours)()
            errs.append(((y.double() - ref).abs().max() / (1 + ref.abs().max())).item())
        del ref
        plans = [with_env(ENV, v, lambda: forward_plan(x, groups))() for v in ("1", "0")]
        copy_target = torch.empty_like(x)
        fns = {"vectors": with_env(ENV, "1", ours), "element-wise": with_env(ENV, "0", ours), "eager": eager}
        if not args.no_compile:
            fns["compile"] = fresh_compile(eager)
        fns["copy"] = lambda: copy_target.copy_(x)
        t = {name: us / 1000.0 for name, us in round_robin(fns, 30).items()}  # ms
        vec, elem, eag, copy = t["vectors"], t["element-wise"], t["eager"], t["copy"]
        comp = t.get("compile", float("nan"))
        best = min(eag, comp) if not args.no_compile else eag
        name = f"{shape} G{groups} {str(dtype).replace('torch.', '')}" + (f" +{act}" if act else "")
        line = (f"| {name} | {plans[0]} | {plans[1]} | {vec:.4f} | {elem:.4f} | {eag:.4f} | {comp:.4f} | {copy:.4f} "
                f"| {vec / copy:.2f} | {elem / vec:.2f} | {best / vec:.2f} | {errs[0]:.1e} / {errs[1]:.1e} | ")
        finish_line(args, line, fns, lines)
    if args.backward:
        backward_rows(args, lines)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "unaligned_check.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()

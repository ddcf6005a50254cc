"""GPU check of the fused activation epilogue and of the few-slice plans, in one process: build once, then
correctness of every forward plan and both backward paths with every activation, then timings.

    python benchmarks/activation_check.py [--out DIR] [--small] [--no-compile]

1. Forward, each launch plan forced by name (small, resident, streamed, fused, split) on an input it takes,
   every activation, float32 and bfloat16, output memory poisoned with NaN first, against float64
   (F.group_norm in float64, then the activation in float64).
2. Backward through autograd (row path HW >= 1024, short path HW < 1024), every activation, float32 / bfloat16
   / float64: grad_input, grad_weight, grad_bias against float64 autograd of the same composite.
3. Timings (CUDA events, L2 flushed under 200 MB, medians): GroupNorm alone and GroupNorm+SiLU (ours), eager
   F.silu(F.group_norm), torch.compile of it, and a copy of the same tensor; then each forced plan on the
   few-slice diffusion rows, to see which design their time needs.
`--small` runs a few small cases only (for compute-sanitizer). Log: DIR/activation_check.txt.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from forward_check import log, poison_allocator, time_fn, write_log  # noqa: E402

ACTS = [(None, None), ("silu", None), ("gelu", None), ("gelu_tanh", None), ("relu", None),
        ("leaky_relu", {"negative_slope": 0.2}), ("mish", None), ("hardswish", None),
        ("hardtanh", {"min_val": -0.5, "max_val": 0.7}), ("sigmoid", None), ("tanh", None)]
FWD_TOL = {torch.float32: 2e-5, torch.float64: 1e-10, torch.float16: 4e-3, torch.bfloat16: 3e-2}
BWD_TOL = {torch.float32: 2e-4, torch.float64: 1e-9, torch.float16: 3e-2, torch.bfloat16: 2e-1}


def reference(x, G, w, b, eps, act, params):
    from groupnorm_inline import activations
    code, alpha, beta = activations.resolve(act, params)
    z = F.group_norm(x.double(), G, None if w is None else w.double(), None if b is None else b.double(), eps)
    return activations.reference(z, code, alpha, beta)


def check_forward(ops, shape, G, dtype, plan, act, params):
    from groupnorm_inline import activations
    code, alpha, beta = activations.resolve(act, params)
    x = (torch.randn(shape, device="cuda") * 1.5 + 0.3).to(dtype)
    w = torch.rand(shape[1], device="cuda", dtype=dtype) + 0.5
    b = torch.rand(shape[1], device="cuda", dtype=dtype) - 0.5
    poison_allocator(x.numel() * x.element_size() * 2)
    y, _, _ = ops.group_norm_forward_with_plan(x, G, w, b, 1e-5, plan, code, alpha, beta)
    torch.cuda.synchronize()
    ref = reference(x, G, w, b, 1e-5, act, params)
    nan = int(torch.isnan(y).sum())
    err = (y.double() - ref).abs().max().item()
    ok = nan == 0 and err <= FWD_TOL[dtype] * max(1.0, ref.abs().max().item())
    if not ok:
        log(f"FAIL fwd {plan:9s} {str(shape):22s} G={G} {dtype} act={act} err={err:.3e} nan={nan}")
    return ok, err


def check_backward(shape, G, dtype, act, params, layout="contiguous"):
    import groupnorm_inline as gn
    x = (torch.randn(shape, device="cuda") + 0.2).to(dtype)
    if layout == "channels_last":
        x = x.to(memory_format=torch.channels_last if x.dim() == 4 else torch.channels_last_3d)
    w = (torch.rand(shape[1], device="cuda") + 0.5).to(dtype)
    b = (torch.rand(shape[1], device="cuda") - 0.5).to(dtype)
    dy = torch.randn(shape, device="cuda").to(dtype)
    xs, ws, bs = (t.detach().requires_grad_() for t in (x, w, b))
    y = gn.group_norm(xs, G, ws, bs, 1e-5, activation=act, activation_params=params)
    got = torch.autograd.grad(y, (xs, ws, bs), dy)
    xr, wr, br = (t.detach().double().requires_grad_() for t in (x, w, b))
    yr = reference(xr, G, wr, br, 1e-5, act, params)
    want = torch.autograd.grad(yr, (xr, wr, br), dy.double())
    worst, ok = 0.0, True
    for name, g, r in zip(("dx", "dw", "db"), got, want):
        err = (g.double() - r).abs().max().item()
        scale = max(1.0, r.abs().max().item())
        rel = err / scale
        worst = max(worst, rel)
        if not (rel <= BWD_TOL[dtype]) or torch.isnan(g).any():
            ok = False
            log(f"FAIL bwd {str(shape):22s} G={G} {dtype} act={act} {layout} {name} err={err:.3e} scale={scale:.2e}")
    return ok, worst


def forward_section(small: bool) -> bool:
    import groupnorm_inline as gn
    ops = gn.extension.load()
    plan_cases = {
        "small": [((64, 512), 32), ((3, 12, 5, 7), 4)],
        "resident": [((4, 64, 40, 40), 8), ((2, 30, 17, 19), 5)],
        "streamed": [((2, 8, 512, 512), 1)],
        "fused": [((4, 64, 40, 40), 8), ((3, 12, 33, 7), 4)],
        "split": [((2, 16, 200, 200), 2), ((3, 12, 33, 7), 4)],
        "auto": [((2, 32, 64, 64), 32), ((2, 6, 5, 7), 3)],
    }
    ok = True
    for plan, cases in plan_cases.items():
        worst = 0.0
        for shape, G in (cases[:1] if small else cases):
            for dtype in ((torch.float32,) if small else (torch.float32, torch.bfloat16)):
                for act, params in (ACTS[:3] if small else ACTS):
                    try:
                        good, err = check_forward(ops, shape, G, dtype, plan, act, params)
                    except RuntimeError as exc:  # a plan that cannot take the case on this device
                        log(f"skip {plan} {shape}: {str(exc).splitlines()[0]}")
                        break
                    ok &= good
                    worst = max(worst, err)
        log(f"forward plan {plan:9s}: {'ok' if ok else 'FAIL'} (max abs err {worst:.2e})")
    return ok


def backward_section(small: bool) -> bool:
    ok = True
    cases = [((2, 8, 40, 40), 4), ((3, 12, 5, 7), 3)] if not small else [((2, 8, 40, 40), 4)]
    for shape, G in cases:
        for dtype in ((torch.float32,) if small else (torch.float32, torch.bfloat16, torch.float64)):
            worst = 0.0
            for act, params in (ACTS[:3] if small else ACTS):
                for layout in ("contiguous", "channels_last"):
                    good, err = check_backward(shape, G, dtype, act, params, layout)
                    ok &= good
                    worst = max(worst, err)
            log(f"backward {str(shape):18s} G={G} {str(dtype):14s}: {'ok' if ok else 'FAIL'} (max rel err {worst:.2e})")
    return ok


def timing_section(with_compile: bool) -> None:
    import groupnorm_inline as gn
    ops = gn.extension.load()
    rows = [((112, 64, 512, 512), 8, torch.bfloat16), ((16, 64, 256, 256), 8, torch.float32),
            ((8, 320, 64, 64), 32, torch.float16), ((2, 64, 1000, 1000), 8, torch.float32),
            ((1024, 8192), 256, torch.float32), ((1, 512, 128, 128), 32, torch.float16),
            ((2, 320, 128, 128), 32, torch.float16), ((2, 1280, 32, 32), 32, torch.bfloat16),
            ((1, 128, 512, 512), 32, torch.float16)]
    log("")
    log("GroupNorm+SiLU: times in ms (ratios: ours_act / ours_plain, ours_act / copy, eager / ours_act, compile / ours_act;"
        " gn+gelu is the per-call Runtime epilogue)")
    for shape, G, dtype in rows:
        x = torch.randn(shape, device="cuda").to(dtype)
        w = torch.rand(shape[1], device="cuda", dtype=dtype) + 0.5
        b = torch.rand(shape[1], device="cuda", dtype=dtype) - 0.5
        y = torch.empty_like(x)
        flush = 2 * x.numel() * x.element_size() < 200e6
        t_copy = time_fn(lambda: y.copy_(x), 20, flush)
        t_plain = time_fn(lambda: gn.group_norm(x, G, w, b), 20, flush)
        t_act = time_fn(lambda: gn.group_norm(x, G, w, b, activation="silu"), 20, flush)
        t_gelu = time_fn(lambda: gn.group_norm(x, G, w, b, activation="gelu"), 20, flush)  # the Runtime epilogue
        t_eager = time_fn(lambda: F.silu(F.group_norm(x, G, w, b)), 20, flush)
        t_comp = float("nan")
        if with_compile:
            torch._dynamo.reset()
            comp = torch.compile(lambda t: F.silu(F.group_norm(t, G, w, b)), dynamic=False)
            t_comp = time_fn(lambda: comp(x), 20, flush)
        plan = gn.functional.forward_plan(x, G).split(":")[0]
        log(f"{str(shape):22s} G={G:<4d} {str(dtype).split('.')[-1]:9s} copy={t_copy:.4f} gn={t_plain:.4f} "
            f"gn+silu={t_act:.4f} gn+gelu={t_gelu:.4f} eager={t_eager:.4f} compile={t_comp:.4f} | {t_act / t_plain:.3f} "
            f"{t_act / t_copy:.2f}x {t_eager / t_act:.2f} {t_comp / t_act:.2f} [{plan}]")
    log("")
    log("Forced plans on few-slice rows (ms; plain GroupNorm; copy beside)")
    for shape, G, dtype in rows[5:]:
        x = torch.randn(shape, device="cuda").to(dtype)
        w = torch.rand(shape[1], device="cuda", dtype=dtype) + 0.5
        b = torch.rand(shape[1], device="cuda", dtype=dtype) - 0.5
        y = torch.empty_like(x)
        flush = 2 * x.numel() * x.element_size() < 200e6
        parts = [f"copy={time_fn(lambda: y.copy_(x), 20, flush):.4f}"]
        for plan in ("auto", "resident", "streamed", "fused", "split"):
            try:
                t = time_fn(lambda: ops.group_norm_forward_with_plan(x, G, w, b, 1e-5, plan), 20, flush)
                parts.append(f"{plan}={t:.4f}")
            except RuntimeError:
                parts.append(f"{plan}=n/a")
        log(f"{str(shape):22s} G={G:<4d} {str(dtype).split('.')[-1]:9s} " + " ".join(parts)
            + f" | auto plan: {gn.functional.forward_plan(x, G)}")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--small", action="store_true")
    ap.add_argument("--no-compile", action="store_true")
    args = ap.parse_args()
    t0 = time.time()
    import groupnorm_inline  # noqa: F401  (builds)
    log(f"device {torch.cuda.get_device_name()} torch {torch.__version__} import+build {time.time() - t0:.1f} s")
    torch.manual_seed(0)
    ok = forward_section(args.small)
    ok &= backward_section(args.small)
    log("correctness: " + ("ALL PASS" if ok else "FAILURES"))
    if not args.small:
        timing_section(not args.no_compile)
    write_log(args.out, "activation_check.txt" if not args.small else "activation_check_small.txt")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

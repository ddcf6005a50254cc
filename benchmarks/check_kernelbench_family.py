"""GPU check of the KernelBench level 2 GroupNorm family (the 14 problems on problems/family.py: 9 convolution
problems on the slice path, 5 Linear problems on the rows path), one run:

    python benchmarks/check_kernelbench_family.py                       # every problem, real shapes
    python benchmarks/check_kernelbench_family.py --problems 19,61,85   # a subset (numbers or keys "2/19")
    python benchmarks/check_kernelbench_family.py --small               # the recipes' small shapes, quick
    python benchmarks/check_kernelbench_family.py --no-compile          # skip torch.compile (about 30 s each)

Per problem, as KernelBench's harness does it: Model and ModelNew built on the CPU after set_seed(42) and moved
to the GPU; 5 trials with seeds drawn after manual_seed(42), each on fresh `get_inputs()`, float32 at
allclose(1e-4), then the precision option (models and inputs cast) in bfloat16 and float16 at 1e-2. Every call
runs with PyTorch's fill of uninitialised memory on (new tensors start as NaN), so an output element a kernel
never writes fails the check; inputs are checked unchanged. A further check gives every parameter a random value
(the initial GroupNorm affine parameters make #23's output rounding noise near zero) and compares against the
float64 reference (convolutions in IEEE float32 for that check), beside float32 eager PyTorch's own margin there:
it passes within the tolerance, or within twice eager's margin where float32 itself misses it. Timing: CUDA events on the current stream, a
256 MB L2 flush before every call, mean of up to 100 calls after warm-up, for ModelNew, eager Model and
torch.compile(Model) (inductor, default mode).

Prints a markdown table; with $OUT set, also writes it and the log there. A problem that raises is reported as
an error row and the run goes on. torch.compile takes about half a minute per problem: within a 10-minute
command, run the family in two or three parts (--problems 11,19,21,23,27,60,61 / 30,37,62,75 / 83,85,88).
"""

from __future__ import annotations

import argparse
import copy
import importlib
import os
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))       # timing.py
sys.path.insert(1, str(Path(__file__).resolve().parent.parent))  # the package, when not installed
from timing import L2Flusher, TimingPlan, time_cuda  # noqa: E402

HARNESS_SEED = 42
TRIALS = 5
PLAN = TimingPlan(warmup=3, min_iters=20, max_iters=100, target_s=1.5)
LOG_LINES: list[str] = []


def log(text: str = "") -> None:
    print(text, flush=True)
    LOG_LINES.append(text)


def set_seed(seed: int) -> None:
    torch.manual_seed(seed)
    torch.cuda.manual_seed(seed)


def draw_seeds(count: int, seed: int) -> list:
    torch.manual_seed(seed)
    return [int(torch.randint(0, 2 ** 32 - 1, (1,)).item()) for _ in range(count)]


def margin(out: torch.Tensor, ref: torch.Tensor, tol: float) -> float:
    """max(|out - ref| / (tol + tol |ref|)); <= 1 is torch.allclose(out, ref, tol, tol); inf on NaN or shapes."""
    if out.shape != ref.shape:
        return float("inf")
    o, r = out.detach().double(), ref.detach().to(out.device).double()
    ratio = (o - r).abs() / (tol + tol * r.abs())
    if ratio.numel() == 0:
        return 0.0
    return float("inf") if torch.isnan(ratio).any() else ratio.max().item()


def max_abs(out: torch.Tensor, ref: torch.Tensor) -> float:
    return (out.detach().double() - ref.detach().to(out.device).double()).abs().max().item()


class PoisonedOutputs:
    """Inside: every tensor PyTorch allocates uninitialised (the operator's outputs too) is filled with NaN."""

    def __enter__(self):
        import torch.utils.deterministic as deterministic

        self.saved = (torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled(),
                      deterministic.fill_uninitialized_memory)
        torch.use_deterministic_algorithms(True, warn_only=True)
        deterministic.fill_uninitialized_memory = True
        return self

    def __exit__(self, *exc):
        import torch.utils.deterministic as deterministic

        on, warn_only, fill = self.saved
        deterministic.fill_uninitialized_memory = fill
        torch.use_deterministic_algorithms(on, warn_only=warn_only)
        return False


def load_problem(key: str, small: bool):
    from groupnorm_inline.cli import problem_source, recipes
    from groupnorm_inline.problems import PROBLEMS

    info = PROBLEMS[key]
    namespace: dict = {}
    exec(problem_source.reference_source(info), namespace)
    if small:
        namespace.update(recipes.RECIPES[key].small_constants)
    module = importlib.import_module(f"groupnorm_inline.problems.{info.module}")
    return info, namespace, module.ModelNew


def construct(namespace, model_new_cls):
    set_seed(HARNESS_SEED)
    init = namespace["get_init_inputs"]()
    set_seed(HARNESS_SEED)
    model = namespace["Model"](*init)
    set_seed(HARNESS_SEED)
    model_new = model_new_cls(*init)
    return model, model_new


def harness_trials(namespace, model_new_cls, dtype: torch.dtype, tol: float) -> dict:
    """KernelBench's correctness flow in `dtype`; worst margin and max abs error over the trials."""
    model, model_new = construct(namespace, model_new_cls)
    model = model.to(device="cuda", dtype=dtype)
    model_new = model_new.to(device="cuda", dtype=dtype)
    worst, err, passed = 0.0, 0.0, True
    for seed in draw_seeds(TRIALS, HARNESS_SEED):
        set_seed(seed)
        inputs = [x.to(dtype=dtype).cuda() for x in namespace["get_inputs"]()]
        before = [x.clone() for x in inputs]
        # Both under the same mode: deterministic algorithms also steer cuDNN's choice of convolution algorithm,
        # and the reference's convolution must be the one ModelNew runs (TF32 results differ between algorithms).
        with torch.no_grad(), PoisonedOutputs():
            ref = model(*inputs)
            torch.cuda.synchronize()
            out = model_new(*inputs)
            torch.cuda.synchronize()
        m = margin(out, ref, tol)
        worst, err = max(worst, m), max(err, max_abs(out, ref) if out.shape == ref.shape else float("inf"))
        unchanged = all(torch.equal(a, b) for a, b in zip(inputs, before))
        passed = passed and out.dtype == ref.dtype and torch.allclose(out, ref, atol=tol, rtol=tol) and unchanged
        del inputs, before, ref, out
    return {"margin": worst, "max_abs": err, "passed": passed}


def perturbed_float64(key, namespace, model_new_cls) -> tuple[float, float]:
    """Margins (1e-4) against the float64 reference with every parameter set to a random value: of ModelNew, and
    of the float32 eager Model itself (the accuracy PyTorch reaches: where a GroupNorm normalises few values, a
    group whose values lie close together amplifies float32 rounding, the reference's as much as ours). The
    convolutions run in IEEE float32 here (cuDNN's TF32 off, restored after): with TF32 the float64 comparison
    would measure the convolution's TF32 rounding (the harness check compares TF32 with TF32)."""
    saved_tf32 = torch.backends.cudnn.allow_tf32
    torch.backends.cudnn.allow_tf32 = False
    try:
        return _perturbed_float64(key, namespace, model_new_cls)
    finally:
        torch.backends.cudnn.allow_tf32 = saved_tf32


def _perturbed_float64(key, namespace, model_new_cls) -> tuple[float, float]:
    model, model_new = construct(namespace, model_new_cls)
    gen = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * 0.7 + 0.2)
    model_new.load_state_dict(model.state_dict())
    if key == "2/83":  # dropout masks differ between float32 and float64 tensors
        model.eval()
        model_new.eval()
    model64 = copy.deepcopy(model).double().cuda()
    model32 = copy.deepcopy(model).cuda()
    model_new = model_new.cuda()
    set_seed(3)
    x = namespace["get_inputs"]()[0].cuda()
    with torch.no_grad():
        with PoisonedOutputs():
            out = model_new(x)
        eager = model32(x)
        ref = model64(x.double())
    return margin(out, ref, 1e-4), margin(eager, ref, 1e-4)


def float64_ok(ours: float, eager: float) -> bool:
    """ModelNew as accurate as float32 eager PyTorch against float64: within the tolerance, or within twice the
    reference's own margin where float32 itself does not reach it."""
    return ours <= max(1.0, 2.0 * eager)


def leading_module(model: torch.nn.Module):
    """The reference's first convolution, transposed convolution or Linear (applied to the input first)."""
    kinds = (torch.nn.Linear, torch.nn.modules.conv._ConvNd)
    return next((m for m in model.children() if isinstance(m, kinds)), None)


def timings(namespace, model_new_cls, compile_too: bool) -> dict:
    model, model_new = construct(namespace, model_new_cls)
    model, model_new = model.cuda(), model_new.cuda()
    set_seed(1)
    x = namespace["get_inputs"]()[0].cuda()
    flusher = L2Flusher(torch.device("cuda"))
    result = {}
    with torch.no_grad():
        result["ours"] = time_cuda(lambda: model_new(x), PLAN, flusher).mean_ms
        result["eager"] = time_cuda(lambda: model(x), PLAN, flusher).mean_ms
        main_op = leading_module(model)
        if main_op is not None:  # the convolution or GEMM alone: the part ModelNew leaves to cuDNN/cuBLAS
            result["main op"] = time_cuda(lambda: main_op(x), PLAN, flusher).mean_ms
        if compile_too:
            compiled = torch.compile(model, backend="inductor", mode="default")
            result["compile"] = time_cuda(lambda: compiled(x), PLAN, flusher).mean_ms
            torch._dynamo.reset()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--problems", default="", help="comma-separated problem numbers or keys (default: all)")
    parser.add_argument("--small", action="store_true", help="the recipes' small shapes (no timing)")
    parser.add_argument("--no-compile", action="store_true", help="skip torch.compile timings")
    parser.add_argument("--timing-only", action="store_true", help="skip the correctness trials")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        sys.exit("check_kernelbench_family.py needs a CUDA GPU")

    from groupnorm_inline.cli import recipes
    from groupnorm_inline.problems import family_kernels

    # Every problem on the family operator, the five Linear problems (#30, #37, #62, #75, #88: #94's GEMM
    # variants, then the family operator's rows path) included.
    family = sorted(recipes.FAMILY_KEYS, key=lambda k: int(k.split("/")[1]))
    wanted = [w.strip() for w in args.problems.split(",") if w.strip()]
    keys = [k for k in family if not wanted or k in wanted or k.split("/")[1] in wanted]
    log(f"# KernelBench GroupNorm family on {torch.cuda.get_device_name()}, torch {torch.__version__}, "
        f"{'small' if args.small else 'real'} shapes, {time.strftime('%Y-%m-%d %H:%M')}")
    start = time.monotonic()
    family_kernels.load()
    log(f"family extension loaded in {time.monotonic() - start:.1f} s")

    rows, errors = [], []
    for key in keys:
        info, namespace, model_new_cls = load_problem(key, args.small)
        t0 = time.monotonic()
        try:
            if args.timing_only:
                fp32 = bf16 = fp16 = {"margin": float("nan"), "max_abs": float("nan"), "passed": False}
                f64 = f64_eager = float("nan")
            else:
                fp32 = harness_trials(namespace, model_new_cls, torch.float32, 1e-4)
                bf16 = harness_trials(namespace, model_new_cls, torch.bfloat16, 1e-2)
                fp16 = harness_trials(namespace, model_new_cls, torch.float16, 1e-2)
                f64, f64_eager = perturbed_float64(key, namespace, model_new_cls)
            times = {} if args.small else timings(namespace, model_new_cls, not args.no_compile)
        except Exception as exc:  # report and go on with the other problems
            errors.append((key, info.file_name, f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:300]}"))
            log(f"{key} {info.file_name}: ERROR {errors[-1][2]}")
            torch.cuda.empty_cache()
            continue
        torch.cuda.empty_cache()
        row = {"key": key, "name": info.file_name, "fp32": fp32, "bf16": bf16, "fp16": fp16, "f64": f64,
               "f64_eager": f64_eager, **times}
        rows.append(row)
        checks = ("not checked (--timing-only); " if args.timing_only else
                  f"fp32 margin {fp32['margin']:.3g} ({'pass' if fp32['passed'] else 'FAIL'}), "
                  f"bf16 {bf16['margin']:.3g} ({'pass' if bf16['passed'] else 'FAIL'}), fp16 {fp16['margin']:.3g} "
                  f"({'pass' if fp16['passed'] else 'FAIL'}), perturbed vs float64 margin {f64:.3g} (eager float32 "
                  f"{f64_eager:.3g}); ")
        log(f"{key} {info.file_name}: " + checks
            + ", ".join(f"{k} {v:.3f} ms" for k, v in times.items()) + f" [{time.monotonic() - t0:.0f} s]")

    log()
    log("| problem | ours ms | eager ms | compile ms | vs eager | vs compile | main op ms | fp32 max err (margin) | "
        "bf16 max err (margin) | fp16 | float64 margin, ours / eager fp32 (perturbed) | pass |")
    log("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        ours, eager, comp = r.get("ours"), r.get("eager"), r.get("compile")
        fmt = (lambda v: f"{v:.3f}" if v is not None else "-")
        ok = (r["fp32"]["passed"] and r["bf16"]["passed"] and r["fp16"]["passed"]
              and float64_ok(r["f64"], r["f64_eager"]))
        ratio = (lambda base: f"{base / ours:.2f}x" if ours and base else "-")  # "-" where not timed
        timing = (f"| {r['name']} | {fmt(ours)} | {fmt(eager)} | {fmt(comp)} | {ratio(eager)} | {ratio(comp)} | "
                  f"{fmt(r.get('main op'))} | ")
        if args.timing_only:  # nothing was compared: no error cells, no verdict
            log(timing + " | ".join(["-"] * 4) + " | not checked |")
            continue
        log(timing + f"{r['fp32']['max_abs']:.2e} ({r['fp32']['margin']:.2f}) | {r['bf16']['max_abs']:.2e} "
            f"({r['bf16']['margin']:.2f}) | {'pass' if r['fp16']['passed'] else 'FAIL'} ({r['fp16']['margin']:.2f}) | "
            f"{r['f64']:.3f} / {r['f64_eager']:.3f} | {'yes' if ok else 'NO'} |")
    for key, name, message in errors:
        log(f"| {name} | error: {message} |")
    out_dir = os.environ.get("OUT")
    if out_dir:
        Path(out_dir).mkdir(parents=True, exist_ok=True)
        tag = ("small" if args.small else "real") + (f"-{'-'.join(k.split('/')[1] for k in keys)}" if wanted else "")
        (Path(out_dir) / f"kernelbench-family-{tag}.md").write_text("\n".join(LOG_LINES) + "\n")


if __name__ == "__main__":
    main()

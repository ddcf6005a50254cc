"""Would the convolution problems of the KernelBench GroupNorm family gain from a channels_last convolution, and
would its results still pass the float32 harness check? Reference models only (no package kernels, no build):

    python benchmarks/conv_layout_check.py                  # every convolution problem of the family
    python benchmarks/conv_layout_check.py --problems 27,60

Per problem, at the real shapes, float32 (TF32 convolutions as PyTorch's default):
  - accuracy: the reference `Model` in NCHW (the harness's reference) against the same model with its weights and
    input in channels_last (cuDNN then runs other algorithms, whose TF32 roundings may differ), over the harness's
    5 seeded trials: margin max |diff| / (tol + tol |ref|) at tol 1e-4 (<= 1 passes) of the GroupNorm's output
    (captured by a hook: the most sensitive point, a GroupNorm divides any difference by the group's spread) and of
    the final output; the same with cuDNN's TF32 off for the channels_last run (what the reference's own TF32
    error is);
  - timings (CUDA events, L2 flushed): the leading convolution without its bias in NCHW, in channels_last from a
    channels_last input, the conversion of the input to channels_last, and a plain copy of the convolution's
    output (the floor of one extra pass over it).
Log to $OUT/conv_layout_check.txt when OUT is set.
"""

from __future__ import annotations

import argparse
import ast
import copy
import re
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(Path(__file__).resolve().parent.parent))
from check_kernelbench_family import (HARNESS_SEED, LOG_LINES, TRIALS, draw_seeds, leading_module, log,  # noqa: E402
                                      margin, set_seed)
from report import save_log  # noqa: E402
from timing import L2Flusher, TimingPlan, time_cuda  # noqa: E402

CONV_PROBLEMS = ("2/11", "2/19", "2/21", "2/23", "2/27", "2/60", "2/61", "2/83", "2/85")
PLAN = TimingPlan(warmup=3, min_iters=10, max_iters=40, target_s=0.4)


def reference_namespace(key: str) -> dict:
    """The KernelBench reference part of a problem module (Model, constants, get_inputs), executed without
    importing the package (which would build its kernels): the module's source minus its own imports and
    ModelNew. The problem modules name their files in groupnorm_inline/problems/__init__.py's PROBLEMS table."""
    root = Path(__file__).resolve().parent.parent / "groupnorm_inline" / "problems"
    table = (root / "__init__.py").read_text()
    number = key.split("/")[1]
    module = re.search(rf'"{re.escape(key)}": ProblemInfo\("{re.escape(key)}", "{number}_\w+",\s*"(\w+)"', table)
    text = (root / f"{module.group(1)}.py").read_text()
    tree = ast.parse(text)
    keep = [node for node in tree.body
            if not (isinstance(node, ast.ImportFrom) and (node.level > 0 or (node.module or "").startswith("groupnorm")))
            and not (isinstance(node, ast.ClassDef) and node.name == "ModelNew")]
    namespace: dict = {}
    exec(compile(ast.Module(body=keep, type_ignores=[]), str(root / module.group(1)), "exec"), namespace)
    return namespace


def channels_last_format(x: torch.Tensor):
    return torch.channels_last if x.dim() == 4 else torch.channels_last_3d


def group_norm_module(model: torch.nn.Module) -> torch.nn.GroupNorm:
    return next(m for m in model.modules() if isinstance(m, torch.nn.GroupNorm))


def run_capturing_group_norm(model, x):
    """(final output, the GroupNorm's output) of model(x)."""
    captured = {}
    handle = group_norm_module(model).register_forward_hook(lambda m, i, o: captured.setdefault("gn", o.clone()))
    try:
        out = model(x)
    finally:
        handle.remove()
    return out, captured["gn"]


def accuracy(namespace, allow_tf32_cl: bool) -> tuple[float, float]:
    """Worst margins (GroupNorm output, final output) of the channels_last model against the NCHW reference."""
    set_seed(HARNESS_SEED)
    init = namespace["get_init_inputs"]()
    set_seed(HARNESS_SEED)
    model = namespace["Model"](*init).cuda()
    worst_gn = worst_out = 0.0
    for seed in draw_seeds(TRIALS, HARNESS_SEED):
        set_seed(seed)
        x = namespace["get_inputs"]()[0].cuda()
        model_cl = copy.deepcopy(model).to(memory_format=channels_last_format(x))
        x_cl = x.contiguous(memory_format=channels_last_format(x))
        with torch.no_grad():
            ref, ref_gn = run_capturing_group_norm(model, x)
            saved = torch.backends.cudnn.allow_tf32
            torch.backends.cudnn.allow_tf32 = allow_tf32_cl
            try:
                out, out_gn = run_capturing_group_norm(model_cl, x_cl)
            finally:
                torch.backends.cudnn.allow_tf32 = saved
        worst_gn = max(worst_gn, margin(out_gn, ref_gn, 1e-4))
        worst_out = max(worst_out, margin(out, ref, 1e-4))
        del x, x_cl, ref, ref_gn, out, out_gn, model_cl
        torch.cuda.empty_cache()
    return worst_gn, worst_out


def timings(namespace) -> dict:
    set_seed(HARNESS_SEED)
    model = namespace["Model"](*namespace["get_init_inputs"]()).cuda()
    conv = leading_module(model)
    set_seed(1)
    x = namespace["get_inputs"]()[0].cuda()
    fmt = channels_last_format(x)
    x_cl = x.contiguous(memory_format=fmt)
    weight_cl = conv.weight.detach().contiguous(memory_format=fmt)
    flusher = L2Flusher(torch.device("cuda"))

    def run_conv(inp, weight):
        if conv.transposed:
            fn = (None, torch.conv_transpose1d, torch.conv_transpose2d, torch.conv_transpose3d)[inp.dim() - 2]
            return fn(inp, weight, None, conv.stride, conv.padding, conv.output_padding, conv.groups, conv.dilation)
        return conv._conv_forward(inp, weight, None)

    with torch.no_grad():
        y = run_conv(x, conv.weight.detach())
        result = {
            "conv_nchw": time_cuda(lambda: run_conv(x, conv.weight.detach()), PLAN, flusher).mean_ms,
            "conv_cl": time_cuda(lambda: run_conv(x_cl, weight_cl), PLAN, flusher).mean_ms,
            "to_cl": time_cuda(lambda: x.contiguous(memory_format=fmt), PLAN, flusher).mean_ms,
            "copy_y": time_cuda(lambda: y.clone(), PLAN, flusher).mean_ms,
            "eager": time_cuda(lambda: model(x), PLAN, flusher).mean_ms,
            "y_mb": y.numel() * y.element_size() / 1e6,
            "x_mb": x.numel() * x.element_size() / 1e6,
        }
        model_cl = copy.deepcopy(model).to(memory_format=fmt)
        result["eager_cl"] = time_cuda(lambda: model_cl(x.contiguous(memory_format=fmt)), PLAN, flusher).mean_ms
        y_cl = run_conv(x_cl, weight_cl)
        result["cl_to_nchw"] = time_cuda(lambda: y_cl.contiguous(), PLAN, flusher).mean_ms
    return result


VARIANTS = [(layout, tf32, bench) for layout in ("nchw", "cl") for tf32 in (True, False) for bench in (False, True)]


def variant_sweep(namespace, trials: int) -> list[tuple[str, float, float]]:
    """(variant, conv ms, GroupNorm-output margin) of the leading convolution run in each layout x cuDNN TF32 x
    cudnn.benchmark, the model's other ops as the reference; margin against the NCHW reference with PyTorch's
    defaults over `trials` harness seeds. The input's conversion is not in the conv time (see the table)."""
    set_seed(HARNESS_SEED)
    model = namespace["Model"](*namespace["get_init_inputs"]()).cuda()
    conv = leading_module(model)
    flusher = L2Flusher(torch.device("cuda"))
    rows = []
    seeds = draw_seeds(TRIALS, HARNESS_SEED)[:trials]
    refs = []
    with torch.no_grad():
        for seed in seeds:
            set_seed(seed)
            x = namespace["get_inputs"]()[0].cuda()
            refs.append((x, run_capturing_group_norm(model, x)[1]))
        for layout, tf32, bench in VARIANTS:
            fmt = channels_last_format(refs[0][0]) if layout == "cl" else torch.contiguous_format
            variant = copy.deepcopy(model).to(memory_format=fmt)
            with torch.backends.cudnn.flags(enabled=True, benchmark=bench, deterministic=False, allow_tf32=tf32):
                worst = 0.0
                for x, ref_gn in refs:
                    worst = max(worst, margin(run_capturing_group_norm(variant, x.contiguous(memory_format=fmt))[1],
                                              ref_gn, 1e-4))
                x_in = refs[0][0].contiguous(memory_format=fmt)
                vconv = leading_module(variant)
                if vconv.transposed:
                    fn = (None, torch.conv_transpose1d, torch.conv_transpose2d, torch.conv_transpose3d)[x_in.dim() - 2]
                    call = lambda: fn(x_in, vconv.weight, None, vconv.stride, vconv.padding, vconv.output_padding,
                                      vconv.groups, vconv.dilation)
                else:
                    call = lambda: vconv._conv_forward(x_in, vconv.weight, None)
                ms = time_cuda(call, PLAN, flusher).mean_ms
            rows.append((f"{layout} tf32={int(tf32)} bench={int(bench)}", ms, worst))
            del variant
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--problems", default=",".join(p.split("/")[1] for p in CONV_PROBLEMS))
    parser.add_argument("--variants", type=int, default=0, metavar="TRIALS",
                        help="instead of the table: each layout x TF32 x cudnn.benchmark variant of the convolution, "
                             "its time and GroupNorm-output margin over TRIALS harness seeds")
    args = parser.parse_args()
    log(f"torch {torch.__version__}, {torch.cuda.get_device_name()}, cudnn {torch.backends.cudnn.version()}, "
        f"cudnn.allow_tf32 {torch.backends.cudnn.allow_tf32}")
    if args.variants:
        log("| problem | variant | conv ms | GN margin |")
        log("|---|---|--:|--:|")
        for number in args.problems.split(","):
            key = f"2/{number.strip()}"
            for name, ms, worst in variant_sweep(reference_namespace(key), args.variants):
                log(f"| {key} | {name} | {ms:.3f} | {worst:.3g} |")
            torch.cuda.empty_cache()
        save_log("conv_layout_variants.txt", LOG_LINES)
        return
    log("| problem | conv NCHW ms | conv CL ms | input to CL ms | CL out to NCHW ms | copy of conv out ms | "
        "eager ms | eager CL ms | conv out MB | GN margin CL tf32 | out margin CL tf32 | GN margin CL fp32 |")
    log("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
    for number in args.problems.split(","):
        key = f"2/{number.strip()}"
        namespace = reference_namespace(key)
        t = timings(namespace)
        torch.cuda.empty_cache()
        gn_tf32, out_tf32 = accuracy(namespace, allow_tf32_cl=True)
        gn_fp32, _ = accuracy(namespace, allow_tf32_cl=False)
        log(f"| {key} | {t['conv_nchw']:.3f} | {t['conv_cl']:.3f} | {t['to_cl']:.3f} | {t['cl_to_nchw']:.3f} | "
            f"{t['copy_y']:.3f} | {t['eager']:.3f} | {t['eager_cl']:.3f} | {t['y_mb']:.0f} | {gn_tf32:.3g} | "
            f"{out_tf32:.3g} | {gn_fp32:.3g} |")
        torch.cuda.empty_cache()
    save_log("conv_layout_check.txt", LOG_LINES)


if __name__ == "__main__":
    main()

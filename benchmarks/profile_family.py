"""Where the time of each KernelBench GroupNorm-family problem goes, at the real shapes, float32:

    python benchmarks/profile_family.py                         # every family problem
    python benchmarks/profile_family.py --problems 11,21 --compile 11

Per problem: the GPU kernels one ModelNew call launches (torch.profiler, mean over 10 calls) and their sum; the
leading convolution / Linear alone in NCHW and in channels_last (weights and input already in that layout, as a
channels_last network keeps them) and the cost of turning the input into channels_last; the floor of the part
after the leading op (one read of its output plus the final output's write, at the copy rate measured here).
With --compile, the same kernel list for torch.compile(Model) (inductor may run the convolution in channels_last:
its layout optimisation). Log to $OUT/profile_family.txt when OUT is set.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections import defaultdict
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(Path(__file__).resolve().parent.parent))
from check_kernelbench_family import construct, leading_module, load_problem  # noqa: E402
from timing import L2Flusher, TimingPlan, time_cuda  # noqa: E402

PLAN = TimingPlan(warmup=3, min_iters=10, max_iters=50, target_s=0.5)
LOG: list[str] = []


def log(text: str = "") -> None:
    print(text, flush=True)
    LOG.append(text)


def kernel_table(fn, calls: int = 10) -> list[tuple[str, float, int]]:
    """(kernel name, mean us per call, launches per call) of fn's GPU kernels, largest first."""
    fn()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    total, count = defaultdict(float), defaultdict(int)
    for ev in prof.events():
        if ev.device_type == torch.autograd.DeviceType.CUDA:
            total[ev.name] += ev.device_time_total if hasattr(ev, "device_time_total") else ev.cuda_time_total
            count[ev.name] += 1
    rows = [(name, total[name] / calls, count[name] // calls) for name in total]
    return sorted(rows, key=lambda r: -r[1])


def show(title: str, rows) -> None:
    log(f"  {title}: kernel sum {sum(r[1] for r in rows):.1f} us")
    for name, us, n in rows[:12]:
        log(f"    {us:9.1f} us  x{n}  {name[:150]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--problems", default="")
    parser.add_argument("--compile", default="", help="problems whose torch.compile(Model) is profiled too")
    args = parser.parse_args()
    from groupnorm_inline.cli import recipes

    family = sorted(recipes.FAMILY_KEYS, key=lambda k: int(k.split("/")[1]))
    wanted = [w.strip() for w in args.problems.split(",") if w.strip()]
    compiled_too = {w.strip() for w in args.compile.split(",") if w.strip()}
    keys = [k for k in family if not wanted or k.split("/")[1] in wanted]
    flusher = L2Flusher(torch.device("cuda"))
    probe = torch.empty(64 * 2 ** 20, device="cuda")
    copy_ms = time_cuda(lambda: probe.clone(), PLAN, flusher).mean_ms
    rate = 2 * probe.numel() * 4 / (copy_ms * 1e-3)  # bytes per second, read + write
    log(f"# family profile on {torch.cuda.get_device_name()}, torch {torch.__version__}; "
        f"copy of 256 MB: {copy_ms:.3f} ms ({rate / 1e12:.2f} TB/s read+write)")
    for key in keys:
        info, namespace, model_new_cls = load_problem(key, False)
        model, model_new = construct(namespace, model_new_cls)
        model, model_new = model.cuda(), model_new.cuda()
        torch.manual_seed(1)
        x = namespace["get_inputs"]()[0].cuda()
        log(f"\n## {key} {info.file_name}: input {tuple(x.shape)}")
        with torch.no_grad():
            out = model_new(x)
            main_op = leading_module(model)
            ours_ms = time_cuda(lambda: model_new(x), PLAN, flusher).mean_ms
            line = f"  ours {ours_ms:.3f} ms"
            if main_op is not None:
                mid = main_op(x)
                nchw_ms = time_cuda(lambda: main_op(x), PLAN, flusher).mean_ms
                floor_ms = (mid.numel() * mid.element_size() + out.numel() * out.element_size()) / rate * 1e3
                line += f"; leading op NCHW {nchw_ms:.3f} ms, its output {tuple(mid.shape)}; floor after it " \
                        f"{floor_ms:.3f} ms (one read + the output's write)"
                if x.dim() in (4, 5) and not isinstance(main_op, torch.nn.Linear):
                    fmt = torch.channels_last if x.dim() == 4 else torch.channels_last_3d
                    op_cl = main_op.to(memory_format=fmt)
                    x_cl = x.contiguous(memory_format=fmt)
                    cl_ms = time_cuda(lambda: op_cl(x_cl), PLAN, flusher).mean_ms
                    to_cl_ms = time_cuda(lambda: x.contiguous(memory_format=fmt), PLAN, flusher).mean_ms
                    mid_cl = op_cl(x_cl)
                    line += f"; channels_last {cl_ms:.3f} ms (output CL: {mid_cl.is_contiguous(memory_format=fmt)}), " \
                            f"input to CL {to_cl_ms:.3f} ms"
                    main_op.to(memory_format=torch.contiguous_format)
                del mid
            log(line)
            show("ModelNew", kernel_table(lambda: model_new(x)))
            if key.split("/")[1] in compiled_too:
                compiled = torch.compile(model, backend="inductor", mode="default")
                compiled(x)
                comp_ms = time_cuda(lambda: compiled(x), PLAN, flusher).mean_ms
                log(f"  compile {comp_ms:.3f} ms")
                show("compile", kernel_table(lambda: compiled(x)))
                torch._dynamo.reset()
        del model, model_new, x, out
        torch.cuda.empty_cache()
    out_dir = os.environ.get("OUT")
    if out_dir:
        Path(out_dir).mkdir(parents=True, exist_ok=True)
        (Path(out_dir) / "profile_family.txt").write_text("\n".join(LOG) + "\n")


if __name__ == "__main__":
    main()

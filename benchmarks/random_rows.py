"""GroupNorm problems drawn at random, timed against eager PyTorch and torch.compile: the "never slower on any
input" claim checked on shapes nobody chose (the suite's rows were picked; these are not).

    python benchmarks/random_rows.py --rows 60 --seed 1 --out results/    # markdown table to stdout and a file
    python benchmarks/random_rows.py --rows 60 --no-compile                # eager only (no compile time)
    python benchmarks/random_rows.py --device cpu --rows 80 --threads 2    # the CPU kernels against PyTorch's CPU

Each problem: rank 2-5 ((N, C), (N, C, L), (N, C, H, W), (N, C, D, H, W)), NCHW or channels-last (4-D/5-D),
float32 / float16 / bfloat16 (float64 now and then), N in 1..64, G in 1..32 with 1..64 channels per group,
the element count log-uniform over 16 K .. 64 M (32 KB .. 256 MB in float32), spatial sizes odd or even;
forward, forward + backward, or forward + SiLU. Every row is checked against eager (max |diff|) before it is
timed; times are medians of CUDA-event-timed calls with L2 flushed before each (benchmarks/timing.py), ours,
eager, compile and a copy of the same tensor (the floor) interleaved by row. A row is flagged SLOWER when ours
exceeds the faster baseline by more than 3% (the run-to-run spread of the small rows).

On the CPU (--device cpu) the element count is drawn over 4 K .. 4 M (the CPU takes milliseconds where the GPU
takes microseconds) and the providers are called in turn, one call each per round (ours, eager, compile, copy,
ours, ...), the median of each taken over the rounds: a burst of load from elsewhere on the machine then slows
every provider alike instead of whichever ran during it.
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import random
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(__file__))
import groupnorm_inline  # noqa: E402
from providers import (compiled_group_norm, copy_provider, forward_providers,  # noqa: E402
                       retained_graph_compile_config, training_floor_provider, training_providers)
from timing import QUICK_PLAN, L2Flusher, needs_l2_flush, time_cuda  # noqa: E402

DTYPES = [(torch.float32, 0.4), (torch.float16, 0.3), (torch.bfloat16, 0.25), (torch.float64, 0.05)]
SLOWER_MARGIN = 1.03


# log2 of the element count's range, by device
ELEMENT_RANGE = {"cuda": (14, 26), "cpu": (12, 22)}
DEVICE = "cuda"


def draw_problem(rng: random.Random) -> dict:
    """One random problem: shape, groups, dtype, layout, direction."""
    rank = rng.choices([2, 3, 4, 5], weights=[0.05, 0.15, 0.6, 0.2])[0]
    groups = rng.choice([1, 2, 4, 8, 16, 32, 32, 32])
    cpg = rng.choice([1, 2, 3, 4, 5, 8, 10, 16, 20, 32, 40, 64])
    channels = groups * cpg
    n = rng.choice([1, 1, 2, 2, 3, 4, 8, 16, 32, 64])
    dtype = rng.choices([d for d, _ in DTYPES], weights=[w for _, w in DTYPES])[0]
    elements = int(2 ** rng.uniform(*ELEMENT_RANGE[DEVICE]))
    spatial_total = max(1, elements // (n * channels))
    if rank == 2:
        spatial: tuple[int, ...] = ()
    elif rank == 3:
        spatial = (spatial_total,)
    elif rank == 4:
        h = max(1, int(round(math.sqrt(spatial_total) * rng.uniform(0.7, 1.4))))
        spatial = (h, max(1, spatial_total // h))
    else:
        d = rng.choice([1, 2, 3, 4, 8, 16])
        hw = max(1, spatial_total // d)
        h = max(1, int(round(math.sqrt(hw))))
        spatial = (d, h, max(1, hw // h))
    layout = "channels_last" if rank in (4, 5) and rng.random() < 0.5 else "contiguous"
    direction = rng.choices(["forward", "fwd+bwd", "forward+silu"], weights=[0.6, 0.3, 0.1])[0]
    return {"shape": (n, channels, *spatial), "groups": groups, "dtype": dtype, "layout": layout,
            "direction": direction}


def make_inputs(p: dict, requires_grad: bool):
    gen = torch.Generator(device=DEVICE).manual_seed(0)
    x = torch.randn(p["shape"], device=DEVICE, dtype=p["dtype"], generator=gen)
    if p["layout"] == "channels_last":
        x = x.contiguous(memory_format=torch.channels_last if x.dim() == 4 else torch.channels_last_3d)
    c = p["shape"][1]
    w = (torch.rand(c, device=DEVICE, generator=gen) + 0.5).to(p["dtype"])
    b = torch.randn(c, device=DEVICE, generator=gen).to(p["dtype"])
    if requires_grad:
        x, w, b = (t.detach().requires_grad_() for t in (x, w, b))
    return x, w, b


def check(p: dict, x, w, b) -> float:
    """Max |ours - eager| of the forward (and of dx for training rows), relative to 1 + max |eager|."""
    act = "silu" if p["direction"] == "forward+silu" else None
    ours = groupnorm_inline.group_norm(x, p["groups"], w, b, 1e-5, activation=act)
    ref = F.group_norm(x.double(), p["groups"], w.double(), b.double(), 1e-5)
    if act:
        ref = F.silu(ref)
    err = ((ours.double() - ref).abs().max() / (1 + ref.abs().max())).item() if ref.numel() else 0.0
    if p["direction"] == "fwd+bwd":
        dy = torch.randn_like(ours)
        (dx,) = torch.autograd.grad(ours, x, dy)
        (dx_ref,) = torch.autograd.grad(ref, x, dy.double())
        err = max(err, ((dx.double() - dx_ref).abs().max() / (1 + dx_ref.abs().max())).item())
    return err


def time_row(p: dict, with_compile: bool) -> dict:
    training = p["direction"] == "fwd+bwd"
    x, w, b = make_inputs(p, training)
    err = check(p, x, w, b)
    if training:
        dy = torch.randn_like(x.detach())
        compiled = compiled_group_norm(p["groups"], 1e-5) if with_compile else None
        with retained_graph_compile_config():
            providers = training_providers(x, w, b, dy, p["groups"], 1e-5, compiled, backward_only=False)
        providers.append(training_floor_provider(x, dy, backward_only=False))
        working = 4 * x.numel() * x.element_size()
    else:
        act = "silu" if p["direction"] == "forward+silu" else None
        providers = forward_providers(x, w, b, p["groups"], 1e-5, with_compile, act)
        providers.append(copy_provider(x))
        working = 2 * x.numel() * x.element_size()
    with retained_graph_compile_config():
        if DEVICE == "cpu":
            return {"err": err, **time_cpu_round_robin({prov.name: prov.fn for prov in providers})}
        flusher = L2Flusher(x.device) if needs_l2_flush(working) else None
        return {"err": err, **{prov.name: time_cuda(prov.fn, QUICK_PLAN, flusher).median_ms for prov in providers}}


def time_cpu_round_robin(fns: dict, target_s: float = 1.5, min_rounds: int = 9, max_rounds: int = 400) -> dict:
    """Median ms per call of each CPU function, called in turn one call per round (see the module docstring);
    as many rounds as fit in about target_s seconds, after two rounds of warm-up."""
    for _ in range(2):
        for fn in fns.values():
            fn()
    start = time.perf_counter()
    for fn in fns.values():
        fn()
    rounds = int(min(max_rounds, max(min_rounds, target_s / max(time.perf_counter() - start, 1e-6))))
    times = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            times[name].append((time.perf_counter() - t0) * 1e3)
    return {name: statistics.median(ts) for name, ts in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=60)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--no-compile", action="store_true")
    parser.add_argument("--time-limit", type=float, default=400.0, help="stop drawing rows after this many s")
    parser.add_argument("--out", type=Path, default=None, help="folder for random_rows_seed<S>.md (CPU: random_rows_cpu<T>t_seed<S>.md)")
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--threads", type=int, default=None, help="CPU: torch.set_num_threads (default: torch's)")
    args = parser.parse_args()
    global DEVICE
    DEVICE = args.device
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    where = (torch.cuda.get_device_name() if DEVICE == "cuda"
             else f"CPU ({platform.machine()}, {torch.get_num_threads()} threads)")
    rng = random.Random(args.seed)
    start = time.time()
    how = "L2 flushed" if DEVICE == "cuda" else "providers called in turn"
    lines = [f"# Random GroupNorm problems, seed {args.seed}: {where}, torch {torch.__version__}",
             "", f"Times in ms (medians, {how}). ratio = ours / faster baseline (< 1: ours faster).", "",
             "| # | shape | G | dtype | layout | direction | ours | eager | compile | copy | ours/copy | ratio | err |",
             "|--:|---|--:|---|---|---|--:|--:|--:|--:|--:|--:|--:|"]
    print("\n".join(lines), flush=True)
    slower = []
    for i in range(args.rows):
        if time.time() - start > args.time_limit:
            lines.append(f"(stopped after {i} rows: time limit)")
            print(lines[-1])
            break
        p = draw_problem(rng)
        try:
            r = time_row(p, not args.no_compile)
        except torch.OutOfMemoryError:
            if DEVICE == "cuda":
                torch.cuda.empty_cache()
            continue
        except ValueError as ours_error:
            # A problem PyTorch rejects too (one value per group: N = C / G = HW = 1) is a row of its own: the same
            # refusal is the right answer; a refusal eager does not share is a defect and stops the run.
            x, w, b = make_inputs(p, False)
            try:
                F.group_norm(x, p["groups"], w, b, 1e-5)
            except ValueError as eager_error:
                lines.append(f"| {i} | {tuple(p['shape'])} | {p['groups']} | {p['dtype']} | {p['layout']} | "
                             f"{p['direction']} | rejected, as eager: {str(eager_error)[:60]} |||||||")
                print(lines[-1], flush=True)
                continue
            raise RuntimeError(f"ours rejects {p} but eager takes it") from ours_error
        base = min(v for k, v in r.items() if k in ("eager", "compile"))
        ratio = r["ours"] / base
        flag = " SLOWER" if ratio > SLOWER_MARGIN else ""
        if flag:
            slower.append(i)
        dt = str(p["dtype"]).replace("torch.", "")
        line = (f"| {i} | {tuple(p['shape'])} | {p['groups']} | {dt} | {p['layout']} | {p['direction']} | "
                f"{r['ours']:.4f} | {r['eager']:.4f} | {r.get('compile', float('nan')):.4f} | {r['copy']:.4f} | "
                f"{r['ours'] / r['copy']:.2f} | {ratio:.3f}{flag} | {r['err']:.1e} |")
        lines.append(line)
        print(line, flush=True)
    lines += ["", f"rows slower than the faster baseline by > {SLOWER_MARGIN - 1:.0%}: {slower or 'none'}"]
    print(lines[-1])
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        # The CPU's file names its thread count: one seed is often run at several.
        suffix = "" if DEVICE == "cuda" else f"_cpu{torch.get_num_threads()}t"
        (args.out / f"random_rows{suffix}_seed{args.seed}.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()

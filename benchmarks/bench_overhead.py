"""Host time per call of our GroupNorm against `torch.nn.GroupNorm` at tiny shapes, where the kernels take
next to nothing and what is measured is the Python, dispatcher and autograd work around them.

Four measures per shape, for ours and for eager PyTorch, taken side by side in this one process:

    fwd          module(x), with x, weight and bias requiring grad (the graph is built, then dropped)
    bwd          torch.autograd.grad of one kept output (retain_graph), gradients of x, weight and bias
    fwd+bwd      a whole step: module(x), then torch.autograd.grad
    fwd no_grad  module(x) under torch.no_grad()

Each measure is a loop of `--calls` calls timed by the wall clock (on CUDA with one synchronize after the
loop, so the time is what the host spends issuing the calls as long as the GPU keeps up; tiny shapes make
sure it does), repeated `--rounds` times, ours and eager alternating; the median loop is reported in
microseconds per call. Ours and eager are first checked to agree (output and gradients).

    python benchmarks/bench_overhead.py                  # CPU, and CUDA when a GPU is present
    python benchmarks/bench_overhead.py --device cuda --calls 5000
    python benchmarks/bench_overhead.py --device cpu --threads 2   # the CPU kernels on two threads
    python benchmarks/bench_overhead.py --device cpu --shapes short # many slices of channels of 1-4 elements
    python benchmarks/bench_overhead.py --device cpu --shapes short --dtype bfloat16
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Callable

# Benchmark the package of this checkout (it need not be installed): the repository root goes on the path
# right after this script's folder, ahead of any installed copy.
_REPO_ROOT = Path(__file__).resolve().parent.parent
if (_REPO_ROOT / "groupnorm_inline").is_dir():
    sys.path.insert(1, str(_REPO_ROOT))

import torch  # noqa: E402

import groupnorm_inline  # noqa: E402

# (shape, num_groups): small enough that a call's kernels take a few microseconds at most on either device;
# the last one has no trailing dims.
SHAPES = [((2, 32, 4, 4), 8), ((1, 8, 2, 2), 2), ((8, 64), 4)]
# --shapes short: inputs of many slices whose channels are shorter than one vector ((N, C) features, 2x2 to 5x5
# maps), where the per-channel and per-slice work, not the data, sets the CPU kernels' time.
SHORT_CHANNEL_SHAPES = [((64, 64), 4), ((256, 64), 8), ((8, 1024), 4), ((16, 256, 2, 2), 32), ((64, 64, 2, 2), 4),
                        ((8, 96, 3, 3), 32), ((64, 96, 3, 3), 32), ((64, 64, 4, 4), 32), ((64, 64, 5, 5), 32)]
MEASURES = ("fwd", "bwd", "fwd+bwd", "fwd no_grad")
# How closely ours and eager must agree (atol = rtol) before anything is timed: both round their results to the
# dtype, from float32 (float64) arithmetic, so 16-bit results may differ by a few units in the last place.
AGREEMENT_TOL = {"float32": 1e-4, "float64": 1e-9, "bfloat16": 1e-1, "float16": 2e-2}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", choices=("cpu", "cuda", "all"), default="all",
                        help="where to run (default: the CPU, and CUDA when a GPU is present)")
    parser.add_argument("--calls", type=int, default=2000, help="calls per timed loop (default 2000)")
    parser.add_argument("--rounds", type=int, default=7, help="timed loops per measure; the median is kept")
    parser.add_argument("--threads", type=int, default=1,
                        help="CPU threads for torch (default 1: host time is what is measured, and one thread "
                        "keeps other processes' load from stretching the CPU kernels' parallel regions)")
    parser.add_argument("--shapes", choices=("tiny", "short"), default="tiny",
                        help="tiny: the host-overhead shapes (default); short: many slices of short channels")
    parser.add_argument("--dtype", choices=tuple(AGREEMENT_TOL), default="float32",
                        help="the input's and the parameters' dtype (default float32)")
    return parser.parse_args(argv)


def loop_time_us(call: Callable[[], object], synchronize: Callable[[], None], calls: int) -> float:
    """Wall-clock time per call of one loop of `calls` calls, in microseconds (one synchronize at its end)."""
    start = time.perf_counter()
    for _ in range(calls):
        call()
    synchronize()
    return (time.perf_counter() - start) / calls * 1e6


def measure_modules(modules: dict, shape, device: torch.device, calls: int, rounds: int,
                    dtype: torch.dtype = torch.float32) -> dict:
    """{provider: {measure: us per call}} for GroupNorm modules on an input of `shape`.

    The providers' loops alternate round by round, so a burst of load from other processes on the machine
    falls on both alike; each figure is the median of its `rounds` loops.
    """
    x = torch.randn(shape, device=device, dtype=dtype, requires_grad=True)
    dy = torch.randn(shape, device=device, dtype=dtype)
    synchronize = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    calls_of = {}
    for provider, module in modules.items():
        leaves = (x, module.weight, module.bias)
        kept = module(x)  # a graph kept alive for the backward-only measure

        def forward_no_grad(module=module):
            with torch.no_grad():
                return module(x)

        calls_of[provider] = {
            "fwd": lambda module=module: module(x),
            "bwd": lambda kept=kept, leaves=leaves: torch.autograd.grad(kept, leaves, dy, retain_graph=True),
            "fwd+bwd": lambda module=module, leaves=leaves: torch.autograd.grad(module(x), leaves, dy),
            "fwd no_grad": forward_no_grad,
        }
    times = {provider: {} for provider in modules}
    for measure in MEASURES:
        for provider in modules:  # warm-up: allocator caches, lazy initialisation
            for _ in range(min(50, calls)):
                calls_of[provider][measure]()
        synchronize()
        loops = {provider: [] for provider in modules}
        for _ in range(rounds):
            for provider in modules:
                loops[provider].append(loop_time_us(calls_of[provider][measure], synchronize, calls))
        for provider in modules:
            times[provider][measure] = statistics.median(loops[provider])
    return times


def check_same_result(ours: torch.nn.Module, eager: torch.nn.Module, shape, device: torch.device,
                      dtype: torch.dtype = torch.float32) -> None:
    """Ours and eager agree (output and the three gradients, AGREEMENT_TOL) before anything is timed."""
    x = torch.randn(shape, device=device, dtype=dtype, requires_grad=True)
    dy = torch.randn(shape, device=device, dtype=dtype)
    tol = AGREEMENT_TOL[str(dtype).removeprefix("torch.")]
    results = []
    for module in (ours, eager):
        out = module(x)
        results.append((out, *torch.autograd.grad(out, (x, module.weight, module.bias), dy)))
    for name, got, ref in zip(("output", "grad input", "grad weight", "grad bias"), *results):
        if not torch.allclose(got.double(), ref.double(), atol=tol, rtol=tol):
            raise SystemExit(f"{name} of ours differs from nn.GroupNorm at {shape} on {device}: max abs error "
                             f"{(got - ref).abs().max().item():.3g}")


def run_device(device: torch.device, calls: int, rounds: int, shapes=SHAPES, dtype: torch.dtype = torch.float32) -> None:
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    print(f"\n{name} ({device}), torch {torch.__version__}, {torch.get_num_threads()} CPU threads, {dtype}; "
          f"us per call, median of {rounds} loops of {calls} calls")
    header = f"{'shape':<18} {'G':>3}  {'measure':<12} {'ours':>9} {'eager':>9} {'ours/eager':>11}"
    print(header)
    print("-" * len(header))
    for shape, groups in shapes:
        torch.manual_seed(0)
        ours = groupnorm_inline.GroupNorm(groups, shape[1]).to(device, dtype)
        eager = torch.nn.GroupNorm(groups, shape[1]).to(device, dtype)
        with torch.no_grad():  # the same parameters, neither the identity
            for p, q in zip(ours.parameters(), eager.parameters()):
                p.copy_(torch.randn_like(p))
                q.copy_(p)
        check_same_result(ours, eager, shape, device, dtype)
        times = measure_modules({"ours": ours, "eager": eager}, shape, device, calls, rounds, dtype)
        for measure in MEASURES:
            a, b = times["ours"][measure], times["eager"][measure]
            print(f"{str(tuple(shape)):<18} {groups:>3}  {measure:<12} {a:>9.1f} {b:>9.1f} {a / b:>10.2f}x")


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    devices = []
    if args.device in ("cpu", "all"):
        devices.append(torch.device("cpu"))
    if args.device == "cuda" or (args.device == "all" and torch.cuda.is_available()):
        if not torch.cuda.is_available():
            raise SystemExit("--device cuda: no GPU is visible")
        devices.append(torch.device("cuda"))
    for device in devices:
        run_device(device, args.calls, args.rounds, SHORT_CHANNEL_SHAPES if args.shapes == "short" else SHAPES,
                   getattr(torch, args.dtype))


if __name__ == "__main__":
    main()

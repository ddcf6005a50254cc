"""Quickstart: `groupnorm_inline.GroupNorm` against `torch.nn.GroupNorm`, error and speed.

    python examples/quickstart.py                       # the GPU when one is visible, else the CPU
    python examples/quickstart.py --shape 32 256 64 64 --groups 32 --dtype bfloat16

`GroupNorm` is a drop-in for `nn.GroupNorm`: same constructor, same parameters, same `state_dict`. The first
run on a machine compiles the kernels (about 12 minutes with CUDA on 2 cores, 3.5 without); later runs load them
from the cache in well under a second.

On the GPU the times are medians of CUDA-event timings, L2 flushed before each call; on the CPU (no GPU
visible) a smaller default shape and wall-clock medians are used, and the script says so.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing
import groupnorm_inline  # noqa: E402  (compiles the kernels on the first import on a machine)

GPU_DEFAULT_SHAPE = (16, 64, 256, 256)   # 67M elements, 268 MB in float32: the pre-2025 KernelBench #35 shape
CPU_DEFAULT_SHAPE = (8, 64, 64, 64)      # 2M elements: a few milliseconds per call on a CPU core
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16, "float64": torch.float64}


def median_ms_cuda(fn, x: torch.Tensor, reps: int) -> float:
    """Median over `reps` calls of fn(x), each timed with CUDA events on the current stream after an L2 flush."""
    flush = torch.empty(256 * 1024 * 1024 // 4, dtype=torch.int32, device=x.device)  # 256 MB > any L2
    for _ in range(3):  # warm-up
        fn(x)
    times = []
    for _ in range(reps):
        flush.zero_()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn(x)
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def median_ms_cpu(fn, x: torch.Tensor, reps: int) -> float:
    """Median wall-clock time over `reps` calls of fn(x)."""
    fn(x)  # warm-up
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn(x)
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shape", type=int, nargs="+", help="input shape (N, C, *); default depends on the device")
    parser.add_argument("--groups", type=int, default=8)
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="float32")
    parser.add_argument("--device", choices=("cuda", "cpu"),
                        default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--reps", type=int, help="timed calls (default 20 on the GPU, 10 on the CPU)")
    args = parser.parse_args()

    device = torch.device(args.device)
    on_gpu = device.type == "cuda"
    shape = tuple(args.shape) if args.shape else (GPU_DEFAULT_SHAPE if on_gpu else CPU_DEFAULT_SHAPE)
    dtype = DTYPES[args.dtype]
    reps = args.reps or (20 if on_gpu else 10)
    if on_gpu:
        print(f"device: {torch.cuda.get_device_name(device)}, torch {torch.__version__}")
    else:
        print(f"device: CPU (no GPU visible), torch {torch.__version__}; the C++ CPU kernels at a small "
              f"shape (pass --shape to change it)")

    # The two modules, with the same random affine parameters: ours loads nn.GroupNorm's state_dict as is.
    torch.manual_seed(0)
    channels = shape[1]
    reference = nn.GroupNorm(args.groups, channels)
    with torch.no_grad():
        reference.weight.normal_()
        reference.bias.normal_()
    ours = groupnorm_inline.GroupNorm(args.groups, channels)
    ours.load_state_dict(reference.state_dict())
    reference.to(device, dtype)
    ours.to(device, dtype)
    print(f"module: {ours}")

    x = torch.randn(shape, device=device, dtype=dtype)
    with torch.no_grad():
        y_ours = ours(x)
        y_torch = reference(x)
        y_exact = F.group_norm(x.double(), args.groups, reference.weight.double(), reference.bias.double(),
                               reference.eps)
    err_vs_torch = (y_ours.double() - y_torch.double()).abs().max().item()
    err_ours = (y_ours.double() - y_exact).abs().max().item()
    err_torch = (y_torch.double() - y_exact).abs().max().item()
    print(f"input {tuple(shape)} {args.dtype}, {args.groups} groups, {x.numel() * x.element_size() / 1e6:.3g} MB")
    print(f"max |ours - nn.GroupNorm| = {err_vs_torch:.3g}")
    print(f"max error against a float64 reference: ours {err_ours:.3g}, nn.GroupNorm {err_torch:.3g}")

    timer = median_ms_cuda if on_gpu else median_ms_cpu
    with torch.no_grad():
        t_ours = timer(ours, x, reps)
        t_torch = timer(reference, x, reps)
    how = "CUDA events, L2 flushed" if on_gpu else "wall clock"
    print(f"time (median of {reps}, {how}): groupnorm_inline {t_ours:.3f} ms, nn.GroupNorm {t_torch:.3f} ms, "
          f"speedup {t_torch / t_ours:.2f}x")


if __name__ == "__main__":
    main()

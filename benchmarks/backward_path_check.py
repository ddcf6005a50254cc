"""The backward's long-row paths side by side, call by call in one process: the row path (x and dy read twice, at
DRAM bandwidth), the resident path (read once into a cluster's shared memory, latency-bound) and the automatic
choice, with a streaming floor beside them (torch.add(x, dy, out=dx): reads x and dy, writes dx once).

    python benchmarks/backward_path_check.py        # log to $OUT/backward_path_check.txt when OUT is set

GROUPNORM_INLINE_BACKWARD_PATH (read by the operator on every call) picks the path: `row`, `resident` (whenever
the problem fits a cluster, whatever the rule says) or unset (the rule). For each shape: median of 30 operator
calls per setting (CUDA events, L2 flushed, settings interleaved so that drift hits all alike), the effective
rates (bytes each path moves over its time: 3 tensor sizes for the resident path, 5 for the row path) and
whether the paths' gradients agree. The header gives the DRAM peak and the L2 size the rule reads.
"""

from __future__ import annotations

import os
import statistics
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(__file__))
import groupnorm_inline  # noqa: E402
from groupnorm_inline import extension  # noqa: E402
from forward_check import LOG, log  # noqa: E402
from report import save_log  # noqa: E402
from timing import L2Flusher  # noqa: E402

ENV = "GROUPNORM_INLINE_BACKWARD_PATH"
SHAPES = [  # (shape, groups, dtype): slices the resident path can hold (<= 8 CTAs of 96 KB), 4 MB to 1 GB
    ((128, 64, 126, 126), 16, torch.float32),
    ((32, 64, 126, 126), 16, torch.float32),
    ((32, 256, 64, 64), 32, torch.float32),
    ((64, 128, 64, 64), 32, torch.float32),
    ((16, 128, 96, 96), 32, torch.float32),
    ((8, 320, 64, 64), 32, torch.float32),
    ((4, 64, 64, 64), 32, torch.float32),
    ((256, 32, 32, 32), 8, torch.float32),
    ((64, 128, 128, 128), 32, torch.bfloat16),
    ((32, 256, 64, 64), 32, torch.bfloat16),
    ((16, 512, 32, 32), 32, torch.bfloat16),
    ((2, 320, 128, 128), 32, torch.float16),
    ((8, 320, 64, 64), 32, torch.float16),
    ((4, 512, 64, 64), 32, torch.float16),
]


def set_path(setting: str) -> None:
    if setting == "auto":
        os.environ.pop(ENV, None)
    else:
        os.environ[ENV] = setting


def dram_peak_bytes_per_s() -> float | None:
    """2 transfers per memory clock over the bus (HBM), from the device properties torch exposes; None if absent."""
    props = torch.cuda.get_device_properties(0)
    clock_khz = getattr(props, "memory_clock_rate", None)
    bus_bits = getattr(props, "memory_bus_width", None)
    if not clock_khz or not bus_bits:
        return None
    return 2.0 * clock_khz * 1e3 * bus_bits / 8.0


def main() -> int:
    ops = extension.load()
    flush = L2Flusher(torch.device("cuda"))
    props = torch.cuda.get_device_properties(0)
    peak = dram_peak_bytes_per_s()
    l2 = getattr(props, "L2_cache_size", 0)
    log(f"# backward_path_check on {props.name}, torch {torch.__version__}, {props.multi_processor_count} SMs, "
        f"DRAM peak {peak / 1e12 if peak else float('nan'):.2f} TB/s, L2 {l2 / 2**20:.0f} MB")
    log("# rates: resident = 3 B / t, row = 5 B / t, floor = 3 B / t (B = bytes of x)")
    settings = ("row", "resident", "auto", "floor")
    for shape, groups, dtype in SHAPES:
        x = (torch.randn(shape, device="cuda") * 1.3 + 0.2).to(dtype)
        dy = torch.randn(shape, device="cuda").to(dtype)
        w = (torch.rand(shape[1], device="cuda") + 0.5).to(dtype)
        _, mean, rstd = groupnorm_inline.group_norm_with_stats(x, groups, w, None)
        out = torch.empty_like(x)

        def call(setting):
            if setting == "floor":
                return [torch.add(x, dy, out=out)]
            set_path(setting)
            return ops.group_norm_backward.default(dy, x, mean, rstd, w, groups, [True, True, True], None, 0, 0.0,
                                                   0.0)

        times = {s: [] for s in settings}
        results = {}
        for setting in settings:  # warm-up, and each path's gradients
            results[setting] = [t.float() for t in call(setting)]
            call(setting)
        torch.cuda.synchronize()
        for _ in range(30):
            for setting in settings:
                flush()
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                call(setting)
                end.record()
                torch.cuda.synchronize()
                times[setting].append(start.elapsed_time(end))
        os.environ.pop(ENV, None)
        same = all(torch.allclose(a, c, rtol=1e-3, atol=1e-3 * (c.abs().max().item() + 1))
                   for other in ("resident", "auto") for a, c in zip(results[other], results["row"]))
        t = {s: statistics.median(v) for s, v in times.items()}
        nbytes = x.numel() * x.element_size()
        rate = lambda tensors, ms: tensors * nbytes / (ms * 1e-3) / 1e12  # noqa: E731
        picked = "resident" if abs(t["auto"] - t["resident"]) < abs(t["auto"] - t["row"]) else "row"
        log(f"{str(shape):21s} G={groups:<3d} {str(dtype)[6:]:8s} {nbytes / 1e6:7.1f} MB  row {t['row']:.4f}  "
            f"resident {t['resident']:.4f}  auto {t['auto']:.4f} (~{picked})  floor {t['floor']:.4f} ms  "
            f"resident/row {t['resident'] / t['row']:.3f}  TB/s: row {rate(5, t['row']):.2f} "
            f"resident {rate(3, t['resident']):.2f} floor {rate(3, t['floor']):.2f}  gradients agree: {same}")
        del x, dy, out
        torch.cuda.empty_cache()
    save_log("backward_path_check.txt", LOG)
    return 0


if __name__ == "__main__":
    sys.exit(main())

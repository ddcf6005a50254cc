"""Launches the forward (and backward) of a few rows once each inside a profiler range, for Nsight Compute:

    ncu --profile-from-start off --section SpeedOfLight --section Occupancy --section LaunchStats \
        --section WarpStateStats python benchmarks/ncu_rows.py [--act silu] [--rows few_slice,held,...]

Every row is run three times first (build, plan caches, allocator), outside the range; inside it, each row's
GroupNorm forward and a copy of the same tensor (the bandwidth anchor) run once, so the report holds one kernel
per line of the table printed here. `--backward` adds each row's backward (a random grad) to the range. The
package imported is the one on PYTHONPATH if there is one (a baseline build to compare), else this checkout's.
"""

from __future__ import annotations

import argparse
import os
import sys

import torch

try:  # the package on PYTHONPATH if there is one (another build to compare), else this checkout's
    import groupnorm_inline as gn
except ImportError:
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
    import groupnorm_inline as gn  # noqa: E402

# (shape, groups, dtype, memory format): the few-slice diffusion rows of the suite.
FEW_SLICE = [
    ((2, 1280, 32, 32), 32, torch.bfloat16, torch.contiguous_format),
    ((1, 512, 128, 128), 32, torch.float16, torch.contiguous_format),
    ((2, 320, 128, 128), 32, torch.float16, torch.contiguous_format),
    ((1, 128, 512, 512), 32, torch.float16, torch.contiguous_format),
    ((2, 320, 128, 128), 32, torch.float16, torch.channels_last),
]
# The channels-last rows of a few MB whose single launch sits at 2-2.6x the copy (benchmarks/NOTES.md, channels-last forward).
CHANNELS_LAST = [
    ((2, 640, 64, 64), 32, torch.float16, torch.channels_last),
    ((1, 320, 64, 64), 32, torch.float16, torch.channels_last),
    ((2, 320, 128, 128), 32, torch.float16, torch.channels_last),
]
# Channels-last rows larger than the GPU's shared memory, whose single launch reads x twice (1.7-2.1x the copy).
CHANNELS_LAST_LARGE = [
    ((1, 128, 512, 512), 32, torch.float16, torch.channels_last),
    ((16, 64, 256, 256), 8, torch.float32, torch.channels_last),
    ((8, 320, 64, 64), 32, torch.float32, torch.channels_last),
]
# One row of each channels-last kernel family, for comparing two builds: the block plan (one CTA, a cluster),
# the single launch with tiles held whole and held in part, and a float32 tile.
CHANNELS_LAST_KINDS = [
    ((64, 32, 16, 16), 32, torch.float16, torch.channels_last),
    ((1, 320, 64, 64), 32, torch.float16, torch.channels_last),
    ((4, 64, 64, 64), 32, torch.float32, torch.channels_last),
    ((2, 640, 64, 64), 32, torch.float16, torch.channels_last),
    ((2, 320, 128, 128), 32, torch.float16, torch.channels_last),
    ((8, 320, 64, 64), 32, torch.float32, torch.channels_last),
    ((1, 128, 512, 512), 32, torch.float16, torch.channels_last),
]
# NCHW rows the held plan takes (one cooperative launch, slices held in shared memory and L2): 1.5-1.6x the copy.
HELD = [
    ((1, 256, 256, 256), 32, torch.bfloat16, torch.contiguous_format),
    ((2, 320, 128, 128), 32, torch.float16, torch.contiguous_format),
    ((2, 320, 128, 128), 32, torch.float32, torch.contiguous_format),
    ((1, 128, 512, 512), 32, torch.float16, torch.contiguous_format),
]
# Held rows of 3-4 rounds in half precision: bfloat16 (2 CTAs per SM) against float16 (3) at the same shape.
HELD_HALF = [
    ((32, 16, 94230), 8, torch.bfloat16, torch.contiguous_format),
    ((32, 16, 94232), 8, torch.bfloat16, torch.contiguous_format),
    ((32, 16, 94232), 8, torch.float16, torch.contiguous_format),
]
# NCHW rows the resident plan takes (a cluster per slice, the slice in shared memory): 1.5-1.6x the copy.
NCHW_RESIDENT = [
    ((1, 320, 64, 64), 32, torch.float16, torch.contiguous_format),
    ((2, 1280, 32, 32), 32, torch.float16, torch.contiguous_format),
    ((2, 640, 64, 64), 32, torch.float16, torch.contiguous_format),
]
ROWS = {"few_slice": FEW_SLICE, "held": HELD, "held_half": HELD_HALF, "nchw_resident": NCHW_RESIDENT,
        "channels_last": CHANNELS_LAST,
        "channels_last_large": CHANNELS_LAST_LARGE, "channels_last_kinds": CHANNELS_LAST_KINDS}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--act", default=None, help="activation for the forward (default: none)")
    parser.add_argument("--rows", default="few_slice",
                        help="comma-separated row sets: " + ", ".join(sorted(ROWS)) + " (default few_slice)")
    parser.add_argument("--backward", action="store_true", help="also the backward of each row (random grad)")
    args = parser.parse_args()
    cases = []

    def run(x, groups, w, b, y, dy):
        out = gn.group_norm(x, groups, w, b, activation=args.act)
        if dy is not None:
            out.backward(dy)
        y.copy_(x.detach())

    unknown = [name for name in args.rows.split(",") if name not in ROWS]
    if unknown:
        parser.error(f"unknown row sets {unknown}; known: {sorted(ROWS)}")
    for shape, groups, dtype, fmt in [row for name in args.rows.split(",") for row in ROWS[name]]:
        x = torch.randn(shape, device="cuda", dtype=dtype).contiguous(memory_format=fmt)
        w = torch.randn(shape[1], device="cuda", dtype=dtype)
        b = torch.randn(shape[1], device="cuda", dtype=dtype)
        y = torch.empty_like(x)
        dy = None
        if args.backward:
            dy = torch.randn_like(x)
            for t in (x, w, b):
                t.requires_grad_(True)
        cases.append((x, groups, w, b, y, dy))
        for _ in range(3):
            run(x, groups, w, b, y, dy)
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    for case in cases:
        run(*case)
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()
    for x, groups, w, b, y, _ in cases:
        print(tuple(x.shape), groups, x.dtype, "channels_last" if not x.is_contiguous() else "nchw",
              gn.functional.forward_plan(x, groups) if x.is_contiguous() else "channels-last kernel")


if __name__ == "__main__":
    main()

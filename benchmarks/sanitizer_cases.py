"""Small forward and backward calls through every CUDA path, for compute-sanitizer (memcheck, racecheck):

    compute-sanitizer --tool memcheck python benchmarks/sanitizer_cases.py
    compute-sanitizer --tool racecheck python benchmarks/sanitizer_cases.py --channels-last --forward
    compute-sanitizer --tool memcheck python benchmarks/sanitizer_cases.py --nchw

Shapes are chosen to reach each forward plan (the channels-last ones take the block plan unless
GROUPNORM_INLINE_CL_FORWARD_PLAN says `fused` or `three`) and both backward paths (resident clusters and row chunks for
HW >= 1024, lane segments below), NCHW and channels-last, with and without an activation; the inputs are
random (never zeros) and small enough that the tools finish in a minute or two.
"""

from __future__ import annotations

import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import groupnorm_inline as gn  # noqa: E402

CASES = [  # (shape, groups, dtype, memory format)
    ((2, 64, 40, 40), 8, torch.float32, torch.contiguous_format),     # resident backward, HW = 1600
    ((3, 12, 40, 40), 4, torch.float16, torch.contiguous_format),     # channel boundaries inside a warp step
    ((2, 16, 32, 32), 1, torch.bfloat16, torch.contiguous_format),    # one group
    ((2, 8, 33, 35), 4, torch.float32, torch.contiguous_format),      # odd HW: row path, vectors with edges
    ((1, 3, 7, 4001), 1, torch.float16, torch.contiguous_format),     # odd HW, rows split: chunk heads and tails
    ((4, 32, 9, 9), 8, torch.float32, torch.contiguous_format),       # short path (HW < 1024)
    ((3, 5, 99, 97), 5, torch.float16, torch.contiguous_format),      # odd D: resident, vector body, edge elements
    ((1, 2, 301, 299), 1, torch.float16, torch.contiguous_format),    # D = 6 mod 8: a cluster of 8, edges per CTA
    ((1, 8, 512, 512), 2, torch.bfloat16, torch.contiguous_format),   # 16-CTA clusters within L2: the held plan
    ((1, 8, 511, 511), 2, torch.bfloat16, torch.contiguous_format),   # the same, odd D: held items with edges
    ((2, 32, 16, 16), 8, torch.float16, torch.channels_last),
    ((1, 16, 4, 8, 8), 4, torch.bfloat16, torch.channels_last_3d),
    ((3, 10, 7, 9), 5, torch.float32, torch.channels_last),           # block plan, scalar accesses (C % 4 != 0)
    ((8, 128, 7, 9), 2, torch.float16, torch.channels_last),          # block plan, a warp per group (C/G = 64)
    ((1, 8, 32, 64), 4, torch.float32, torch.channels_last),          # block plan, 256 threads x 8 rows each
    ((2, 96, 50, 50), 32, torch.float16, torch.channels_last),        # block plan, clusters of 4, last rank short
    ((1, 320, 64, 64), 32, torch.float16, torch.channels_last),       # block plan, clusters of 16
    ((3, 640, 48, 48), 32, torch.float16, torch.channels_last),       # block plan, rows held in shared memory
]


def main() -> int:
    # --channels-last: only the channels-last cases; --nchw: only the others; --forward: no backward (racecheck's
    # slower passes).
    channels_last_only = "--channels-last" in sys.argv[1:]
    nchw_only = "--nchw" in sys.argv[1:]
    forward_only = "--forward" in sys.argv[1:]
    torch.manual_seed(0)
    cases = [c for c in CASES if not channels_last_only or c[3] is not torch.contiguous_format]
    cases = [c for c in cases if not nchw_only or c[3] is torch.contiguous_format]
    for shape, G, dtype, fmt in cases:
        x = torch.randn(shape, device="cuda", dtype=dtype).to(memory_format=fmt).requires_grad_()
        w = (torch.rand(shape[1], device="cuda", dtype=dtype) + 0.5).requires_grad_()
        b = torch.rand(shape[1], device="cuda", dtype=dtype).requires_grad_()
        for act in (None, "silu", "gelu"):
            y = gn.group_norm(x, G, w, b, 1e-5, activation=act)
            if forward_only:
                assert torch.isfinite(y).all(), (shape, dtype, act)
                continue
            grads = torch.autograd.grad(y, (x, w, b), torch.randn_like(y))
            assert all(torch.isfinite(g).all() for g in grads), (shape, dtype, act)
    torch.cuda.synchronize()
    print(f"sanitizer cases: {len(cases)} shapes x 3 activations, forward{'' if forward_only else ' and backward'}, "
          "finished")
    return 0


if __name__ == "__main__":
    sys.exit(main())

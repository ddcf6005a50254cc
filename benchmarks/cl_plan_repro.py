"""Channels-last forward of one input under each plan (automatic, then fused and three forced), against a
float64 reference, several times: shows which plan an error belongs to and whether it repeats.

    python benchmarks/cl_plan_repro.py 2,1280,32,32 32 float64 [--mean 1e4] [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import groupnorm_inline as gn  # noqa: E402
from groupnorm_inline.functional import forward_plan  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("shape")
    parser.add_argument("groups", type=int)
    parser.add_argument("dtype")
    parser.add_argument("--mean", type=float, default=0.0)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    shape = tuple(int(s) for s in args.shape.split(","))
    dtype = getattr(torch, args.dtype)
    fmt = torch.channels_last if len(shape) == 4 else torch.channels_last_3d
    torch.manual_seed(0)
    x = (torch.randn(shape, dtype=torch.float64) + args.mean).to(dtype).to("cuda", memory_format=fmt)
    w = (torch.rand(shape[1], dtype=torch.float64) + 0.5).to(dtype).cuda()
    b = torch.rand(shape[1], dtype=torch.float64).to(dtype).cuda()
    ref = F.group_norm(x.double().cpu(), args.groups, w.double().cpu(), b.double().cpu(), 1e-5)
    for plan in ("", "fused", "three"):
        os.environ["GROUPNORM_INLINE_CL_FORWARD_PLAN"] = plan
        name = forward_plan(x, args.groups)
        for r in range(args.repeat):
            y = gn.group_norm(x, args.groups, w, b, 1e-5)
            err = (y.double().cpu() - ref).abs()
            worst = err.flatten().argmax().item()
            where = torch.unravel_index(torch.tensor(worst), ref.shape)
            print(f"{plan or 'auto':5} run {r}: max err {err.max().item():.3e} at {tuple(int(i) for i in where)} "
                  f"(bad channels: {sorted(set((err > 1e-6).nonzero()[:, 1].tolist()))[:12]}) | {name}")


if __name__ == "__main__":
    main()

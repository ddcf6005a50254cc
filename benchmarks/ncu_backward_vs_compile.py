"""Per-kernel view of one training step's backward, ours against torch.compile's, for Nsight Compute.

    ncu --profile-from-start off --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum \
        python benchmarks/ncu_backward_vs_compile.py [--shape 128,64,126,126 --groups 16]

Warms both up (torch.compile's kernels are built and tuned first), then profiles exactly one backward of each
(autograd of a retained forward: the kernels that `loss.backward` launches), ours with the automatic path and with
GROUPNORM_INLINE_BACKWARD_PATH=row, between cudaProfilerStart/Stop.
"""

from __future__ import annotations

import argparse
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(__file__))
import groupnorm_inline  # noqa: E402
from providers import retained_graph_compile_config  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", default="128,64,126,126")
    ap.add_argument("--groups", type=int, default=16)
    args = ap.parse_args()
    shape = tuple(int(v) for v in args.shape.split(","))
    g = args.groups
    x = (torch.randn(shape, device="cuda") * 1.3 + 0.2).requires_grad_()
    w = (torch.rand(shape[1], device="cuda") + 0.5).requires_grad_()
    b = (torch.rand(shape[1], device="cuda") - 0.5).requires_grad_()
    dy = torch.randn(shape, device="cuda")
    with retained_graph_compile_config():
        compiled = torch.compile(lambda t, ww, bb: F.group_norm(t, g, ww, bb, 1e-5), dynamic=False)
        outs = {"compile": compiled(x, w, b), "ours": groupnorm_inline.group_norm(x, g, w, b, 1e-5)}
        for _ in range(3):
            for y in outs.values():
                torch.autograd.grad(y, (x, w, b), dy, retain_graph=True)
        torch.cuda.synchronize()
        torch.cuda.profiler.start()
        for name in ("compile", "ours", "ours-row"):
            if name == "ours-row":
                os.environ["GROUPNORM_INLINE_BACKWARD_PATH"] = "row"
            torch.cuda.nvtx.range_push(name)
            torch.autograd.grad(outs[name.split("-")[0]], (x, w, b), dy, retain_graph=True)
            torch.cuda.synchronize()
            torch.cuda.nvtx.range_pop()
        torch.cuda.profiler.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())

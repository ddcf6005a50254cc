"""Does gathering the GroupNorm statistics inside the direct convolution (the conv_group_norm op) beat the two-op
path (the direct convolution, then the family operator's statistics pass and store pass) at the real shapes of the
problems whose chain it is built for? Per problem: both paths' outputs compared (max |diff|, float32 rounding
apart) and timed in one process (CUDA events, L2 flushed), the family check's ModelNew parameters.

    python benchmarks/conv_group_norm_check.py          # log to $OUT/conv_group_norm_check.txt when OUT is set
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(Path(__file__).resolve().parent.parent))
from timing import L2Flusher, TimingPlan, time_cuda  # noqa: E402

from groupnorm_inline.problems import family  # noqa: E402

PLAN = TimingPlan(warmup=3, min_iters=10, max_iters=30, target_s=0.3)
# problem: (conv, input shape, groups, prologue, number of prologue vectors, epilogue, epilogue scalars)
CASES = {
    "2/21": (lambda: torch.nn.Conv2d(8, 32, 3), (128, 8, 256, 256), 8, "add_scale_sigmoid", 2, "identity", ()),
    "2/83": (lambda: torch.nn.Conv3d(3, 16, 3), (128, 3, 16, 64, 64), 8, "identity", 0, "min_clamp", (0.5, -0.3, 0.4)),
}


def main() -> int:
    if not torch.cuda.is_available():
        print("conv_group_norm_check: needs a CUDA device")
        return 0
    lines = [f"# conv_group_norm against the two-op path, {torch.cuda.get_device_name()}, torch {torch.__version__}"]
    flusher = L2Flusher(torch.device("cuda"))
    torch.manual_seed(0)
    for key, (make, shape, groups, prologue, n_vectors, epilogue, scalars) in CASES.items():
        conv = make().cuda()
        gn = torch.nn.GroupNorm(groups, conv.out_channels).cuda()
        with torch.no_grad():
            gn.weight.normal_()
            gn.bias.normal_()
        vectors = tuple(torch.randn(conv.out_channels, 1, 1, device="cuda") for _ in range(n_vectors))
        x = torch.rand(shape, device="cuda")

        def fused():
            return family._conv_group_norm(conv, x, gn, prologue, vectors, (), epilogue, (), scalars)

        def two_ops():
            y, bias = family.convolution_deferring_bias(conv, x)
            return family.group_norm_chain(y, gn, prologue=prologue, prologue_vectors=vectors, epilogue=epilogue,
                                           epilogue_scalars=scalars, input_bias=bias)

        with torch.no_grad():
            diff = (fused() - two_ops()).abs().max().item()
            t_fused = time_cuda(fused, PLAN, flusher).median_ms
            t_two = time_cuda(two_ops, PLAN, flusher).median_ms
        lines.append(f"{key} {prologue}/{epilogue} x {shape}: conv_group_norm {t_fused:.3f} ms, two ops {t_two:.3f} ms "
                     f"({t_two / t_fused:.2f}x), max |diff| {diff:.2e}")
        print(lines[-1], flush=True)
        del x
        torch.cuda.empty_cache()
    out = os.environ.get("OUT")
    if out:
        Path(out, "conv_group_norm_check.txt").write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

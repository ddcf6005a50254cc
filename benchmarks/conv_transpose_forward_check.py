"""Would the family's stride-1 transposed convolutions (#11, #19, #61) run faster as the forward convolution they
equal, and would the results still pass the harness's float32 check? A transposed convolution of stride 1 (no
output padding, dilation 1, one group) is the forward convolution of the same input with the kernel flipped in
every spatial dimension, its in/out channels swapped, and padding k - 1 - p. cuDNN runs the transposed one as a
"dgrad" kernel and the forward one with its fprop kernels: other algorithms, other TF32 roundings.

Per problem, at the real shapes, float32 with PyTorch's default TF32 setting (reference models' convolutions only,
nothing built):
  - time (CUDA events, L2 flushed) of the transposed convolution in NCHW and channels_last, and of the forward
    form in NCHW and channels_last (weights converted once, outside the timing);
  - margin = max |diff| / (1e-4 + 1e-4 |ref|) against the reference (the NCHW transposed convolution) at the
    convolution's output and at a GroupNorm of it (G = 8, the family's groups: a GroupNorm divides a difference by
    the group's spread), and the same for the reference itself against float64, over the first two samples.

    python benchmarks/conv_transpose_forward_check.py     # log to $OUT/conv_transpose_forward_check.txt when OUT is set
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
from report import save_log  # noqa: E402
from timing import L2Flusher, TimingPlan, time_cuda  # noqa: E402

PLAN = TimingPlan(warmup=3, min_iters=10, max_iters=30, target_s=0.3)
# problem: (input shape, C_out, kernel, padding)
CASES = {
    "2/11": ((512, 64, 32, 32), 128, 5, 1),
    "2/19": ((128, 64, 256, 256), 64, 3, 0),
    "2/61": ((16, 64, 32, 32, 32), 128, 3, 0),
}


def margin(got: torch.Tensor, ref: torch.Tensor, tol: float = 1e-4) -> float:
    return ((got.double() - ref.double()).abs() / (tol + tol * ref.double().abs())).max().item()


def main() -> int:
    if not torch.cuda.is_available():
        print("conv_transpose_forward_check: needs a CUDA device")
        return 0
    lines = [f"# stride-1 transposed convolutions as forward convolutions, {torch.cuda.get_device_name()}, "
             f"torch {torch.__version__}, cudnn.allow_tf32={torch.backends.cudnn.allow_tf32}"]
    flusher = L2Flusher(torch.device("cuda"))
    torch.manual_seed(0)
    for key, (shape, c_out, k, pad) in CASES.items():
        dims = len(shape) - 2
        transposed = (F.conv_transpose2d, F.conv_transpose3d)[dims - 2]
        forward = (F.conv2d, F.conv3d)[dims - 2]
        cl = (torch.channels_last, torch.channels_last_3d)[dims - 2]
        x = torch.rand(shape, device="cuda") * 2 - 1
        bound = 1.0 / (shape[1] * k ** dims) ** 0.5
        w = (torch.rand(shape[1], c_out, *[k] * dims, device="cuda") * 2 - 1) * bound  # (C_in, C_out, k...)
        w_fwd = w.transpose(0, 1).flip(list(range(2, 2 + dims))).contiguous()
        fpad = k - 1 - pad
        x_cl, w_cl, wf_cl = x.contiguous(memory_format=cl), w.contiguous(memory_format=cl), w_fwd.contiguous(memory_format=cl)
        runs = {
            "transposed NCHW (reference)": lambda: transposed(x, w, padding=pad),
            "transposed channels_last": lambda: transposed(x_cl, w_cl, padding=pad),
            "forward NCHW": lambda: forward(x, w_fwd, padding=fpad),
            "forward channels_last": lambda: forward(x_cl, wf_cl, padding=fpad),
        }
        with torch.no_grad():
            ref = runs["transposed NCHW (reference)"]()
            ref64 = transposed(x[:2].double(), w.double(), padding=pad)
            gn = lambda t: F.group_norm(t.double(), 8)  # noqa: E731
            gn_ref = gn(ref[:2])
            lines.append(f"\n## {key}: x {shape}, C_out {c_out}, kernel {k}, padding {pad} -> forward padding {fpad}")
            lines.append(f"  reference vs float64: conv margin {margin(ref[:2], ref64):.3g}, "
                         f"GroupNorm margin {margin(gn_ref, gn(ref64)):.3g}")
            for name, fn in runs.items():
                out = fn()
                t = time_cuda(fn, PLAN, flusher).median_ms
                lines.append(f"  {name:28s} {t:7.3f} ms  vs reference: conv margin {margin(out, ref):.3g}, GroupNorm "
                             f"margin {margin(gn(out[:2]), gn_ref):.3g}; vs float64: GroupNorm margin "
                             f"{margin(gn(out[:2]), gn(ref64)):.3g}")
                del out
        print("\n".join(lines[-6:]), flush=True)
        del x, x_cl, ref, ref64
        torch.cuda.empty_cache()
    save_log("conv_transpose_forward_check.txt", lines)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

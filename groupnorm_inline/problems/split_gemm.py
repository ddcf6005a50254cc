"""#94's GEMM variants for the other Linear problems of the GroupNorm family (#30, #37, #62, #75, #88).

`linear(module, x, gemm)` computes `module(x)` (an nn.Linear on x (M, K)) with the GEMM variant `gemm`:

  "fp32"    the module itself: the reference's own cuBLAS call (IEEE float32, as eager PyTorch runs it);
  "3xtf32"  x W^T ~= x_hi W_hi^T + (x_hi W_lo^T + x_lo W_hi^T) on TF32 tensor cores,
  "3xfp16"  the same with float16 parts scaled per row by powers of two (low parts stored times 2^12),

the split variants exactly as level2_94_gemm_mish_group_norm describes them (the operand split and the GEMMs
of level2_94_kernels), the parts then summed in #94's order (main product, correction times its scale), scaled
back per row and column, plus the Linear bias: four elementwise passes over the float32 (M, N) result, against
a GEMM 2-4x faster than the float32 one. The weight's split is cached per module and remade when the weight
changes (another tensor, storage or in-place version). For float16/bfloat16 parameters (KernelBench's precision
option), inputs other than 2-D, or `gemm="fp32"`, the module itself runs.
"""

from __future__ import annotations

import torch

from . import level2_94_kernels as kernels
from .level2_94_kernels import GEMM_VARIANTS, CublasFloat32Mode
from .level2_94_kernels import ops as _ops  # builds the #94 kernels (first time on a machine) and loads them


def check_gemm(gemm: str) -> str:
    """`gemm` when it names a variant this torch has; ValueError/RuntimeError otherwise."""
    if gemm not in GEMM_VARIANTS:
        raise ValueError(f"gemm must be one of {GEMM_VARIANTS}, got {gemm!r}")
    if gemm == "3xfp16" and not kernels.HAS_MM_OUT_DTYPE:
        raise RuntimeError(f"gemm='3xfp16' needs torch >= 2.8 (torch.mm with out_dtype); this is torch "
                           f"{torch.__version__}; use gemm='3xtf32'")
    return gemm


def _weight_split(module, weight: torch.Tensor, fmt: int):
    """([W_lo | W_hi], column scales) of the module's weight, cached on the module (no parameter, no buffer)."""
    key = (fmt, weight.data_ptr(), weight._version, weight.device, tuple(weight.shape))
    cached = getattr(module, "_weight_split_cache", None)
    if cached is None or cached[0] != key:
        cat, scale = _ops.split_rows(weight.contiguous(), fmt, True)
        # Holding `weight` keeps its storage alive, so no other tensor can get its address while cached.
        cached = (key, cat, scale, weight)
        module._weight_split_cache = cached
    return cached[1], cached[2]


def linear(module, x: torch.Tensor, gemm: str) -> torch.Tensor:
    """`module(x)` for an nn.Linear, with the GEMM variant `gemm` (see the module docstring)."""
    weight = module.weight.detach()
    if gemm == "fp32" or weight.dtype != torch.float32 or x.dtype != torch.float32 or x.dim() != 2 \
            or x.shape[1] != weight.shape[1] or x.device != weight.device or x.shape[0] == 0:
        return module(x)  # the reference's own call (and its own errors for a bad input)
    x = x.detach().contiguous()
    fmt = kernels.SPLIT_FORMAT[gemm]
    K = x.shape[1]
    x_cat, x_scale = _ops.split_rows(x, fmt, False)           # [x_hi | x_lo], (M, 2K)
    w_cat, w_scale = _weight_split(module, weight, fmt)        # [W_lo | W_hi], (N, 2K)
    with CublasFloat32Mode(tf32=True):
        correction = kernels.product(x_cat, w_cat)            # x_hi W_lo^T + x_lo W_hi^T
        out = kernels.product(x_cat[:, :K], w_cat[:, K:])     # x_hi W_hi^T
    out.add_(correction, alpha=kernels.FP16_CORRECTION_SCALE if gemm == "3xfp16" else 1.0)
    if gemm == "3xfp16":
        out.mul_(x_scale.unsqueeze(1)).mul_(w_scale)
    if module.bias is not None:
        out.add_(module.bias.detach())
    return out

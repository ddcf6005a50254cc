"""KernelBench level 2, problem 94 (`94_Gemm_BiasAdd_Hardtanh_Mish_GroupNorm`).

`Model`, the constants and `get_inputs`/`get_init_inputs` reproduce the KernelBench problem file: x (1024, 8192)
from `torch.rand`, Linear 8192 -> 8192, a bias of shape (8192,), GroupNorm with 256 groups of 32 channels.

`ModelNew` takes the same positional constructor arguments, creates the same submodules and parameters in the
same order (Linear weight, Linear bias, then `torch.randn(bias_shape)`), so under one seed both hold identical
parameters and `state_dict`s. Its forward is a GEMM followed by one fused kernel for everything else (Linear
bias, bias, Hardtanh, Mish, GroupNorm) that reads the GEMM result once and writes the output once.

The GEMM, chosen by the keyword-only `gemm` argument:

  "fp32"    one IEEE float32 GEMM (TF32 forced off for it), exactly what eager PyTorch computes.
  "3xtf32"  split precision on tensor cores: x = x_hi + x_lo and W = W_hi + W_lo, each part a TF32 value
            (the high part rounded to nearest, the low part the rounded remainder), and
            x W^T ~= x_hi W_hi^T + (x_hi W_lo^T + x_lo W_hi^T); the two correction products are one GEMM
            of depth 2K over the side-by-side operands [x_hi | x_lo] and [W_lo | W_hi].
  "3xfp16"  the same three products with float16 parts (each row scaled by a power of two, the low part
            stored times 2^12), on tensor cores at twice the TF32 rate, accumulated in float32
            (`torch.mm(..., out_dtype=torch.float32)`, torch >= 2.8).

`k_splits` (split variants) cuts the depth of the large product x_hi W_hi^T into that many chunks whose
float32 results the epilogue adds: tensor cores accumulate with truncation, so shorter chains lose less.
The operand split of the weight is cached and recomputed when the weight changes (another tensor, another
storage, or an in-place update, seen through `weight._version`; writes through `weight.data` are not seen:
call `refresh_weight_split()` after them). Inference only: the output carries no autograd graph.

KernelBench's precision option (Model, ModelNew and inputs cast to float16 or bfloat16): the GEMM in that dtype
(the reference's own Linear: cuBLAS with float32 accumulation), then the GroupNorm family operator
(problems/family.py) computes bias, Hardtanh, Mish and the GroupNorm from it, rounding as the reference's ops do.
"""

import torch
import torch.nn as nn

from . import level2_94_kernels as kernels
from .level2_94_kernels import DEFAULT_GEMM, DEFAULT_K_SPLITS, GEMM_VARIANTS, CublasFloat32Mode
from .level2_94_kernels import ops as _ops  # builds the kernels (first time on a machine) and loads them
from .family import group_norm_chain


class Model(nn.Module):
    """
    A model that performs a GEMM, BiasAdd, Hardtanh, Mish, and GroupNorm operations in sequence
    (the KernelBench reference).
    """

    def __init__(self, in_features, out_features, bias_shape, num_groups):
        super(Model, self).__init__()
        self.gemm = nn.Linear(in_features, out_features)
        self.bias = nn.Parameter(torch.randn(bias_shape))
        self.hardtanh = nn.Hardtanh()
        self.mish = nn.Mish()
        self.groupnorm = nn.GroupNorm(num_groups=num_groups, num_channels=out_features)

    def forward(self, x):
        """
        Args:
            x (torch.Tensor): Input tensor of shape (batch_size, in_features).
        Returns:
            torch.Tensor: Output tensor of shape (batch_size, out_features).
        """
        x = self.gemm(x)
        x = x + self.bias
        x = self.hardtanh(x)
        x = self.mish(x)
        x = self.groupnorm(x)
        return x


class ModelNew(nn.Module):
    """`Model` as a GEMM plus one fused epilogue kernel; `gemm` picks the GEMM (see the module docstring)."""

    def __init__(self, in_features, out_features, bias_shape, num_groups, *, gemm: str = DEFAULT_GEMM,
                 k_splits: int = DEFAULT_K_SPLITS):
        super().__init__()
        # Same submodules and parameters, created in the same order as Model (the same RNG draws).
        self.gemm = nn.Linear(in_features, out_features)
        self.bias = nn.Parameter(torch.randn(bias_shape))
        self.hardtanh = nn.Hardtanh()  # kept for the module tree and repr; the fused kernel applies it
        self.mish = nn.Mish()
        self.groupnorm = nn.GroupNorm(num_groups=num_groups, num_channels=out_features)
        if gemm not in GEMM_VARIANTS:
            raise ValueError(f"gemm must be one of {GEMM_VARIANTS}, got {gemm!r}")
        if gemm == "3xfp16" and not kernels.HAS_MM_OUT_DTYPE:
            raise RuntimeError(f"gemm='3xfp16' needs torch >= 2.8 (torch.mm with out_dtype); this is torch "
                               f"{torch.__version__}; use gemm='3xtf32'")
        if isinstance(k_splits, bool) or not isinstance(k_splits, int) or not 1 <= k_splits <= kernels.MAX_K_SPLITS:
            raise ValueError(f"k_splits must be an int from 1 to {kernels.MAX_K_SPLITS}, got {k_splits!r}")
        if gemm == "fp32" and k_splits != 1:
            raise ValueError("k_splits applies to the split-precision GEMMs ('3xtf32', '3xfp16'), not to 'fp32'")
        self.gemm_variant = gemm
        self.k_splits = k_splits
        self._weight_split = None  # (key, [W_lo | W_hi], row scales, the weight it was made from)

    def extra_repr(self) -> str:
        return f"gemm={self.gemm_variant!r}, k_splits={self.k_splits}"

    def _apply(self, fn, *args, **kwargs):
        self._weight_split = None  # .to()/.cuda()/.half() make new weights
        return super()._apply(fn, *args, **kwargs)

    def refresh_weight_split(self) -> None:
        """Drop the cached operand split of the weight (it is rebuilt at the next forward)."""
        self._weight_split = None

    def _split_weight(self, weight: torch.Tensor, fmt: int):
        key = (fmt, weight.data_ptr(), weight._version, weight.device, tuple(weight.shape))
        if self._weight_split is None or self._weight_split[0] != key:
            cat, scale = _ops.split_rows(weight.contiguous(), fmt, True)  # [W_lo | W_hi]
            # Holding `weight` keeps its storage alive, so no other tensor can get its address while cached.
            self._weight_split = (key, cat, scale, weight)
        return self._weight_split[1], self._weight_split[2]

    def _check_input(self, x, weight: torch.Tensor) -> None:
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"ModelNew.forward expected a Tensor, got {type(x).__name__}")
        in_features = weight.shape[1]
        if x.dim() != 2:
            raise RuntimeError(f"ModelNew expected a 2-D input of shape (batch, {in_features}), got shape "
                               f"{tuple(x.shape)}")
        if x.shape[1] != in_features:
            raise RuntimeError(f"mat1 and mat2 shapes cannot be multiplied ({x.shape[0]}x{x.shape[1]} and "
                               f"{in_features}x{weight.shape[0]})")
        if weight.dtype not in (torch.float32, torch.float16, torch.bfloat16):
            raise RuntimeError(f"ModelNew computes in float32, float16 or bfloat16; its parameters are {weight.dtype}")
        if x.dtype != weight.dtype:
            raise RuntimeError(f"expected input of dtype {weight.dtype} (the parameters' dtype), got {x.dtype}")
        if x.device != weight.device:
            raise RuntimeError(f"Expected all tensors to be on the same device, but found at least two devices, "
                               f"{x.device} (input) and {weight.device} (parameters)!")
        if x.device.type not in ("cpu", "cuda"):
            raise RuntimeError(f"ModelNew runs on CPU and CUDA devices, got {x.device}")
        groups = self.groupnorm.num_groups
        if x.shape[0] * (weight.shape[0] // groups) == 1:  # F.group_norm refuses a single value per group
            raise ValueError(f"Expected more than 1 value per channel when training, got input size "
                             f"{[x.shape[0] * weight.shape[0] // groups, groups]}")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weight = self.gemm.weight.detach()
        self._check_input(x, weight)
        x = x.detach().contiguous()  # a copy only when x is not contiguous; x itself is never written
        out_features = weight.shape[0]
        gn = self.groupnorm
        gn_weight = gn.weight.detach() if gn.weight is not None else torch.ones_like(weight[:, 0])
        gn_bias = gn.bias.detach() if gn.bias is not None else torch.zeros_like(weight[:, 0])
        linear_bias = self.gemm.bias.detach() if self.gemm.bias is not None else torch.zeros_like(weight[:, 0])
        bias = kernels.bias_vector(self.bias.detach(), out_features)
        if weight.dtype != torch.float32:  # the precision option: the Linear in that dtype, the family operator
            return group_norm_chain(self.gemm(x), gn, prologue="add_hardtanh_mish", prologue_vectors=(bias,))
        row_scale = col_scale = None
        if self.gemm_variant == "fp32":
            with CublasFloat32Mode(tf32=False):
                parts = [torch.mm(x, weight.t())]
            scales = [1.0]
        else:
            fmt = kernels.SPLIT_FORMAT[self.gemm_variant]
            K = x.shape[1]
            x_cat, x_scale = _ops.split_rows(x, fmt, False)      # [x_hi | x_lo], (M, 2K)
            w_cat, w_scale = self._split_weight(weight, fmt)     # [W_lo | W_hi], (N, 2K)
            with CublasFloat32Mode(tf32=True):
                correction = kernels.product(x_cat, w_cat)              # x_hi W_lo^T + x_lo W_hi^T
                parts = kernels.chunked_products(x_cat[:, :K], w_cat[:, K:], self.k_splits)  # x_hi W_hi^T
            if self.gemm_variant == "3xfp16":
                scales = [1.0] * len(parts) + [kernels.FP16_CORRECTION_SCALE]
                row_scale, col_scale = x_scale, w_scale
            else:
                scales = [1.0] * (len(parts) + 1)
            parts.append(correction)
        return _ops.epilogue(parts, scales, row_scale, col_scale, linear_bias, bias, gn_weight, gn_bias,
                             gn.num_groups, gn.eps)


batch_size = 1024
in_features = 8192
out_features = 8192
bias_shape = (out_features,)
num_groups = 256


def get_inputs():
    return [torch.rand(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features, bias_shape, num_groups]

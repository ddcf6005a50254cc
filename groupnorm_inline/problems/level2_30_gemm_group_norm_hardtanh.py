"""KernelBench level 2, problem 30 (`30_Gemm_GroupNorm_Hardtanh`).

`Model`, the constants and `get_inputs`/`get_init_inputs` reproduce the KernelBench problem file: x (1024, 8192) from
`torch.rand`, Linear 8192 -> 8192, GroupNorm with 16 groups of 512 channels, Hardtanh(-2, 2).

`ModelNew`: the Linear (see below), then one family operator on the (N, C) rows: GroupNorm,
epilogue Hardtanh with the module's bounds.

The Linear runs with the GEMM variant of the keyword-only `gemm` (problems/split_gemm.py, #94's variants): by
default #94's default, the operand split on tensor cores ("3xfp16" where torch has the float16 -> float32 GEMM,
else "3xtf32"), float32-accurate; "fp32" runs the reference's own float32 cuBLAS call.
"""

import torch
import torch.nn as nn

from .family import group_norm_chain
from .level2_94_kernels import DEFAULT_GEMM
from .split_gemm import check_gemm, linear


class Model(nn.Module):
    """
    Simple model that performs a GEMM, applies Group Normalization, and then HardTanh.
    """
    def __init__(self, in_features, out_features, num_groups, hardtanh_min, hardtanh_max):
        super(Model, self).__init__()
        self.gemm = nn.Linear(in_features, out_features)
        self.group_norm = nn.GroupNorm(num_groups, out_features)
        self.hardtanh = nn.Hardtanh(min_val=hardtanh_min, max_val=hardtanh_max)

    def forward(self, x):
        """
        Args:
            x (torch.Tensor): Input tensor of shape (batch_size, in_features).
        Returns:
            torch.Tensor: Output tensor of shape (batch_size, out_features).
        """
        x = self.gemm(x)
        x = self.group_norm(x)
        x = self.hardtanh(x)
        return x


class ModelNew(nn.Module):
    """`Model` with GroupNorm + Hardtanh as one family operator after the GEMM."""

    def __init__(self, in_features, out_features, num_groups, hardtanh_min, hardtanh_max, *, gemm: str = DEFAULT_GEMM):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features)
        self.group_norm = nn.GroupNorm(num_groups, out_features)
        self.hardtanh = nn.Hardtanh(min_val=hardtanh_min, max_val=hardtanh_max)
        self.gemm_variant = check_gemm(gemm)

    def extra_repr(self) -> str:
        return f"gemm={self.gemm_variant!r}"

    def forward(self, x):
        x = linear(self.gemm, x, self.gemm_variant)
        return group_norm_chain(x, self.group_norm, epilogue="hardtanh",
                                epilogue_scalars=(self.hardtanh.min_val, self.hardtanh.max_val))


batch_size = 1024
in_features = 8192
out_features = 8192
num_groups = 16
hardtanh_min = -2.0
hardtanh_max = 2.0

def get_inputs():
    return [torch.rand(batch_size, in_features)]

def get_init_inputs():
    return [in_features, out_features, num_groups, hardtanh_min, hardtanh_max]

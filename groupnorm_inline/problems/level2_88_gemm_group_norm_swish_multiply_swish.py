"""KernelBench level 2, problem 88 (`88_Gemm_GroupNorm_Swish_Multiply_Swish`).

`Model`, the constants and `get_inputs`/`get_init_inputs` reproduce the KernelBench problem file: x (1024, 8192) from
`torch.rand`, Linear 8192 -> 8192, GroupNorm with 256 groups of 32 channels, Swish, * multiply_weight (8192,), Swish.

`ModelNew` draws the same parameters in the same order (Linear, multiply_weight). Forward: the Linear (PyTorch),
then one family operator on the rows: GroupNorm, epilogue Swish, multiply, Swish.

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
    Model that performs a GEMM, GroupNorm, Swish, Multiply, and Swish operations.
    """
    def __init__(self, in_features, out_features, num_groups, multiply_weight_shape):
        super(Model, self).__init__()
        self.gemm = nn.Linear(in_features, out_features)
        self.group_norm = nn.GroupNorm(num_groups, out_features)
        self.multiply_weight = nn.Parameter(torch.randn(multiply_weight_shape))

    def forward(self, x):
        # (batch_size, in_features) -> (batch_size, out_features)
        x = self.gemm(x)
        # (batch_size, out_features) -> (batch_size, out_features)
        x = self.group_norm(x)
        # (batch_size, out_features) -> (batch_size, out_features)
        x = x * torch.sigmoid(x)
        # (batch_size, out_features) -> (batch_size, out_features)
        x = x * self.multiply_weight
        # (batch_size, out_features) -> (batch_size, out_features)
        x = x * torch.sigmoid(x)
        return x


class ModelNew(nn.Module):
    """`Model` with GroupNorm, Swish, multiply and Swish as one family operator after the GEMM."""

    def __init__(self, in_features, out_features, num_groups, multiply_weight_shape, *, gemm: str = DEFAULT_GEMM):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features)
        self.group_norm = nn.GroupNorm(num_groups, out_features)
        self.multiply_weight = nn.Parameter(torch.randn(multiply_weight_shape))
        self.gemm_variant = check_gemm(gemm)

    def extra_repr(self) -> str:
        return f"gemm={self.gemm_variant!r}"

    def forward(self, x):
        x = linear(self.gemm, x, self.gemm_variant)
        return group_norm_chain(x, self.group_norm, epilogue="silu_mul_silu",
                                epilogue_vectors=(self.multiply_weight,))


batch_size = 1024
in_features = 8192
out_features = 8192
num_groups = 256
multiply_weight_shape = (out_features,)

def get_inputs():
    return [torch.rand(batch_size, in_features)]

def get_init_inputs():
    return [in_features, out_features, num_groups, multiply_weight_shape]

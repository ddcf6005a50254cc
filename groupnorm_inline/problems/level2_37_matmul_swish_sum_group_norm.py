"""KernelBench level 2, problem 37 (`37_Matmul_Swish_Sum_GroupNorm`).

`Model`, the constants and `get_inputs`/`get_init_inputs` reproduce the KernelBench problem file: x (32768, 1024) from
`torch.rand`, Linear 1024 -> 4096, Swish, + bias (4096,), GroupNorm with 64 groups of 64 channels.

`ModelNew` draws the same parameters in the same order (Linear, bias). Forward: the Linear (see below), then one
family operator on the rows: prologue x * sigmoid(x) + bias, GroupNorm.

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
    A model that performs a matrix multiplication, applies Swish activation, sums with a bias term, and normalizes with GroupNorm.
    """
    def __init__(self, in_features, out_features, num_groups, bias_shape):
        super(Model, self).__init__()
        self.matmul = nn.Linear(in_features, out_features)
        self.bias = nn.Parameter(torch.randn(bias_shape))
        self.group_norm = nn.GroupNorm(num_groups, out_features)

    def forward(self, x):
        """
        Args:
            x (torch.Tensor): Input tensor of shape (batch_size, in_features).
        Returns:
            torch.Tensor: Output tensor of shape (batch_size, out_features).
        """
        x = self.matmul(x)
        x = torch.sigmoid(x) * x  # Swish activation
        x = x + self.bias
        x = self.group_norm(x)
        return x


class ModelNew(nn.Module):
    """`Model` with Swish, bias and GroupNorm as one family operator after the GEMM."""

    def __init__(self, in_features, out_features, num_groups, bias_shape, *, gemm: str = DEFAULT_GEMM):
        super().__init__()
        self.matmul = nn.Linear(in_features, out_features)
        self.bias = nn.Parameter(torch.randn(bias_shape))
        self.group_norm = nn.GroupNorm(num_groups, out_features)
        self.gemm_variant = check_gemm(gemm)

    def extra_repr(self) -> str:
        return f"gemm={self.gemm_variant!r}"

    def forward(self, x):
        x = linear(self.matmul, x, self.gemm_variant)
        return group_norm_chain(x, self.group_norm, prologue="silu_add", prologue_vectors=(self.bias,))


batch_size = 32768
in_features = 1024
out_features = 4096
num_groups = 64
bias_shape = (out_features,)

def get_inputs():
    return [torch.rand(batch_size, in_features)]

def get_init_inputs():
    return [in_features, out_features, num_groups, bias_shape]

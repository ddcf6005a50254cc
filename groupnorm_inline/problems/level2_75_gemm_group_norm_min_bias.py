"""KernelBench level 2, problem 75 (`75_Gemm_GroupNorm_Min_BiasAdd`).

`Model`, the constants and `get_inputs`/`get_init_inputs` reproduce the KernelBench problem file: x (1024, 8192) from
`torch.rand`, Linear 8192 -> 8192, GroupNorm with 512 groups, the min over the features (keepdim) -> (1024, 1), then
+ bias of shape (1, 8192, 1, 1), which broadcasts to the output (1, 8192, 1024, 1).

`ModelNew` draws the same parameters in the same order (Linear, bias). Forward: the Linear (see below), one family
operator on the rows (GroupNorm with the min_channels output: only (N, 1) is written), then the same broadcast add
as the reference (it makes the (1, C, N, 1) output).

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
    Model that performs a GEMM, Group Normalization, Minimum operation, and Bias addition.
    """
    def __init__(self, in_features, out_features, num_groups, bias_shape):
        super(Model, self).__init__()
        self.gemm = nn.Linear(in_features, out_features)
        self.group_norm = nn.GroupNorm(num_groups, out_features)
        self.bias = nn.Parameter(torch.randn(bias_shape))

    def forward(self, x):
        x = self.gemm(x)
        x = self.group_norm(x)
        x = torch.min(x, dim=1, keepdim=True)[0]
        x = x + self.bias
        return x


class ModelNew(nn.Module):
    """`Model` with GroupNorm + min over the features as one family operator after the GEMM."""

    def __init__(self, in_features, out_features, num_groups, bias_shape, *, gemm: str = DEFAULT_GEMM):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features)
        self.group_norm = nn.GroupNorm(num_groups, out_features)
        self.bias = nn.Parameter(torch.randn(bias_shape))
        self.gemm_variant = check_gemm(gemm)

    def extra_repr(self) -> str:
        return f"gemm={self.gemm_variant!r}"

    def forward(self, x):
        x = linear(self.gemm, x, self.gemm_variant)
        x = group_norm_chain(x, self.group_norm, output="min_channels")  # (N, 1)
        return x + self.bias.detach()


batch_size = 1024
in_features = 8192
out_features = 8192
num_groups = 512
bias_shape = (1, out_features, 1, 1)

def get_inputs():
    return [torch.rand(batch_size, in_features)]

def get_init_inputs():
    return [in_features, out_features, num_groups, bias_shape]

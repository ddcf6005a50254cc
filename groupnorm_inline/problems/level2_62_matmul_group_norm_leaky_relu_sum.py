"""KernelBench level 2, problem 62 (`62_Matmul_GroupNorm_LeakyReLU_Sum`).

`Model`, the constants and `get_inputs`/`get_init_inputs` reproduce the KernelBench problem file: x (1024, 8192) from
`torch.rand`, Linear 8192 -> 8192, GroupNorm with 512 groups of 16 channels, LeakyReLU(0.01), x + x.

`ModelNew`: the Linear (PyTorch), then one family operator on the rows: GroupNorm, epilogue LeakyReLU with the
module's slope and the sum x + x.

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
    A model that performs a matrix multiplication, group normalization, leaky ReLU activation, and element-wise sum.
    """
    def __init__(self, input_size, hidden_size, num_groups, eps=1e-5, negative_slope=0.01):
        super(Model, self).__init__()
        self.fc = nn.Linear(input_size, hidden_size)
        self.gn = nn.GroupNorm(num_groups=num_groups, num_channels=hidden_size, eps=eps)
        self.leaky_relu = nn.LeakyReLU(negative_slope=negative_slope)

    def forward(self, x):
        """
        Performs the forward pass of the model.

        Args:
            x: Input tensor of shape (batch_size, input_size).

        Returns:
            Output tensor of shape (batch_size, hidden_size).
        """
        x = self.fc(x)
        x = self.gn(x)
        x = self.leaky_relu(x)
        x = x + x
        return x


class ModelNew(nn.Module):
    """`Model` with GroupNorm, LeakyReLU and x + x as one family operator after the GEMM."""

    def __init__(self, input_size, hidden_size, num_groups, eps=1e-5, negative_slope=0.01, *, gemm: str = DEFAULT_GEMM):
        super().__init__()
        self.fc = nn.Linear(input_size, hidden_size)
        self.gn = nn.GroupNorm(num_groups=num_groups, num_channels=hidden_size, eps=eps)
        self.leaky_relu = nn.LeakyReLU(negative_slope=negative_slope)
        self.gemm_variant = check_gemm(gemm)

    def extra_repr(self) -> str:
        return f"gemm={self.gemm_variant!r}"

    def forward(self, x):
        x = linear(self.fc, x, self.gemm_variant)
        return group_norm_chain(x, self.gn, epilogue="leaky_relu_double",
                                epilogue_scalars=(self.leaky_relu.negative_slope,))


batch_size = 1024
input_size = 8192
hidden_size = 8192
num_groups = 512

def get_inputs():
    return [torch.rand(batch_size, input_size)]

def get_init_inputs():
    return [input_size, hidden_size, num_groups]

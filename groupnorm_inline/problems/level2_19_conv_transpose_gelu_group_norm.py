"""KernelBench level 2, problem 19 (`19_ConvTranspose2d_GELU_GroupNorm`).

`Model`, the constants and `get_inputs`/`get_init_inputs` reproduce the KernelBench problem file: x (128, 64, 256, 256)
from `torch.rand`, ConvTranspose2d 64 -> 64 (3 x 3, stride 1) to (128, 64, 258, 258), GELU (erf), GroupNorm with 8
groups.

`ModelNew`: the transposed convolution (PyTorch; on CUDA without its bias, which the operator adds as it reads, and
in channels_last for float32: the same cuDNN kernel without the two layout transposes of an NCHW call), then one family operator
(reading and writing channels_last): prologue GELU, GroupNorm."""

import torch
import torch.nn as nn

from .family import convolution_deferring_bias, group_norm_chain


class Model(nn.Module):
    """
    Model that performs a transposed convolution, applies GELU, and normalizes with GroupNorm.
    """
    def __init__(self, in_channels, out_channels, kernel_size, stride, groups, num_groups):
        super(Model, self).__init__()
        self.conv_transpose = nn.ConvTranspose2d(in_channels, out_channels, kernel_size, stride=stride)
        self.group_norm = nn.GroupNorm(num_groups=num_groups, num_channels=out_channels)

    def forward(self, x):
        x = self.conv_transpose(x)
        x = torch.nn.functional.gelu(x)
        x = self.group_norm(x)
        return x


class ModelNew(nn.Module):
    """`Model` with GELU + GroupNorm as one family operator after the convolution."""

    def __init__(self, in_channels, out_channels, kernel_size, stride, groups, num_groups):
        super().__init__()
        self.conv_transpose = nn.ConvTranspose2d(in_channels, out_channels, kernel_size, stride=stride)
        self.group_norm = nn.GroupNorm(num_groups=num_groups, num_channels=out_channels)

    def forward(self, x):
        x, conv_bias = convolution_deferring_bias(self.conv_transpose, x, channels_last=True)
        return group_norm_chain(x, self.group_norm, prologue="gelu", input_bias=conv_bias)


batch_size   = 128
in_channels  = 64
out_channels = 64
height = width = 256
kernel_size  = 3
stride       = 1
groups = 8
num_groups = 8

def get_inputs():
    return [torch.rand(batch_size, in_channels, height, width)]

def get_init_inputs():
    return [in_channels, out_channels, kernel_size, stride, groups, num_groups]

"""KernelBench level 2, problem 60 (`60_ConvTranspose3d_Swish_GroupNorm_HardSwish`).

`Model`, the constants and `get_inputs`/`get_init_inputs` reproduce the KernelBench problem file: x (128, 3, 16, 32, 32)
from `torch.rand`, ConvTranspose3d 3 -> 16 (3 x 3 x 3, stride 2, padding 1) to (128, 16, 31, 63, 63), Swish,
GroupNorm with 4 groups, HardSwish.

`ModelNew`: the transposed convolution (PyTorch; on CUDA without its bias, which the operator adds as it reads, and
in channels_last for float32: the same cuDNN kernel without the two layout transposes of an NCHW call), then one family operator
(reading and writing channels_last): prologue Swish, GroupNorm, epilogue HardSwish."""

import torch
import torch.nn as nn

from .family import convolution_deferring_bias, group_norm_chain


class Model(nn.Module):
    """
    Model that performs a 3D transposed convolution, applies Swish activation,
    group normalization, and then HardSwish activation.
    """
    def __init__(self, in_channels, out_channels, kernel_size, stride, padding, groups, eps, bias=True):
        super(Model, self).__init__()
        self.conv_transpose = nn.ConvTranspose3d(in_channels, out_channels, kernel_size, stride=stride, padding=padding, bias=bias)
        self.group_norm = nn.GroupNorm(num_groups=groups, num_channels=out_channels, eps=eps)

    def forward(self, x):
        x = self.conv_transpose(x)
        x = torch.sigmoid(x) * x  # Swish activation
        x = self.group_norm(x)
        x = torch.nn.functional.hardswish(x)  # HardSwish activation
        return x


class ModelNew(nn.Module):
    """`Model` with Swish + GroupNorm + HardSwish as one family operator after the convolution."""

    def __init__(self, in_channels, out_channels, kernel_size, stride, padding, groups, eps, bias=True):
        super().__init__()
        self.conv_transpose = nn.ConvTranspose3d(in_channels, out_channels, kernel_size, stride=stride,
                                                 padding=padding, bias=bias)
        self.group_norm = nn.GroupNorm(num_groups=groups, num_channels=out_channels, eps=eps)

    def forward(self, x):
        x, conv_bias = convolution_deferring_bias(self.conv_transpose, x, channels_last=True)
        return group_norm_chain(x, self.group_norm, prologue="silu", epilogue="hardswish", input_bias=conv_bias)


batch_size = 128
in_channels = 3
out_channels = 16
depth, height, width = 16, 32, 32
kernel_size = 3
stride = 2
padding = 1
groups = 4
eps = 1e-5

def get_inputs():
    return [torch.rand(batch_size, in_channels, depth, height, width)]

def get_init_inputs():
    return [in_channels, out_channels, kernel_size, stride, padding, groups, eps]

"""KernelBench level 2, problem 61 (`61_ConvTranspose3d_ReLU_GroupNorm`).

`Model`, the constants and `get_inputs`/`get_init_inputs` reproduce the KernelBench problem file: x (16, 64, 32, 32, 32)
from `torch.rand`, ConvTranspose3d 64 -> 128 (3 x 3 x 3, no bias) to (16, 128, 34, 34, 34), ReLU, GroupNorm with 8
groups.

`ModelNew`: the transposed convolution (PyTorch; on CUDA without its bias, which the operator adds as it reads, and
in channels_last for float32: the same cuDNN kernel without the two layout transposes of an NCHW call), then one family operator
(reading and writing channels_last): prologue ReLU, GroupNorm."""

import torch
import torch.nn as nn

from .family import convolution_deferring_bias, group_norm_chain


class Model(nn.Module):
    """
    Model that performs a transposed 3D convolution, applies ReLU, and then applies group normalization.
    """
    def __init__(self, in_channels, out_channels, kernel_size, groups, bias=False):
        super(Model, self).__init__()
        self.conv_transpose = nn.ConvTranspose3d(in_channels, out_channels, kernel_size, bias=bias)
        self.relu = nn.ReLU()
        self.group_norm = nn.GroupNorm(num_groups=groups, num_channels=out_channels)

    def forward(self, x):
        """
        Args:
            x (torch.Tensor): Input tensor of shape (batch_size, in_channels, D, H, W).

        Returns:
            torch.Tensor: Output tensor of shape (batch_size, out_channels, D, H, W).
        """
        x = self.conv_transpose(x)
        x = self.relu(x)
        x = self.group_norm(x)
        return x


class ModelNew(nn.Module):
    """`Model` with ReLU + GroupNorm as one family operator after the convolution."""

    def __init__(self, in_channels, out_channels, kernel_size, groups, bias=False):
        super().__init__()
        self.conv_transpose = nn.ConvTranspose3d(in_channels, out_channels, kernel_size, bias=bias)
        self.relu = nn.ReLU()  # applied by the fused operator's prologue
        self.group_norm = nn.GroupNorm(num_groups=groups, num_channels=out_channels)

    def forward(self, x):
        x, conv_bias = convolution_deferring_bias(self.conv_transpose, x, channels_last=True)
        return group_norm_chain(x, self.group_norm, prologue="relu", input_bias=conv_bias)


batch_size = 16
in_channels = 64
out_channels = 128
D, H, W = 32, 32, 32
kernel_size = 3
groups = 8
bias = False

def get_inputs():
    return [torch.rand(batch_size, in_channels, D, H, W)]

def get_init_inputs():
    return [in_channels, out_channels, kernel_size, groups, bias]

"""KernelBench level 2, problem 21 (`21_Conv2d_Add_Scale_Sigmoid_GroupNorm`).

`Model`, the constants and `get_inputs`/`get_init_inputs` reproduce the KernelBench problem file: x (128, 8, 256, 256)
from `torch.rand`, Conv2d 8 -> 32 (3 x 3) to (128, 32, 254, 254), + bias (32, 1, 1), * scale (32, 1, 1), Sigmoid,
GroupNorm with 8 groups.

`ModelNew` draws the same parameters in the same order (Conv2d, bias, scale). Forward: the convolution (on CUDA in
float32 the family's direct kernel, the float32 sums of cuDNN's NCHW algorithm for these 8 input channels, 1.49x
faster on an H100; without its bias, which the operator adds as it reads), then one family operator: prologue
sigmoid((x + bias) * scale), GroupNorm."""

import torch
import torch.nn as nn

from .family import convolution_deferring_bias, group_norm_chain


class Model(nn.Module):
    """
    Model that performs a convolution, adds a bias term, scales, applies sigmoid, and performs group normalization.
    """
    def __init__(self, in_channels, out_channels, kernel_size, num_groups, bias_shape, scale_shape):
        super(Model, self).__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.bias = nn.Parameter(torch.randn(bias_shape))
        self.scale = nn.Parameter(torch.randn(scale_shape))
        self.group_norm = nn.GroupNorm(num_groups, out_channels)

    def forward(self, x):
        x = self.conv(x)
        x = x + self.bias
        x = x * self.scale
        x = torch.sigmoid(x)
        x = self.group_norm(x)
        return x


class ModelNew(nn.Module):
    """`Model` with bias, scale, Sigmoid and GroupNorm as one family operator after the convolution."""

    def __init__(self, in_channels, out_channels, kernel_size, num_groups, bias_shape, scale_shape):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.bias = nn.Parameter(torch.randn(bias_shape))
        self.scale = nn.Parameter(torch.randn(scale_shape))
        self.group_norm = nn.GroupNorm(num_groups, out_channels)

    def forward(self, x):
        x, conv_bias = convolution_deferring_bias(self.conv, x)
        return group_norm_chain(x, self.group_norm, prologue="add_scale_sigmoid",
                                prologue_vectors=(self.bias, self.scale), input_bias=conv_bias)


batch_size = 128
in_channels = 8
out_channels = 32
height = width = 256
kernel_size = 3
num_groups = 8
bias_shape = (out_channels, 1, 1)
scale_shape = (out_channels, 1, 1)

def get_inputs():
    return [torch.rand(batch_size, in_channels, height, width)]

def get_init_inputs():
    return [in_channels, out_channels, kernel_size, num_groups, bias_shape, scale_shape]

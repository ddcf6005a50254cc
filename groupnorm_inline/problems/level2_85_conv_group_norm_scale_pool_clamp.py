"""KernelBench level 2, problem 85 (`85_Conv2d_GroupNorm_Scale_MaxPool_Clamp`).

`Model`, the constants and `get_inputs`/`get_init_inputs` reproduce the KernelBench problem file: x (128, 8, 128, 128)
from `torch.rand`, Conv2d 8 -> 64 (3 x 3) to (128, 64, 126, 126), GroupNorm with 16 groups, * scale (64, 1, 1),
MaxPool 4 x 4, clamp to [0, 1]: output (128, 64, 31, 31).

`ModelNew`: the convolution (on CUDA in float32 the family's direct kernel, the float32 sums of cuDNN's NCHW
algorithm, 1.15x faster on an H100; without its bias, which the operator adds as it reads), then one family
operator: GroupNorm, epilogue scale and clamp, the max_pool output (only the pooled tensor is written). The clamp is
applied before the max instead of after it: a clamp is non-decreasing and max-pool only selects, so both orders give
the same values (NaN included)."""

import torch
import torch.nn as nn

from .family import convolution_deferring_bias, group_norm_chain


class Model(nn.Module):
    """
    Model that performs convolution, group normalization, scaling, max pooling, and clamping.
    """
    def __init__(self, in_channels, out_channels, kernel_size, num_groups, scale_shape, maxpool_kernel_size, clamp_min, clamp_max):
        super(Model, self).__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.group_norm = nn.GroupNorm(num_groups, out_channels)
        self.scale = nn.Parameter(torch.ones(scale_shape))
        self.maxpool = nn.MaxPool2d(kernel_size=maxpool_kernel_size)
        self.clamp_min = clamp_min
        self.clamp_max = clamp_max

    def forward(self, x):
        """
        Args:
            x: Input tensor of shape (batch_size, in_channels, height, width).
        Returns:
            Output tensor of shape (batch_size, out_channels, height', width').
        """
        x = self.conv(x)
        x = self.group_norm(x)
        x = x * self.scale
        x = self.maxpool(x)
        x = torch.clamp(x, self.clamp_min, self.clamp_max)
        return x


class ModelNew(nn.Module):
    """`Model` with GroupNorm, scale, MaxPool and clamp as one family operator after the convolution."""

    def __init__(self, in_channels, out_channels, kernel_size, num_groups, scale_shape, maxpool_kernel_size,
                 clamp_min, clamp_max):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.group_norm = nn.GroupNorm(num_groups, out_channels)
        self.scale = nn.Parameter(torch.ones(scale_shape))
        self.maxpool = nn.MaxPool2d(kernel_size=maxpool_kernel_size)
        self.clamp_min = clamp_min
        self.clamp_max = clamp_max

    def forward(self, x):
        x, conv_bias = convolution_deferring_bias(self.conv, x)
        return group_norm_chain(x, self.group_norm, epilogue="scale_clamp", epilogue_vectors=(self.scale,),
                                epilogue_scalars=(self.clamp_min, self.clamp_max), output="max_pool",
                                output_pool=self.maxpool.kernel_size, input_bias=conv_bias)


batch_size = 128
in_channels = 8
out_channels = 64
height, width = 128, 128
kernel_size = 3
num_groups = 16
scale_shape = (out_channels, 1, 1)
maxpool_kernel_size = 4
clamp_min = 0.0
clamp_max = 1.0

def get_inputs():
    return [torch.rand(batch_size, in_channels, height, width)]

def get_init_inputs():
    return [in_channels, out_channels, kernel_size, num_groups, scale_shape, maxpool_kernel_size, clamp_min, clamp_max]

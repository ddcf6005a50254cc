"""KernelBench level 2, problem 23 (`23_Conv3d_GroupNorm_Mean`).

`Model`, the constants and `get_inputs`/`get_init_inputs` reproduce the KernelBench problem file: x (128, 3, 24, 32, 32)
from `torch.rand`, Conv3d 3 -> 24 (3 x 3 x 3) to (128, 24, 22, 30, 30), GroupNorm with 8 groups, the mean over every
dimension but the batch: output (128,).

With GroupNorm's initial affine parameters (weight 1, bias 0) every group's normalised values sum to zero, so the
reference output is float32 rounding noise near 0; tests and the GPU script also set other affine parameters.

`ModelNew`: the convolution (on CUDA in float32 the family's direct Conv3d kernel, the float32 sums of PyTorch's
NCDHW convolution, 1.9-4.7x faster on an H200; without its bias, which the operator adds as it reads), then one family
operator: GroupNorm with the mean_all output (per-chunk partial sums of the normalised values; the normalised tensor
is never written)."""

import torch
import torch.nn as nn

from .family import convolution_deferring_bias, group_norm_chain


class Model(nn.Module):
    """
    Model that performs a 3D convolution, applies Group Normalization, computes the mean
    """
    def __init__(self, in_channels, out_channels, kernel_size, num_groups):
        super(Model, self).__init__()
        self.conv = nn.Conv3d(in_channels, out_channels, kernel_size)
        self.group_norm = nn.GroupNorm(num_groups, out_channels)

    def forward(self, x):
        """
        Args:
            x (torch.Tensor): Input tensor of shape (batch_size, in_channels, D, H, W).
        Returns:
            torch.Tensor: Output tensor of shape (batch_size, 1).
        """
        x = self.conv(x)
        x = self.group_norm(x)
        x = x.mean(dim=[1, 2, 3, 4]) # Compute mean across all dimensions except batch
        return x


class ModelNew(nn.Module):
    """`Model` with GroupNorm + mean as one family operator after the convolution."""

    def __init__(self, in_channels, out_channels, kernel_size, num_groups):
        super().__init__()
        self.conv = nn.Conv3d(in_channels, out_channels, kernel_size)
        self.group_norm = nn.GroupNorm(num_groups, out_channels)

    def forward(self, x):
        x, conv_bias = convolution_deferring_bias(self.conv, x)
        return group_norm_chain(x, self.group_norm, output="mean_all", input_bias=conv_bias)


batch_size = 128
in_channels = 3
out_channels = 24
D, H, W = 24, 32, 32
kernel_size = 3
num_groups = 8

def get_inputs():
    return [torch.rand(batch_size, in_channels, D, H, W)]

def get_init_inputs():
    return [in_channels, out_channels, kernel_size, num_groups]

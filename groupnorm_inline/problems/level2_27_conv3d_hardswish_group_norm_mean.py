"""KernelBench level 2, problem 27 (`27_Conv3d_HardSwish_GroupNorm_Mean`).

`Model`, the constants and `get_inputs`/`get_init_inputs` reproduce the KernelBench problem file: x (1024, 3, 16, 32, 32)
from `torch.rand`, Conv3d 3 -> 16 (4 x 4 x 4) to (1024, 16, 13, 29, 29), HardSwish, GroupNorm with 4 groups (the
constructor's default), the mean over the spatial dimensions: output (1024, 16).

`ModelNew`: the convolution (on CUDA in float32 the family's direct Conv3d kernel, the float32 sums of PyTorch's
NCDHW convolution, 1.9-4.7x faster on an H200; without its bias, which the operator adds as it reads), then one family
operator: prologue HardSwish, GroupNorm, the mean_spatial output (the normalised tensor is never written)."""

import torch
import torch.nn as nn
import torch.nn.functional as F

from .family import convolution_deferring_bias, group_norm_chain


class Model(nn.Module):
    """
    Model that performs:
    1. Conv3D
    2. HardSwish activation
    3. GroupNorm
    4. Mean pooling across spatial dimensions
    """
    def __init__(self, in_channels, out_channels, kernel_size, num_groups=4, bias=True):
        super(Model, self).__init__()
        self.conv = nn.Conv3d(in_channels, out_channels, kernel_size, bias=bias)
        self.group_norm = nn.GroupNorm(num_groups, out_channels)

    def forward(self, x):
        x = self.conv(x)                             # (B, C, D, H, W)
        x = F.hardswish(x)                           # Nonlinear activation
        x = self.group_norm(x)                       # Normalization over channels
        x = torch.mean(x, dim=[2, 3, 4])             # Mean over spatial dims → (B, C)
        return x


class ModelNew(nn.Module):
    """`Model` with HardSwish + GroupNorm + mean as one family operator after the convolution."""

    def __init__(self, in_channels, out_channels, kernel_size, num_groups=4, bias=True):
        super().__init__()
        self.conv = nn.Conv3d(in_channels, out_channels, kernel_size, bias=bias)
        self.group_norm = nn.GroupNorm(num_groups, out_channels)

    def forward(self, x):
        x, conv_bias = convolution_deferring_bias(self.conv, x)
        return group_norm_chain(x, self.group_norm, prologue="hardswish", output="mean_spatial", input_bias=conv_bias)


# === Test config ===
batch_size = 1024
in_channels = 3
out_channels = 16
depth, height, width = 16, 32, 32
kernel_size = 4

def get_inputs():
    return [torch.rand(batch_size, in_channels, depth, height, width)]

def get_init_inputs():
    return [in_channels, out_channels, kernel_size]

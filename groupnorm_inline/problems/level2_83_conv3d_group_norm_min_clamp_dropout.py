"""KernelBench level 2, problem 83 (`83_Conv3d_GroupNorm_Min_Clamp_Dropout`).

`Model`, the constants and `get_inputs`/`get_init_inputs` reproduce the KernelBench problem file: x (128, 3, 16, 64, 64)
from `torch.rand`, Conv3d 3 -> 16 (3 x 3 x 3) to (128, 16, 14, 62, 62), GroupNorm with 8 groups, torch.min with
min_value = 0, clamp to [0, 1], Dropout(0.2) (active: the harness never calls eval()).

min(v, 0) clamped to [0, 1] is 0 for every value but NaN, so the reference output is zeros (NaN where the
normalised value is NaN).

`ModelNew`: the convolution (on CUDA in float32 the family's direct Conv3d kernel, the float32 sums of PyTorch's
NCDHW convolution, 1.9-4.7x faster on an H200; without its bias, which the operator adds as it reads), one family
operator (GroupNorm, epilogue min + clamp), then the module's own Dropout, which draws its mask from PyTorch's
generator exactly as the reference does (same numel, same generator state afterwards). `constant_shortcut=True`
(keyword-only, off by default) uses the identity above instead: it skips the convolution and the GroupNorm and returns
Dropout(full(clamp(min_value))) of the output shape, the same values for every finite input and the same generator
draw; NaN or inf in x or the parameters would not show."""

import torch
import torch.nn as nn

from .family import convolution_deferring_bias, group_norm_chain


class Model(nn.Module):
    """
    Model that performs a 3D convolution, applies Group Normalization, minimum, clamp, and dropout.
    """
    def __init__(self, in_channels, out_channels, kernel_size, groups, min_value, max_value, dropout_p):
        super(Model, self).__init__()
        self.conv = nn.Conv3d(in_channels, out_channels, kernel_size)
        self.norm = nn.GroupNorm(groups, out_channels)
        self.dropout = nn.Dropout(dropout_p)

    def forward(self, x):
        x = self.conv(x)
        x = self.norm(x)
        x = torch.min(x, torch.tensor(min_value, device=x.device))
        x = torch.clamp(x, min=min_value, max=max_value)
        x = self.dropout(x)
        return x


class ModelNew(nn.Module):
    """`Model` with GroupNorm + min + clamp as one family operator after the convolution; the module's Dropout."""

    def __init__(self, in_channels, out_channels, kernel_size, groups, min_value, max_value, dropout_p, *,
                 constant_shortcut: bool = False):
        super().__init__()
        self.conv = nn.Conv3d(in_channels, out_channels, kernel_size)
        self.norm = nn.GroupNorm(groups, out_channels)
        self.dropout = nn.Dropout(dropout_p)
        self.min_value = min_value
        self.max_value = max_value
        self.constant_shortcut = constant_shortcut

    def extra_repr(self) -> str:
        return f"min_value={self.min_value}, max_value={self.max_value}, constant_shortcut={self.constant_shortcut}"

    def _output_shape(self, x):
        conv = self.conv
        spatial = [(size + 2 * pad - dil * (k - 1) - 1) // st + 1 for size, pad, dil, k, st in
                   zip(x.shape[2:], conv.padding, conv.dilation, conv.kernel_size, conv.stride)]
        return (x.shape[0], conv.out_channels, *spatial)

    def forward(self, x):
        if self.constant_shortcut:
            # clamp(min(v, lo), lo, hi) = min(max(min(v, lo), lo), hi) = min(lo, hi) for every finite v.
            return self.dropout(x.new_full(self._output_shape(x), min(self.min_value, self.max_value)))
        x, conv_bias = convolution_deferring_bias(self.conv, x)
        x = group_norm_chain(x, self.norm, epilogue="min_clamp",
                             epilogue_scalars=(self.min_value, self.min_value, self.max_value), input_bias=conv_bias)
        return self.dropout(x)


batch_size = 128
in_channels = 3
out_channels = 16
depth, height, width = 16, 64, 64
kernel_size = 3
groups = 8
min_value = 0.0
max_value = 1.0
dropout_p = 0.2

def get_inputs():
    return [torch.rand(batch_size, in_channels, depth, height, width)]

def get_init_inputs():
    return [in_channels, out_channels, kernel_size, groups, min_value, max_value, dropout_p]

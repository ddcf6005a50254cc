"""KernelBench level 2, problem 11 (`11_ConvTranspose2d_BatchNorm_Tanh_MaxPool_GroupNorm`).

`Model`, the constants and `get_inputs`/`get_init_inputs` reproduce the KernelBench problem file: x (512, 64, 32, 32)
from `torch.rand` (the file sets height = width = 2048 and then 32, 32: the last assignment runs), ConvTranspose2d
64 -> 128 (5 x 5, stride 1, padding 1) to (512, 128, 34, 34), BatchNorm2d, Tanh, MaxPool 2 x 2, GroupNorm with 8
groups, output (512, 128, 17, 17).

`ModelNew` has the same constructor arguments, submodules and RNG draws. Its forward: the transposed convolution
(PyTorch; on CUDA in float32 without its bias, which the operator adds as it reads, and in channels_last as the
forward convolution it equals: cuDNN's fprop kernel without the NCHW call's two layout transposes), the BatchNorm's
statistics as its forward takes them (the batch's mean and biased variance in training mode, which the harness never
leaves, with the same update of the running buffers; the running statistics in eval mode; one read of the
channels_last output), then one family operator: prologue BatchNorm + Tanh, the 2 x 2 max-pool on the read
(input_pool), GroupNorm; in channels_last a cluster of two CTAs per sample holds its pooled values in shared
memory, so the convolution's output is read once. The pooled (512, 128, 17, 17) tensor is never written before the output, which
is channels_last where the convolution's output is."""

import torch
import torch.nn as nn

from .family import batch_norm_affine, batch_norm_statistics, convolution_deferring_bias, group_norm_chain


class Model(nn.Module):
    """
    Model that performs a transposed convolution, batch normalization, tanh activation, max pooling, and group normalization.
    """
    def __init__(self, in_channels, out_channels, kernel_size, stride, padding, groups, num_groups):
        super(Model, self).__init__()
        self.conv_transpose = nn.ConvTranspose2d(in_channels, out_channels, kernel_size, stride=stride, padding=padding)
        self.batch_norm = nn.BatchNorm2d(out_channels)
        self.tanh = nn.Tanh()
        self.max_pool = nn.MaxPool2d(kernel_size=2, stride=2)
        self.group_norm = nn.GroupNorm(num_groups=num_groups, num_channels=out_channels)

    def forward(self, x):
        x = self.conv_transpose(x)
        x = self.batch_norm(x)
        x = self.tanh(x)
        x = self.max_pool(x)
        x = self.group_norm(x)
        return x


class ModelNew(nn.Module):
    """`Model` with BatchNorm + Tanh + MaxPool + GroupNorm as one family operator after the convolution."""

    def __init__(self, in_channels, out_channels, kernel_size, stride, padding, groups, num_groups):
        super().__init__()
        self.conv_transpose = nn.ConvTranspose2d(in_channels, out_channels, kernel_size, stride=stride, padding=padding)
        self.batch_norm = nn.BatchNorm2d(out_channels)
        self.tanh = nn.Tanh()  # applied by the fused operator's prologue
        self.max_pool = nn.MaxPool2d(kernel_size=2, stride=2)
        self.group_norm = nn.GroupNorm(num_groups=num_groups, num_channels=out_channels)

    def forward(self, x):
        # The bias is deferred for float32 only: the BatchNorm's statistics are taken over x without it (the bias
        # moves the mean only), while in float16/bfloat16 the reference takes them over x + bias rounded to the
        # dtype, and those roundings move the variance of a narrow channel by more than the precision check allows.
        # In float32 on CUDA the convolution runs in channels_last (as the forward convolution it equals), and the
        # family operator reads that layout in place (its pooled channels-last kernel).
        deferred = x.is_cuda and x.dtype == torch.float32
        x, conv_bias = convolution_deferring_bias(self.conv_transpose, x, defer=deferred, channels_last=deferred)
        mean, invstd = batch_norm_statistics(self.batch_norm, x, conv_bias)
        bn_weight, bn_bias = batch_norm_affine(self.batch_norm, x.shape[1], x)
        return group_norm_chain(x, self.group_norm, prologue="batch_norm_tanh",
                                prologue_vectors=(mean, invstd, bn_weight, bn_bias),
                                input_pool=self.max_pool.kernel_size, input_bias=conv_bias)


batch_size = 512
in_channels  = 64
out_channels = 128
height = width = 2048
kernel_size  = 5
stride       = 1
padding      = 1
groups       = 8
num_groups   = 8
height, width = 32, 32

def get_inputs():
    return [torch.rand(batch_size, in_channels, height, width)]

def get_init_inputs():
    return [in_channels, out_channels, kernel_size, stride, padding, groups, num_groups]

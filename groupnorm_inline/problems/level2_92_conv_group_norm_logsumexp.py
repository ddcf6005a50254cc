"""KernelBench level 2, problem 92 (`92_Conv2d_GroupNorm_Tanh_HardSwish_ResidualAdd_LogSumExp`).

`Model`, the constants and `get_inputs`/`get_init_inputs` reproduce the KernelBench problem file: x (128, 8, 128, 128)
from `torch.rand`, Conv2d 8 -> 64 with a 3 x 3 kernel and no padding, GroupNorm with 16 groups, output
(128, 1, 126, 126).

`ModelNew` takes the same constructor arguments (`eps` included), creates the same submodules in the same
order (the Conv2d draws the only random numbers), so under one seed both hold identical `state_dict`s. Its
forward is one operator (`fused_forward`, csrc/level2_92_cpu.py describes the decomposition): a direct
float32 3 x 3 convolution that gathers the GroupNorm statistics where the convolution is produced, then one
sweep that applies GroupNorm, Tanh, HardSwish, the residual add and a numerically stable LogSumExp over the
channels and writes only the (N, 1, OH, OW) result.

`conv_kernel` (keyword-only) chooses how CUDA computes the convolution:

  "fp32"    the direct kernel: float32 FMAs from shared memory;
  "3xtf32"  an implicit GEMM on the TF32 tensor cores (sm_80+), each float32 operand split into a high and a
            low TF32 part, three products accumulated in float32 (about 22 significant bits; Cout <= 64 and
            Cin <= 16, the fp32 kernel elsewhere).

`conv_output` (keyword-only) chooses what happens to the convolution between the two:

  "store"      written once by the statistics kernel and read once by the epilogue (520 MB at the real shape);
  "recompute"  never written: the epilogue kernel computes the convolution again (twice the FMAs, no traffic).

On the CPU both keywords give the same float32 arithmetic (the direct decomposition, stored or recomputed).

The fused kernels take a 3 x 3 kernel (stride 1, no padding, as the problem has) and, on CUDA, at most 128
output channels; other configurations run the reference's own PyTorch ops, and so does KernelBench's precision
option (Model, ModelNew and inputs cast to float16 or bfloat16: PyTorch's convolution, GroupNorm and logsumexp in
that dtype with float32 accumulation). Inference only: the output carries no autograd graph.
"""

import torch
import torch.nn as nn

from .level2_92_kernels import (CONV_KERNEL_CODES, CONV_KERNELS, CONV_OUTPUT_MODES, CUDA_MAX_OUT_CHANNELS,
                                DEFAULT_CONV_KERNEL, DEFAULT_CONV_OUTPUT)
from .level2_92_kernels import ops as _ops  # builds the kernels (first time on a machine) and loads them


class Model(nn.Module):
    """
    Model that performs a convolution, applies Group Normalization, Tanh, HardSwish,
    Residual Addition, and LogSumExp (the KernelBench reference).
    """

    def __init__(self, in_channels, out_channels, kernel_size, groups, eps=1e-5):
        super(Model, self).__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.group_norm = nn.GroupNorm(groups, out_channels, eps=eps)
        self.tanh = nn.Tanh()
        self.hard_swish = nn.Hardswish()

    def forward(self, x):
        # Convolution
        x_conv = self.conv(x)
        # Group Normalization
        x_norm = self.group_norm(x_conv)
        # Tanh
        x_tanh = self.tanh(x_norm)
        # HardSwish
        x_hard_swish = self.hard_swish(x_tanh)
        # Residual Addition
        x_res = x_conv + x_hard_swish
        # LogSumExp
        x_logsumexp = torch.logsumexp(x_res, dim=1, keepdim=True)
        return x_logsumexp


class ModelNew(nn.Module):
    """`Model` as one fused operator; `conv_kernel` picks the convolution kernel and `conv_output` store or
    recompute (see the module docstring)."""

    def __init__(self, in_channels, out_channels, kernel_size, groups, eps=1e-5, *,
                 conv_kernel: str = DEFAULT_CONV_KERNEL, conv_output: str = DEFAULT_CONV_OUTPUT):
        super().__init__()
        # Same submodules, created in the same order as Model (the same RNG draws).
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.group_norm = nn.GroupNorm(groups, out_channels, eps=eps)
        self.tanh = nn.Tanh()  # kept for the module tree and repr; the fused kernel applies it
        self.hard_swish = nn.Hardswish()
        if conv_kernel not in CONV_KERNELS:
            raise ValueError(f"conv_kernel must be one of {CONV_KERNELS}, got {conv_kernel!r}")
        if conv_output not in CONV_OUTPUT_MODES:
            raise ValueError(f"conv_output must be one of {CONV_OUTPUT_MODES}, got {conv_output!r}")
        self.conv_kernel = conv_kernel
        self.conv_output = conv_output

    def extra_repr(self) -> str:
        return f"conv_kernel={self.conv_kernel!r}, conv_output={self.conv_output!r}"

    def _fused_supported(self, device: torch.device) -> bool:
        conv = self.conv
        plain = (conv.kernel_size == (3, 3) and conv.stride == (1, 1) and conv.padding == (0, 0)
                 and conv.dilation == (1, 1) and conv.groups == 1 and conv.padding_mode == "zeros"
                 and conv.bias is not None and self.group_norm.affine)
        return plain and (device.type == "cpu" or conv.out_channels <= CUDA_MAX_OUT_CHANNELS)

    def _reference_forward(self, x: torch.Tensor) -> torch.Tensor:
        x_conv = self.conv(x)
        x_res = x_conv + self.hard_swish(self.tanh(self.group_norm(x_conv)))
        return torch.logsumexp(x_res, dim=1, keepdim=True)

    def _check_input(self, x) -> None:
        weight = self.conv.weight
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"ModelNew.forward expected a Tensor, got {type(x).__name__}")
        if x.dim() != 4:
            raise RuntimeError(f"ModelNew expected a 4-D input (batch, {self.conv.in_channels}, height, width), "
                               f"got shape {tuple(x.shape)}")
        if x.shape[1] != self.conv.in_channels:
            raise RuntimeError(f"Given groups=1, weight of size {list(weight.shape)}, expected input{list(x.shape)} "
                               f"to have {self.conv.in_channels} channels, but got {x.shape[1]} channels instead")
        kh, kw = self.conv.kernel_size
        if x.shape[2] < kh or x.shape[3] < kw:
            raise RuntimeError(f"Calculated padded input size per channel: ({x.shape[2]} x {x.shape[3]}). "
                               f"Kernel size: ({kh} x {kw}). Kernel size can't be greater than actual input size")
        if weight.dtype not in (torch.float32, torch.float16, torch.bfloat16):
            raise RuntimeError(f"ModelNew computes in float32, float16 or bfloat16; its parameters are {weight.dtype}")
        if x.dtype != weight.dtype:
            raise RuntimeError(f"expected input of dtype {weight.dtype} (the parameters' dtype), got {x.dtype}")
        if x.device != weight.device:
            raise RuntimeError(f"Expected all tensors to be on the same device, but found at least two devices, "
                               f"{x.device} (input) and {weight.device} (parameters)!")
        if x.device.type not in ("cpu", "cuda"):
            raise RuntimeError(f"ModelNew runs on CPU and CUDA devices, got {x.device}")
        groups, channels = self.group_norm.num_groups, self.conv.out_channels
        out_h, out_w = x.shape[2] - kh + 1, x.shape[3] - kw + 1
        if x.shape[0] * (channels // groups) * out_h * out_w == 1:  # F.group_norm refuses one value per group
            raise ValueError(f"Expected more than 1 value per channel when training, got input size "
                             f"{[x.shape[0] * channels // groups, groups, out_h, out_w]}")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self._check_input(x)
        if not self._fused_supported(x.device) or x.dtype != torch.float32:
            with torch.no_grad():
                return self._reference_forward(x)
        gn = self.group_norm
        return _ops.fused_forward(x.detach(), self.conv.weight.detach(), self.conv.bias.detach(),
                                  gn.weight.detach(), gn.bias.detach(), gn.num_groups, gn.eps,
                                  self.conv_output == "store", CONV_KERNEL_CODES[self.conv_kernel])


batch_size = 128
in_channels = 8
out_channels = 64
height, width = 128, 128
kernel_size = 3
groups = 16


def get_inputs():
    return [torch.rand(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, groups]

"""`group_norm`: argument checks with PyTorch's wording, layout handling, and the call into the kernels."""

from __future__ import annotations

import math

import torch

from . import activations, extension
from .registration import stats_dtype

_SUPPORTED_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
_HALF_DTYPES = (torch.float16, torch.bfloat16)  # inputs that also take float32 parameters

# The checks below run on every call, ahead of a kernel that takes a few microseconds at small shapes: each
# reads a tensor's shape, dtype and device once and builds its message only when it raises.


def _check_param(name: str, param, input: torch.Tensor, channels: int, device: torch.device,
                 input_dtype: torch.dtype) -> None:
    """param: a (channels,) Tensor (not None) beside input (N, channels, *) of input_dtype on `device`."""
    if not isinstance(param, torch.Tensor):
        raise TypeError(f"group_norm: expected {name} to be a Tensor or None, got {type(param).__name__}")
    if param.dim() != 1 or param.numel() != channels:
        raise RuntimeError(
            f"Expected {name} to be a vector of size equal to the number of channels in input, but got "
            f"{name} of shape {list(param.shape)} and input of shape {list(input.shape)}")
    if param.device != device:
        raise RuntimeError(
            "Expected all tensors to be on the same device, but found at least two devices, "
            f"{device} (input) and {param.device} ({name})!")
    dtype = param.dtype
    if dtype != input_dtype and not (dtype == torch.float32 and input_dtype in _HALF_DTYPES):
        allowed = {input_dtype} | ({torch.float32} if input_dtype in _HALF_DTYPES else set())
        raise RuntimeError(
            f"group_norm: expected {name} to have dtype {' or '.join(sorted(str(d) for d in allowed))} "
            f"for an input of dtype {input_dtype}, but got {dtype}")


# Dims in the order ATen's channels-last test walks them: C, W, H, N (C, W, H, D, N).
_CHANNELS_LAST_ORDER = {4: ((1, 3, 2, 0), torch.channels_last), 5: ((1, 4, 3, 2, 0), torch.channels_last_3d)}


def _suggested_memory_format(x: torch.Tensor) -> torch.memory_format:
    """The layout PyTorch's CPU GroupNorm gives its output: ATen's `Tensor.suggest_memory_format()`.

    Ported rather than approximated with `is_contiguous(memory_format=...)`, because ATen keeps channels_last
    for any tensor whose strides are *ordered* like NHWC (NDHWC), sliced views included: the dims, taken in
    the order C, W, H, N (C, W, H, D, N), must have non-decreasing strides, each at least the extent of the
    previous one; a zero C stride, an empty dim or an N stride equal to C's (ambiguous N111) means contiguous.
    """
    order = _CHANNELS_LAST_ORDER.get(x.dim())
    if order is None:
        return torch.contiguous_format
    dim_order, channels_last = order
    shape, strides = x.shape, x.stride()
    if strides[1] == 0:
        return torch.contiguous_format
    min_stride = 0
    for d in dim_order:  # an NCHW-contiguous tensor leaves at the second dim (W's stride 1 < C's extent)
        if shape[d] == 0 or strides[d] < min_stride:
            return torch.contiguous_format
        if d == 0 and min_stride == strides[1]:
            return torch.contiguous_format
        min_stride = strides[d] * shape[d]
    return channels_last


def _checked_on_cpu(input, num_groups, weight, bias) -> bool:
    """`check_group_norm_args`, returning whether the input is on the CPU (else it is on a CUDA device)."""
    if not isinstance(input, torch.Tensor):
        raise TypeError(f"group_norm: expected input to be a Tensor, got {type(input).__name__}")
    shape = input.shape
    if len(shape) < 2:
        raise RuntimeError(f"Expected at least 2 dimensions for input tensor but received {len(shape)}")
    dtype = input.dtype
    if dtype not in _SUPPORTED_DTYPES:
        raise TypeError(f"group_norm: expected a floating-point input (float16, bfloat16, float32 or float64), "
                        f"but got {dtype}")
    if isinstance(num_groups, bool) or not isinstance(num_groups, int):
        raise TypeError(f"group_norm: num_groups must be an int, got {type(num_groups).__name__}")
    if num_groups <= 0:
        raise RuntimeError(f"Expected num groups to be greater than 0, got {num_groups}")
    channels = shape[1]
    if channels <= 0:
        raise RuntimeError(f"Expected number of channels to be greater than 0, got {channels}")
    if channels % num_groups != 0:
        raise RuntimeError(
            "Expected number of channels in input to be divisible by num_groups, but got input of shape "
            f"{list(shape)} and num_groups={num_groups}")
    rows = shape[0] * channels
    spatial = input.numel() // rows if rows else math.prod(shape[2:])  # HxW: 1 for an (N, C) input
    if spatial == 0:
        raise RuntimeError("Expected HxW to be greater than 0, got 0")
    if shape[0] * (channels // num_groups) * spatial == 1:
        # F.group_norm's own check (_verify_batch_size): one value per group cannot be normalised.
        raise ValueError("Expected more than 1 value per channel when training, got input size "
                         f"{[shape[0] * channels // num_groups, num_groups] + list(shape[2:])}")
    if weight is not None or bias is not None:
        device = input.device
        if weight is not None:
            _check_param("weight", weight, input, channels, device, dtype)
        if bias is not None:
            _check_param("bias", bias, input, channels, device, dtype)
    on_cpu = input.is_cpu
    if not on_cpu and not input.is_cuda:
        raise RuntimeError(f"group_norm: inputs on {input.device.type} are not supported (CPU and CUDA only)")
    return on_cpu


def check_group_norm_args(input, num_groups, weight=None, bias=None) -> None:
    """Raise, as `torch.nn.functional.group_norm` would, for arguments the operator cannot take."""
    _checked_on_cpu(input, num_groups, weight, bias)


def group_norm_with_stats(input: torch.Tensor, num_groups: int, weight: torch.Tensor | None = None,
                          bias: torch.Tensor | None = None, eps: float = 1e-5, *, activation=None,
                          activation_params: dict | None = None):
    """GroupNorm forward returning (output, mean, rstd); mean/rstd are (N, num_groups) float32 (float64 for
    float64 input), the statistics of the input (before any activation). Differentiable in input, weight and
    bias. `activation`, `activation_params`: as in `group_norm`."""
    act_code, act_alpha, act_beta = activations.resolve(activation, activation_params)
    on_cpu = _checked_on_cpu(input, num_groups, weight, bias)
    ops = extension.load()
    if not on_cpu and not extension.has_cuda_kernels():
        raise RuntimeError("groupnorm_inline: got a CUDA tensor, but the CUDA kernels were not built: "
                           + extension.cuda_unavailable_reason())
    # The kernels take weight and bias together (y = x * a[c] + b[c]); fill in the missing one.
    if weight is None and bias is not None:
        weight = torch.ones_like(bias)
    elif bias is None and weight is not None:
        bias = torch.zeros_like(weight)
    # The kernels read NCHW-contiguous or channels-last contiguous (NHWC / NDHWC) tensors in place and write
    # the output in the same layout; any other strides are copied once into the layout ATen suggests for them
    # (the input is never modified). The output thus keeps a channels-last network's layout on CUDA too,
    # where PyTorch's own CUDA kernel returns NCHW. The operator's autograd (C++) saves what the backward
    # needs and makes no graph node under no_grad.
    memory_format = _suggested_memory_format(input)
    if not input.is_contiguous(memory_format=memory_format):
        input = input.contiguous(memory_format=memory_format)
    out, mean, rstd = ops.group_norm_forward.default(input, num_groups, weight, bias, float(eps), act_code,
                                                     act_alpha, act_beta)
    if out.numel() == 0:
        # An empty tensor counts as contiguous whatever its strides, so the input kept its own and the kernel's
        # empty_like copied them: give it the strides PyTorch's output has (no data to move).
        out = out.as_strided(out.shape, torch.empty(out.shape, device="meta", memory_format=memory_format).stride())
    return out, mean, rstd


def group_norm(input: torch.Tensor, num_groups: int, weight: torch.Tensor | None = None,
               bias: torch.Tensor | None = None, eps: float = 1e-5, *, activation=None,
               activation_params: dict | None = None) -> torch.Tensor:
    """Same as `torch.nn.functional.group_norm(input, num_groups, weight, bias, eps)`, optionally followed by an
    activation computed in the same pass: `act(group_norm(...))`.

    input: (N, C, *) float16/bfloat16/float32/float64 on CPU or CUDA; weight, bias: (C,) of the input's
    dtype (or float32 for half inputs) or None. Statistics are accumulated in float32 or better.
    activation (keyword-only, so the positional signature stays PyTorch's): None, a name (silu, gelu, gelu_tanh, relu, leaky_relu, mish, hardswish, hardtanh, sigmoid, tanh)
    or an activation module (`nn.SiLU()`, `nn.LeakyReLU(0.2)`, `nn.GELU(approximate="tanh")`, ...);
    activation_params: the named activation's parameters, e.g. `{"negative_slope": 0.2}` for leaky_relu,
    `{"min_val": -2.0, "max_val": 2.0}` for hardtanh (PyTorch's defaults otherwise).
    The output has the input's layout (channels-last stays channels-last, on CUDA too).
    """
    return group_norm_with_stats(input, num_groups, weight, bias, eps, activation=activation,
                                activation_params=activation_params)[0]


def forward_plan(input: torch.Tensor, num_groups: int, affine: bool = True) -> str:
    """Which kernel plan the forward takes for `input` (small / resident / fused / split on CUDA, with its
    launch shape), as one line of text. Launches nothing."""
    check_group_norm_args(input, num_groups)
    if input.device.type == "cpu":
        return ("cpu: at::vec kernels, (n, g) slices (NCHW) or samples (channels-last) cut into parts when they do "
                "not share out evenly over the threads; shifted-sum statistics merged in float64")
    ops = extension.load()
    if not extension.has_cuda_kernels():
        raise RuntimeError("groupnorm_inline: the CUDA kernels were not built: " + extension.cuda_unavailable_reason())
    return ops.group_norm_forward_plan(input, num_groups, affine)


__all__ = ["group_norm", "group_norm_with_stats", "forward_plan", "check_group_norm_args", "stats_dtype"]

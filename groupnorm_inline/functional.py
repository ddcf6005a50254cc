"""`group_norm`: the Python entry to the forward operator (which checks the arguments with PyTorch's words,
picks the layout and runs the kernels)."""

from __future__ import annotations

import torch

from . import activations, extension
from .registration import stats_dtype

# The argument checks live in the operator (C++, check_forward_args in csrc/group_norm_cpu.py: PyTorch's words
# and exception types, ~50 ns) and so do the layout decision and the filling in of a missing weight or bias:
# at tiny shapes the whole call takes a few microseconds, and the same steps in Python cost ~2 us of it. What
# stays here is what only Python can say: arguments that are not tensors or ints.


def _check_python_types(input, num_groups, weight, bias) -> None:
    """TypeErrors for arguments of the wrong Python type, named as torch.nn.functional.group_norm would."""
    if not isinstance(input, torch.Tensor):
        raise TypeError(f"group_norm: expected input to be a Tensor, got {type(input).__name__}")
    if isinstance(num_groups, bool) or not isinstance(num_groups, int):
        raise TypeError(f"group_norm: num_groups must be an int, got {type(num_groups).__name__}")
    for name, param in (("weight", weight), ("bias", bias)):
        if param is not None and not isinstance(param, torch.Tensor):
            raise TypeError(f"group_norm: expected {name} to be a Tensor or None, got {type(param).__name__}")


# The forward operator, once loaded: the OpOverload (torch.ops.groupnorm_inline.group_norm_forward.default),
# which torch.compile and export trace and which handles __torch_function__ overrides (tensor subclasses, Proxy,
# torch function modes), and the extension's direct entries (csrc/python_entry.py), which eager calls otherwise:
# they call the same operator through the dispatcher (autograd, autocast and dispatch modes see it), without the
# OpOverload's boxed argument matching, and group_norm's hands back only the output. (1,8,4,4) float32 on a
# 2-core AMD EPYC at one thread: 13.3 us a call through the OpOverload's C++ entry, 9.6 through this one.
_forward_op = None
_entry_with_stats = None
_entry_output = None
_has_torch_function = torch._C._has_torch_function


def _load_forward_op():
    global _forward_op, _entry_with_stats, _entry_output
    _forward_op = extension.load().group_norm_forward.default
    entry = extension.python_entry()
    _entry_with_stats, _entry_output = entry.group_norm_with_stats, entry.group_norm
    return _forward_op


def _use_overload(input, num_groups, weight, bias):
    """Whether the call must go through the OpOverload (Dynamo tracing, __torch_function__ overrides) rather than
    the direct entry. First the checks both paths share (cheap where the types are right) and, on first use, the
    operator's loading."""
    if (type(num_groups) is not int or not isinstance(input, torch.Tensor)
            or (weight is not None and not isinstance(weight, torch.Tensor))
            or (bias is not None and not isinstance(bias, torch.Tensor))):
        _check_python_types(input, num_groups, weight, bias)
    if input.is_cuda and not extension.has_cuda_kernels():
        raise RuntimeError("groupnorm_inline: got a CUDA tensor, but the CUDA kernels were not built: "
                           + extension.cuda_unavailable_reason())
    if _forward_op is None:
        _load_forward_op()
    return torch.compiler.is_compiling() or _has_torch_function((input, weight, bias))


def check_group_norm_args(input, num_groups, weight=None, bias=None) -> None:
    """Raise, as `torch.nn.functional.group_norm` would, for arguments the operator cannot take."""
    _check_python_types(input, num_groups, weight, bias)
    extension.load().group_norm_check_args(input, num_groups, weight, bias)


def forward(input, num_groups: int, weight, bias, eps: float, act: tuple[int, float, float]):
    """The forward operator's (output, mean, rstd) for an activation already resolved to its code and
    parameters (`activations.resolve`): the path of `group_norm_with_stats`; `group_norm` and the module take
    `forward_output`, the same call handing back the output alone.

    The operator reads NCHW-contiguous or channels-last contiguous (NHWC / NDHWC) tensors in place and writes
    the output in the same layout; any other strides are copied once into the layout ATen suggests for them
    (the input is never modified). The output thus keeps a channels-last network's layout on CUDA too, where
    PyTorch's own CUDA kernel returns NCHW. The operator's autograd (C++) saves what the backward needs and
    makes no graph node under no_grad.
    """
    if _use_overload(input, num_groups, weight, bias):
        return _forward_op(input, num_groups, weight, bias, float(eps), *act)
    return _entry_with_stats(input, num_groups, weight, bias, float(eps), *act)


def forward_output(input, num_groups: int, weight, bias, eps: float, act: tuple[int, float, float]):
    """`forward(...)[0]`: the output alone (eager calls hand no statistics to Python)."""
    if _use_overload(input, num_groups, weight, bias):
        return _forward_op(input, num_groups, weight, bias, float(eps), *act)[0]
    return _entry_output(input, num_groups, weight, bias, float(eps), *act)


def group_norm_with_stats(input: torch.Tensor, num_groups: int, weight: torch.Tensor | None = None,
                          bias: torch.Tensor | None = None, eps: float = 1e-5, *, activation=None,
                          activation_params: dict | None = None):
    """GroupNorm forward returning (output, mean, rstd); mean/rstd are (N, num_groups) float32 (float64 for
    float64 input), the statistics of the input (before any activation). Differentiable in input, weight and
    bias. `activation`, `activation_params`: as in `group_norm`."""
    act = (activations.NONE if activation is None and activation_params is None
           else activations.resolve(activation, activation_params))
    return forward(input, num_groups, weight, bias, eps, act)


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
    act = (activations.NONE if activation is None and activation_params is None
           else activations.resolve(activation, activation_params))
    return forward_output(input, num_groups, weight, bias, eps, act)


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

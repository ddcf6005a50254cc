"""torch.library glue for the C++-defined operators: fake (meta) kernels and the Python parts of autograd.

    group_norm_forward(input, G, weight, bias, eps, activation=0, act_alpha=0, act_beta=0) -> (out, mean, rstd)
    group_norm_backward(grad_out, input, mean, rstd, weight, G, output_mask, bias=None, activation=0, act_alpha=0,
                        act_beta=0) -> (grad_input, grad_weight, grad_bias)
    group_norm_differentiable_backward(grad_out, input, weight, G, eps, bias=None, activation=0, act_alpha=0,
                                       act_beta=0) -> (grad_input, grad_weight, grad_bias)

`activation` is a code of activations.py (0: none): out = act(group_norm(input)).

Fake kernels let `torch.compile` trace through the operators without running them; they repeat the shape
and dtype rules of the real kernels (and their argument checks) and allocate on the input's own device
(`new_empty`). Autograd of the forward is C++ (csrc/group_norm_autograd.py: a Python autograd layer cost
several times nn.GroupNorm's host time per call); it calls the backward operator, so a compiled training
step holds two opaque custom ops and no graph break. Gradients that must themselves be differentiable
(create_graph=True) come from `group_norm_differentiable_backward`, whose implementation is the PyTorch-ops
formula below with the statistics recomputed from the input. The backward operator is differentiable too
(double backward, e.g. for gradient penalties): its own gradient is taken through the same formula.
"""

from __future__ import annotations

import torch

from . import activations
from .csrc.group_norm_cpu import OP_NAMESPACE

FORWARD_OP = f"{OP_NAMESPACE}::group_norm_forward"
BACKWARD_OP = f"{OP_NAMESPACE}::group_norm_backward"
DIFFERENTIABLE_BACKWARD_OP = f"{OP_NAMESPACE}::group_norm_differentiable_backward"

_registered = False


def stats_dtype(dtype: torch.dtype) -> torch.dtype:
    """dtype of the saved mean/rstd (and of the compute): float64 for float64 input, else float32."""
    return torch.float64 if dtype == torch.float64 else torch.float32


# ----------------------------------------------------------------------------------------------- forward

def output_memory_format(input: torch.Tensor) -> torch.memory_format:
    """The layout of the operators' outputs for an input they read in place (the kernels' rule,
    `is_channels_last` in C++): channels-last when the input is channels-last contiguous and not also
    NCHW-contiguous. The backward copies any other input to NCHW."""
    fmt = {4: torch.channels_last, 5: torch.channels_last_3d}.get(input.dim())
    if fmt is not None and not input.is_contiguous() and input.is_contiguous(memory_format=fmt):
        return fmt
    return torch.contiguous_format


# Dims in the order ATen's channels-last test walks them: C, W, H, N (C, W, H, D, N).
_CHANNELS_LAST_ORDER = {4: ((1, 3, 2, 0), torch.channels_last), 5: ((1, 4, 3, 2, 0), torch.channels_last_3d)}


def suggested_memory_format(x: torch.Tensor) -> torch.memory_format:
    """ATen's `Tensor.suggest_memory_format()`, which Python does not expose: the layout the forward copies an
    input of other strides into (`readable_input` in C++), as PyTorch's CPU GroupNorm lays out its output.

    ATen keeps channels_last for any tensor whose strides are *ordered* like NHWC (NDHWC), sliced views
    included: the dims, taken in the order C, W, H, N (C, W, H, D, N), must have non-decreasing strides, each
    at least the extent of the previous one; a zero C stride, an empty dim or an N stride equal to C's
    (ambiguous N111) means contiguous.
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


def forward_output_memory_format(input: torch.Tensor) -> torch.memory_format:
    """The layout of the forward's output for any input: the input's own when the kernels read it in place,
    contiguous when it is empty (an empty tensor is contiguous whatever its strides), else the suggested one
    it is copied into."""
    if input.is_contiguous():
        return torch.contiguous_format
    fmt = output_memory_format(input)
    return fmt if fmt != torch.contiguous_format else suggested_memory_format(input)


def _check_activation(activation):
    torch._check(0 <= activation < len(activations.ACTIVATIONS) + 1,
                 lambda: f"unknown activation code {activation}")


def _forward_fake(input, num_groups, weight, bias, eps, activation=0, act_alpha=0.0, act_beta=0.0):
    # Reached by real meta tensors too (a meta input or parameter, the autograd layer skipped under inference
    # mode): the operator's own checks refuse them, as the CPU and CUDA kernels would. Fake tensors under
    # torch.compile report the device they stand for, and their arguments were checked by the autograd layer.
    if input.device.type == "meta" or any(p is not None and p.device != input.device for p in (weight, bias)):
        getattr(torch.ops, OP_NAMESPACE).group_norm_check_args(input, num_groups, weight, bias)
    torch._check(input.dim() >= 2, lambda: "Expected at least 2 dimensions for input tensor")
    torch._check(num_groups > 0, lambda: f"Expected num groups to be greater than 0, got {num_groups}")
    _check_activation(activation)
    n = input.shape[0]
    acc = stats_dtype(input.dtype)
    return (torch.empty_like(input, memory_format=forward_output_memory_format(input)),
            input.new_empty((n, num_groups), dtype=acc), input.new_empty((n, num_groups), dtype=acc))


# ---------------------------------------------------------------------------------------------- backward

def _check_backward_args(grad_out, input, mean, rstd, weight, num_groups, output_mask) -> None:
    """The C++ kernels' checks (check_backward_args), for the fake kernel."""
    torch._check(input.dim() >= 2, lambda: (
        f"group_norm_backward: expected input with at least 2 dimensions, got {input.dim()}"))
    torch._check(num_groups > 0, lambda: f"group_norm_backward: expected num_groups > 0, got {num_groups}")
    n, c = input.shape[0], input.shape[1]
    torch._check(c % num_groups == 0, lambda: (
        f"group_norm_backward: the number of channels {c} is not divisible by num_groups={num_groups}"))
    torch._check(len(output_mask) == 3, lambda: f"group_norm_backward: expected 3 output_mask entries")
    torch._check(grad_out.shape == input.shape, lambda: (
        f"group_norm_backward: expected grad_out of shape {list(input.shape)} (the input's), but got "
        f"{list(grad_out.shape)}"))
    torch._check(grad_out.dtype == input.dtype, lambda: (
        f"group_norm_backward: expected grad_out of dtype {input.dtype} (the input's), but got {grad_out.dtype}"))
    torch._check(grad_out.device == input.device, lambda: (
        f"group_norm_backward: expected grad_out on {input.device} (the input's device), but got "
        f"{grad_out.device}"))
    acc = stats_dtype(input.dtype)
    for name, stat in (("mean", mean), ("rstd", rstd)):
        torch._check(stat.dim() == 2 and stat.shape[0] == n and stat.shape[1] == num_groups, lambda: (
            f"group_norm_backward: expected {name} of shape [{n}, {num_groups}], but got {list(stat.shape)}"))
        torch._check(stat.dtype == acc, lambda: (
            f"group_norm_backward: expected {name} of dtype {acc} for an input of dtype {input.dtype}, "
            f"but got {stat.dtype}"))
        torch._check(stat.device == input.device, lambda: (
            f"group_norm_backward: expected {name} on {input.device}, but got {stat.device}"))
    if weight is not None:
        torch._check(weight.dim() == 1 and weight.shape[0] == c, lambda: (
            f"group_norm_backward: expected weight of shape [{c}], but got {list(weight.shape)}"))
        torch._check(weight.device == input.device, lambda: (
            f"group_norm_backward: expected weight on {input.device}, but got {weight.device}"))
        torch._check(weight.dtype.is_floating_point, lambda: (
            f"group_norm_backward: expected a floating-point weight, but got {weight.dtype}"))


def _backward_fake(grad_out, input, mean, rstd, weight, num_groups, output_mask, bias=None, activation=0,
                   act_alpha=0.0, act_beta=0.0):
    _check_backward_args(grad_out, input, mean, rstd, weight, num_groups, output_mask)
    _check_activation(activation)
    c = input.shape[1]
    param_dtype = _param_dtype(input, weight)
    grad_input = (torch.empty_like(input, memory_format=output_memory_format(input)) if output_mask[0]
                  else input.new_empty((0,)))
    grad_weight = input.new_empty((c if output_mask[1] else 0,), dtype=param_dtype)
    grad_bias = input.new_empty((c if output_mask[2] else 0,), dtype=param_dtype)
    return grad_input, grad_weight, grad_bias


def backward_reference(grad_out, input, mean, rstd, weight, num_groups, bias=None, activation=0, act_alpha=0.0,
                       act_beta=0.0):
    """What the backward operator computes, in PyTorch ops (differentiable in every tensor argument).

    grad_out, input: (N, C, *); mean, rstd: (N, G); weight, bias: (C,) or None. Returns float tensors in the
    stats dtype: grad_input (N, C, *), grad_weight (C,), grad_bias (C,). Like the kernels, it refines the
    saved mean (rounded to float32 for float32/half inputs) by the slice's mean residual, so the result
    depends on the input's exact mean, not on the rounding of `mean`. With an activation, grad_out is the
    gradient of act(z), z = (x - mean) * rstd * weight + bias, and dz = grad_out * act'(z) replaces it.
    """
    acc = stats_dtype(input.dtype)
    n, c, g = input.shape[0], input.shape[1], num_groups
    x = input.to(acc).reshape(n, g, c // g, -1)                  # (N, G, C/G, HW)
    dy = grad_out.to(acc).reshape(n, g, c // g, -1)
    saved_mu = mean.reshape(n, g, 1, 1)
    mu = saved_mu + (x - saved_mu).mean(dim=(2, 3), keepdim=True)
    sigma = rstd.reshape(n, g, 1, 1)
    w = (torch.ones(c, dtype=acc, device=input.device) if weight is None else weight.to(acc)).reshape(1, g, c // g, 1)
    if activation != 0:
        b = (torch.zeros(c, dtype=acc, device=input.device) if bias is None else bias.to(acc)).reshape(1, g, c // g, 1)
        with torch.enable_grad():
            z = (x - mu) * sigma * w + b
            z_leaf = z if z.requires_grad else z.detach().requires_grad_()
            out = activations.reference(z_leaf, activation, act_alpha, act_beta)
            # create_graph keeps dz differentiable in grad_out and, through z, in input/weight/bias.
            (dy,) = torch.autograd.grad(out, z_leaf, dy, create_graph=True)
    ds = (dy * (x - mu)).sum(dim=3, keepdim=True)                 # (N, G, C/G, 1)
    db = dy.sum(dim=3, keepdim=True)
    count = x.shape[2] * x.shape[3]
    coef_x = -sigma ** 3 * (w * ds).sum(dim=2, keepdim=True) / count
    coef_1 = -sigma * (w * db).sum(dim=2, keepdim=True) / count
    grad_input = (sigma * w * dy + coef_x * (x - mu) + coef_1).reshape(input.shape)
    grad_weight = (ds * sigma).sum(dim=0).reshape(c)
    grad_bias = db.sum(dim=0).reshape(c)
    return grad_input, grad_weight, grad_bias


def _param_dtype(input, weight):
    return input.dtype if weight is None else weight.dtype


def _differentiable_backward(grad_out, input, weight, num_groups, eps, bias=None, activation=0, act_alpha=0.0,
                             act_beta=0.0):
    """`group_norm_differentiable_backward`: `backward_reference` with mean/rstd recomputed from the input in
    PyTorch ops, so the gradients are differentiable in the input too (double backward through the forward).

    grad_out, input: (N, C, *); weight: (C,) or None. Returns grad_input (N, C, *) in the input's dtype,
    grad_weight and grad_bias (C,) in the weight's (the input's when there is no weight), as the backward
    operator does; the C++ backward casts grad_bias to the bias's own dtype where that differs.
    """
    acc = stats_dtype(input.dtype)
    x = input.to(acc).reshape(input.shape[0], num_groups, -1)
    var, mean = torch.var_mean(x, dim=2, unbiased=False)
    grad_input, grad_weight, grad_bias = backward_reference(grad_out, input, mean, torch.rsqrt(var + eps), weight,
                                                            num_groups, bias, activation, act_alpha, act_beta)
    param_dtype = _param_dtype(input, weight)
    return grad_input.to(input.dtype), grad_weight.to(param_dtype), grad_bias.to(param_dtype)


def _backward_setup_context(ctx, inputs, output):
    grad_out, input, mean, rstd, weight, num_groups, output_mask = inputs[:7]
    bias, activation, act_alpha, act_beta = (tuple(inputs[7:]) + (None, 0, 0.0, 0.0)[len(inputs) - 7:])
    ctx.num_groups = num_groups
    ctx.output_mask = list(output_mask)
    ctx.activation = (activation, act_alpha, act_beta)
    ctx.save_for_backward(grad_out, input, mean, rstd, weight, bias)


def _backward_backward(ctx, gg_input, gg_weight, gg_bias):
    """Vector-Jacobian product of the backward operator, through `backward_reference`."""
    saved = ctx.saved_tensors                       # grad_out, input, mean, rstd, weight, bias
    positions = (0, 1, 2, 3, 4, 7)                  # their places among the operator's 11 arguments
    needs = [ctx.needs_input_grad[p] if p < len(ctx.needs_input_grad) else False for p in positions]
    if not any(needs):
        return (None,) * 11
    create_graph = torch.is_grad_enabled()  # True inside a backward run with create_graph=True
    with torch.enable_grad():
        # Tensors that already take part in a graph (create_graph=True) are used as they are, so the
        # result is differentiable once more; the others are cut off at a fresh leaf.
        leaves = [t if (t is not None and t.requires_grad) else
                  (t.detach().requires_grad_() if t is not None and need else t) for t, need in zip(saved, needs)]
        outs = backward_reference(*leaves[:5], ctx.num_groups, leaves[5], *ctx.activation)
        pairs = [(o, g.to(o.dtype)) for o, g, m in zip(outs, (gg_input, gg_weight, gg_bias), ctx.output_mask)
                 if m and g is not None]
        wanted = [i for i, need in enumerate(needs) if need]
        grads = torch.autograd.grad([o for o, _ in pairs], [leaves[i] for i in wanted], [g for _, g in pairs],
                                    allow_unused=True, create_graph=create_graph) if pairs else ()
    result = [None] * 11
    for i, grad in zip(wanted, grads):
        if grad is None:
            grad = torch.zeros_like(saved[i])
        result[positions[i]] = grad.to(saved[i].dtype)
    return tuple(result)


_library = None  # torch.library.Library holding the Python implementation (kept alive with the process)


def register() -> None:
    """Attach the fake kernels, the backward operator's autograd and the differentiable backward's
    implementation to the loaded operators (idempotent). The forward's autograd is the C++ kernel."""
    global _registered, _library
    if _registered:
        return
    torch.library.register_fake(FORWARD_OP)(_forward_fake)
    torch.library.register_fake(BACKWARD_OP)(_backward_fake)
    torch.library.register_autograd(BACKWARD_OP, _backward_backward, setup_context=_backward_setup_context)
    # Composite: runs under autograd (called from the C++ backward when create_graph=True), and under
    # torch.compile it decomposes into the PyTorch ops it calls.
    _library = torch.library.Library(OP_NAMESPACE, "IMPL")
    _library.impl(DIFFERENTIABLE_BACKWARD_OP.split("::")[1], _differentiable_backward, "CompositeImplicitAutograd")
    _registered = True

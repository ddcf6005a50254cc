"""torch.library glue for the C++-defined operators: fake (meta) kernels and autograd.

Fake kernels let `torch.compile` trace through the operators without running them; they repeat the shape
rules of the real kernels and allocate on the input's own device (`new_empty`).
"""

from __future__ import annotations

import torch

from .csrc.group_norm_cpu import OP_NAMESPACE

_registered = False


def stats_dtype(dtype: torch.dtype) -> torch.dtype:
    """dtype of the saved mean/rstd (and of the compute): float64 for float64 input, else float32."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def _forward_fake(input, num_groups, weight, bias, eps):
    torch._check(input.dim() >= 2, lambda: "Expected at least 2 dimensions for input tensor")
    torch._check(num_groups > 0, lambda: f"Expected num groups to be greater than 0, got {num_groups}")
    n = input.shape[0]
    acc = stats_dtype(input.dtype)
    return (torch.empty_like(input, memory_format=torch.contiguous_format),
            input.new_empty((n, num_groups), dtype=acc), input.new_empty((n, num_groups), dtype=acc))


def _forward_setup_context(ctx, inputs, output):
    input, num_groups, weight, bias, eps = inputs
    _, mean, rstd = output
    ctx.num_groups = num_groups
    ctx.mark_non_differentiable(mean, rstd)  # saved statistics, not a differentiable result
    ctx.save_for_backward(input, weight, mean, rstd)


def _forward_backward(ctx, grad_out, grad_mean, grad_rstd):
    """Gradients of y = (x - mean) * rstd * w + b, written with PyTorch ops in the stats dtype."""
    input, weight, mean, rstd = ctx.saved_tensors
    g = ctx.num_groups
    n, c = input.shape[0], input.shape[1]
    acc = stats_dtype(input.dtype)
    x = input.to(acc).reshape(n, g, c // g, -1)
    dy = grad_out.to(acc).reshape(n, g, c // g, -1)
    xhat = (x - mean.reshape(n, g, 1, 1)) * rstd.reshape(n, g, 1, 1)
    grad_weight = grad_bias = grad_input = None
    if weight is not None:
        if ctx.needs_input_grad[2]:
            grad_weight = (dy * xhat).sum(dim=(0, 3)).reshape(c).to(weight.dtype)
        if ctx.needs_input_grad[3]:
            grad_bias = dy.sum(dim=(0, 3)).reshape(c).to(weight.dtype)
        dxhat = dy * weight.to(acc).reshape(1, g, c // g, 1)
    else:
        dxhat = dy
    if ctx.needs_input_grad[0]:
        m1 = dxhat.mean(dim=(2, 3), keepdim=True)
        m2 = (dxhat * xhat).mean(dim=(2, 3), keepdim=True)
        grad_input = ((dxhat - m1 - xhat * m2) * rstd.reshape(n, g, 1, 1)).reshape(input.shape).to(input.dtype)
    return grad_input, None, grad_weight, grad_bias, None


def register() -> None:
    """Attach the fake kernel and autograd to the loaded operators (idempotent)."""
    global _registered
    if _registered:
        return
    name = f"{OP_NAMESPACE}::group_norm_forward"
    torch.library.register_fake(name)(_forward_fake)
    torch.library.register_autograd(name, _forward_backward, setup_context=_forward_setup_context)
    _registered = True

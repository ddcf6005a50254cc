"""torch.library glue for the C++-defined operators: fake (meta) kernels and autograd.

    group_norm_forward(input, G, weight, bias, eps) -> (out, mean, rstd)
    group_norm_backward(grad_out, input, mean, rstd, weight, G, output_mask) -> (grad_input, grad_weight, grad_bias)

Fake kernels let `torch.compile` trace through the operators without running them; they repeat the shape
and dtype rules of the real kernels (and their argument checks) and allocate on the input's own device
(`new_empty`). Autograd of the forward calls the backward operator, so a compiled training step holds two
opaque custom ops and no graph break. The backward operator is differentiable too (double backward, e.g.
for gradient penalties): its own gradient is taken through an equivalent formula in PyTorch ops.
"""

from __future__ import annotations

import torch

from .csrc.group_norm_cpu import OP_NAMESPACE

FORWARD_OP = f"{OP_NAMESPACE}::group_norm_forward"
BACKWARD_OP = f"{OP_NAMESPACE}::group_norm_backward"

_registered = False


def stats_dtype(dtype: torch.dtype) -> torch.dtype:
    """dtype of the saved mean/rstd (and of the compute): float64 for float64 input, else float32."""
    return torch.float64 if dtype == torch.float64 else torch.float32


# ----------------------------------------------------------------------------------------------- forward

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
    ctx.eps = eps
    ctx.bias_dtype = None if bias is None else bias.dtype
    ctx.mark_non_differentiable(mean, rstd)  # saved statistics, not a differentiable result
    ctx.save_for_backward(input, weight, mean, rstd)


def _forward_backward(ctx, grad_out, grad_mean, grad_rstd):
    """Gradients of the forward through the backward operator (mean/rstd carry no gradient)."""
    input, weight, mean, rstd = ctx.saved_tensors
    need_input, need_weight, need_bias = ctx.needs_input_grad[0], ctx.needs_input_grad[2], ctx.needs_input_grad[3]
    output_mask = [bool(need_input), bool(need_weight and weight is not None), bool(need_bias)]
    if not any(output_mask):
        return None, None, None, None, None
    if torch.is_grad_enabled():
        # create_graph=True: the gradients must be differentiable in the input, and mean/rstd depend on it,
        # so take the PyTorch-ops path with the statistics recomputed differentiably.
        grad_input, grad_weight, grad_bias = _differentiable_backward(grad_out, input, weight, ctx.num_groups,
                                                                      ctx.eps)
        grad_input, grad_weight = grad_input.to(input.dtype), grad_weight.to(_param_dtype(input, weight))
        grad_bias = grad_bias.to(_param_dtype(input, weight))
    else:  # the operator checks grad_out (shape, dtype, device) against the input
        grad_input, grad_weight, grad_bias = _call_backward_op(grad_out, input, mean, rstd, weight, ctx.num_groups,
                                                               output_mask)
    if output_mask[2] and ctx.bias_dtype is not None and grad_bias.dtype != ctx.bias_dtype:
        grad_bias = grad_bias.to(ctx.bias_dtype)  # bias may be float32 beside a half weight, or the reverse
    return (grad_input if output_mask[0] else None, None, grad_weight if output_mask[1] else None,
            grad_bias if output_mask[2] else None, None)


# The backward operator's autograd kernel (double backward) is Python; inside a backward pass grad mode is
# off and it would only redispatch, at ~30 us per call, so eager calls go straight below the autograd layer.
# Under torch.compile the operator is called as is, so the traced graph records it unchanged.
_BELOW_AUTOGRAD = getattr(torch._C, "_AutoDispatchBelowAutograd", None)
_backward_op = None  # OpOverload of group_norm_backward, looked up once (register)


def _call_backward_op(*args):
    if _BELOW_AUTOGRAD is None or torch.compiler.is_compiling():
        return _backward_op(*args)
    with _BELOW_AUTOGRAD():
        return _backward_op(*args)


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


def _backward_fake(grad_out, input, mean, rstd, weight, num_groups, output_mask):
    _check_backward_args(grad_out, input, mean, rstd, weight, num_groups, output_mask)
    c = input.shape[1]
    param_dtype = _param_dtype(input, weight)
    grad_input = input.new_empty(input.shape if output_mask[0] else (0,))
    grad_weight = input.new_empty((c if output_mask[1] else 0,), dtype=param_dtype)
    grad_bias = input.new_empty((c if output_mask[2] else 0,), dtype=param_dtype)
    return grad_input, grad_weight, grad_bias


def backward_reference(grad_out, input, mean, rstd, weight, num_groups):
    """What the backward operator computes, in PyTorch ops (differentiable in every tensor argument).

    grad_out, input: (N, C, *); mean, rstd: (N, G); weight: (C,) or None. Returns float tensors in the
    stats dtype: grad_input (N, C, *), grad_weight (C,), grad_bias (C,). Like the kernels, it refines the
    saved mean (rounded to float32 for float32/half inputs) by the slice's mean residual, so the result
    depends on the input's exact mean, not on the rounding of `mean`.
    """
    acc = stats_dtype(input.dtype)
    n, c, g = input.shape[0], input.shape[1], num_groups
    x = input.to(acc).reshape(n, g, c // g, -1)                  # (N, G, C/G, HW)
    dy = grad_out.to(acc).reshape(n, g, c // g, -1)
    saved_mu = mean.reshape(n, g, 1, 1)
    mu = saved_mu + (x - saved_mu).mean(dim=(2, 3), keepdim=True)
    sigma = rstd.reshape(n, g, 1, 1)
    w = (torch.ones(c, dtype=acc, device=input.device) if weight is None else weight.to(acc)).reshape(1, g, c // g, 1)
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


def _differentiable_backward(grad_out, input, weight, num_groups, eps):
    """`backward_reference` with mean/rstd recomputed from the input in PyTorch ops (double backward)."""
    acc = stats_dtype(input.dtype)
    x = input.to(acc).reshape(input.shape[0], num_groups, -1)
    var, mean = torch.var_mean(x, dim=2, unbiased=False)
    return backward_reference(grad_out, input, mean, torch.rsqrt(var + eps), weight, num_groups)


def _backward_setup_context(ctx, inputs, output):
    grad_out, input, mean, rstd, weight, num_groups, output_mask = inputs
    ctx.num_groups = num_groups
    ctx.output_mask = list(output_mask)
    ctx.save_for_backward(grad_out, input, mean, rstd, weight)


def _backward_backward(ctx, gg_input, gg_weight, gg_bias):
    """Vector-Jacobian product of the backward operator, through `backward_reference`."""
    saved = ctx.saved_tensors
    needs = ctx.needs_input_grad[:5]
    if not any(needs):
        return (None,) * 7
    create_graph = torch.is_grad_enabled()  # True inside a backward run with create_graph=True
    with torch.enable_grad():
        # Tensors that already take part in a graph (create_graph=True) are used as they are, so the
        # result is differentiable once more; the others are cut off at a fresh leaf.
        leaves = [t if (t is not None and t.requires_grad) else
                  (t.detach().requires_grad_() if t is not None and need else t) for t, need in zip(saved, needs)]
        outs = backward_reference(*leaves, ctx.num_groups)
        pairs = [(o, g.to(o.dtype)) for o, g, m in zip(outs, (gg_input, gg_weight, gg_bias), ctx.output_mask)
                 if m and g is not None]
        wanted = [i for i, need in enumerate(needs) if need]
        grads = torch.autograd.grad([o for o, _ in pairs], [leaves[i] for i in wanted], [g for _, g in pairs],
                                    allow_unused=True, create_graph=create_graph) if pairs else ()
    result = [None] * 7
    for i, grad in zip(wanted, grads):
        if grad is None:
            grad = torch.zeros_like(saved[i])
        result[i] = grad.to(saved[i].dtype)
    return tuple(result)


def register() -> None:
    """Attach the fake kernels and autograd to the loaded operators (idempotent)."""
    global _registered, _backward_op
    if _registered:
        return
    _backward_op = getattr(torch.ops, OP_NAMESPACE).group_norm_backward.default
    torch.library.register_fake(FORWARD_OP)(_forward_fake)
    torch.library.register_autograd(FORWARD_OP, _forward_backward, setup_context=_forward_setup_context)
    torch.library.register_fake(BACKWARD_OP)(_backward_fake)
    torch.library.register_autograd(BACKWARD_OP, _backward_backward, setup_context=_backward_setup_context)
    _registered = True

"""`torch.library.opcheck` on the forward and backward operators: schema (no hidden mutation or aliasing),
autograd registration, fake kernels against the real ones (shapes, dtypes, strides, devices), and AOT dispatch
with dynamic shapes, on CPU and CUDA inputs, with and without requires_grad; and on the differentiable
backward (the double-backward formula) that the forward's C++ autograd calls under create_graph=True."""

from __future__ import annotations

import pytest
import torch

import groupnorm_inline  # noqa: F401  (builds and registers the operators)
from groupnorm_inline.csrc.group_norm_cpu import OP_NAMESPACE

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)]


def _ops():
    return getattr(torch.ops, OP_NAMESPACE)


# (shape, num_groups, input dtype, parameter dtype or None for no affine). HW >= 1024 in the last rows takes the
# CUDA kernels' row path; (2, 6) has no trailing dims.
FORWARD_CASES = [
    ((2, 6, 5, 7), 3, torch.float32, torch.float32),
    ((2, 6), 2, torch.float32, None),
    ((3, 4, 9), 4, torch.float64, torch.float64),
    ((2, 8, 4, 4), 2, torch.float16, torch.float32),
    ((2, 8, 4, 4), 4, torch.bfloat16, torch.bfloat16),
    ((1, 4, 40, 40), 2, torch.float32, torch.float32),
]


def _forward_args(shape, num_groups, dtype, param_dtype, device, requires_grad):
    x = torch.randn(shape, device=device).to(dtype).requires_grad_(requires_grad)
    weight = bias = None
    if param_dtype is not None:
        weight = torch.randn(shape[1], device=device).to(param_dtype).requires_grad_(requires_grad)
        bias = torch.randn(shape[1], device=device).to(param_dtype).requires_grad_(requires_grad)
    return (x, num_groups, weight, bias, 1e-5)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("requires_grad", [False, True], ids=["no_grad", "requires_grad"])
@pytest.mark.parametrize("shape, num_groups, dtype, param_dtype", FORWARD_CASES, ids=str)
def test_opcheck_forward(shape, num_groups, dtype, param_dtype, requires_grad, device):
    args = _forward_args(shape, num_groups, dtype, param_dtype, device, requires_grad)
    torch.library.opcheck(_ops().group_norm_forward.default, args)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("requires_grad", [False, True], ids=["no_grad", "requires_grad"])
@pytest.mark.parametrize("view", ["transposed H/W", "channels_last, H sliced", "expanded batch (stride 0)",
                                  "(C, N) transposed to (N, C)"])
def test_opcheck_forward_views(view, requires_grad, device):
    """The operator takes any strides (copying what its kernels cannot read in place into the layout ATen
    suggests): the fake kernel must give the output the same strides as the real one."""
    from cases import make_view

    x, _ = make_view(view, torch.float32, device=device)
    x = x.requires_grad_(requires_grad) if x.is_leaf else x.detach().requires_grad_(requires_grad)
    weight = torch.randn(6, device=device).requires_grad_(requires_grad)
    bias = torch.randn(6, device=device).requires_grad_(requires_grad)
    torch.library.opcheck(_ops().group_norm_forward.default, (x, 3, weight, bias, 1e-5))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("given", ["weight only", "bias only"])
def test_opcheck_forward_one_parameter(given, device):
    """A weight without a bias or the reverse: the operator fills in the other (ones / zeros)."""
    x = torch.randn(2, 6, 5, 7, device=device, dtype=torch.float16).requires_grad_()
    param = torch.randn(6, device=device).requires_grad_()  # float32 beside a half input
    weight, bias = (param, None) if given == "weight only" else (None, param)
    torch.library.opcheck(_ops().group_norm_forward.default, (x, 3, weight, bias, 1e-5))


def _backward_args(shape, num_groups, dtype, param_dtype, device, requires_grad, output_mask):
    x = torch.randn(shape, device=device).to(dtype)
    weight = None if param_dtype is None else torch.randn(shape[1], device=device).to(param_dtype)
    _, mean, rstd = _ops().group_norm_forward(x, num_groups, weight, None if weight is None else weight, 1e-5)
    grad_out = torch.randn(shape, device=device).to(dtype)
    tensors = [grad_out, x, mean, rstd, weight]
    tensors = [t if t is None else t.detach().requires_grad_(requires_grad) for t in tensors]
    return (*tensors, num_groups, output_mask)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("requires_grad", [False, True], ids=["no_grad", "requires_grad"])
@pytest.mark.parametrize("output_mask", [[True, True, True], [True, False, False], [False, True, True]], ids=str)
@pytest.mark.parametrize("shape, num_groups, dtype, param_dtype", FORWARD_CASES, ids=str)
def test_opcheck_backward(shape, num_groups, dtype, param_dtype, output_mask, requires_grad, device):
    args = _backward_args(shape, num_groups, dtype, param_dtype, device, requires_grad, output_mask)
    torch.library.opcheck(_ops().group_norm_backward.default, args)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("shape, num_groups, dtype, param_dtype", FORWARD_CASES[:4], ids=str)
def test_opcheck_differentiable_backward(shape, num_groups, dtype, param_dtype, device):
    """The double-backward formula's operator (composite, from Python) with every tensor requiring grad."""
    x = torch.randn(shape, device=device).to(dtype).requires_grad_()
    grad_out = torch.randn(shape, device=device).to(dtype).requires_grad_()
    weight = None if param_dtype is None else torch.randn(shape[1], device=device).to(param_dtype).requires_grad_()
    torch.library.opcheck(_ops().group_norm_differentiable_backward.default, (grad_out, x, weight, num_groups, 1e-5))

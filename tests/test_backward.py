"""Gradients of `group_norm` (the `group_norm_backward` operator behind its autograd) against float64.

Reference: autograd of `torch.nn.functional.group_norm` in float64 on the CPU, fed the same (already rounded)
input, parameters and output gradient. Errors are measured against the size of what is summed
(`gradient_scales`), because grad_input is a difference of terms of size ~rstd * |w| * |dy| and
grad_weight / grad_bias are sums over N * HW terms of either sign (`GRAD_TOLERANCES`):
  - float64: 1e-9, far above float64 rounding, far below any real mistake;
  - float32: 2e-5, the output's rounding (6e-8) plus float32 products folded into float64 sums;
  - float16 / bfloat16: 4 half-ulps at the largest element (2^-11, 2^-8 per rounding of the result).
Outputs start as NaN (`poisoned_outputs`), so an element the kernels never write fails.
"""

from __future__ import annotations

import contextlib

import pytest
import torch
import torch.nn.functional as F

import groupnorm_inline
from groupnorm_inline import GroupNorm, group_norm
from groupnorm_inline.csrc.group_norm_cpu import OP_NAMESPACE
from utils import assert_close_report

pytestmark = pytest.mark.usefixtures("poisoned_outputs")

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)]

GRAD_TOLERANCES = {torch.float64: 1e-9, torch.float32: 2e-5, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}

# (shape, num_groups). Trailing dims 0..3, odd sizes, C/G in {1, 3, 5, 48}, G = 1, G = C, N = 1. For the CUDA
# kernels: rows of HW < 1024 take the short path (slices shared by lane groups, or split over CTAs as in
# (1, 64, 30, 30)); the last rows have HW >= 1024, the row path: HW odd (scalar accesses), HW a multiple of 8
# (16-byte vectors), a few long rows (rows split across CTAs).
SHAPES = [
    ((2, 6, 5, 7), 3),           # minimal 4-D, C/G = 3
    ((1, 3, 11), 1),             # N = 1, G = 1, C/G = 3
    ((3, 5), 5),                 # no trailing dims, G = C (one element per slice: var = 0)
    ((4, 10), 2),                # no trailing dims, C/G = 5
    ((2, 5, 9), 1),              # C/G = 5, G = 1
    ((2, 48, 3, 5), 1),          # C/G = 48, G = 1
    ((1, 96, 7), 2),             # C/G = 48, N = 1
    ((2, 7, 13), 7),             # G = C
    ((3, 15, 3, 3), 5),          # C/G = 3
    ((2, 10, 3, 4, 5), 2),       # 3 trailing dims, C/G = 5
    ((2, 9, 1, 1), 3),           # HW = 1
    ((1, 64, 30, 30), 1),        # one slice of 57600 elements in rows of 900
    ((2, 8, 33, 35), 4),         # HW = 1155: rows of odd length
    ((2, 4, 40, 40), 2),         # HW = 1600
    ((1, 2, 3, 6000), 1),        # HW = 18000, rows split across CTAs
]

PARAM_MODES = ["affine", "no affine", "weight only", "bias only"]
DTYPE_PARAMS = (
    [(dtype, mode) for dtype in (torch.float32, torch.float64, torch.float16, torch.bfloat16) for mode in PARAM_MODES]
    + [(torch.float16, "float32 params"), (torch.bfloat16, "float32 weight")]
)


def make_params(channels, mode, dtype, device):
    """(weight, bias) leaves for `mode`, neither the identity; "float32 params": both float32 beside a half input;
    "float32 weight": a float32 weight beside a bias of the input's dtype."""
    w = (1 + 0.5 * torch.randn(channels, dtype=torch.float64))
    b = torch.randn(channels, dtype=torch.float64)
    wdt = torch.float32 if mode in ("float32 params", "float32 weight") else dtype
    bdt = torch.float32 if mode == "float32 params" else dtype
    weight = None if mode in ("no affine", "bias only") else w.to(device, wdt).requires_grad_()
    bias = None if mode in ("no affine", "weight only") else b.to(device, bdt).requires_grad_()
    return weight, bias


def make_input(shape, dtype, device, mean=0.5, std=2.0):
    return (mean + std * torch.randn(shape, dtype=torch.float64)).to(device, dtype)


def reference_grads(x, num_groups, weight, bias, grad_out, eps=1e-5):
    """float64 gradients of F.group_norm on the CPU: {"input": ..., "weight": ..., "bias": ...} for the given
    tensors (weight / bias only when not None)."""
    leaves = {"input": x.detach().to("cpu", torch.float64).requires_grad_()}
    for name, t in (("weight", weight), ("bias", bias)):
        if t is not None:
            leaves[name] = t.detach().to("cpu", torch.float64).requires_grad_()
    ref_weight = leaves.get("weight")
    if ref_weight is None and "bias" in leaves:
        # Some torch releases (2.11) fail in native_group_norm_backward for a bias without a weight ("tensor
        # does not have a device"); a constant weight of ones is the same function.
        ref_weight = torch.ones_like(leaves["bias"])
    out = F.group_norm(leaves["input"], num_groups, ref_weight, leaves.get("bias"), eps)
    grads = torch.autograd.grad(out, list(leaves.values()), grad_out.detach().to("cpu", torch.float64))
    return dict(zip(leaves, grads))


def gradient_scales(x, num_groups, weight, grad_out, eps=1e-5):
    """The size each gradient's error is measured against (float64 scalars): for grad_input the largest
    rstd * |w| * |dy| (its leading term); for grad_weight / grad_bias the largest sum of absolute terms of one
    channel, sum |dy| (|xhat| + rstd |x|) (the reference's formula, (sum dy x - mean sum dy) rstd, rounds at
    the size of its uncentred terms) and sum |dy|. Slices of one element have gradients 0 exactly, where a
    tolerance relative to the result itself would be 0 too."""
    n, c = x.shape[0], x.shape[1]
    x64 = x.detach().to("cpu", torch.float64).reshape(n, num_groups, -1)
    var, mean = torch.var_mean(x64, dim=2, unbiased=False, keepdim=True)
    xhat = ((x64 - mean) * (var + eps).rsqrt()).reshape(n, c, -1)
    rstd = (var + eps).rsqrt().repeat_interleave(c // num_groups, dim=1)          # (N, C, 1)
    w = torch.ones(c, dtype=torch.float64) if weight is None else weight.detach().to("cpu", torch.float64)
    dy = grad_out.detach().to("cpu", torch.float64).reshape(n, c, -1).abs()
    return {"input": (rstd * w.abs().view(1, c, 1) * dy).max().item(),
            "weight": (dy * (xhat.abs() + rstd * x64.reshape(n, c, -1).abs())).sum(dim=(0, 2)).max().item(),
            "bias": dy.sum(dim=(0, 2)).max().item()}


def our_grads(x, num_groups, weight, bias, grad_out, eps=1e-5):
    leaves = {"input": x.detach().requires_grad_()}
    for name, t in (("weight", weight), ("bias", bias)):
        if t is not None:
            leaves[name] = t
    out = group_norm(leaves["input"], num_groups, leaves.get("weight"), leaves.get("bias"), eps)
    grads = torch.autograd.grad(out, list(leaves.values()), grad_out)
    return dict(zip(leaves, grads)), leaves


def assert_grads_close(x, num_groups, weight, bias, grad_out, what=""):
    ours, leaves = our_grads(x, num_groups, weight, bias, grad_out)
    expected = reference_grads(x, num_groups, weight, bias, grad_out)
    tol = GRAD_TOLERANCES[x.dtype]
    scales = gradient_scales(x, num_groups, weight, grad_out)
    for name, ref in expected.items():
        got = ours[name]
        assert got.dtype == leaves[name].dtype, f"{what} grad {name}: dtype {got.dtype} != {leaves[name].dtype}"
        assert got.device == leaves[name].device, f"{what} grad {name}: on {got.device}"
        assert_close_report(got, ref, tol * scales[name], tol, f"{what} grad {name}")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype, params", DTYPE_PARAMS, ids=lambda v: str(v).replace("torch.", ""))
@pytest.mark.parametrize("shape, num_groups", SHAPES, ids=str)
def test_grads_match_float64(shape, num_groups, dtype, params, device):
    x = make_input(shape, dtype, device)
    weight, bias = make_params(shape[1], params, dtype, device)
    grad_out = torch.randn(shape, dtype=torch.float64).to(device, dtype)
    assert_grads_close(x, num_groups, weight, bias, grad_out, f"{shape} G={num_groups} {dtype} {params}")


# Rows of HW >= 1024 take the resident (cluster) path or the row path, chosen by a rule from the device's DRAM
# bandwidth; GROUPNORM_INLINE_BACKWARD_PATH forces either, so both are checked on any GPU. The HW values end the
# CTAs' chunks in partial rounds of vectors (the batched tail of the row loops), rows whose length is not a
# multiple of the vector start at every offset from a 16-byte boundary (the row path cuts each chunk into an
# element-wise head and tail and a body of vectors; the resident path declines them), and (1, 2, 3, 6000) splits
# rows across CTAs. Every case runs with and without those edge vectors (GROUPNORM_INLINE_EDGE_VECTORS=0: one
# element at a time).
LONG_ROW_SHAPES = [
    ((2, 4, 40, 40), 2),         # HW = 1600
    ((1, 4, 126, 126), 2),       # HW = 15876: float32 rows of 3-4 full rounds, then a partial one
    ((3, 6, 33, 64), 3),         # HW = 2112
    ((2, 8, 33, 35), 4),         # HW = 1155, odd: rows at every offset (heads of every length in half precision)
    ((2, 6, 37, 58), 3),         # HW = 2146 (2 mod 4, 2 mod 8)
    ((1, 2, 3, 6000), 1),        # HW = 18000, rows split across CTAs
    ((1, 3, 7, 4001), 1),        # HW = 28007, odd: rows split across CTAs, each chunk with a head and tail
]


@pytest.mark.cuda
@pytest.mark.parametrize("edge_vectors", ["1", "0"])
@pytest.mark.parametrize("path", ["row", "resident"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64], ids=str)
@pytest.mark.parametrize("shape, num_groups", LONG_ROW_SHAPES, ids=str)
def test_long_row_paths_match_float64(shape, num_groups, dtype, path, edge_vectors, monkeypatch):
    monkeypatch.setenv("GROUPNORM_INLINE_BACKWARD_PATH", path)
    monkeypatch.setenv("GROUPNORM_INLINE_EDGE_VECTORS", edge_vectors)
    x = make_input(shape, dtype, "cuda")
    weight, bias = make_params(shape[1], "affine", dtype, "cuda")
    grad_out = torch.randn(shape, dtype=torch.float64).to("cuda", dtype)
    assert_grads_close(x, num_groups, weight, bias, grad_out,
                       f"{shape} G={num_groups} {dtype} path {path} edge vectors {edge_vectors}")


# Groups of one element (C == G and HW == 1): x is its group's mean, the normalised value 0, so grad_input is 0
# exactly, whatever rstd (1/sqrt(eps) here); PyTorch's float32 kernels leave the rounding of rstd * w * dy (~1e-4).
# NCHW (N, C) and (N, C, 1, 1) inputs, and a channels-last (N, C, 1, 1) one; on CUDA the short path.
SINGLE_ELEMENT_GROUP_CASES = [((16, 64), "contiguous"), ((3, 40, 1, 1), "channels_last"), ((2, 9000), "contiguous")]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("shape, layout", SINGLE_ELEMENT_GROUP_CASES, ids=str)
def test_single_element_groups_grad_input_is_zero(shape, layout, dtype, device):
    x = make_input(shape, dtype, device)
    if layout == "channels_last":
        x = x.contiguous(memory_format=torch.channels_last)
    weight, bias = make_params(shape[1], "affine", dtype, device)
    grad_out = torch.randn(shape, dtype=torch.float64).to(device, dtype)
    what = f"{shape} G={shape[1]} {dtype} {layout} on {device}"
    ours, _ = our_grads(x, shape[1], weight, bias, grad_out)
    dx = ours["input"]
    assert dx.stride() == x.stride(), f"{what}: grad_input strides {dx.stride()} != input's {x.stride()}"
    assert torch.equal(dx, torch.zeros_like(dx)), f"{what}: grad_input not exactly 0, max |dx| {dx.abs().max()}"
    assert_grads_close(x, shape[1], weight, bias, grad_out, what)


# The parameter gradients add N x splits partials per channel over a CTA of `cc` channels and 256 / cc item lanes
# (parameter_grads_block): few channels and many samples take cc < 32 and a multi-level lane tree, on every path
# that produces them (row, resident, and channels-last, whose CTAs have a thread count that is not a power of two
# when C / vector width does not divide 256, e.g. C = 12 in float32: 255 threads).
PARAM_SPREAD_CASES = [
    ((64, 4, 32, 64), 2, "contiguous", "row"),        # HW = 2048, 64 samples: 4 channels per CTA, 64 lanes
    ((64, 4, 32, 64), 2, "contiguous", "resident"),
    ((96, 6, 32, 32), 3, "contiguous", "row"),        # C = 6: the last CTA's channels partly past C
    ((40, 12, 16, 16), 4, "channels_last", "auto"),   # channels-last, 255-thread CTAs
    ((130, 2, 8, 8), 1, "channels_last", "auto"),     # more samples than 2 x lanes
]


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("shape, num_groups, layout, path", PARAM_SPREAD_CASES, ids=str)
def test_parameter_gradients_of_many_samples(shape, num_groups, layout, path, dtype, monkeypatch):
    if path != "auto":
        monkeypatch.setenv("GROUPNORM_INLINE_BACKWARD_PATH", path)
    x = make_input(shape, dtype, "cuda")
    if layout == "channels_last":
        x = x.contiguous(memory_format=torch.channels_last)
    weight, bias = make_params(shape[1], "affine", dtype, "cuda")
    grad_out = torch.randn(shape, dtype=torch.float64).to("cuda", dtype)
    assert_grads_close(x, num_groups, weight, bias, grad_out, f"{shape} G={num_groups} {dtype} {layout} {path}")


# Layouts of the input and of the incoming gradient: each builds a tensor of `shape` from a float64 one.
LAYOUTS = {
    "contiguous": lambda t: t,
    "channels_last": lambda t: t.contiguous(memory_format=torch.channels_last),
    "transposed H/W": lambda t: t.transpose(2, 3).contiguous().transpose(2, 3),
    "W sliced with step 2": lambda t: torch.cat([t, t], dim=3)[..., ::2],
    "storage offset 1 (unaligned)": lambda t: torch.cat([t.new_zeros(1), t.reshape(-1)])[1:].view(t.shape),
}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("grad_layout", list(LAYOUTS))
@pytest.mark.parametrize("input_layout", ["contiguous", "channels_last", "storage offset 1 (unaligned)"])
@pytest.mark.parametrize("shape, num_groups", [((2, 6, 5, 7), 3), ((2, 8, 32, 40), 4)], ids=str)
def test_layouts(shape, num_groups, input_layout, grad_layout, dtype, device):
    x = LAYOUTS[input_layout](make_input(shape, dtype, device))
    grad_out = LAYOUTS[grad_layout](torch.randn(shape, dtype=torch.float64).to(device, dtype))
    weight, bias = make_params(shape[1], "affine", dtype, device)
    assert_grads_close(x, num_groups, weight, bias, grad_out, f"input {input_layout}, grad {grad_layout}")


@pytest.mark.parametrize("device", DEVICES)
def test_expanded_grad_of_a_sum(device):
    """y.sum().backward() hands the backward a stride-0 (expanded) gradient."""
    x = make_input((3, 6, 4, 5), torch.float32, device).requires_grad_()
    weight, bias = make_params(6, "affine", torch.float32, device)
    (group_norm(x, 3, weight, bias) * torch.arange(6, device=device).view(1, 6, 1, 1)).sum().backward()
    ref = reference_grads(x, 3, weight, bias, torch.arange(6.0).view(1, 6, 1, 1).expand(3, 6, 4, 5))
    for name, got in (("input", x.grad), ("weight", weight.grad), ("bias", bias.grad)):
        assert_close_report(got, ref[name], 2e-5 * ref[name].abs().max().item(), 2e-5, f"grad {name}")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("offset, scale", [(1e4, 1.0), (-3e3, 0.01)], ids=str)
def test_large_mean_float32(offset, scale, device):
    """|mean| >> std (1e4 and 3e5 std): the per-channel sums are taken about the saved mean, so nothing
    cancels, and the saved mean's float32 rounding (up to 3e5 * 6e-8 = 2e-2 std here) is measured and
    removed, so the float32 tolerance holds."""
    x = (offset + scale * torch.randn(2, 8, 33, 31, dtype=torch.float64)).float().to(device)
    weight, bias = make_params(8, "affine", torch.float32, device)
    grad_out = torch.randn(x.shape, dtype=torch.float64).float().to(device)
    assert_grads_close(x, 4, weight, bias, grad_out, f"mean {offset}, std {scale}")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("needs", ["input only", "weight only", "bias only", "parameters only"])
def test_only_the_gradients_asked_for(needs, device):
    """Gradients not needed are not computed, and the others are unaffected."""
    x = make_input((2, 6, 5, 7), torch.float32, device).requires_grad_(needs == "input only")
    weight, bias = make_params(6, "affine", torch.float32, device)
    weight.requires_grad_(needs in ("weight only", "parameters only"))
    bias.requires_grad_(needs in ("bias only", "parameters only"))
    grad_out = torch.randn(x.shape, device=device)
    group_norm(x, 3, weight, bias).backward(grad_out)
    ref = reference_grads(x, 3, weight, bias, grad_out)
    for name, t in (("input", x), ("weight", weight), ("bias", bias)):
        if t.requires_grad:
            assert_close_report(t.grad, ref[name], 2e-5 * ref[name].abs().max().item(), 2e-5, f"grad {name}")
        else:
            assert t.grad is None, f"{name} does not require grad but got one"


# ------------------------------------------------------------------------------------------- gradcheck

GRADCHECK_CASES = [((2, 6, 5, 3), 3, "affine"), ((3, 4), 2, "no affine"), ((1, 6, 7), 6, "weight only"),
                   ((2, 4, 2, 2, 2), 1, "bias only")]


def _gradcheck_inputs(shape, mode, device):
    x = torch.randn(shape, dtype=torch.float64, device=device, requires_grad=True)
    weight, bias = make_params(shape[1], mode, torch.float64, device)
    return x, weight, bias


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("shape, num_groups, mode", GRADCHECK_CASES, ids=str)
def test_gradcheck(shape, num_groups, mode, device):
    x, weight, bias = _gradcheck_inputs(shape, mode, device)
    assert torch.autograd.gradcheck(lambda x_, w_, b_: group_norm(x_, num_groups, w_, b_), (x, weight, bias))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("shape, num_groups, mode", GRADCHECK_CASES[:2], ids=str)
def test_gradgradcheck(shape, num_groups, mode, device):
    """Double backward (create_graph=True), e.g. for gradient penalties."""
    x, weight, bias = _gradcheck_inputs(shape, mode, device)
    assert torch.autograd.gradgradcheck(lambda x_, w_, b_: group_norm(x_, num_groups, w_, b_), (x, weight, bias))


@pytest.mark.parametrize("device", DEVICES)
def test_backward_operator_gradcheck(device):
    """The backward operator alone, mean/rstd as independent inputs: its values against finite differences of
    itself, its autograd (PyTorch-ops formula) against the same."""
    op = getattr(torch.ops, OP_NAMESPACE).group_norm_backward
    x = torch.randn(2, 6, 5, 3, dtype=torch.float64, device=device)
    _, mean, rstd = getattr(torch.ops, OP_NAMESPACE).group_norm_forward(x, 3, None, None, 1e-5)
    args = [torch.randn_like(x), x, mean, rstd, torch.randn(6, dtype=torch.float64, device=device)]
    args = [t.clone().requires_grad_() for t in args]
    assert torch.autograd.gradcheck(lambda *a: op(*a, 3, [True, True, True]), args)


# ---------------------------------------------------------------------------------------- autograd layer

def test_forward_autograd_is_the_cpp_kernel():
    """The forward's autograd is the C++ kernel at the Autograd key, not a Python autograd.Function per call:
    its graph node is a C++ node with one edge per tensor argument; mean and rstd carry no gradient."""
    assert torch._C._dispatch_has_kernel_for_dispatch_key(f"{OP_NAMESPACE}::group_norm_forward", "Autograd")
    x = make_input((2, 6, 5), torch.float32, "cpu").requires_grad_()
    weight, bias = make_params(6, "affine", torch.float32, "cpu")
    out, mean, rstd = groupnorm_inline.group_norm_with_stats(x, 3, weight, bias)
    assert "GroupNormForward" in out.grad_fn.name(), out.grad_fn.name()
    assert not isinstance(out.grad_fn, torch.autograd.function.BackwardCFunction)
    assert [type(f).__name__ for f, _ in out.grad_fn.next_functions] == ["AccumulateGrad"] * 3
    assert not mean.requires_grad and not rstd.requires_grad


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("context", ["no_grad", "inference_mode", "nothing requires grad"])
def test_no_graph_without_gradients(context, device):
    """Where no gradient can be asked for, the operator runs below the autograd layer: no graph node, and the
    same values as with one."""
    x = make_input((2, 6, 5, 7), torch.float32, device)
    weight, bias = make_params(6, "affine", torch.float32, device)
    expected = [t.detach() for t in groupnorm_inline.group_norm_with_stats(x, 3, weight, bias)]
    if context == "nothing requires grad":
        weight, bias = weight.detach(), bias.detach()
    scope = {"no_grad": torch.no_grad, "inference_mode": torch.inference_mode}.get(context, contextlib.nullcontext)
    with scope():
        got = groupnorm_inline.group_norm_with_stats(x, 3, weight, bias)
    for name, t, ref in zip(("output", "mean", "rstd"), got, expected):
        assert t.grad_fn is None and not t.requires_grad, f"{name} is part of a graph"
        assert torch.equal(t, ref), f"{name} differs from the one computed with a graph"


class _NoGradientForFirst(torch.autograd.Function):
    """Returns a copy of its second argument; its backward hands its first argument no gradient (None)."""

    @staticmethod
    def forward(ctx, ignored, kept):
        return kept.clone()

    @staticmethod
    def backward(ctx, grad):
        return None, grad


def test_undefined_output_gradient_counts_as_zeros():
    """A graph that gives the forward's node no gradient for its output gets zero gradients (the missing
    output gradient is taken as zeros), not an error."""
    x = make_input((2, 6, 5), torch.float32, "cpu").requires_grad_()
    weight, bias = make_params(6, "affine", torch.float32, "cpu")
    other = torch.randn(3, requires_grad=True)
    _NoGradientForFirst.apply(group_norm(x, 3, weight, bias), other).sum().backward()
    for name, t in (("input", x), ("weight", weight), ("bias", bias)):
        assert t.grad is not None and torch.equal(t.grad, torch.zeros_like(t)), f"grad {name}: {t.grad}"


CREATE_GRAPH_CASES = [(torch.float32, "affine"), (torch.float64, "bias only"), (torch.float16, "float32 params"),
                      (torch.bfloat16, "float32 weight")]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype, params", CREATE_GRAPH_CASES, ids=lambda v: str(v).replace("torch.", ""))
def test_create_graph_gradients(dtype, params, device):
    """create_graph=True takes the differentiable path (PyTorch ops, statistics recomputed from the input):
    gradients as accurate as the plain backward's, in each leaf's dtype (a bfloat16 bias beside a float32
    weight included), and grad_input and grad_weight part of a graph themselves."""
    shape, num_groups = (2, 6, 5, 7), 3
    x = make_input(shape, dtype, device).requires_grad_()
    weight, bias = make_params(shape[1], params, dtype, device)
    grad_out = torch.randn(shape, dtype=torch.float64).to(device, dtype)
    leaves = {"input": x, "weight": weight, "bias": bias}
    leaves = {name: t for name, t in leaves.items() if t is not None}
    grads = torch.autograd.grad(group_norm(x, num_groups, weight, bias), list(leaves.values()), grad_out,
                                create_graph=True)
    expected = reference_grads(x, num_groups, weight, bias, grad_out)
    scales = gradient_scales(x, num_groups, weight, grad_out)
    tol = GRAD_TOLERANCES[dtype]
    for (name, leaf), got in zip(leaves.items(), grads):
        assert got.dtype == leaf.dtype, f"grad {name}: dtype {got.dtype} != {leaf.dtype}"
        if name != "bias":  # sum(grad_out) over a constant grad_out is a constant
            assert got.requires_grad and got.grad_fn is not None, f"grad {name} is not differentiable"
        assert_close_report(got, expected[name], tol * scales[name], tol, f"create_graph grad {name}")


@pytest.mark.parametrize("device", DEVICES)
def test_gradient_penalty_matches_float64(device):
    """A gradient penalty, |v . d y / d x|^2 differentiated again in x and weight (d y / d x does not depend
    on the bias), against the same through F.group_norm in float64. Second derivatives of a float32
    computation: tolerance 1e-4 of the largest element of each gradient."""
    shape, num_groups = (2, 6, 5, 7), 3
    x = make_input(shape, torch.float32, device).requires_grad_()
    weight, bias = make_params(shape[1], "affine", torch.float32, device)
    v = torch.randn(shape, dtype=torch.float64)

    def penalty_grads(fn, x, weight, bias):
        y = fn(x, num_groups, weight, bias)
        (grad_x,) = torch.autograd.grad((y * v.to(y)).sum(), x, create_graph=True)
        return torch.autograd.grad(grad_x.square().sum(), (x, weight))

    ours = penalty_grads(group_norm, x, weight, bias)
    ref_leaves = [t.detach().to("cpu", torch.float64).requires_grad_() for t in (x, weight, bias)]
    expected = penalty_grads(F.group_norm, *ref_leaves)
    for name, got, ref in zip(("input", "weight"), ours, expected):
        assert_close_report(got, ref, 1e-4 * ref.abs().max().item(), 1e-4, f"penalty grad {name}")


# ------------------------------------------------------------------------------------ module, problem

@pytest.mark.parametrize("device", DEVICES)
def test_module_and_problem_35_train_like_pytorch(device):
    """GroupNorm (and ModelNew of level 1 #35, which holds one) gets PyTorch's parameter gradients."""
    ours = groupnorm_inline.ModelNew(64, 8).to(device)
    ref = groupnorm_inline.Model(64, 8).to(device)
    with torch.no_grad():
        for p in list(ours.parameters()) + list(ref.parameters()):
            p.copy_(torch.randn_like(p))
        ref.load_state_dict(ours.state_dict())
    x = torch.rand(2, 64, 8, 8, device=device)
    grad_out = torch.randn_like(x)
    ours(x).backward(grad_out)
    ref(x).backward(grad_out)
    for (name, p), (_, q) in zip(ours.named_parameters(), ref.named_parameters()):
        assert_close_report(p.grad, q.grad, 1e-5 * q.grad.abs().max().item(), 1e-5, f"grad {name}")
    assert isinstance(ours.gn, GroupNorm)


# -------------------------------------------------------------------------------------------- errors

def _op_args(device="cpu"):
    x = torch.randn(2, 6, 5, dtype=torch.float32, device=device)
    _, mean, rstd = getattr(torch.ops, OP_NAMESPACE).group_norm_forward(x, 3, None, None, 1e-5)
    return dict(grad_out=torch.randn_like(x), input=x, mean=mean, rstd=rstd,
                weight=torch.ones(6, device=device), num_groups=3)


BAD_BACKWARD_ARGS = {
    "grad_out of the wrong shape": (dict(grad_out=torch.randn(2, 6, 4)), r"expected grad_out of shape \[2, 6, 5\]"),
    "grad_out of the wrong dtype": (dict(grad_out=torch.randn(2, 6, 5, dtype=torch.float64)),
                                    "expected grad_out of dtype (Float|torch.float32)"),
    "mean of the wrong shape": (dict(mean=torch.zeros(2, 2)), r"expected mean of shape \[2, 3\]"),
    "rstd of the wrong dtype": (dict(rstd=torch.ones(2, 3, dtype=torch.float64)),
                                "expected rstd of dtype (Float|torch.float32)"),
    "weight of the wrong size": (dict(weight=torch.ones(5)), r"expected weight of shape \[6\]"),
    "integer weight": (dict(weight=torch.ones(6, dtype=torch.int32)), "expected a floating-point weight"),
    "channels not divisible": (dict(num_groups=4), "not divisible by num_groups=4"),
    "num_groups zero": (dict(num_groups=0), "expected num_groups > 0"),
}


def _call_backward(args):
    op = getattr(torch.ops, OP_NAMESPACE).group_norm_backward
    return op(args["grad_out"], args["input"], args["mean"], args["rstd"], args["weight"], args["num_groups"],
              [True, True, True])


@pytest.mark.parametrize("case", list(BAD_BACKWARD_ARGS))
def test_backward_operator_rejects_bad_input(case):
    override, message = BAD_BACKWARD_ARGS[case]
    args = {**_op_args(), **override}
    with pytest.raises(RuntimeError, match=message):
        _call_backward(args)


@pytest.mark.parametrize("case", list(BAD_BACKWARD_ARGS))
def test_backward_fake_kernel_rejects_bad_input(case):
    """The fake kernel (what torch.compile traces) raises the same errors."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    override, message = BAD_BACKWARD_ARGS[case]
    args = {**_op_args(), **override}
    with FakeTensorMode(allow_non_fake_inputs=True) as mode:
        fake = {k: mode.from_tensor(v) if isinstance(v, torch.Tensor) else v for k, v in args.items()}
        with pytest.raises(RuntimeError, match=message):
            _call_backward(fake)


@pytest.mark.cuda
def test_backward_operator_rejects_mixed_devices():
    args = {**_op_args("cuda"), "grad_out": torch.randn(2, 6, 5)}
    with pytest.raises(RuntimeError, match="expected grad_out on cuda"):
        _call_backward(args)


def test_wrong_gradient_shape_through_autograd():
    """A gradient of the wrong shape never reaches the kernels: autograd names the mismatch."""
    x = torch.randn(2, 6, 5, requires_grad=True)
    y = group_norm(x, 3)
    with pytest.raises(RuntimeError, match="Mismatch in shape"):
        torch.autograd.grad(y, x, torch.randn(2, 6, 4))


@pytest.mark.parametrize("device", DEVICES)
def test_empty_batch_backward(device):
    x = torch.randn(0, 6, 5, device=device, requires_grad=True)
    weight, bias = make_params(6, "affine", torch.float32, device)
    group_norm(x, 3, weight, bias).sum().backward()
    assert x.grad.shape == x.shape
    assert torch.equal(weight.grad, torch.zeros_like(weight)) and torch.equal(bias.grad, torch.zeros_like(bias))


def test_backward_operator_output_mask():
    """Outputs not asked for come back as empty (0,) tensors; the ones asked for are unchanged."""
    args = _op_args()
    full = _call_backward(args)
    op = getattr(torch.ops, OP_NAMESPACE).group_norm_backward
    for mask in ([True, False, False], [False, True, False], [False, False, True], [False, False, False]):
        out = op(args["grad_out"], args["input"], args["mean"], args["rstd"], args["weight"], 3, mask)
        for asked, got, ref in zip(mask, out, full):
            if asked:
                assert torch.equal(got, ref)
            else:
                assert got.shape == (0,)


# ------------------------------------------------------------------------------------- CUDA, large shapes

def _assert_grads_close_by_samples(x, num_groups, weight, bias, grad_out, grads, what, eps=1e-5):
    """Our (dx, dw, db) against float64 autograd of F.group_norm computed on x's device a few samples at a time
    (the samples of a GroupNorm are independent), with the error measure of `gradient_scales`."""
    n, c = x.shape[0], x.shape[1]
    tol = GRAD_TOLERANCES[x.dtype]
    w64, b64 = weight.detach().double(), bias.detach().double()
    dw, db = torch.zeros_like(w64), torch.zeros_like(b64)
    scale_w, scale_b = torch.zeros_like(w64), torch.zeros_like(b64)
    step = max(1, (1 << 25) // x[0].numel())
    for n0 in range(0, n, step):
        xs = x[n0:n0 + step].detach().double().requires_grad_()
        gs = grad_out[n0:n0 + step].double()
        wl, bl = w64.clone().requires_grad_(), b64.clone().requires_grad_()
        ref_dx, ref_dw, ref_db = torch.autograd.grad(F.group_norm(xs, num_groups, wl, bl, eps), (xs, wl, bl), gs)
        dw += ref_dw
        db += ref_db
        with torch.no_grad():
            m = xs.shape[0]
            flat = xs.reshape(m, num_groups, -1)
            var, mean = torch.var_mean(flat, dim=2, unbiased=False, keepdim=True)
            rstd = (var + eps).rsqrt()
            xhat = ((flat - mean) * rstd).reshape(m, c, -1)
            rstd_c = rstd.repeat_interleave(c // num_groups, dim=1)          # (m, C, 1)
            g = gs.reshape(m, c, -1).abs()
            scale_x = (rstd_c * w64.abs().view(1, c, 1) * g).max().item()
            scale_w += (g * (xhat.abs() + rstd_c * xs.reshape(m, c, -1).abs())).sum(dim=(0, 2))
            scale_b += g.sum(dim=(0, 2))
            assert_close_report(grads[0][n0:n0 + step], ref_dx, tol * scale_x, tol,
                                f"{what} grad input, samples {n0}..{n0 + m - 1}")
        del xs, gs, ref_dx, flat, xhat, g
    assert_close_report(grads[1], dw, tol * scale_w.max().item(), tol, f"{what} grad weight")
    assert_close_report(grads[2], db, tol * scale_b.max().item(), tol, f"{what} grad bias")


def _large_case(shape, num_groups):
    x = torch.rand(shape, device="cuda")              # as KernelBench draws its inputs
    grad_out = torch.randn(shape, device="cuda")
    weight = (torch.rand(shape[1], device="cuda") + 0.5).requires_grad_()
    bias = (torch.rand(shape[1], device="cuda") - 0.5).requires_grad_()
    xl = x.detach().requires_grad_()
    y = group_norm(xl, num_groups, weight, bias)
    grads = torch.autograd.grad(y, (xl, weight, bias), grad_out)
    del y
    _assert_grads_close_by_samples(x, num_groups, weight, bias, grad_out, grads, f"{shape} G={num_groups}")


@pytest.mark.cuda
@pytest.mark.slow
def test_level1_35_class_shape_cuda():
    """(56, 64, 512, 512), G = 8, float32: 3.8e9 elements (64-bit offsets), rows of 262144 split across CTAs;
    half the batch of KernelBench #35 so that input, output, grad and grad_input fit beside the reference."""
    _large_case((56, 64, 512, 512), 8)


@pytest.mark.cuda
@pytest.mark.slow
def test_many_short_rows_cuda():
    """(1100000, 1024), G = 8: 1.1e9 elements in rows of one element (64-bit indices on the short-row path)."""
    _large_case((1100000, 1024), 8)


@pytest.mark.cuda
def test_runs_on_the_current_stream():
    """Backward on a side stream right after work queued on it: kernels launched elsewhere would race it."""
    x = make_input((8, 64, 64, 64), torch.float32, "cuda").requires_grad_()
    weight, bias = make_params(64, "affine", torch.float32, "cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        grad_out = torch.randn(x.shape, device="cuda")
        for _ in range(20):  # keep the side stream busy while the backward is queued
            grad_out = grad_out * 1.0001 - 0.0001 * grad_out.sin()
        y = group_norm(x, 8, weight, bias)
        grads = torch.autograd.grad(y, (x, weight, bias), grad_out)
    side.synchronize()
    expected = reference_grads(x, 8, weight, bias, grad_out)
    scales = gradient_scales(x, 8, weight, grad_out)
    for name, got in zip(("input", "weight", "bias"), grads):
        assert_close_report(got, expected[name], 2e-5 * scales[name], 2e-5, f"grad {name}")

"""The fused activation, y = act(group_norm(x)): every activation x dtype x layout x direction against float64
references built from PyTorch's own activation modules, the module form against nn.Sequential(nn.GroupNorm, act),
opcheck and torch.compile with the activation arguments, and the errors a bad activation argument gets.

Tolerances: the activation's derivative is at most 1.5 in magnitude for every activation of the table (hardswish
at z = 3; gelu's ~1.13), so an error of the normalised value passes through it at most 1.5x amplified; forward
tolerances are twice the plain GroupNorm ones with their conditioning term (tests/utils.group_norm_atol: groups of
two elements whose variance is << eps have rstd ~ 1/sqrt(eps), and any float32 GroupNorm, PyTorch's too, is off
by ~7e-5 there), which also covers the output's own rounding. Backward tolerances are scaled by the size of the
reference gradient (float64 autograd of the same composite).
"""

from __future__ import annotations

import zlib

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from groupnorm_inline import GroupNorm, group_norm, group_norm_with_stats
from groupnorm_inline.csrc.group_norm_cpu import OP_NAMESPACE
from utils import TOLERANCES, assert_bitwise_equal, assert_close_report, group_norm_atol

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)]

# name, activation_params, the same activation as a PyTorch module (the reference).
ACTIVATIONS = [
    ("silu", None, nn.SiLU()),
    ("gelu", None, nn.GELU()),
    ("gelu_tanh", None, nn.GELU(approximate="tanh")),
    ("relu", None, nn.ReLU()),
    ("leaky_relu", {"negative_slope": 0.2}, nn.LeakyReLU(0.2)),
    ("mish", None, nn.Mish()),
    ("hardswish", None, nn.Hardswish()),
    ("hardtanh", {"min_val": -0.5, "max_val": 0.7}, nn.Hardtanh(-0.5, 0.7)),
    ("sigmoid", None, nn.Sigmoid()),
    ("tanh", None, nn.Tanh()),
]
IDS = [a[0] for a in ACTIVATIONS]

# (shape, groups, memory format): a 4-D NCHW slice of HW >= 1024 (the CUDA row paths), a short one, channels-last
# 4-D and 5-D, no trailing dims, and one channel per group.
SHAPES = [
    ((2, 8, 40, 40), 4, torch.contiguous_format),
    ((3, 12, 5, 7), 3, torch.contiguous_format),
    ((2, 16, 6, 5), 4, torch.channels_last),
    ((2, 8, 3, 4, 5), 2, torch.channels_last_3d),
    ((5, 6), 3, torch.contiguous_format),
    ((2, 6, 7, 3), 6, torch.contiguous_format),
    ((2, 16, 48, 48), 4, torch.contiguous_format),  # CUDA: slices of 9216, a cluster per slice (resident plan)
    ((3, 12, 2, 3), 4, torch.contiguous_format),  # channels of 6, shorter than a CPU vector in every dtype
    # CPU: channels of 1073 (a partial last vector), slices of 3219 normalised 1024 elements at a time into a
    # buffer, then activated: chunk edges inside channels
    ((2, 6, 37, 29), 2, torch.contiguous_format),
]


def _ops():
    return getattr(torch.ops, OP_NAMESPACE)


def _input(shape, dtype, memory_format, device, requires_grad=False):
    # A seed of the case's own, the same in every process (hash() of a str is salted per process).
    gen = torch.Generator().manual_seed(zlib.crc32(repr((shape, str(dtype))).encode()))
    x = (torch.randn(shape, generator=gen, dtype=torch.float64) * 1.7 + 0.3).to(dtype)
    x = x.to(device).contiguous(memory_format=memory_format)
    return x.requires_grad_(requires_grad)


def _params(channels, dtype, device, requires_grad=False):
    gen = torch.Generator().manual_seed(channels)
    w = (1 + 0.5 * torch.randn(channels, generator=gen, dtype=torch.float64)).to(device, dtype)
    b = (0.5 * torch.randn(channels, generator=gen, dtype=torch.float64)).to(device, dtype)
    return w.requires_grad_(requires_grad), b.requires_grad_(requires_grad)


def _reference(x, groups, w, b, eps, module):
    """act(group_norm(x)) in float64 on the CPU, PyTorch's functions only."""
    z = F.group_norm(x.detach().to("cpu", torch.float64), groups,
                     None if w is None else w.detach().to("cpu", torch.float64),
                     None if b is None else b.detach().to("cpu", torch.float64), eps)
    return module(z)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("name, params, module", ACTIVATIONS, ids=IDS)
@pytest.mark.parametrize("shape, groups, memory_format", SHAPES, ids=str)
def test_forward(shape, groups, memory_format, name, params, module, dtype, device):
    x = _input(shape, dtype, memory_format, device)
    w, b = _params(shape[1], dtype, device)
    x_before = x.clone(memory_format=torch.preserve_format)
    out, mean, rstd = group_norm_with_stats(x, groups, w, b, 1e-5, activation=name, activation_params=params)
    assert_bitwise_equal(x, x_before, "input")
    assert out.dtype == dtype and out.shape == x.shape
    assert out.is_contiguous(memory_format=memory_format), f"output strides {out.stride()} lost {memory_format}"
    _, rtol = TOLERANCES[dtype]
    atol = 2 * group_norm_atol(x, groups, w, b, 1e-5)
    assert_close_report(out, _reference(x, groups, w, b, 1e-5, module), atol, 2 * rtol, f"{name} output")
    # mean/rstd are the input's statistics, untouched by the activation.
    _, mean0, rstd0 = group_norm_with_stats(x, groups, w, b, 1e-5)
    assert torch.equal(mean, mean0) and torch.equal(rstd, rstd0)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("name", ["silu", "sigmoid", "mish", "tanh", "gelu_tanh"])
@pytest.mark.parametrize("memory_format", [torch.contiguous_format, torch.channels_last], ids=str)
def test_forward_far_tails(memory_format, name, dtype, device):
    """z from -120 to +120 (biases of +-40, +-100): the sigmoid's exponential overflows to inf (z < -88) and
    flushes to 0 (z > 87) in float, and tanh saturates (the CPU's float tanh is a rational of z clamped to
    |z| <= 7.9, +-1 from |z| = 9 on); the results must still be 0-ish, z or +-1 there, as PyTorch's."""
    shape = (2, 8, 24, 24)
    x = _input(shape, dtype, memory_format, device)
    w = torch.full((8,), 6.0, dtype=dtype, device=device)
    b = torch.tensor([-100.0, -40.0, -3.0, 0.0, 3.0, 40.0, 100.0, -90.0], dtype=dtype, device=device)
    out = group_norm(x, 2, w, b, 1e-5, activation=name)
    module = dict((a[0], a[2]) for a in ACTIVATIONS)[name]
    atol, rtol = TOLERANCES[dtype]
    # |z| up to ~120: the normalised value's own error scales with |w| and |b|, so the tolerance does too.
    assert_close_report(out, _reference(x, 2, w, b, 1e-5, module), 100 * atol, 2 * rtol, f"{name} far tails")
    assert torch.isfinite(out).all()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64], ids=str)
def test_tanh_special_values(dtype, device):
    """tanh of z = bias (weight 0): +-inf -> +-1 exactly, NaN stays NaN, tiny values and signed zeros as they
    are, and the values around the float rational's clamp (7.9) and saturation (9) as torch.tanh's."""
    values = [float("nan"), float("inf"), -float("inf"), 1e-30, -1e-30, -3e-4, 7.0, -7.9, 8.5, -9.0, 12.0, 0.5]
    b = torch.tensor(values * 2, dtype=dtype, device=device)
    x = _input((2, 24, 3, 5), dtype, torch.contiguous_format, device)
    out = group_norm(x, 4, torch.zeros(24, dtype=dtype, device=device), b, 1e-5, activation="tanh")
    expected = torch.tanh(b.double()).to(dtype).view(1, 24, 1, 1).expand_as(out)
    assert torch.isnan(out[:, 0::12]).all(), "tanh(NaN)"
    finite = ~torch.isnan(expected)
    atol = {torch.float32: 3e-7, torch.bfloat16: 8e-3, torch.float64: 1e-15}[dtype]  # bfloat16: one ulp near 1
    assert_close_report(out[finite], expected[finite], atol, 0.0, "tanh special values")
    for col, want in ((1, 1.0), (2, -1.0), (13, 1.0), (14, -1.0)):
        assert (out[:, col] == want).all(), f"tanh({values[col % 12]}) = {out[0, col, 0, 0].item()}, not {want}"


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name, params, module", ACTIVATIONS, ids=IDS)
@pytest.mark.parametrize("shape, groups, memory_format", SHAPES, ids=str)
def test_backward_float64(shape, groups, memory_format, name, params, module, device):
    """Gradients of input, weight and bias against float64 autograd through PyTorch's own ops."""
    x = _input(shape, torch.float64, memory_format, device, requires_grad=True)
    w, b = _params(shape[1], torch.float64, device, requires_grad=True)
    gen = torch.Generator().manual_seed(7)
    grad = torch.randn(shape, generator=gen, dtype=torch.float64).to(device)
    out = group_norm(x, groups, w, b, 1e-5, activation=name, activation_params=params)
    ours = torch.autograd.grad(out, (x, w, b), grad)
    xr, wr, br = (t.detach().cpu().requires_grad_() for t in (x, w, b))
    ref = module(F.group_norm(xr, groups, wr, br, 1e-5))
    theirs = torch.autograd.grad(ref, (xr, wr, br), grad.cpu())
    for what, a, e in zip(("grad_input", "grad_weight", "grad_bias"), ours, theirs):
        assert_close_report(a, e, 1e-9 * (1 + e.abs().max().item()), 1e-9, f"{name} {what}")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("name, params, module", ACTIVATIONS, ids=IDS)
def test_backward_low_precision(name, params, module, dtype, device):
    """float32 / bfloat16 gradients against float64 autograd from the same rounded inputs (channels-last too)."""
    tol = {torch.float32: 1e-4, torch.bfloat16: 6e-2}[dtype]
    for shape, groups, memory_format in SHAPES[:4]:
        x = _input(shape, dtype, memory_format, device, requires_grad=True)
        w, b = _params(shape[1], dtype, device, requires_grad=True)
        grad = torch.randn(shape, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
        out = group_norm(x, groups, w, b, 1e-5, activation=name, activation_params=params)
        ours = torch.autograd.grad(out, (x, w, b), grad.to(device, dtype))
        xr, wr, br = (t.detach().to("cpu", torch.float64).requires_grad_() for t in (x, w, b))
        ref = module(F.group_norm(xr, groups, wr, br, 1e-5))
        theirs = torch.autograd.grad(ref, (xr, wr, br), grad.to(dtype).double())
        for what, a, e in zip(("grad_input", "grad_weight", "grad_bias"), ours, theirs):
            scale = 1 + e.abs().max().item()
            assert_close_report(a, e, tol * scale, tol, f"{name} {what} {shape} {memory_format}")


@pytest.mark.parametrize("num_threads", [1, 3])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("name, params, module", ACTIVATIONS, ids=IDS)
def test_backward_channels_of_a_few_vectors(name, params, module, dtype, num_threads):
    """CPU: NCHW channels of 2-320 elements, which the AVX-512 backward takes 16 channels at a time, dz = dy *
    act'(z) formed per lane with the row's channel's scale and bias and kept for grad_input: 2 elements (16
    channels a vector), 16 (one vector each), 17 (two), 48 (one channel a group), 50 (10 channels a group, a partial
    last vector) and 320 (the longest), on 1 and 3 threads. AVX2 builds take channels of 16 to 64 elements (16-bit
    data: to 256) 8 at a time, dz of a chunk of slices computed first (slices of 34 and 250 elements end in a
    partial vector): 255 is the longest 16-bit one."""
    tol = {torch.float32: 1e-4, torch.bfloat16: 6e-2, torch.float16: 1e-2}[dtype]
    before = torch.get_num_threads()
    torch.set_num_threads(num_threads)
    try:
        for shape, groups in (((21, 8, 2), 4), ((9, 48, 4, 4), 16), ((7, 10, 17), 5), ((17, 32, 48), 32),
                              ((2, 40, 2, 5, 5), 4), ((3, 8, 320), 4), ((3, 16, 255), 4)):
            x = _input(shape, dtype, torch.contiguous_format, "cpu", requires_grad=True)
            w, b = _params(shape[1], dtype, "cpu", requires_grad=True)
            grad = torch.randn(shape, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
            out = group_norm(x, groups, w, b, 1e-5, activation=name, activation_params=params)
            ours = torch.autograd.grad(out, (x, w, b), grad.to(dtype))
            xr, wr, br = (t.detach().double().requires_grad_() for t in (x, w, b))
            ref = module(F.group_norm(xr, groups, wr, br, 1e-5))
            theirs = torch.autograd.grad(ref, (xr, wr, br), grad.to(dtype).double())
            for what, a, e in zip(("grad_input", "grad_weight", "grad_bias"), ours, theirs):
                scale = 1 + e.abs().max().item()
                assert_close_report(a, e, tol * scale, tol, f"{name} {what} {shape} {num_threads} threads")
    finally:
        torch.set_num_threads(before)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64], ids=str)
@pytest.mark.parametrize("name, params, module", ACTIVATIONS, ids=IDS)
def test_backward_short_channels_cut_into_parts(name, params, module, dtype):
    """CPU: one slice of 7000 channels of 5 elements on 3 threads. The backward cuts the slice into 3 parts (their
    boundaries inside a channel) and computes dz = dy * act'(z) of channels shorter than a vector in runs of a few
    thousand elements (run boundaries inside channels too) before the sums and grad_input."""
    tol = {torch.float32: 1e-4, torch.bfloat16: 6e-2, torch.float64: 1e-9}[dtype]
    before = torch.get_num_threads()
    torch.set_num_threads(3)
    try:
        shape = (1, 7000, 5)
        x = _input(shape, dtype, torch.contiguous_format, "cpu", requires_grad=True)
        w, b = _params(shape[1], dtype, "cpu", requires_grad=True)
        grad = torch.randn(shape, generator=torch.Generator().manual_seed(5), dtype=torch.float64).to(dtype)
        out = group_norm(x, 1, w, b, 1e-5, activation=name, activation_params=params)
        ours = torch.autograd.grad(out, (x, w, b), grad)
    finally:
        torch.set_num_threads(before)
    xr, wr, br = (t.detach().double().requires_grad_() for t in (x, w, b))
    theirs = torch.autograd.grad(module(F.group_norm(xr, 1, wr, br, 1e-5)), (xr, wr, br), grad.double())
    for what, a, e in zip(("grad_input", "grad_weight", "grad_bias"), ours, theirs):
        assert_close_report(a, e, tol * (1 + e.abs().max().item()), tol, f"{name} {dtype} {what}")


@pytest.mark.parametrize("name, params, module", ACTIVATIONS[:6], ids=IDS[:6])
def test_gradcheck_and_double_backward(name, params, module):
    x = _input((2, 4, 3, 3), torch.float64, torch.contiguous_format, "cpu", requires_grad=True)
    w, b = _params(4, torch.float64, "cpu", requires_grad=True)

    def fn(x, w, b):
        return group_norm(x, 2, w, b, 1e-5, activation=name, activation_params=params)
    assert torch.autograd.gradcheck(fn, (x, w, b))
    if name not in ("relu", "leaky_relu"):  # piecewise-linear: second derivative is zero almost everywhere
        assert torch.autograd.gradgradcheck(fn, (x, w, b))


@pytest.mark.parametrize("channels_last", [False, True], ids=["nchw", "channels_last"])
@pytest.mark.parametrize("name", ["sigmoid", "tanh"])
def test_cpu_derivative_from_saved_output(name, channels_last):
    """CPU: sigmoid and tanh take their derivative from the saved output (y (1 - y), 1 - y^2, as PyTorch's own
    autograd does) and run the plain GroupNorm backward on dz. Gradients against PyTorch's GroupNorm then the
    activation in float64 (gradcheck, double backward), and the saved output guarded as PyTorch guards it: changed
    in place before the backward, the backward raises PyTorch's error instead of using the changed values."""
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    x = _input((2, 6, 3, 3), torch.float64, fmt, "cpu", requires_grad=True)
    w, b = _params(6, torch.float64, "cpu", requires_grad=True)

    def fn(x, w, b):
        return group_norm(x, 3, w, b, 1e-5, activation=name)
    assert torch.autograd.gradcheck(fn, (x, w, b))
    assert torch.autograd.gradgradcheck(fn, (x, w, b))

    out = fn(x, w, b)
    out.mul_(2.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        torch.autograd.grad(out.sum(), (x, w, b))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("activation", [nn.SiLU(), nn.LeakyReLU(0.3), nn.GELU(approximate="tanh"), nn.ReLU6(),
                                        nn.Hardtanh(-2.0, 3.0)], ids=repr)
def test_module_matches_sequential(activation, device):
    ours = GroupNorm(4, 16, activation=activation).to(device)
    theirs = nn.Sequential(nn.GroupNorm(4, 16), activation).to(device)
    with torch.no_grad():
        theirs[0].weight.normal_(1.0, 0.3)
        theirs[0].bias.normal_(0.0, 0.3)
    ours.load_state_dict(theirs[0].state_dict())
    assert list(ours.state_dict()) == list(nn.GroupNorm(4, 16).state_dict())
    x = _input((2, 16, 9, 9), torch.float32, torch.channels_last, device)
    assert_close_report(ours(x), theirs(x), 2e-5, 2e-5, f"GroupNorm(activation={activation!r})")
    assert "activation=" in repr(ours)


@pytest.mark.parametrize("device", DEVICES)
def test_opcheck_with_activation(device):
    x = _input((2, 8, 5, 7), torch.float32, torch.contiguous_format, device, requires_grad=True)
    w, b = _params(8, torch.float32, device, requires_grad=True)
    torch.library.opcheck(_ops().group_norm_forward.default, (x, 4, w, b, 1e-5, 5, 0.2, 0.0))
    _, mean, rstd = _ops().group_norm_forward(x.detach(), 4, w.detach(), b.detach(), 1e-5, 1, 0.0, 0.0)
    g = torch.randn_like(x)
    torch.library.opcheck(_ops().group_norm_backward.default,
                          (g, x.detach(), mean, rstd, w.detach(), 4, [True, True, True], b.detach(), 1, 0.0, 0.0))
    torch.library.opcheck(_ops().group_norm_differentiable_backward.default,
                          (g.requires_grad_(), x, w, 4, 1e-5, b, 8, -0.5, 0.5))


@pytest.mark.parametrize("device", DEVICES)
def test_compile_fullgraph_with_activation(device):
    """One graph, no breaks, and the compiled forward and backward match eager."""
    torch._dynamo.reset()
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), GroupNorm(4, 8, activation="silu"),
                          nn.Conv2d(8, 4, 1)).to(device)
    x = torch.randn(2, 3, 10, 10, device=device)
    explanation = torch._dynamo.explain(model)(x)
    assert explanation.graph_break_count == 0 and explanation.graph_count == 1
    compiled = torch.compile(model, backend="aot_eager", fullgraph=True)
    out_c = compiled(x)
    out_e = model(x)
    assert_close_report(out_c, out_e, 1e-5, 1e-5, "compiled output")
    (g_c,) = torch.autograd.grad(out_c.sum(), model[1].weight)
    (g_e,) = torch.autograd.grad(out_e.sum(), model[1].weight)
    assert_close_report(g_c, g_e, 1e-4, 1e-4, "compiled grad_weight")


def test_bad_activation_arguments():
    x = torch.randn(2, 4, 3)
    with pytest.raises(ValueError, match="unknown activation 'swish2'"):
        group_norm(x, 2, activation="swish2")
    with pytest.raises(TypeError, match="activation must be None, a str or an nn.Module"):
        group_norm(x, 2, activation=3)
    with pytest.raises(TypeError, match="activation_params must be a dict"):
        group_norm(x, 2, activation="leaky_relu", activation_params=[0.1])
    with pytest.raises(TypeError, match="negative_slope must be a number"):
        group_norm(x, 2, activation="leaky_relu", activation_params={"negative_slope": "0.1"})
    with pytest.raises(ValueError, match="silu"):
        group_norm(x, 2, activation="silu", activation_params={"negative_slope": 0.1})
    with pytest.raises(ValueError, match="given without an activation"):
        group_norm(x, 2, activation_params={"negative_slope": 0.1})
    with pytest.raises(ValueError, match="ELU is not supported"):
        group_norm(x, 2, activation=nn.ELU())
    with pytest.raises(ValueError, match="min_val <= max_val"):
        group_norm(x, 2, activation="hardtanh", activation_params={"min_val": 1.0, "max_val": -1.0})
    with pytest.raises(ValueError, match="unknown activation"):
        GroupNorm(2, 4, activation="nope")  # at construction, not at the first forward
    with pytest.raises(RuntimeError, match="unknown activation code"):
        _ops().group_norm_forward(x, 2, None, None, 1e-5, 99, 0.0, 0.0)

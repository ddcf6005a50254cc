"""`group_norm` / `group_norm_with_stats` on the CPU against a float64 reference.

Every case checks the output (tolerances: tests/utils.py TOLERANCES plus the conditioning term of
`group_norm_atol`), the returned mean/rstd (STATS_RTOL), that the input is left bitwise unchanged, and that
shape, dtype and memory layout are those `torch.nn.functional.group_norm` returns. Outputs start as NaN
(`poisoned_outputs`), so an element the kernel never writes fails the comparison.
"""

from __future__ import annotations

import inspect

import pytest
import torch
import torch.nn.functional as F

from groupnorm_inline import group_norm, group_norm_with_stats
from utils import assert_bitwise_equal, assert_group_norm_close, assert_stats_close

pytestmark = pytest.mark.usefixtures("poisoned_outputs")

# (shape, num_groups). Trailing dims 0..3, sizes mostly odd (not multiples of 4), C/G in {1, 3, 5, 48}.
SHAPES = [
    # minimal
    ((2, 1), 1),                 # one element per slice: var 0, y = bias
    ((1, 2), 1),                 # N = 1, two elements
    ((1, 4, 3), 2),
    # trailing dims 0..3
    ((3, 12), 4),                # (N, C), C/G = 3
    ((2, 10, 17), 2),            # (N, C, L), C/G = 5
    ((2, 6, 7, 9), 2),           # (N, C, H, W), C/G = 3
    ((2, 10, 3, 5, 7), 2),       # (N, C, D, H, W), C/G = 5
    # group == channel (C/G = 1)
    ((2, 7, 13), 7),
    ((3, 5, 3, 3), 5),
    ((4, 6), 6),                 # one element per slice again, several groups
    ((2, 3, 2, 3, 5), 3),        # 5-D
    # G = 1: the whole sample is one slice
    ((2, 48, 5, 3), 1),          # C/G = 48
    ((1, 3, 31), 1),
    # C/G = 48
    ((2, 96, 7), 2),
    ((1, 144, 3, 3), 3),
    # N = 1
    ((1, 15, 4, 9), 5),          # C/G = 3
    ((1, 10, 3, 3, 3), 2),       # C/G = 5, 5-D
    # non-aligned: prime extents, H = W = 1
    ((3, 15, 1, 13), 3),
    ((2, 9, 1, 1), 3),
    # larger slices (7680 elements), sizes that are multiples of 4
    ((2, 32, 40, 24), 8),
]

# (input dtype, how weight/bias are given). Parameters are in the input's dtype except for "float32 params":
# half inputs with float32 weight and bias, the mixed mode PyTorch accepts (e.g. under autocast).
PARAM_MODES = ["affine", "no affine", "weight only", "bias only"]
DTYPE_PARAMS = (
    [(dtype, mode) for dtype in (torch.float32, torch.float64, torch.float16, torch.bfloat16) for mode in PARAM_MODES]
    + [(torch.float16, "float32 params"), (torch.bfloat16, "float32 params")]
)


def make_input(shape, dtype, mean=0.5, std=2.0):
    """Normal values drawn in float64 and rounded once to `dtype` (the reference sees the rounded values)."""
    return (mean + std * torch.randn(shape, dtype=torch.float64)).to(dtype)


def make_params(channels, mode, dtype):
    """(weight, bias) for `mode`; weight ~ 1 + 0.5 N(0, 1), bias ~ N(0, 1), so neither is the identity."""
    param_dtype = torch.float32 if mode == "float32 params" else dtype
    weight = (1 + 0.5 * torch.randn(channels, dtype=torch.float64)).to(param_dtype)
    bias = torch.randn(channels, dtype=torch.float64).to(param_dtype)
    return {
        "affine": (weight, bias),
        "float32 params": (weight, bias),
        "no affine": (None, None),
        "weight only": (weight, None),
        "bias only": (None, bias),
    }[mode]


def check_forward(x, num_groups, weight=None, bias=None, eps=1e-5, what="output"):
    """Run the operator on x and check everything a caller can observe; returns the output."""
    x_before = x.clone(memory_format=torch.preserve_format)
    out, mean, rstd = group_norm_with_stats(x, num_groups, weight, bias, eps)
    assert_bitwise_equal(x, x_before, "input")
    assert_group_norm_close(out, x, num_groups, weight, bias, eps, what)
    assert_stats_close(mean, rstd, x, num_groups, eps)
    expected_layout = F.group_norm(x, num_groups, weight, bias, eps)
    assert out.stride() == expected_layout.stride(), \
        f"{what}: strides {out.stride()}, F.group_norm returns {expected_layout.stride()}"
    assert torch.equal(group_norm(x, num_groups, weight, bias, eps), out), "group_norm != group_norm_with_stats[0]"
    return out


@pytest.mark.parametrize("dtype, params", DTYPE_PARAMS, ids=lambda v: str(v).replace("torch.", ""))
@pytest.mark.parametrize("shape, num_groups", SHAPES, ids=str)
def test_forward_matches_float64(shape, num_groups, dtype, params):
    x = make_input(shape, dtype)
    weight, bias = make_params(shape[1], params, dtype)
    check_forward(x, num_groups, weight, bias)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("eps", [
    0.0,       # no regularisation (var > 0 here)
    1e-12,
    1e-5,      # nn.GroupNorm's default
    0.1,       # comparable to var (0.09): a misplaced eps shows
    10.0,      # eps dominates var
])
def test_eps(eps, dtype):
    x = make_input((2, 6, 5, 7), dtype, std=0.3)
    weight, bias = make_params(6, "affine", dtype)
    check_forward(x, 3, weight, bias, eps)


# Non-contiguous inputs. Each entry builds (view, base): the view handed to the operator and the tensor that
# owns its storage (checked unchanged). The output must have the strides F.group_norm gives on the CPU:
# channels_last(_3d) kept for strides ordered like NHWC (sliced views too), contiguous otherwise.
VIEWS = {
    "transposed H/W": lambda dt: _view(torch.randn(2, 6, 5, 7, dtype=dt), lambda b: b.transpose(2, 3)),
    "(N, L, C) permuted to (N, C, L)": lambda dt: _view(torch.randn(3, 11, 6, dtype=dt), lambda b: b.permute(0, 2, 1)),
    "(C, N) transposed to (N, C)": lambda dt: _view(torch.randn(6, 4, dtype=dt), lambda b: b.t()),
    "W sliced with step 2": lambda dt: _view(torch.randn(2, 6, 5, 14, dtype=dt), lambda b: b[..., ::2]),
    "channel slice": lambda dt: _view(torch.randn(2, 9, 5, 7, dtype=dt), lambda b: b[:, 2:8]),
    "batch slice (storage offset)": lambda dt: _view(torch.randn(4, 6, 5, 7, dtype=dt), lambda b: b[1:3]),
    "expanded batch (stride 0)": lambda dt: _view(torch.randn(1, 6, 5, 7, dtype=dt), lambda b: b.expand(3, 6, 5, 7)),
    "channels_last": lambda dt: _view(torch.randn(2, 6, 5, 7, dtype=dt),
                                      lambda b: b.contiguous(memory_format=torch.channels_last)),
    "channels_last_3d": lambda dt: _view(torch.randn(2, 6, 3, 5, 7, dtype=dt),
                                         lambda b: b.contiguous(memory_format=torch.channels_last_3d)),
    "channels_last, H sliced": lambda dt: _view(torch.randn(2, 6, 10, 7, dtype=dt).contiguous(
        memory_format=torch.channels_last), lambda b: b[:, :, ::2]),
    "channels_last_3d, channel slice": lambda dt: _view(torch.randn(2, 9, 3, 5, 7, dtype=dt).contiguous(
        memory_format=torch.channels_last_3d), lambda b: b[:, 1:7]),
    "channels_last from permute": lambda dt: _view(torch.randn(2, 5, 7, 6, dtype=dt), lambda b: b.permute(0, 3, 1, 2)),
}


def _view(base, make_view):
    return make_view(base), base


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16], ids=str)
@pytest.mark.parametrize("view", list(VIEWS))
def test_non_contiguous_and_channels_last(view, dtype):
    x, base = VIEWS[view](dtype)
    assert not x.is_contiguous() or x.data_ptr() != base.data_ptr(), "the case must be a real view"
    base_before = base.clone(memory_format=torch.preserve_format)
    weight, bias = make_params(x.shape[1], "affine", dtype)
    check_forward(x, 3, weight, bias, what=view)
    assert_bitwise_equal(base, base_before, "storage under the view")


@pytest.mark.parametrize("memory_format", [None, torch.channels_last], ids=["contiguous", "channels_last"])
@pytest.mark.parametrize("shape, num_groups", [
    ((0, 6), 3),
    ((0, 6, 5), 2),
    ((0, 6, 4, 5), 3),
    ((0, 6, 2, 3, 4), 6),
], ids=str)
def test_empty_batch(shape, num_groups, memory_format):
    """N = 0: an empty output of the input's shape and dtype, (0, G) statistics, as F.group_norm."""
    if memory_format is not None and len(shape) != 4:
        memory_format = None  # channels_last exists for 4-D tensors only
    x = torch.randn(shape)
    if memory_format is not None:
        x = x.contiguous(memory_format=memory_format)
    weight, bias = make_params(shape[1], "affine", x.dtype)
    expected = F.group_norm(x, num_groups, weight, bias)
    out, mean, rstd = group_norm_with_stats(x, num_groups, weight, bias)
    assert (out.shape, out.dtype) == (expected.shape, expected.dtype)
    # Strides of an empty tensor hold no data and are not compared (ours may keep the input's); every
    # memory-format query answers as for PyTorch's output.
    for fmt in (torch.contiguous_format, torch.channels_last, torch.channels_last_3d):
        if fmt == torch.contiguous_format or len(shape) == {torch.channels_last: 4, torch.channels_last_3d: 5}[fmt]:
            assert out.is_contiguous(memory_format=fmt) == expected.is_contiguous(memory_format=fmt)
    assert mean.shape == rstd.shape == (0, num_groups)
    assert mean.dtype == rstd.dtype == torch.float32


@pytest.mark.parametrize("offset, scale", [
    (1e4, 1.0),      # |mean| = 1e4 std, as the contract states
    (-1e4, 1.0),
    (100.0, 0.01),   # same ratio, small std
    (3e4, 1.0),      # 3e4 std: float32 keeps ~1e-3 std of resolution here
], ids=str)
def test_large_mean_float32(offset, scale):
    """|mean| >> std in float32: statistics must come from a cancellation-free method (shifted sums or
    Welford/Chan), not from float32 E[x^2] - E[x]^2."""
    x = (offset + scale * torch.randn(2, 8, 33, 31, dtype=torch.float64)).float()
    slices = x.reshape(2, 4, -1)
    naive_var = slices.square().mean(dim=2) - slices.mean(dim=2).square()        # float32, (N, G)
    true_var = slices.double().var(dim=2, unbiased=False)
    naive_error = ((naive_var.double() - true_var).abs() / true_var).max().item()
    assert naive_error > 0.1, f"the data must defeat a naive float32 variance (its error is only {naive_error:.2g})"
    weight, bias = make_params(8, "affine", torch.float32)
    check_forward(x, 4, weight, bias)


def test_signature_matches_torch():
    ours = list(inspect.signature(group_norm).parameters)
    assert ours == list(inspect.signature(F.group_norm).parameters)
    defaults = {k: p.default for k, p in inspect.signature(group_norm).parameters.items()}
    assert defaults == {k: p.default for k, p in inspect.signature(F.group_norm).parameters.items()}


def test_keyword_arguments():
    x = make_input((2, 6, 5), torch.float32)
    weight, bias = make_params(6, "affine", torch.float32)
    out = group_norm(input=x, num_groups=3, weight=weight, bias=bias, eps=1e-3)
    assert_group_norm_close(out, x, 3, weight, bias, 1e-3)

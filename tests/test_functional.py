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
from cases import DTYPE_PARAMS, SHAPES, VIEWS, check_forward, make_input, make_params, make_view
from utils import assert_bitwise_equal, assert_group_norm_close

pytestmark = pytest.mark.usefixtures("poisoned_outputs")


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


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16], ids=str)
@pytest.mark.parametrize("view", list(VIEWS))
def test_non_contiguous_and_channels_last(view, dtype):
    x, base = make_view(view, dtype)
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
    # F.group_norm's parameters with their defaults, then the keyword-only activation and activation_params.
    ours = dict(inspect.signature(group_norm).parameters)
    extra = {k: ours.pop(k) for k in ("activation", "activation_params")}
    theirs = inspect.signature(F.group_norm).parameters
    assert [(p.name, p.kind, p.default) for p in ours.values()] == \
        [(p.name, p.kind, p.default) for p in theirs.values()]
    assert all(p.kind == inspect.Parameter.KEYWORD_ONLY and p.default is None for p in extra.values())


def test_keyword_arguments():
    x = make_input((2, 6, 5), torch.float32)
    weight, bias = make_params(6, "affine", torch.float32)
    out = group_norm(input=x, num_groups=3, weight=weight, bias=bias, eps=1e-3)
    assert_group_norm_close(out, x, 3, weight, bias, 1e-3)


class _RecordingMode(torch.overrides.TorchFunctionMode):
    """Records the functions that reach __torch_function__ (the OpOverload path's callers see them)."""

    def __init__(self):
        super().__init__()
        self.seen = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.seen.append(str(func))
        return func(*args, **(kwargs or {}))


class _LoggingTensor(torch.Tensor):
    """A subclass with its own __torch_function__: calls on it must go through the OpOverload."""

    calls: list = []

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        cls.calls.append(str(func))
        return super().__torch_function__(func, types, args, kwargs or {})


@pytest.mark.parametrize("with_stats", [False, True])
def test_direct_entry_and_overload_agree(with_stats):
    # Eager calls take the extension's direct entry; a torch function mode or a subclass overriding
    # __torch_function__ takes the OpOverload (which hands them the call). Both run the same operator: the
    # results are bitwise equal, and the mode sees the operator.
    x = make_input((3, 12, 7, 5), torch.float32)
    weight, bias = make_params(12, "affine", torch.float32)
    call = ((lambda t: group_norm_with_stats(t, 4, weight, bias, activation="silu")) if with_stats
            else (lambda t: (group_norm(t, 4, weight, bias, activation="silu"),)))
    direct = call(x)
    mode = _RecordingMode()
    with mode:
        through_mode = call(x)
    assert any("group_norm_forward" in name for name in mode.seen), mode.seen
    _LoggingTensor.calls = []
    through_subclass = call(x.as_subclass(_LoggingTensor))
    assert any("group_norm_forward" in name for name in _LoggingTensor.calls), _LoggingTensor.calls
    assert len(direct) == (3 if with_stats else 1)
    for a, b, c in zip(direct, through_mode, through_subclass):
        assert_bitwise_equal(a, b)
        assert_bitwise_equal(a, c.as_subclass(torch.Tensor))
    reference = F.silu(F.group_norm(x.double(), 4, weight.double(), bias.double()))
    torch.testing.assert_close(direct[0].double(), reference, rtol=1e-5, atol=1e-5)  # float32 storage, x ~ N(0, 1)


def test_direct_entry_gradients():
    # The direct entry returns the autograd node's output: gradients flow as through the OpOverload.
    x = make_input((2, 6, 9), torch.float64).requires_grad_()
    weight, bias = (p.requires_grad_() for p in make_params(6, "affine", torch.float64))
    assert torch.autograd.gradcheck(lambda a, w, b: group_norm(a, 3, w, b), (x, weight, bias))
    with torch.no_grad():
        assert group_norm(x, 3, weight, bias).grad_fn is None


def test_direct_entry_rejects_wrong_types():
    # The entry is internal (the Python callers check types first), but it never guesses: wrong types raise.
    from groupnorm_inline import extension

    entry = extension.python_entry()
    x = make_input((2, 4, 3), torch.float32)
    cases = [((x.numpy(), 2, None, None, 1e-5, 0, 0.0, 0.0), "input to be a Tensor"),
             ((x, 2.0, None, None, 1e-5, 0, 0.0, 0.0), "num_groups must be an int"),
             ((x, True, None, None, 1e-5, 0, 0.0, 0.0), "num_groups must be an int"),
             ((x, 2, [1.0] * 4, None, 1e-5, 0, 0.0, 0.0), "weight to be a Tensor or None"),
             ((x, 2, None, 3, 1e-5, 0, 0.0, 0.0), "bias to be a Tensor or None"),
             ((x, 2, None, None, 1, 0, 0.0, 0.0), "eps must be a float"),
             ((x, 2, None, None, 1e-5, 0, 0.0), "8 positional arguments")]
    for args, words in cases:
        for fn in (entry.group_norm, entry.group_norm_with_stats):
            with pytest.raises(TypeError, match=words):
                fn(*args)
    with pytest.raises(OverflowError):
        entry.group_norm(x, 2 ** 70, None, None, 1e-5, 0, 0.0, 0.0)
    # The operator's own checks raise through it with PyTorch's types and words.
    with pytest.raises(RuntimeError, match="divisible by num_groups"):
        entry.group_norm(x, 3, None, None, 1e-5, 0, 0.0, 0.0)

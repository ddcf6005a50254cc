"""`groupnorm_inline.GroupNorm` as a drop-in for `torch.nn.GroupNorm`, and `ModelNew` against `Model` (#35).

A drop-in means: the same constructor signature, parameter names, state_dict keys and values (loadable both
ways), repr, reset_parameters and affine=False behaviour, and the same output within tests/utils.TOLERANCES.
"""

from __future__ import annotations

import copy
import inspect
import io
import pickle

import pytest
import torch
from torch import nn

import groupnorm_inline
from groupnorm_inline import GroupNorm, Model, ModelNew, get_init_inputs
from utils import TOLERANCES, assert_close_report, assert_group_norm_close

pytestmark = pytest.mark.usefixtures("poisoned_outputs")

# Constructor arguments tried on both classes: (args, kwargs).
CONSTRUCTIONS = [
    ((4, 12), {}),                                         # defaults: eps 1e-5, affine
    ((3, 6), {"eps": 1e-3}),
    ((2, 8), {"affine": False}),
    ((1, 5), {"dtype": torch.float64}),                     # G = 1
    ((6, 6), {"device": "cpu", "dtype": torch.float16}),    # group == channel
    ((2, 4), {"eps": 0.1, "affine": True, "device": None, "dtype": torch.bfloat16}),
]


def pair(args, kwargs, seed=7):
    """(ours, PyTorch's), built from the same RNG state."""
    torch.manual_seed(seed)
    ours = GroupNorm(*args, **kwargs)
    torch.manual_seed(seed)
    theirs = nn.GroupNorm(*args, **kwargs)
    return ours, theirs


def randomize(module, seed=3):
    """Give affine parameters values that are not their defaults (so state_dict copies are visible)."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=gen, dtype=torch.float64).to(p.dtype))
    return module


def test_is_an_nn_groupnorm():
    assert issubclass(GroupNorm, nn.GroupNorm)
    assert GroupNorm.__name__ == "GroupNorm"


def test_constructor_signature():
    # PyTorch's parameters, in order, with the same defaults and kinds; then only the two keyword-only
    # activation parameters, defaulting to None (no activation).
    ours = dict(inspect.signature(GroupNorm).parameters)
    theirs = inspect.signature(nn.GroupNorm).parameters
    extra = {k: ours.pop(k) for k in ("activation", "activation_params")}
    assert [(p.name, p.kind, p.default) for p in ours.values()] == \
        [(p.name, p.kind, p.default) for p in theirs.values()]
    assert all(p.kind == inspect.Parameter.KEYWORD_ONLY and p.default is None for p in extra.values())
    assert GroupNorm.__constants__ == nn.GroupNorm.__constants__


@pytest.mark.parametrize("args, kwargs", CONSTRUCTIONS, ids=str)
def test_attributes_parameters_and_state_dict(args, kwargs):
    ours, theirs = pair(args, kwargs)
    for name in ("num_groups", "num_channels", "eps", "affine"):
        assert getattr(ours, name) == getattr(theirs, name), name
    ours_params = [(n, p.shape, p.dtype, p.device, p.requires_grad) for n, p in ours.named_parameters()]
    theirs_params = [(n, p.shape, p.dtype, p.device, p.requires_grad) for n, p in theirs.named_parameters()]
    assert ours_params == theirs_params
    assert list(ours.buffers()) == list(theirs.buffers()) == []
    ours_state, theirs_state = ours.state_dict(), theirs.state_dict()
    assert list(ours_state) == list(theirs_state)
    for key in theirs_state:
        assert torch.equal(ours_state[key], theirs_state[key]), key


@pytest.mark.parametrize("args, kwargs", CONSTRUCTIONS, ids=str)
def test_repr(args, kwargs):
    ours, theirs = pair(args, kwargs)
    assert repr(ours) == repr(theirs)
    assert repr(nn.Sequential(ours)) == repr(nn.Sequential(theirs))


def test_load_state_dict_both_ways():
    ours, theirs = pair((4, 12), {})
    randomize(theirs, seed=1)
    ours.load_state_dict(theirs.state_dict(), strict=True)
    for key, value in theirs.state_dict().items():
        assert torch.equal(ours.state_dict()[key], value), key

    ours, theirs = pair((4, 12), {})
    randomize(ours, seed=2)
    theirs.load_state_dict(ours.state_dict(), strict=True)
    for key, value in ours.state_dict().items():
        assert torch.equal(theirs.state_dict()[key], value), key

    # Through a file, as checkpoints travel.
    buffer = io.BytesIO()
    torch.save(ours.state_dict(), buffer)
    buffer.seek(0)
    fresh = GroupNorm(4, 12)
    fresh.load_state_dict(torch.load(buffer, weights_only=True))
    assert all(torch.equal(a, b) for a, b in zip(fresh.parameters(), ours.parameters()))


def test_reset_parameters():
    ours, theirs = pair((4, 12), {})
    randomize(ours)
    randomize(theirs)
    ours.reset_parameters()
    theirs.reset_parameters()
    assert torch.equal(ours.weight, torch.ones(12)) and torch.equal(ours.bias, torch.zeros(12))
    assert all(torch.equal(a, b) for a, b in zip(ours.parameters(), theirs.parameters()))


def test_affine_false_has_no_parameters():
    ours, theirs = pair((2, 8), {"affine": False})
    assert ours.weight is None and ours.bias is None
    assert list(ours.parameters()) == []
    assert ours.state_dict() == {} == theirs.state_dict()
    x = torch.randn(3, 8, 5)
    assert_group_norm_close(ours(x), x, 2)


@pytest.mark.parametrize("shape, num_groups, dtype", [
    ((2, 12, 5, 7), 4, torch.float32),
    ((3, 6, 11), 3, torch.float64),
    ((2, 10, 3, 3, 3), 5, torch.float32),   # 5-D
    ((5, 8), 8, torch.float32),             # (N, C), group == channel
    ((2, 48, 3, 5), 1, torch.bfloat16),
    ((1, 15, 9, 7), 5, torch.float16),
], ids=str)
def test_forward_matches_nn_groupnorm(shape, num_groups, dtype):
    ours, theirs = pair((num_groups, shape[1]), {"dtype": dtype})
    randomize(theirs)
    ours.load_state_dict(theirs.state_dict())
    x = torch.randn(shape, dtype=torch.float64).to(dtype)
    out = ours(x)
    expected = theirs(x)
    atol, rtol = TOLERANCES[dtype]
    assert out.dtype == expected.dtype and out.stride() == expected.stride()
    # PyTorch is one more implementation with its own rounding: allow twice the float64 tolerance.
    assert_close_report(out, expected, 2 * atol, 2 * rtol, "GroupNorm vs nn.GroupNorm")
    assert_group_norm_close(out, x, num_groups, ours.weight, ours.bias, ours.eps)


def test_half_input_with_float32_module():
    """A float32 module on a float16 input (what autocast produces): mixed mode, as nn.GroupNorm allows."""
    ours, theirs = pair((4, 12), {})
    randomize(theirs)
    ours.load_state_dict(theirs.state_dict())
    x = torch.randn(2, 12, 7, 5).half()
    out = ours(x)
    assert out.dtype == theirs(x).dtype == torch.float16
    assert_group_norm_close(out, x, 4, ours.weight, ours.bias)


def test_train_eval_and_no_grad_agree():
    ours, _ = pair((4, 12), {})
    randomize(ours)
    x = torch.randn(2, 12, 6, 5)
    train_out = ours.train()(x)
    eval_out = ours.eval()(x)
    with torch.no_grad():
        no_grad_out = ours(x)
    assert torch.equal(train_out, eval_out) and torch.equal(train_out, no_grad_out)
    assert train_out.requires_grad and not no_grad_out.requires_grad


def test_copy_pickle_and_dtype_moves():
    ours, _ = pair((3, 6), {})
    randomize(ours)
    x = torch.randn(2, 6, 4)
    expected = ours(x)
    for clone in (copy.deepcopy(ours), pickle.loads(pickle.dumps(ours))):
        assert type(clone) is GroupNorm
        assert torch.equal(clone(x), expected)
    as_double = copy.deepcopy(ours).double()
    assert as_double.weight.dtype == torch.float64
    assert_group_norm_close(as_double(x.double()), x.double(), 3, as_double.weight, as_double.bias)


def test_model_new_matches_model_state_dict():
    """The #35 pair: same constructor arguments, same state_dict keys and (from the same seed) values."""
    init = get_init_inputs()
    torch.manual_seed(42)
    model = Model(*init)
    torch.manual_seed(42)
    model_new = ModelNew(*init)
    assert list(model_new.state_dict()) == list(model.state_dict()) == ["gn.weight", "gn.bias"]
    for key, value in model.state_dict().items():
        assert torch.equal(model_new.state_dict()[key], value), key
    randomize(model)
    model_new.load_state_dict(model.state_dict(), strict=True)
    model.load_state_dict(model_new.state_dict(), strict=True)
    assert isinstance(model_new.gn, groupnorm_inline.GroupNorm)
    assert repr(model_new.gn) == repr(model.gn)


def test_model_new_forward_matches_model():
    init = get_init_inputs()                      # [64, 8]
    model, model_new = Model(*init), ModelNew(*init)
    randomize(model)
    model_new.load_state_dict(model.state_dict())
    x = torch.rand(2, 64, 9, 11)                  # the #35 layout with a small batch and image
    assert_close_report(model_new(x), model(x), 1e-5, 1e-5, "ModelNew vs Model")
    assert_group_norm_close(model_new(x), x, 8, model.gn.weight, model.gn.bias)

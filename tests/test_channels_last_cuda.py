"""The native channels-last CUDA kernels (NHWC / NDHWC read in place, output in the input's layout), forward and
backward, against float64 references computed on the CPU from the same rounded inputs.

Shapes cover the kernels' cases: C = 3 with G = 1 and C = 6 with C/G = 2 (scalar accesses: C not a multiple of
a 16-byte vector), C/G = 10 (vectors spanning two groups), C = 1280 with G = 32 (a diffusion block), C wider
than one CTA's 256 vectors (several channel tiles, groups split across them), odd spatial sizes, HW = 1 (an
input contiguous in both layouts: the NCHW kernels), N = 40 (one tile per sample), HW = 4096 (many tiles per
sample), 5-D inputs.

Tolerances. Forward: tests/utils.TOLERANCES plus the conditioning term (`group_norm_atol`); with an activation
twice TOLERANCES (the activation's derivative is at most ~1.1). Statistics: utils.STATS_RTOL. Backward: each
gradient within `BWD_TOL[dtype] * (1 + max |reference|)` absolute and BWD_TOL relative: float64 1e-9; float32
1e-4 (float32 products folded into float64 sums over up to 1e5 terms); float16 1e-2 and bfloat16 6e-2 (grad_out
and the inputs round at 2^-11 / 2^-8, dx is a difference of terms of the size of its largest element).
Outputs and temporaries start as NaN (`poisoned_outputs`), so an element never written fails.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from groupnorm_inline import group_norm, group_norm_with_stats
from utils import (STATS_RTOL, TOLERANCES, assert_bitwise_equal, assert_close_report, group_norm_atol,
                   poison_cuda_allocator, reference_stats)

pytestmark = [pytest.mark.cuda, pytest.mark.usefixtures("poisoned_outputs")]

DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64]
BWD_TOL = {torch.float64: 1e-9, torch.float32: 1e-4, torch.float16: 1e-2, torch.bfloat16: 6e-2}

# (shape, groups)
SHAPES = [
    ((2, 3, 5, 7), 1),             # C = 3, G = 1: scalar accesses
    ((2, 6, 9, 11), 3),            # C/G = 2, odd H and W
    ((3, 20, 7, 9), 2),            # C/G = 10: a 16-byte half vector spans two groups
    ((2, 32, 7, 9), 8),            # C/G = 4, odd HW = 63
    ((1, 1280, 8, 8), 32),         # diffusion block width
    ((1, 2080, 3, 5), 8),          # float32: 520 vectors, 3 channel tiles; groups of 260 split across tiles
    ((1, 4096, 3, 5), 1),          # one group over every channel tile
    ((2, 64, 1, 1), 16),           # HW = 1: contiguous in both layouts, read as NCHW
    ((40, 16, 4, 4), 4),           # many samples, one tile each
    ((1, 32, 64, 64), 8),          # HW = 4096: many tiles per sample
    ((2, 12, 3, 5, 7), 4),         # 5-D, C/G = 3
    ((1, 64, 4, 6, 5), 8),         # 5-D, C/G = 8
    ((2048, 8, 2, 2), 4),          # more samples than resident CTAs: three launches when the block plan is off
    ((2, 1000, 5, 5), 25),         # 250 threads a tile (a partial last warp) and groups of 40 (a warp per group)
]
SHAPE_IDS = [f"{tuple(s)}-G{g}" for s, g in SHAPES]

ACTS = [(None, None, nn.Identity()), ("silu", None, nn.SiLU()), ("leaky_relu", {"negative_slope": 0.2}, nn.LeakyReLU(0.2)),
        ("gelu", None, nn.GELU())]
ACT_IDS = [a[0] or "none" for a in ACTS]


def _format(shape):
    return torch.channels_last if len(shape) == 4 else torch.channels_last_3d


def _input(shape, dtype, mean=0.3, std=1.7, seed=0):
    gen = torch.Generator().manual_seed(seed)
    x = (mean + std * torch.randn(shape, generator=gen, dtype=torch.float64)).to(dtype)
    return x.to("cuda").contiguous(memory_format=_format(shape))


def _params(channels, dtype, affine, seed=1):
    if not affine:
        return None, None
    gen = torch.Generator().manual_seed(seed)
    w = (1 + 0.5 * torch.randn(channels, generator=gen, dtype=torch.float64)).to("cuda", dtype)
    b = (0.5 * torch.randn(channels, generator=gen, dtype=torch.float64)).to("cuda", dtype)
    return w, b


def _reference(x, groups, w, b, module, eps=1e-5):
    # NCHW on purpose: PyTorch's CPU kernel for a channels-last input takes the variance as E[x^2] - mean^2,
    # which loses ~|mean|^2 / var * 2^-52 of it (1e-8 at |mean| = 1e4 std), over the float64 tolerance.
    z = F.group_norm(x.detach().to("cpu", torch.float64).contiguous(), groups,
                     None if w is None else w.detach().to("cpu", torch.float64),
                     None if b is None else b.detach().to("cpu", torch.float64), eps)
    return module(z)


def _check_forward(x, groups, w, b, act, params, module, what):
    x_before = x.clone(memory_format=torch.preserve_format)
    poison_cuda_allocator(x.numel() * x.element_size())
    out, mean, rstd = group_norm_with_stats(x, groups, w, b, 1e-5, activation=act, activation_params=params)
    torch.cuda.synchronize()
    assert_bitwise_equal(x, x_before, f"{what} input")
    assert out.shape == x.shape and out.dtype == x.dtype
    if x.shape[2:].numel() > 1:
        assert out.is_contiguous(memory_format=_format(x.shape)), f"{what}: output strides {out.stride()}"
    atol, rtol = TOLERANCES[x.dtype]
    expected = _reference(x, groups, w, b, module)
    if act is None:
        assert_close_report(out, expected, group_norm_atol(x, groups, w, b), rtol, f"{what} output")
    else:
        assert_close_report(out, expected, 2 * atol, 2 * rtol, f"{what} output")
    ref_mean, ref_rstd = reference_stats(x, groups)
    std = ref_rstd.reciprocal()
    stats_rtol = STATS_RTOL[x.dtype]
    mean_tol = stats_rtol * std + 2 * torch.finfo(mean.dtype).eps * ref_mean.abs()
    assert_close_report(mean, ref_mean, mean_tol, 0.0, f"{what} mean")
    assert_close_report(rstd, ref_rstd, 0.0, stats_rtol, f"{what} rstd")


@pytest.mark.parametrize("name, params, module", ACTS, ids=ACT_IDS)
@pytest.mark.parametrize("affine", [True, False], ids=["affine", "no affine"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape, groups", SHAPES, ids=SHAPE_IDS)
def test_forward(shape, groups, dtype, affine, name, params, module):
    x = _input(shape, dtype)
    w, b = _params(shape[1], dtype, affine)
    _check_forward(x, groups, w, b, name, params, module, f"{shape} G={groups} {dtype} {name}")


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_forward_float32_params_of_half_input(dtype):
    x = _input((2, 320, 9, 7), dtype)
    w, b = _params(320, torch.float32, True)
    _check_forward(x, 32, w, b, "silu", None, nn.SiLU(), f"float32 params {dtype}")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("shape, groups", [((1, 128, 33, 31), 32), ((2, 6, 40, 40), 3), ((1, 64, 3, 4, 50), 1),
                                           ((2048, 8, 2, 2), 4)], ids=str)
def test_forward_large_mean(shape, groups, dtype):
    """|mean| = 1e4 std: shifted sums keep the statistics and the output accurate."""
    x = _input(shape, dtype, mean=1e4, std=1.0)
    w, b = _params(shape[1], dtype, True)
    _check_forward(x, groups, w, b, None, None, nn.Identity(), f"mean 1e4 {shape} {dtype}")


def test_forward_unaligned_input():
    """A channels-last view whose data pointer is not 16-byte aligned: the scalar kernels, same results."""
    shape = (2, 16, 5, 6)
    flat = torch.empty(torch.Size(shape).numel() + 1, dtype=torch.float16, device="cuda")
    x = flat[1:].view(2, 5, 6, 16).permute(0, 3, 1, 2)
    x.copy_(_input(shape, torch.float16))
    assert x.is_contiguous(memory_format=torch.channels_last) and x.data_ptr() % 16 != 0
    w, b = _params(16, torch.float16, True)
    _check_forward(x, 4, w, b, "silu", None, nn.SiLU(), "unaligned")


# Larger than every SM's shared memory together (~29 MB on an H100, ~19 MB on an A100): the single launch
# holds the first rows of each thread in shared memory and reads the others twice (the second time from L2),
# where SHAPES' inputs are held whole; GROUPNORM_INLINE_CL_PARTIAL_HOLD=0 reads every row twice.
LARGE = ((1, 128, 384, 384), 32)
HOLD_ENV = "GROUPNORM_INLINE_CL_PARTIAL_HOLD"


def test_forward_plan_names_every_path(monkeypatch):
    """The five forward paths, each exercised by the tests: a CTA per sample and channel tile holding its tile in
    registers (SHAPES' small inputs, by default), one cooperative launch holding its tiles in shared memory
    (SHAPES with the block plan turned off), the same holding part of each tile and reading the rest again from
    L2 (LARGE; SHAPES under the `partial` override), or reading every row again (LARGE with partial holding off),
    three launches where the samples alone outnumber the resident CTAs ((2048, 8, 2, 2) with the block plan off)."""
    from groupnorm_inline.functional import forward_plan
    small = _input((2, 320, 16, 16), torch.float16)
    many = _input((2048, 8, 2, 2), torch.float32)
    assert forward_plan(small, 32).startswith("channels_last block (one launch"), forward_plan(small, 32)
    assert forward_plan(many, 4).startswith("channels_last block (one launch"), forward_plan(many, 4)
    large = _input(LARGE[0], torch.float32)
    partial = forward_plan(large, LARGE[1])
    assert partial.startswith("channels_last fused (one cooperative launch, tiles partly held"), partial
    monkeypatch.setenv(HOLD_ENV, "0")
    l2 = forward_plan(large, LARGE[1])
    assert l2.startswith("channels_last fused (one cooperative launch):"), l2
    monkeypatch.delenv(HOLD_ENV)
    monkeypatch.setenv(PLAN_ENV, "partial")
    assert forward_plan(small, 32).startswith("channels_last fused (one cooperative launch, tiles partly held")
    monkeypatch.setenv(PLAN_ENV, "fused")
    held, three = forward_plan(small, 32), forward_plan(many, 4)
    assert held.startswith("channels_last fused (one cooperative launch, tiles held"), held
    assert three.startswith("channels_last (three launches)"), three
    monkeypatch.setenv(PLAN_ENV, "three")
    assert forward_plan(small, 32).startswith("channels_last (three launches)"), forward_plan(small, 32)


# GROUPNORM_INLINE_CL_FORWARD_PLAN (read on every call): `fused` turns the block plan off (the cooperative launch
# where it fits, else three launches), `partial` makes the cooperative launch hold only part of each tile (at
# most half of each thread's rows, the rest read again), `three` forces the three launches. SHAPES by default
# take the block plan wherever their tiles fit a CTA; these runs keep the other paths checked on the same inputs.
PLAN_ENV = "GROUPNORM_INLINE_CL_FORWARD_PLAN"
# GROUPNORM_INLINE_CL_FOLD (read on every call): 1 has every CTA of the cooperative launch finalise its own groups
# (one grid barrier) wherever their constants fit, 0 never (warps across the grid finalise each group once, a
# second grid barrier); unset, a rule picks. Both are forced here so that each is checked whatever the rule picks.
FOLD_ENV = "GROUPNORM_INLINE_CL_FOLD"


@pytest.mark.parametrize("plan", ["fused", "fused+fold", "partial", "partial+fold", "three"])
@pytest.mark.parametrize("name, params, module", ACTS[:2], ids=ACT_IDS[:2])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape, groups", SHAPES, ids=SHAPE_IDS)
def test_forward_other_plans(shape, groups, dtype, name, params, module, plan, monkeypatch):
    monkeypatch.setenv(PLAN_ENV, plan.split("+")[0])
    monkeypatch.setenv(FOLD_ENV, "1" if plan.endswith("+fold") else "0")
    x = _input(shape, dtype)
    w, b = _params(shape[1], dtype, True)
    _check_forward(x, groups, w, b, name, params, module, f"{plan} {shape} G={groups} {dtype} {name}")


# Block-plan edges: one vector column and 128 rows per thread column (HW = 1024), tiles whose vectors span several
# one-channel groups (C/G = 1), groups wider than a warp (C/G = 64: a warp per group), thread counts that are not
# whole warps (HW = 63, 6), many CTAs (1024 samples), a 5-D input, HW = 8 * 256 exactly (every thread of a full
# CTA holding its eight rows), and scalar accesses (C = 10).
BLOCK_SHAPES = [
    ((4, 64, 32, 32), 32),
    ((64, 32, 16, 16), 32),
    ((8, 128, 7, 9), 2),
    ((1024, 16, 2, 3), 8),
    ((2, 64, 4, 8, 8), 16),
    ((1, 8, 32, 64), 4),
    ((3, 10, 7, 9), 5),
]


def _check_plan_on(x, groups, plan):
    """The forward of x under the plan it takes (named in the messages): plain and with SiLU, and for float32 and
    float64 again with |mean| = 1e4 std."""
    shape, dtype = tuple(x.shape), x.dtype
    w, b = _params(shape[1], dtype, True)
    _check_forward(x, groups, w, b, None, None, nn.Identity(), f"{plan[:40]} {shape} G={groups} {dtype}")
    _check_forward(x, groups, w, b, "silu", None, nn.SiLU(), f"{plan[:40]} {shape} G={groups} {dtype} silu")
    if dtype in (torch.float32, torch.float64):
        xm = _input(shape, dtype, mean=1e4, std=1.0)
        _check_forward(xm, groups, w, b, None, None, nn.Identity(), f"{plan[:40]} mean 1e4 {shape} {dtype}")


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape, groups", BLOCK_SHAPES, ids=[f"{tuple(s)}-G{g}" for s, g in BLOCK_SHAPES])
def test_forward_block_plan(shape, groups, dtype):
    from groupnorm_inline.functional import forward_plan
    x = _input(shape, dtype)
    plan = forward_plan(x, groups)
    assert plan.startswith("channels_last block"), plan
    _check_plan_on(x, groups, plan)


# Samples too tall for one CTA: the block plan's clusters (each CTA holds a share of the rows, the sums are added
# across the cluster through distributed shared memory). Diffusion rows (C/G = 10 and 40), and HW = 2500 over a
# cluster of 4 whose last CTA holds fewer rows than the others. Which plan a dtype gets depends on how many
# clusters are resident at once; float16 must take a cluster.
CLUSTER_SHAPES = [
    ((1, 320, 64, 64), 32),
    ((2, 1280, 32, 32), 32),
    ((2, 96, 50, 50), 32),
    ((1, 256, 32, 32), 4),  # four groups of 64 channels, each spread over several ranks
]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape, groups", CLUSTER_SHAPES, ids=[f"{tuple(s)}-G{g}" for s, g in CLUSTER_SHAPES])
def test_forward_block_plan_clusters(shape, groups, dtype):
    from groupnorm_inline.functional import forward_plan
    x = _input(shape, dtype)
    plan = forward_plan(x, groups)
    if dtype == torch.float16:
        assert plan.startswith("channels_last block (one launch, a cluster of"), plan
    _check_plan_on(x, groups, plan)


# Rows held in shared memory beside the registers: the block plan where a CTA's share of its tile outnumbers
# kBlockVecs rows per thread of a full CTA (16-byte vectors only). HELD_SHAPES take it by the rule in half
# precision on a Hopper GPU (inputs of 6-11 MB in tiles of 40 channels, 80-byte rows; clusters all resident at
# once); under GROUPNORM_INLINE_CL_BLOCK_HOLD=force the block and cluster shapes take it as well (one held row
# per thread and up: a partial last row slot, ranks with fewer rows, one-channel groups, every dtype).
BLOCK_HOLD_ENV = "GROUPNORM_INLINE_CL_BLOCK_HOLD"
HELD_SHAPES = [
    ((3, 640, 48, 48), 32),
    ((2, 640, 64, 64), 32),
    ((1, 320, 96, 96), 32),
]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape, groups", HELD_SHAPES, ids=[f"{tuple(s)}-G{g}" for s, g in HELD_SHAPES])
def test_forward_block_plan_held_rows(shape, groups, dtype):
    from groupnorm_inline.functional import forward_plan
    x = _input(shape, dtype)
    plan = forward_plan(x, groups)
    if dtype == torch.float16 and torch.cuda.get_device_capability(x.device)[0] >= 9:
        assert plan.startswith("channels_last block") and "shared memory" in plan, plan
    _check_plan_on(x, groups, plan)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape, groups", BLOCK_SHAPES + CLUSTER_SHAPES,
                         ids=[f"{tuple(s)}-G{g}" for s, g in BLOCK_SHAPES + CLUSTER_SHAPES])
def test_forward_block_plan_forced_held_rows(shape, groups, dtype, monkeypatch):
    from groupnorm_inline.functional import forward_plan
    monkeypatch.setenv(BLOCK_HOLD_ENV, "force")
    x = _input(shape, dtype)
    plan = forward_plan(x, groups)
    assert plan.startswith("channels_last block"), plan
    # 16-byte vectors wherever C fills them (a fresh tensor is aligned); scalar accesses hold nothing
    assert ("shared memory" in plan) == (shape[1] * x.element_size() % 16 == 0), plan
    _check_plan_on(x, groups, plan)


@pytest.mark.parametrize("fold", ["1", "0"], ids=["fold", "finalize"])
@pytest.mark.parametrize("hold", ["1", "0"], ids=["partly-held", "reread"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=str)
def test_forward_large_input_reread_from_l2(dtype, hold, fold, monkeypatch):
    from groupnorm_inline.functional import forward_plan
    monkeypatch.setenv(HOLD_ENV, hold)
    monkeypatch.setenv(FOLD_ENV, fold)
    x = _input(LARGE[0], dtype)
    plan = forward_plan(x, LARGE[1])
    assert plan.startswith("channels_last fused (one cooperative launch" + (", tiles partly held" if hold == "1" else
                                                                            "):")), plan
    assert ("each CTA finalising its own groups" in plan) == (fold == "1"), plan
    w, b = _params(LARGE[0][1], dtype, True)
    what = f"{LARGE[0]} {dtype} hold={hold} fold={fold}"
    _check_forward(x, LARGE[1], w, b, "silu", None, nn.SiLU(), what)
    _check_forward(x, LARGE[1], w, b, None, None, nn.Identity(), what)



@pytest.mark.parametrize("plan_kind", ["fold", "finalize", "block", "block-cluster", "block-held"])
def test_trace_of_the_single_launch(plan_kind, monkeypatch):
    """group_norm_channels_last_trace (diagnostics, benchmarks/cl_trace.py): the single launch's CTAs (the
    cooperative launch, folded or finalised once, or the block plan: one CTA per tile, a cluster, rows held in
    shared memory), as many as the plan names, each stamp their seven points in order; the rows past the grid stay
    zero; the output it computed on the way is the plain forward's (checked above, same kernels); an input of the
    three-launch plan raises."""
    import re

    from groupnorm_inline import extension
    from groupnorm_inline.functional import forward_plan
    ops = extension.load()
    shape = {"block": (64, 32, 16, 16), "block-cluster": (1, 320, 64, 64), "block-held": (2, 640, 64, 64)}.get(
        plan_kind, (2, 320, 32, 32))
    x = _input(shape, torch.float16)
    w, b = _params(shape[1], torch.float16, True)
    if plan_kind in ("fold", "finalize"):
        monkeypatch.setenv(FOLD_ENV, "1" if plan_kind == "fold" else "0")
        monkeypatch.setenv(PLAN_ENV, "fused")
        plan = forward_plan(x, 32)
        ctas = int(re.search(r"statistics over (\d+) tiles", plan).group(1))
    else:
        if plan_kind == "block-held":  # (2, 640, 64, 64) holds 13 rows per thread on an H200; forced on any GPU
            monkeypatch.setenv(BLOCK_HOLD_ENV, "force")
        plan = forward_plan(x, 32)
        assert plan.startswith("channels_last block"), plan
        assert ("cluster of" in plan) == (plan_kind != "block"), plan
        assert ("rows per thread" in plan) == (plan_kind == "block-held"), plan
        ctas = int(re.search(r"\): (\d+) CTAs of", plan).group(1))
    trace = ops.group_norm_channels_last_trace(x, 32, w, b).cpu()
    assert trace.dtype == torch.int64 and trace.shape[1] == 7, trace.shape
    stamped = (trace > 0).all(dim=1)
    assert int(stamped.sum()) == ctas and bool(stamped[:ctas].all()), (int(stamped.sum()), ctas, plan)
    assert bool((trace[ctas:] == 0).all())
    steps = trace[:ctas].diff(dim=1)
    bad = (steps < 0).nonzero()
    assert bad.numel() == 0, f"stamps out of order at (cta, point) {bad[:5].tolist()}: {trace[bad[0, 0]].tolist()}"
    many = _input((2048, 8, 2, 2), torch.float32)
    monkeypatch.setenv(PLAN_ENV, "fused")  # (the block plan takes it otherwise)
    with pytest.raises(RuntimeError, match="three-launch plan"):
        ops.group_norm_channels_last_trace(many, 4, None, None)
    with pytest.raises(RuntimeError, match="expected a channels_last"):
        ops.group_norm_channels_last_trace(torch.randn(2, 8, 4, 4, device="cuda"), 4, None, None)

def test_channels_last_matches_nchw():
    """The channels-last kernels and the NCHW ones agree on the same values."""
    x = _input((2, 320, 16, 16), torch.float32)
    w, b = _params(320, torch.float32, True)
    ours = group_norm(x, 32, w, b, activation="silu")
    nchw = group_norm(x.contiguous(), 32, w, b, activation="silu")
    assert_close_report(ours, nchw, 2e-6, 2e-6, "channels-last vs NCHW")


def _group_norm64(x, groups, w, b, eps=1e-5):
    """float64 GroupNorm as z = (x - mean) * rstd (then * w + b): an element equal to its group's mean gets z = 0
    exactly, as in the kernels (d = x - mean first). F.group_norm's CPU kernel evaluates x * a + (-mean * a) with a
    fused multiply-add, leaving such an element a z of +-1e-17 whose sign picks the derivative of a kinked
    activation (leaky_relu, relu) at random; half-precision data of small groups hits this exactly."""
    n = x.shape[0]
    xs = x.reshape(n, groups, -1)
    mean = xs.mean(dim=2, keepdim=True)
    var = (xs - mean).square().mean(dim=2, keepdim=True)
    z = ((xs - mean) * torch.rsqrt(var + eps)).reshape(x.shape)
    if w is None:
        return z
    view = (1, -1) + (1,) * (x.dim() - 2)
    return z * w.reshape(view) + b.reshape(view)


def _check_backward(x, groups, w, b, act, params, module, grad, what):
    leaves = [x.detach().requires_grad_()] + [t.detach().requires_grad_() for t in (w, b) if t is not None]
    out = group_norm(leaves[0], groups, *(leaves[1:] if w is not None else (None, None)), 1e-5, activation=act,
                     activation_params=params)
    ours = torch.autograd.grad(out, leaves, grad)
    ref_leaves = [t.detach().to("cpu", torch.float64).requires_grad_() for t in leaves]
    ref_w, ref_b = (ref_leaves[1], ref_leaves[2]) if w is not None else (None, None)
    ref = module(_group_norm64(ref_leaves[0], groups, ref_w, ref_b, 1e-5))
    theirs = torch.autograd.grad(ref, ref_leaves, grad.detach().to("cpu", torch.float64))
    tol = BWD_TOL[x.dtype]
    assert ours[0].is_contiguous(memory_format=_format(x.shape)) or x.shape[2:].numel() == 1, \
        f"{what}: grad_input strides {ours[0].stride()}"
    for name, a, e, leaf in zip(("grad_input", "grad_weight", "grad_bias"), ours, theirs, leaves):
        assert a.dtype == leaf.dtype, f"{what} {name}: dtype {a.dtype} != {leaf.dtype}"
        assert_close_report(a, e, tol * (1 + e.abs().max().item()), tol, f"{what} {name}")


@pytest.mark.parametrize("name, params, module", ACTS, ids=ACT_IDS)
@pytest.mark.parametrize("affine", [True, False], ids=["affine", "no affine"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape, groups", SHAPES, ids=SHAPE_IDS)
def test_backward(shape, groups, dtype, affine, name, params, module):
    x = _input(shape, dtype)
    w, b = _params(shape[1], dtype, affine)
    grad = _input(shape, dtype, mean=0.1, std=1.0, seed=5)
    _check_backward(x, groups, w, b, name, params, module, grad, f"{shape} G={groups} {dtype} {name}")


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_backward_float32_params_and_nchw_grad(dtype):
    """float32 parameters beside a half input, and an NCHW-contiguous grad_out for a channels-last input."""
    x = _input((2, 320, 9, 7), dtype)
    w, b = _params(320, torch.float32, True)
    grad = _input((2, 320, 9, 7), dtype, mean=0.0, std=1.0, seed=9).contiguous()
    _check_backward(x, 32, w, b, "silu", None, nn.SiLU(), grad, f"float32 params {dtype}")


def test_backward_large_mean_float32():
    x = _input((1, 64, 30, 30), torch.float32, mean=1e4, std=1.0)
    w, b = _params(64, torch.float32, True)
    grad = _input((1, 64, 30, 30), torch.float32, mean=0.0, std=1.0, seed=3)
    _check_backward(x, 8, w, b, None, None, nn.Identity(), grad, "mean 1e4")


def test_backward_only_weight_grads():
    """output_mask without grad_input: the parameter gradients alone."""
    x = _input((2, 64, 12, 10), torch.float32)
    w, b = _params(64, torch.float32, True)
    w.requires_grad_()
    b.requires_grad_()
    out = group_norm(x, 8, w, b, activation="silu")
    grad = torch.randn_like(out)
    dw, db = torch.autograd.grad(out, (w, b), grad)
    xr, wr, br = (t.detach().to("cpu", torch.float64).requires_grad_() for t in (x, w, b))
    ref = F.silu(F.group_norm(xr, 8, wr, br, 1e-5))
    _, rdw, rdb = torch.autograd.grad(ref, (xr, wr, br), grad.cpu().double())
    assert_close_report(dw, rdw, 1e-4 * (1 + rdw.abs().max().item()), 1e-4, "grad_weight")
    assert_close_report(db, rdb, 1e-4 * (1 + rdb.abs().max().item()), 1e-4, "grad_bias")


def test_empty_batch():
    x = torch.empty(0, 8, 4, 4, device="cuda").contiguous(memory_format=torch.channels_last).requires_grad_()
    out = group_norm(x, 2)
    assert out.shape == x.shape
    out.sum().backward()
    assert x.grad.shape == x.shape

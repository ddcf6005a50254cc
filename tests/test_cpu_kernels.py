"""The vectorised CPU kernels (csrc/cpu_forward_kernels.py, csrc/cpu_backward_kernels.py) on their edge cases.

Every dtype x layout (NCHW, channels-last 4-D, channels-last 5-D) x affine / no affine x a few fused activations,
forward and backward, against float64 references of the same (already rounded) inputs; then the shapes that reach
each code path: one channel per group, C = 3 with one group, one spatial element, odd HW, sizes around the vector
width (the tails), and few slices / few samples with several threads (the slice / sample cut into parts whose
moments are merged). Outputs are poisoned (NaN) before each call, so an element a kernel never writes fails.

Tolerances (|ours - ref| <= atol + rtol |ref|):
  forward   tests/utils.TOLERANCES plus the conditioning term of group_norm_atol (plain GroupNorm), or twice
            TOLERANCES with an activation (its derivative is at most ~1.1, plus the output's own rounding);
            mean and rstd as tests/utils.assert_stats_close.
  backward  GRAD_TOL[dtype] times the size of the reference gradient (largest |ref| + 1): the inputs are rounded
            to the dtype, the kernels compute in float32 (float64 for float64), and the gradients are sums of
            up to D terms each rounded at the compute type's unit roundoff.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from groupnorm_inline import group_norm, group_norm_with_stats
from utils import (TOLERANCES, assert_close_report, assert_group_norm_close, assert_stats_close, group_norm_atol,
                   reference_group_norm)

DTYPES = [torch.float32, torch.bfloat16, torch.float16, torch.float64]
GRAD_TOL = {torch.float64: 1e-9, torch.float32: 1e-4, torch.float16: 1e-2, torch.bfloat16: 6e-2}
LAYOUTS = {
    "NCHW": ((2, 12, 9, 7), 4, torch.contiguous_format),
    "CL4": ((2, 12, 9, 7), 4, torch.channels_last),
    "CL5": ((2, 12, 3, 5, 6), 3, torch.channels_last_3d),
}
# name, activation_params, the PyTorch module of the same activation (reference).
ACTIVATIONS = {
    "none": (None, None, nn.Identity()),
    "silu": ("silu", None, nn.SiLU()),
    "gelu": ("gelu", None, nn.GELU()),
    "leaky_relu": ("leaky_relu", {"negative_slope": 0.2}, nn.LeakyReLU(0.2)),
}


@pytest.fixture
def threads():
    """Sets torch's intra-op thread count for one test (restored after it)."""
    before = torch.get_num_threads()
    yield torch.set_num_threads
    torch.set_num_threads(before)


def _input(shape, dtype, memory_format=torch.contiguous_format, mean=0.5, std=2.0, seed=0):
    gen = torch.Generator().manual_seed(seed)
    x = (mean + std * torch.randn(shape, generator=gen, dtype=torch.float64)).to(dtype)
    return x.contiguous(memory_format=memory_format)


def _params(channels, dtype, affine, seed=1):
    if not affine:
        return None, None
    gen = torch.Generator().manual_seed(seed)
    w = (1 + 0.5 * torch.randn(channels, generator=gen, dtype=torch.float64)).to(dtype)
    b = torch.randn(channels, generator=gen, dtype=torch.float64).to(dtype)
    return w, b


def _as64(t):
    return None if t is None else t.detach().to(torch.float64)


def check_forward_cpu(x, groups, w, b, activation="none", what=""):
    """Our forward (outputs poisoned) against float64, its layout against F.group_norm's, and mean/rstd."""
    name, params, module = ACTIVATIONS[activation]
    out, mean, rstd = group_norm_with_stats(x, groups, w, b, 1e-5, activation=name, activation_params=params)
    assert out.dtype == x.dtype and out.shape == x.shape, what
    assert out.stride() == F.group_norm(x, groups, eps=1e-5).stride(), f"{what}: output layout {out.stride()}"
    if name is None:
        assert_group_norm_close(out, x, groups, w, b, 1e-5, f"{what} output")
    else:
        # The activations used here have slopes of at most ~1.1: twice the GroupNorm output's tolerance, its
        # conditioning term (|mean| >> std) included.
        _, rtol = TOLERANCES[x.dtype]
        expected = module(reference_group_norm(x, groups, w, b, 1e-5))
        assert_close_report(out, expected, 2 * group_norm_atol(x, groups, w, b, 1e-5), 2 * rtol,
                            f"{what} {activation} output")
    assert_stats_close(mean, rstd, x, groups, 1e-5)
    return out


def check_backward_cpu(x, groups, w, b, activation="none", what="", grad_seed=2):
    """Gradients of input, weight and bias (autograd through our operator) against float64 autograd of the
    PyTorch composite act(F.group_norm(...)) on the same rounded values."""
    name, params, module = ACTIVATIONS[activation]
    gen = torch.Generator().manual_seed(grad_seed)
    grad = torch.randn(x.shape, generator=gen, dtype=torch.float64).to(x.dtype)
    leaves = [x.detach().clone(memory_format=torch.preserve_format).requires_grad_()]
    leaves += [t.detach().clone().requires_grad_() for t in (w, b) if t is not None]
    lw, lb = (leaves[1], leaves[2]) if w is not None else (None, None)
    out = group_norm(leaves[0], groups, lw, lb, 1e-5, activation=name, activation_params=params)
    ours = torch.autograd.grad(out, leaves, grad)
    refs = [t.detach().to(torch.float64).requires_grad_() for t in leaves]
    rw, rb = (refs[1], refs[2]) if w is not None else (None, None)
    ref_out = module(F.group_norm(refs[0], groups, rw, rb, 1e-5))
    theirs = torch.autograd.grad(ref_out, refs, grad.to(torch.float64))
    tol = GRAD_TOL[x.dtype]
    assert ours[0].stride() == x.stride(), f"{what}: grad_input strides {ours[0].stride()} != input's {x.stride()}"
    for label, got, ref in zip(("grad_input", "grad_weight", "grad_bias"), ours, theirs):
        assert got.dtype == x.dtype, f"{what} {label}: dtype {got.dtype}"
        scale = 1 + ref.abs().max().item()
        assert_close_report(got, ref, tol * scale, tol, f"{what} {activation} {label}")


@pytest.mark.parametrize("activation", list(ACTIVATIONS))
@pytest.mark.parametrize("affine", [True, False], ids=["affine", "no affine"])
@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_every_dtype_layout_activation(dtype, layout, affine, activation, poisoned_outputs):
    shape, groups, memory_format = LAYOUTS[layout]
    x = _input(shape, dtype, memory_format)
    w, b = _params(shape[1], dtype, affine)
    what = f"{dtype} {layout} {'affine' if affine else 'no affine'}"
    check_forward_cpu(x, groups, w, b, activation, what)
    check_backward_cpu(x, groups, w, b, activation, what)


# (shape, groups): C = 3 with one group, one channel per group, HW = 1, one element per (n, g), odd HW, HW just around the vector width
# (32 float32 / 16 float64 lanes with AVX-512, 16 / 8 with AVX2), channels around it in channels-last, and a
# slice longer than the 2048-element block of the statistics.
ODD_SHAPES = [
    ((2, 3, 5, 7), 1),
    ((2, 6, 4, 5), 6),
    ((4, 8, 1, 1), 2),
    ((3, 4, 17), 2),
    ((2, 4, 15), 4),
    ((2, 4, 31), 2),
    ((2, 4, 33), 2),
    ((2, 4, 65), 1),
    ((2, 33, 3, 3), 3),
    ((2, 17, 2, 2), 17),
    ((1, 2, 3000), 1),
    ((2, 5, 6), 5),
    ((16, 64), 64),  # one element per slice: the output is exactly the bias
    ((256, 64), 8),  # 2048 slices of 8 channels of one element (the backward: a sample a row, as channels-last)
    ((1, 2000, 5), 1),  # channels of 5 in one slice cut into parts: part boundaries fall inside a channel
    ((1, 12000), 1),  # one slice of one-element channels, too long a row for the channels-last kernels
    ((3, 9000), 3),  # the same in three samples
    # Channels-last: 72 channels are whole vector chunks plus a tail (32 + 32 + 8 with AVX-512, 4 x 16 + 8 with
    # AVX2); 575 rows are two column tiles of 256 and an odd tail, groups of 9 straddle the chunks.
    ((1, 72, 25, 23), 8),
]


# Each shape in NCHW, and the 4-D ones in channels_last too.
ODD_CASES = [(shape, groups, "NCHW") for shape, groups in ODD_SHAPES] + \
            [(shape, groups, "channels_last") for shape, groups in ODD_SHAPES if len(shape) == 4]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape, groups, memory_format", ODD_CASES, ids=str)
def test_odd_sizes(shape, groups, memory_format, dtype, poisoned_outputs):
    fmt = torch.channels_last if memory_format == "channels_last" else torch.contiguous_format
    x = _input(shape, dtype, fmt)
    w, b = _params(shape[1], dtype, True)
    what = f"{shape} G={groups} {dtype} {memory_format}"
    check_forward_cpu(x, groups, w, b, "none", what)
    check_forward_cpu(x, groups, w, b, "silu", what)
    if shape[0] * (shape[1] // groups) * (x.numel() // (shape[0] * shape[1])) > 1:
        check_backward_cpu(x, groups, w, b, "none", what)
        check_backward_cpu(x, groups, w, b, "silu", what)


# Groups of one element (C == G, HW == 1) on each backward path: rows of up to 8192 channels (the channels-last
# kernels), longer rows (NCHW, one-element channels), a 4-D channels-last input, and rows cut into parts (one sample
# alone has one value per group, which F.group_norm refuses in training).
SINGLE_ELEMENT_GROUP_SHAPES = [
    ((16, 64), torch.contiguous_format),
    ((3, 16, 1, 1), torch.channels_last),
    ((2, 9000), torch.contiguous_format),
    ((2, 36000), torch.contiguous_format),
]


@pytest.mark.parametrize("activation", ["none", "silu"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape, memory_format", SINGLE_ELEMENT_GROUP_SHAPES, ids=str)
def test_single_element_groups_have_zero_grad_input(shape, memory_format, dtype, activation):
    """x is its own group's mean, the normalised value 0: dx is exactly 0 whatever rstd (1/sqrt(eps) here) and the
    activation; PyTorch's float32 kernel leaves the rounding of rstd * w * dy there (up to ~2.4e-4 for dy ~ N(0, 1)).
    The parameter gradients still match float64 autograd (dw = 0, db = the activation's grad)."""
    x = _input(shape, dtype, memory_format)
    w, b = _params(shape[1], dtype, True)
    what = f"{shape} G={shape[1]} {dtype} {memory_format}"
    name, params, _ = ACTIVATIONS[activation]
    leaf = x.detach().clone(memory_format=torch.preserve_format).requires_grad_()
    grad = torch.randn(shape, generator=torch.Generator().manual_seed(2), dtype=torch.float64).to(dtype)
    out = group_norm(leaf, shape[1], w, b, 1e-5, activation=name, activation_params=params)
    (dx,) = torch.autograd.grad(out, [leaf], grad)
    assert dx.stride() == x.stride(), f"{what}: grad_input strides {dx.stride()} != input's {x.stride()}"
    assert torch.equal(dx, torch.zeros_like(dx)), f"{what}: grad_input is not exactly 0, max |dx| {dx.abs().max()}"
    check_backward_cpu(x, shape[1], w, b, activation, what)


# Few slices (NCHW) or few samples (channels-last) beside several threads: the kernels cut each slice / sample into
# parts (at least 4096 elements each, when there are at least 32768 elements in all) whose moments and sums are
# merged. (shape, groups, memory format); 1, 3 and 5 units against 2, 3 and 4 threads. Channels-last samples whose
# groups can be cut into chunks of equal width (group_chunks: a number that evens out the threads' shares divides
# G, every chunk at least one pack of channels and whole cache lines wide) are cut by groups instead, each chunk
# with its own statistics:
# (3, 256, 6, 7) G8 at 2 threads (2 chunks of 128 channels) and 4 (4 of 64), (1, 512, 8, 8) G32 at 2 and 4 (at 3
# no count that evens out the threads divides 32: 2 chunks of 16 K elements, one thread idle, see
# test_uneven_chunks_of_groups), the 5-D (3, 64, 4, 9, 10) G4 at 2 (chunks of 32 channels). (N, C)
# inputs with one element a channel, (1, 40000) G1 and (2, 36000) G2: the backward's one-element-channel path with
# its slices cut into 2-4 parts (sums in one parallel region, ds, db and dx in a second).
SPLIT_SHAPES = [
    ((1, 3, 64, 64), 1, torch.contiguous_format),
    ((1, 6, 48, 50), 3, torch.contiguous_format),
    ((5, 4, 40, 41), 1, torch.contiguous_format),
    ((1, 8, 64, 64), 2, torch.channels_last),
    ((3, 24, 33, 35), 4, torch.channels_last),
    ((1, 16, 5, 24, 25), 4, torch.channels_last_3d),
    ((3, 256, 6, 7), 8, torch.channels_last),
    ((1, 512, 8, 8), 32, torch.channels_last),
    ((3, 64, 4, 9, 10), 4, torch.channels_last_3d),
    ((3, 256, 2, 2), 4, torch.channels_last),  # chunks of 2 groups of 64 channels: group sums from the rows
    ((1, 40000), 1, torch.contiguous_format),  # one-element channels, a slice cut into parts
    ((2, 36000), 2, torch.contiguous_format),
]


@pytest.mark.parametrize("num_threads", [2, 3, 4])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64], ids=str)
@pytest.mark.parametrize("shape, groups, memory_format", SPLIT_SHAPES, ids=str)
def test_few_slices_many_threads(shape, groups, memory_format, dtype, num_threads, threads, poisoned_outputs):
    threads(num_threads)
    x = _input(shape, dtype, memory_format)
    w, b = _params(shape[1], dtype, True)
    what = f"{shape} G={groups} {dtype} {num_threads} threads"
    check_forward_cpu(x, groups, w, b, "none", what)
    check_backward_cpu(x, groups, w, b, "none", what)
    check_backward_cpu(x, groups, w, b, "gelu", what)


# NCHW slices of at most 2048 elements take their statistics in batches of up to 16 slices (fewer as slices grow:
# at most 16 KB of data per batch), the batch's last one often partial; slices shorter than 32 elements are summed
# 16 at a time by a shuffle tree on AVX-512 builds (one masked vector per slice up to 16 elements, two above).
# (shape, groups): 145 slices of 6, 111 of 18, 37 of 60 (3 channels of 20), 6 of exactly 2048 (a batch of 2
# float32 / 4 bfloat16 slices), 7 of 2049 (one slice at a time, past the block).
BATCHED_STAT_SHAPES = [((29, 10, 3), 5), ((37, 6, 3, 3), 3), ((37, 3, 4, 5), 1), ((3, 4, 1024), 2),
                       ((7, 1, 2049), 1)]


@pytest.mark.parametrize("num_threads", [1, 3])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape, groups", BATCHED_STAT_SHAPES, ids=str)
def test_many_small_slices_batched_statistics(shape, groups, dtype, num_threads, threads, poisoned_outputs):
    threads(num_threads)
    x = _input(shape, dtype, mean=-3.0, std=0.7, seed=num_threads)
    w, b = _params(shape[1], dtype, True)
    what = f"{shape} G={groups} {dtype} {num_threads} threads"
    check_forward_cpu(x, groups, w, b, "none", what)
    check_forward_cpu(x, groups, w, b, "silu", what)
    check_forward_cpu(x, groups, None, None, "none", what + " no affine")


# NCHW slices of channels of up to 320 elements, no activation: on AVX-512 builds the backward takes 16
# channels at a time (one or two masked vectors per channel, or whole vectors and a masked last one from 32
# elements on; sums by a shuffle tree) in chunks of slices, for float32 and 16-bit data. (shape, groups): HW = 2
# (many rows, partial last block of 16), 9 (cpg 2, 111 slices in two chunks), exactly 16 (one vector per channel),
# 17 and 31 (two), one channel per group; 32 (two whole vectors), 48 (one channel per group, 16 * 48 elements a
# slice), 50 (cpg 10, a chunk of 4 slices), 33 and 320 (the longest: one whole slice a chunk) and 321 (past the
# bound: the general path). On AVX2 builds float32 channels of 8 to 64 elements go 8 channels at a time (a hadd
# tree per sum, a masked load for the last HW % 8; blocks of 8 rows across slices, in chunks of 2048 elements):
# HW 8 (one whole vector: groups of 8 channels, and groups of 2 in 1056 slices, chunks of 128 slices and a
# partial one), groups of 8 channels, of 9 and 17, HW 24 (three whole vectors), 64 (the longest) and 65 (past
# it), and groups of 2 channels in chunks of 113 slices (226 rows: a partial block at each chunk's end). bfloat16
# and float16 channels go that way up to 4096 elements: 65, 255 (31 whole vectors and 7 elements), 257, 1027,
# 4096 and 4097 (past it); and from 2 elements, shorter than a vector: HW 2, 3, 5, 7 (one partial vector a
# channel). Each tensor's last row with a partial vector reads only its own elements (the rows before it read into
# the next row). Slices of fewer than 16 elements whose channels are not whole vectors take dx in one flat pass
# over the chunk: D 4 (HW 2; 33 slices, the last vector partial), 9, 10, 11 (one channel of 11 a group).
SHORT_BACKWARD_SHAPES = [((21, 8, 2), 4), ((37, 6, 3, 3), 3), ((9, 48, 4, 4), 16), ((7, 10, 17), 5),
                         ((5, 40, 31), 8), ((6, 19, 5, 5), 19), ((3, 12, 32), 4), ((17, 32, 48), 32),
                         ((2, 40, 2, 5, 5), 4), ((5, 6, 33), 2), ((3, 8, 320), 4), ((2, 6, 321), 3),
                         ((4, 72, 3, 3), 8), ((3, 136, 24), 8), ((2, 64, 8, 8), 8), ((2, 96, 65), 4),
                         ((64, 64, 3, 3), 32), ((3, 16, 255), 4), ((2, 8, 257), 2), ((3, 24, 8), 3),
                         ((33, 64, 2, 4), 32), ((5, 12, 3), 4), ((9, 16, 5), 8), ((4, 8, 1, 7), 2),
                         ((3, 4, 1027), 2), ((2, 4, 64, 64), 2), ((2, 2, 4097), 1), ((11, 6, 1, 2), 3),
                         ((13, 7, 11), 7)]


@pytest.mark.parametrize("num_threads", [1, 3])
@pytest.mark.parametrize("affine", [True, False], ids=["affine", "no affine"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape, groups", SHORT_BACKWARD_SHAPES, ids=str)
def test_backward_of_many_short_channels(shape, groups, dtype, affine, num_threads, threads, poisoned_outputs):
    threads(num_threads)
    x = _input(shape, dtype, mean=40.0, std=3.0, seed=7)
    w, b = _params(shape[1], dtype, affine)
    what = f"{shape} G={groups} {dtype} {num_threads} threads"
    check_backward_cpu(x, groups, w, b, "none", what)
    if affine:
        check_parameter_grads_alone(x, groups, w, b, what)


# Channels-last samples of at most 64 rows, groups of >= 8 channels: float32 without an activation takes the
# group-by-group AVX-512 kernel (backward_group_rows_f32); other dtypes the general path. Pairs of groups of 8, 24,
# 40, 56 and 72 channels (1, 3, 5, 7, 9 vectors a pair; with an odd group left over at 8, 24 and 72), one to ten
# vectors a group with a partial last one (100 and 130 channels: 7 and 9), ten full vectors (160), groups of two
# blocks (170: 160 + 10 channels; 512), one row, 64 rows, and a large mean.
GROUP_KERNEL_SHAPES = [((3, 1280, 2, 2), 32), ((2, 48, 3, 5), 6), ((2, 40, 3, 3), 5), ((2, 16, 4, 4), 2),
                       ((2, 200, 3, 3), 2), ((2, 520, 2, 3), 4), ((4, 72, 8, 8), 3), ((2, 112, 3, 3), 2),
                       ((2, 216, 2, 3), 3), ((2, 144, 1, 1), 9), ((5, 36, 3, 3), 3),
                       ((2, 320, 3, 3), 2), ((2, 340, 2, 3), 2), ((1, 1024, 3, 1), 2),
                       ((2, 64, 2, 2, 2), 2), ((2, 768, 4, 4), 24)]  # (last: 3 chunks of groups at 3 threads)


@pytest.mark.parametrize("num_threads", [1, 3])
@pytest.mark.parametrize("affine", [True, False], ids=["affine", "no affine"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("shape, groups", GROUP_KERNEL_SHAPES, ids=str)
def test_channels_last_backward_of_few_rows(shape, groups, dtype, affine, num_threads, threads, poisoned_outputs):
    threads(num_threads)
    fmt = torch.channels_last if len(shape) == 4 else torch.channels_last_3d
    for mean, std in ((0.5, 2.0), (1e4, 1.0)):
        x = _input(shape, dtype, fmt, mean=mean, std=std, seed=5)
        w, b = _params(shape[1], dtype, affine)
        what = f"{shape} G={groups} {dtype} mean {mean} {num_threads} threads"
        check_backward_cpu(x, groups, w, b, "none", what)
        if affine:
            check_parameter_grads_alone(x, groups, w, b, what)


def test_channels_last_backward_of_few_rows_in_chunks_of_groups(threads, poisoned_outputs):
    """Fewer samples than threads, an output of 8 MB (streamed stores on the general path): the group kernel
    takes chunks of groups (5 samples x 4 chunks on 4 threads) instead of samples cut into parts of rows."""
    threads(4)
    x = _input((5, 4096, 8, 8), torch.float32, torch.channels_last, seed=6)
    w, b = _params(4096, torch.float32, True)
    check_backward_cpu(x, 32, w, b, "none", "(5, 4096, 8, 8) G32 4 threads")


# Weight and bias as the kernels read them: half-precision ones widened to float a pack at a time with an element
# tail (40 channels: one float16 pack of 32 and 8; 2056: 64 packs and 8), strided views (every other element of a
# larger tensor whose gaps hold NaN: element by element) and float32 ones beside a half input (read in place).
@pytest.mark.parametrize("memory_format", [torch.contiguous_format, torch.channels_last], ids=str)
@pytest.mark.parametrize("param_kind", ["contiguous", "strided", "float32"])
@pytest.mark.parametrize("channels", [40, 2056])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_half_parameters(dtype, channels, param_kind, memory_format, poisoned_outputs):
    x = _input((2, channels, 3, 5), dtype, memory_format, seed=4)
    w, b = _params(channels, dtype, True)
    if param_kind == "strided":
        w, b = (torch.stack([t, torch.full_like(t, float("nan"))], 1).reshape(-1)[::2] for t in (w, b))
        assert w.stride() == (2,)
    elif param_kind == "float32":
        w, b = w.float(), b.float()
    what = f"{dtype} {channels} channels, {param_kind} parameters, {memory_format}"
    check_forward_cpu(x, 8, w, b, "none", what)
    check_forward_cpu(x, 8, w, b, "silu", what)
    if param_kind == "contiguous":  # (the backward's gradients take the parameters' dtype; checked as the input's)
        check_backward_cpu(x, 8, w, b, "none", what)


# Fewer samples than threads and G below the chunk count that would even them out: chunks of at most 16 K elements
# on at least half the threads rather than parts of rows (group_chunks). At 16 threads: (1,512,19,10) G8 in 8
# chunks of one group, (3,256,16,16) G8 in 4 chunks a sample (12 tasks), (1,1024,8,8) G8; (1,256,32,32) G8 (32 K
# elements a chunk) and (1,64,32,32) G8 (chunks narrower than a pack) stay parts of rows.
UNEVEN_CHUNK_SHAPES = [((1, 512, 19, 10), 8), ((3, 256, 16, 16), 8), ((1, 1024, 8, 8), 8), ((1, 256, 32, 32), 8),
                       ((1, 64, 32, 32), 8)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64], ids=str)
@pytest.mark.parametrize("shape, groups", UNEVEN_CHUNK_SHAPES, ids=str)
def test_uneven_chunks_of_groups(shape, groups, dtype, threads, poisoned_outputs):
    threads(16)
    x = _input(shape, dtype, torch.channels_last, mean=-20.0, std=2.0, seed=11)
    check_forward_and_backward_cpu(x, groups, f"{shape} G={groups} {dtype} 16 threads", "leaky_relu")


def check_forward_and_backward_cpu(x, groups, what, act_without_affine):
    """Forward (plain and with SiLU) and backward with weights, and the backward of act_without_affine without
    them, each against float64."""
    w, b = _params(x.shape[1], x.dtype, True)
    check_forward_cpu(x, groups, w, b, "none", what)
    check_forward_cpu(x, groups, w, b, "silu", what)
    check_backward_cpu(x, groups, w, b, "none", what)
    check_backward_cpu(x, groups, None, None, act_without_affine, what + " no affine")
    return w, b


# Channels-last samples past 256 K elements, fewer than the threads: at 16 threads each is cut into 16 parts of
# rows (chunks of groups are for samples up to 256 K elements, group_chunks), a mean far from 0 in two of them. The
# forward's parts sum each group about one pivot shared by all parts, then normalise in a second region; the
# backward's parts give group sums for the dx coefficients and, in the second region, each adds a share of the
# channels' parameter sums: checked with and without weights and with the parameter gradients alone (no dx).
LARGE_CL_SAMPLES = [((1, 1280, 17, 23), 32, 0.5), ((1, 256, 40, 40), 32, 1e3), ((1, 256, 4, 20, 20), 16, -7.0)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16], ids=str)
@pytest.mark.parametrize("shape, groups, mean", LARGE_CL_SAMPLES, ids=str)
def test_large_channels_last_samples_at_many_threads(shape, groups, mean, dtype, threads, poisoned_outputs):
    threads(16)
    fmt = torch.channels_last if len(shape) == 4 else torch.channels_last_3d
    x = _input(shape, dtype, fmt, mean=mean, std=1.5, seed=8)
    what = f"{shape} G={groups} {dtype} mean {mean} 16 threads"
    w, b = check_forward_and_backward_cpu(x, groups, what, "gelu")
    check_parameter_grads_alone(x, groups, w, b, what)


def check_parameter_grads_alone(x, groups, w, b, what):
    """Gradients of weight and bias when x needs none (the backward skips its grad_input pass) against float64."""
    gen = torch.Generator().manual_seed(3)
    grad = torch.randn(x.shape, generator=gen, dtype=torch.float64).to(x.dtype)
    lw, lb = (t.detach().clone().requires_grad_() for t in (w, b))
    ours = torch.autograd.grad(group_norm(x, groups, lw, lb, 1e-5), (lw, lb), grad)
    rw, rb = (t.detach().double().requires_grad_() for t in (w, b))
    # The reference reads an NCHW copy: PyTorch's own CPU channels-last backward without an input gradient
    # segfaults in torch 2.11 and 2.13 (GroupNormBackwardKernelImplChannelsLastInternal; seen with this test).
    x64 = x.double().contiguous()
    theirs = torch.autograd.grad(F.group_norm(x64, groups, rw, rb, 1e-5), (rw, rb), grad.double())
    tol = GRAD_TOL[x.dtype]
    for label, got, ref in zip(("grad_weight", "grad_bias"), ours, theirs):
        assert_close_report(got, ref, tol * (1 + ref.abs().max().item()), tol, f"{what} {label} alone")


@pytest.mark.parametrize("num_threads", [1, 3])
def test_thread_count_does_not_change_results_much(num_threads, threads):
    """The same input split into different parts: results agree to the float32 tolerance (the merge is exact up
    to rounding, so only the order of float32 partial sums differs)."""
    x = _input((1, 4, 96, 96), torch.float32)
    w, b = _params(4, torch.float32, True)
    threads(2)
    ref, ref_mean, ref_rstd = group_norm_with_stats(x, 2, w, b)
    threads(num_threads)
    out, mean, rstd = group_norm_with_stats(x, 2, w, b)
    assert_close_report(out, ref, 2e-6, 2e-6, f"output at {num_threads} threads vs 2")
    assert_close_report(rstd, ref_rstd, 0.0, 1e-6, "rstd")
    assert_close_report(mean, ref_mean, 1e-6, 1e-7, "mean")


@pytest.mark.parametrize("offset, scale", [(1e4, 1.0), (-1e4, 1.0), (100.0, 0.01)], ids=str)
@pytest.mark.parametrize("shape, groups, memory_format", [
    ((2, 8, 33, 31), 4, torch.contiguous_format),
    ((37, 6, 3, 3), 3, torch.contiguous_format),      # 111 slices of 18: statistics in batches of 16
    ((1, 2, 128, 160), 1, torch.contiguous_format),   # one slice: cut into parts at 2 threads
    ((2, 8, 33, 31), 4, torch.channels_last),
    ((1, 72, 25, 23), 8, torch.channels_last),       # whole chunks, several column tiles, an odd tail
    ((1, 16, 4, 20, 21), 4, torch.channels_last_3d),
    ((4, 128, 2, 3), 2, torch.channels_last),        # groups of 64 channels, 6 rows: group sums from the rows
], ids=str)
def test_large_mean_float32(shape, groups, memory_format, offset, scale, threads, poisoned_outputs):
    """|mean| = 1e4 std: shifted sums (pivot near the data, parts merged with Chan's formula) keep the statistics
    and the gradients at the float32 tolerance, where float32 E[x^2] - E[x]^2 loses every digit."""
    threads(2)
    x = _input(shape, torch.float32, memory_format, mean=offset, std=scale)
    slices = x.double().reshape(shape[0], groups, -1)
    naive = (x.reshape(shape[0], groups, -1).square().mean(2) - x.reshape(shape[0], groups, -1).mean(2).square())
    true_var = slices.var(dim=2, unbiased=False)
    assert ((naive.double() - true_var).abs() / true_var).max() > 0.1, "the data must defeat a naive variance"
    w, b = _params(shape[1], torch.float32, True)
    check_forward_cpu(x, groups, w, b, "none", f"mean {offset}")
    check_backward_cpu(x, groups, w, b, "none", f"mean {offset}")


@pytest.mark.parametrize("num_threads", [1, 2])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64], ids=str)
@pytest.mark.parametrize("shape, groups", [
    ((3, 12, 20, 30), 3),        # 600 rows: three column tiles (the pivots move between tiles); 2 threads cut samples
    ((64, 40, 2, 4), 1),         # many samples of 8 rows: one task per sample, sums -> constants -> output
    ((4, 1280, 3, 3, 3), 32),    # channels_last_3d, 27 rows, many channels
    ((16, 24, 5, 6), 1),         # one group: the sample's sums as one run (one block); rows normalised as a flat
                                 # run (24 channels: constants tiled over 3 packs)
    ((6, 40, 9, 10), 1),         # one group, 3600 values a sample: blocks merged; flat run over 5-pack periods
    ((3, 256, 2, 3), 4),         # groups of 64 channels, 6 rows: group sums straight from the rows, columns walk
    ((2, 1280, 2, 2), 32),       # groups of 40 channels (a masked last pack), 4 rows: group sums, columns walk
    ((2, 192, 5, 5), 3),         # groups of 64 channels, 25 rows: group sums, rows walk
    ((2, 1024, 2, 3), 2),        # groups of 512 channels: group sums folded into double every few rows
], ids=str)
def test_channels_last_sums_far_apart(shape, groups, dtype, num_threads, threads, poisoned_outputs):
    """The channels-last statistics add per-channel sums taken about each channel's own pivot (its first row, moved
    to the running mean between tiles) after shifting them to one pivot per group; samples of few rows and groups
    a pack wide or wider sum each group straight about its first value (the last four shapes; their backward also
    works group by group). Made hard here: the channels of a group sit 1e3 apart around 1e4 (the group's spread is
    then the channels' spread), and every channel's first row is 50 std off its values (a bad first pivot);
    forward, statistics and gradients (with and without grad_input) against float64. The backward takes whole
    samples per task here too, or parts of them."""
    threads(num_threads)
    layout = torch.channels_last if len(shape) == 4 else torch.channels_last_3d
    x = _input(shape, torch.float64, mean=0.0, std=1.0)
    x = x + 1e4 + 1e3 * torch.arange(shape[1], dtype=torch.float64).reshape(1, -1, *([1] * (len(shape) - 2)))
    first_row = (slice(None), slice(None)) + (0,) * (len(shape) - 2)
    x[first_row] += 50.0
    x = x.to(dtype).contiguous(memory_format=layout)
    w, b = _params(shape[1], dtype, True)
    check_forward_cpu(x, groups, w, b, "none", f"{shape} {dtype}")
    if groups == 1:
        check_forward_cpu(x, groups, w, b, "silu", f"{shape} {dtype}")  # the flat run's epilogue
    check_backward_cpu(x, groups, w, b, "none", f"{shape} {dtype}")
    check_parameter_grads_alone(x, groups, w, b, f"{shape} {dtype}")


@pytest.mark.parametrize("dtype, offset, atol", [
    (torch.float32, 0.5, 2e-6),    # ordinary data: within a few float32 ulps of the unit outputs
    (torch.float64, 1e4, 1e-10),   # |mean| = 1e4 std: the fold's error, ~u |mean| |a|, is ~1e-12 in float64
], ids=str)
def test_channels_last_normalisation_accuracy(dtype, offset, atol, threads, poisoned_outputs):
    """The channels-last forward normalises float32/float64 as x * a + (b - mean * a): checked far tighter than
    the conditioning term of tests/utils.group_norm_atol, which bounds test_large_mean_float32."""
    threads(2)
    x = _input((2, 64, 16, 16), dtype, torch.channels_last, mean=offset, std=1.0)
    w, b = _params(64, dtype, True)
    out = group_norm(x, 8, w, b)
    ref = F.group_norm(x.double().contiguous(), 8, w.double(), b.double(), 1e-5)
    assert_close_report(out, ref, atol, 0.0, f"{dtype} mean {offset}")


def test_outputs_keep_the_input_layout_and_compute_type():
    x = _input((2, 6, 4, 5), torch.bfloat16, torch.channels_last)
    out, mean, rstd = group_norm_with_stats(x, 3)
    assert out.is_contiguous(memory_format=torch.channels_last) and not out.is_contiguous()
    assert mean.dtype == rstd.dtype == torch.float32
    x64 = _input((2, 6, 3, 4, 5), torch.float64, torch.channels_last_3d)
    out64, mean64, _ = group_norm_with_stats(x64, 2)
    assert out64.is_contiguous(memory_format=torch.channels_last_3d) and mean64.dtype == torch.float64


@pytest.mark.parametrize("huge_pages", ["1", "0"], ids=["huge pages advised", "advice off"])
@pytest.mark.parametrize("memory_format", [torch.contiguous_format, torch.channels_last], ids=["NCHW", "CL"])
def test_outputs_of_32_mb_and_more(memory_format, huge_pages, threads, monkeypatch, poisoned_outputs):
    """Outputs of >= 32 MB get transparent huge pages advised before the kernels write them (cpu_forward_kernels'
    advise_huge_pages; GROUPNORM_INLINE_CPU_HUGE_PAGES=0 turns it off): y and grad_input of (1, 64, 256, 256)
    float64 (32 MB each) against float64 references either way, starting poisoned."""
    monkeypatch.setenv("GROUPNORM_INLINE_CPU_HUGE_PAGES", huge_pages)
    threads(2)
    x = _input((1, 64, 256, 256), torch.float64, memory_format)
    assert x.numel() * x.element_size() >= 32 << 20
    w, b = _params(64, torch.float64, True)
    check_forward_cpu(x, 8, w, b, "none", f"32 MB, huge pages {huge_pages}")
    check_backward_cpu(x, 8, w, b, "none", f"32 MB, huge pages {huge_pages}")


@pytest.mark.parametrize("activation", ["none", "silu"])
@pytest.mark.parametrize("shape, groups", [((64, 256, 32), 32), ((64, 256, 33), 8)], ids=str)
def test_streamed_grad_input_of_short_channels(shape, groups, activation, threads, poisoned_outputs):
    """float32 NCHW channels of 9-64 elements with a grad_input of >= 2 MB on one thread (at least a core's L2 on
    common machines: streamed where a store is aligned): the AVX2 short-channel backward. 32 elements (whole
    vectors per channel: each channel's scale broadcast) and 33 (vectors across channels, their scales from the
    scratch row), with and without an activation, against float64, starting poisoned."""
    threads(1)
    x = _input(shape, torch.float32, mean=20.0, std=3.0, seed=8)
    assert x.numel() * x.element_size() >= 2 << 20
    w, b = _params(shape[1], torch.float32, True)
    check_backward_cpu(x, groups, w, b, activation, f"{shape} G={groups} {activation}")


@pytest.mark.parametrize("activation", ["none", "silu"])
@pytest.mark.parametrize("shape, groups, memory_format", [
    ((64, 40, 14, 18), 1, torch.channels_last),   # rows of 40 channels: 160 bytes, 2.5 lines
    ((64, 40, 14, 18), 8, torch.contiguous_format),  # channels of 252 elements: one in four starts on a line
    ((256, 64, 36), 32, torch.contiguous_format),   # AVX2 short channels: slices of 72 elements, 288 bytes
], ids=str)
def test_streamed_grad_input_on_partial_lines(shape, groups, memory_format, activation, threads, poisoned_outputs):
    """float32 grad_input of >= 2 MB on one thread (streamed) whose runs (a channels-last row, an NCHW channel, a
    short-channel slice) end inside a 64-byte line: only their whole lines take non-temporal stores, the line
    the next run shares takes normal ones (cpu_vec's streamed_prefix; mixing both in one line was 2.3x slower).
    Against float64, starting poisoned: every element of a shared line must be written once, by one kind of
    store."""
    threads(1)
    x = _input(shape, torch.float32, memory_format, mean=-30.0, std=2.0, seed=9)
    assert x.numel() * x.element_size() >= 2 << 20
    w, b = _params(shape[1], torch.float32, True)
    check_backward_cpu(x, groups, w, b, activation, f"{shape} G={groups} {memory_format} {activation}")


@pytest.mark.parametrize("activation", ["silu", "gelu", "leaky_relu"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("shape, groups, n_threads", [
    ((8, 40, 14, 18), 1, 1),    # rows of 40 channels (160-320 B), 252 rows a sample: the sums walk columns
    ((2, 136, 7, 9), 4, 1),     # rows of 136 channels (544-1088 B), 63 rows a sample: the sums walk rows in order
    ((6, 24, 3, 5), 4, 1),      # 15 rows a sample: the sums walk columns, partial packs
    ((1, 40, 30, 30), 8, 2),    # one sample cut into parts (fewer samples than threads)
    ((1, 40, 30, 30), 1, 2),    # the same, one group: mean and coefficients held in registers
    ((2, 72, 5, 5, 4), 6, 2),   # 5-D
    ((8, 320, 14, 18), 32, 1),  # 2.6 MB: grad_input streamed (dz in it too below AVX-512 for SiLU and GELU)
], ids=str)
def test_channels_last_activation_backward_dz_in_grad_input(shape, groups, n_threads, dtype, activation, threads,
                                                            poisoned_outputs):
    """Channels-last float32 / float64 backward with an activation: the sums pass stores dz = dy act'(z) into
    grad_input and the dx pass reads it back in place (act' once per element) where grad_input is not streamed,
    and for SiLU and GELU below AVX-512 where it is. Every sums walk (row order, columns with partial packs, a
    sample cut into parts), streamed or not, against float64, starting poisoned."""
    threads(n_threads)
    memory_format = torch.channels_last if len(shape) == 4 else torch.channels_last_3d
    x = _input(shape, dtype, memory_format, mean=3.0, std=2.0, seed=11)
    w, b = _params(shape[1], dtype, True)
    check_backward_cpu(x, groups, w, b, activation, f"{shape} G={groups} {dtype} {n_threads} threads")


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("memory_format", [torch.contiguous_format, torch.channels_last], ids=["NCHW", "CL"])
def test_outputs_of_4_mb_and_more(memory_format, dtype, threads, poisoned_outputs):
    """grad_input of >= 4 MB at 2 threads in float32 and float64 is written with non-temporal stores (a thread's
    share at least a core's L2 of up to 2 MB: cpu_vec's stream_output):
    only where a store is aligned to the vector, the rest (rows of 37 channels, channels of 97 x 101 elements,
    tails) with normal stores; the forward and 16-bit data keep normal stores (measured slower with them). (3, 37,
    97, 101) is 4.3 MB in float32, (3, 37, 137, 151) 4.6 MB in 16-bit types: every case, forward and backward,
    against float64, starting poisoned."""
    threads(2)
    shape = (3, 37, 137, 151) if dtype.itemsize == 2 else (3, 37, 97, 101)
    x = _input(shape, dtype, memory_format)
    assert x.numel() * x.element_size() >= 4 << 20
    w, b = _params(37, dtype, True)
    check_forward_cpu(x, 1, w, b, "none", "4 MB output")
    check_forward_cpu(x, 37, w, b, "silu", "4 MB output, silu")
    check_backward_cpu(x, 1, w, b, "none", "4 MB grad_input")
    check_backward_cpu(x, 37, w, b, "silu", "4 MB grad_input, silu")


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape, groups", [
    ((1, 3, 131, 97), 1),    # rows of 3 channels: a part's rows summed and normalised as one flat run
    ((1, 8, 67, 71), 1),     # rows of 8 channels (a period of one pack in float32, two rows in 16-bit)
    ((1, 3, 131, 97), 3),    # several groups: per-channel sums, flat normalisation
    ((2, 5, 3, 47, 41), 1),  # 5-D, two samples at 3 threads
    ((1, 3, 2, 3), 1),       # too small to be cut into parts
], ids=str)
def test_channels_last_forward_of_few_channels_in_parts(shape, groups, dtype, threads, poisoned_outputs):
    """Channels-last samples of a few channels, fewer samples than threads (each cut into parts of rows): with one
    group a part's rows are one contiguous run, summed flat about the sample's pivot; parts of at least four periods
    of the constants are normalised flat. Against float64, starting poisoned, with a large mean."""
    threads(3)
    memory_format = torch.channels_last if len(shape) == 4 else torch.channels_last_3d
    for mean, std in ((0.5, 2.0), (1e4, 1.0)):
        x = _input(shape, dtype, memory_format, mean=mean, std=std, seed=13)
        w, b = _params(shape[1], dtype, True)
        check_forward_cpu(x, groups, w, b, "none", f"{shape} G={groups} {dtype} mean {mean}")
        check_forward_cpu(x, groups, w, b, "silu", f"{shape} G={groups} {dtype} mean {mean} silu")

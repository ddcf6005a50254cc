"""The CUDA forward against float64 (every test needs a GPU and is skipped cleanly without one).

The CPU sweep again on the GPU, plus what only a GPU run shows: every launch plan of the kernels (small,
resident, fused, split: `test_sweep_reaches_every_plan` keeps the sweep honest; every plan, streamed included,
forced by name on edge-case inputs: `test_forced_plan_against_float64`), 16-byte vector and element-wise
paths (misaligned data pointers, sizes not multiples of the vector width), tensors of more than 2^31 elements and
4 GiB, the full KernelBench #35 shape, the current stream and the current device. Outputs are poisoned two ways before each call: the caching allocator is filled with
freed NaN blocks of the output's size, and `poisoned_outputs` makes every empty/empty_like start as NaN; any
element a kernel does not write stays NaN and fails.

Tolerances: tests/utils.py (TOLERANCES, STATS_RTOL, and `group_norm_atol`'s conditioning term).
"""

from __future__ import annotations

import math
import re

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from groupnorm_inline import GroupNorm, Model, ModelNew, group_norm, group_norm_with_stats
from groupnorm_inline.functional import forward_plan
from cases import DTYPE_PARAMS, SHAPES, VIEWS, check_forward, make_input, make_params, make_view
from utils import (COMPUTE_ROUNDOFF, STATS_RTOL, TOLERANCES, assert_bitwise_equal, assert_close_report,
                   assert_group_norm_close, assert_stats_close, poison_cuda_allocator)

pytestmark = [pytest.mark.cuda, pytest.mark.usefixtures("poisoned_outputs")]

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16]

# (shape, num_groups) for the GPU sweep: the CPU table's kinds of cases plus sizes that reach every launch plan
# (which plan each takes depends on the slice size in bytes: see test_sweep_reaches_every_plan).
CUDA_SHAPES = [
    # minimal
    ((2, 1), 1),
    ((1, 4, 3), 2),
    # trailing dims 0..3, odd sizes
    ((3, 12), 4),                    # (N, C), C/G = 3
    ((2, 10, 17), 2),                # (N, C, L), C/G = 5
    ((2, 6, 7, 9), 2),               # (N, C, H, W), C/G = 3
    ((2, 10, 3, 5, 7), 2),           # (N, C, D, H, W), C/G = 5
    # group == channel
    ((2, 7, 13), 7),
    ((4, 6), 6),                     # one element per slice: var 0, y = bias
    ((2, 16, 9, 31, 33), 16),        # 5-D
    # G = 1
    ((2, 48, 5, 3), 1),              # C/G = 48
    ((1, 3, 1001), 1),
    # C/G = 48
    ((2, 96, 7), 2),
    ((1, 144, 3, 3), 3),
    # N = 1
    ((1, 15, 4, 9), 5),
    ((1, 10, 3, 3, 3), 2),           # 5-D
    # non-aligned
    ((3, 15, 1, 13), 3),
    ((2, 9, 1, 1), 3),
    # many short slices
    ((64, 32, 16, 16), 8),           # 512 slices of 1024 elements
    ((128, 64, 7, 7), 32),           # 4096 slices of 98
    # few long slices (MBs each)
    ((1, 8, 1000, 1001), 2),         # 2 slices of 4e6, D a multiple of 4 but HW is not (vectors cross channels)
    ((2, 64, 333, 301), 8),          # like (2, 64, 1000, 1000), smaller and odd
    ((3, 5, 999, 997), 5),           # C/G = 1, odd D: element-wise accesses
    ((2, 16, 9, 131, 133), 4),       # 5-D
    # level 2 #94's GroupNorm: (1024, 8192), 256 groups of 32 channels, no trailing dims
    ((1024, 8192), 256),
]

# Input dtypes with affine parameters; half inputs also with float32 parameters (mixed mode).
SWEEP_DTYPE_PARAMS = [(dtype, "affine") for dtype in DTYPES] + [(torch.float16, "float32 params"),
                                                                (torch.bfloat16, "float32 params")]


def dtype_id(value):
    return str(value).replace("torch.", "")


def test_poisoning_reaches_empty_like():
    """Both poisons really reach `empty_like` (else the sweep could not catch an unwritten element)."""
    import torch.utils.deterministic as deterministic

    x = torch.randn(4, 1024, 4096, device="cuda")  # 64 MB: blocks above 10 MB get segments of their own
    assert torch.isnan(torch.empty_like(x)).all(), "poisoned_outputs did not fill empty_like with NaN"
    deterministic.fill_uninitialized_memory = False  # restored by the fixture
    for dtype in DTYPES:
        torch.cuda.empty_cache()  # no unpoisoned free block of this size is left to be picked instead
        poison_cuda_allocator(x.numel() * dtype.itemsize)
        assert torch.isnan(torch.empty_like(x, dtype=dtype)).all(), f"freed NaN blocks not reused for {dtype}"


@pytest.mark.parametrize("dtype, params", SWEEP_DTYPE_PARAMS, ids=dtype_id)
@pytest.mark.parametrize("shape, num_groups", CUDA_SHAPES, ids=str)
def test_sweep(shape, num_groups, dtype, params):
    x = make_input(shape, dtype, device="cuda")
    weight, bias = make_params(shape[1], params, dtype, device="cuda")
    check_forward(x, num_groups, weight, bias, what=f"output [{forward_plan(x, num_groups)}]")


def plan_kind(plan: str) -> tuple[str, bool]:
    """("small" | "resident" | "held" | "fused" | "split" | "streamed", whether 16-byte vector accesses are used) of
    a plan line."""
    match = re.fullmatch(r"(\w+): .*vec (\d+)\)", plan)
    assert match, f"unexpected plan description {plan!r}"
    return match.group(1), int(match.group(2)) > 1


def test_sweep_reaches_every_plan():
    """The sweep (aligned inputs and the misaligned cases below) takes the small, resident and held plans both
    with 16-byte vectors and element-wise, and the odd slice lengths of the edge-vector test take the resident,
    held and split plans with vectors, so every kernel of the automatic choice is checked; `fused` needs ~17 GB
    (test_fused_plan) and every plan runs forced by name in test_forced_plan_against_float64."""
    reached = set()
    for shape, num_groups in CUDA_SHAPES:
        for dtype in DTYPES:
            x = torch.empty(shape, dtype=dtype, device="cuda")
            reached.add(plan_kind(forward_plan(x, num_groups)))
    for shape, num_groups in MISALIGNED_SHAPES:
        x = torch.empty(math.prod(shape) + 1, device="cuda")[1:].view(shape)
        reached.add(plan_kind(forward_plan(x, num_groups)))
    unaligned = set()
    for shape, num_groups in EDGE_VECTOR_SHAPES:
        for dtype in DTYPES:
            unaligned.add(plan_kind(forward_plan(torch.empty(shape, dtype=dtype, device="cuda"), num_groups)))
    wanted = {(kind, vectorised) for kind in ("small", "resident", "held") for vectorised in (True, False)}
    assert wanted <= reached, f"plans no case reaches: {sorted(wanted - reached)}"
    # Slices of odd length: vectors with element-wise edges in each plan that takes them; forced plans: below.
    wanted = {(kind, True) for kind in ("resident", "held", "split")}
    assert wanted <= unaligned, f"plans no unaligned case reaches: {sorted(wanted - unaligned)}"


@pytest.mark.parametrize("dtype, params", DTYPE_PARAMS, ids=dtype_id)
@pytest.mark.parametrize("shape, num_groups", SHAPES, ids=str)
def test_parameter_modes(shape, num_groups, dtype, params):
    """Every weight/bias combination (none, weight only, bias only, both, float32 for half inputs)."""
    x = make_input(shape, dtype, device="cuda")
    weight, bias = make_params(shape[1], params, dtype, device="cuda")
    check_forward(x, num_groups, weight, bias)


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
@pytest.mark.parametrize("view", list(VIEWS))
def test_non_contiguous_and_channels_last(view, dtype):
    x, base = make_view(view, dtype, device="cuda")
    base_before = base.clone(memory_format=torch.preserve_format)
    weight, bias = make_params(6, "affine", dtype, device="cuda")
    check_forward(x, 3, weight, bias, what=view)
    assert_bitwise_equal(base, base_before, "storage under the view")


MISALIGNED_SHAPES = [
    ((2, 8, 64, 64), 4),             # would be vectorised if aligned
    ((1, 8, 1000, 1001), 2),         # few long slices
    ((3, 6, 5, 7), 3),               # tiny
]


# Slices whose length D is not a multiple of the 16-byte vector (4 float, 8 half, 2 double elements): every
# slice starts at another alignment, so the resident, held, fused and split plans cut each range into an
# element-wise head, a body of 16-byte vectors and an element-wise tail. Heads of every length (D odd in half
# precision: slice starts step through all eight offsets), ranges shorter than one vector's head, many and few
# slices, each plan of the automatic choice.
EDGE_VECTOR_SHAPES = [
    ((4, 6, 7, 9), 2),               # D = 189: heads of every length, slices shorter than a CTA's work
    ((32, 16, 941), 8),              # D = 1882 (2 mod 4, 2 mod 8), 3-D
    ((3, 5, 999, 997), 5),           # D = 996003 (odd): the held plan (30-60 MB), clusters in waves (120 MB)
    ((2, 8, 181, 141), 4),           # D = 51042, HW odd: vectors straddle channels
    ((2, 320, 127, 129), 32),        # D = 163830: clusters of 16 in more than one wave, so the held plan
    ((8, 4, 154113), 2),             # D = 308226, HW odd: held items whose vectors straddle channels
    ((1, 2, 8193, 8193), 2),         # 134 M elements, 2 slices: past the held plan's rounds, the split plan
]


@pytest.mark.parametrize("activation", [None, "silu"])
@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
@pytest.mark.parametrize("shape, num_groups", EDGE_VECTOR_SHAPES, ids=str)
def test_unaligned_slices_take_16_byte_vectors(shape, num_groups, dtype, activation):
    """Slices of a length that is not a multiple of the vector width still move in 16-byte vectors (float64 has
    2-element vectors: D odd only), with the right result in every element (outputs poisoned)."""
    x = make_input(shape, dtype, device="cuda")
    weight, bias = make_params(shape[1], "affine", dtype, device="cuda")
    plan = forward_plan(x, num_groups)
    if (math.prod(shape[1:]) // num_groups) % (16 // x.element_size()) != 0:
        assert plan_kind(plan)[0] in ("resident", "held", "fused", "split") and plan_kind(plan)[1], plan
    if activation is None:
        check_forward(x, num_groups, weight, bias, what=f"output [{plan}]")
        return
    # The activation's tolerance as in test_activations: the plain output's, doubled (|silu'| <= 1.1).
    poison_cuda_allocator(x.numel() * x.element_size())
    out = group_norm(x, num_groups, weight, bias, 1e-5, activation=activation)
    expected = F.silu(F.group_norm(x.double(), num_groups, weight.double(), bias.double(), 1e-5))
    atol, rtol = TOLERANCES[dtype]
    assert_close_report(out, expected, 2 * atol, 2 * rtol, f"silu output [{plan}]")


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
@pytest.mark.parametrize("shape, num_groups", MISALIGNED_SHAPES, ids=str)
def test_misaligned_data_pointer(shape, num_groups, dtype):
    """A view starting one element into its storage: not 16-byte aligned, so no 16-byte accesses allowed."""
    storage = make_input((math.prod(shape) + 1,), dtype, device="cuda")
    x = storage[1:].view(shape)
    assert x.data_ptr() % 16 != 0
    weight, bias = make_params(shape[1], "affine", dtype, device="cuda")
    check_forward(x, num_groups, weight, bias, what=f"output [{forward_plan(x, num_groups)}]")


@pytest.mark.parametrize("eps", [0.0, 1e-12, 1e-5, 0.1, 10.0])
def test_eps(eps):
    x = make_input((2, 6, 5, 7), torch.float32, std=0.3, device="cuda")
    weight, bias = make_params(6, "affine", torch.float32, device="cuda")
    check_forward(x, 3, weight, bias, eps)


@pytest.mark.parametrize("memory_format", [None, torch.channels_last], ids=["contiguous", "channels_last"])
@pytest.mark.parametrize("shape, num_groups", [((0, 6), 3), ((0, 6, 5), 2), ((0, 6, 4, 5), 3)], ids=str)
def test_empty_batch(shape, num_groups, memory_format):
    x = torch.randn(shape, device="cuda")
    if memory_format is not None and x.dim() == 4:
        x = x.contiguous(memory_format=memory_format)
    weight, bias = make_params(shape[1], "affine", torch.float32, device="cuda")
    expected = F.group_norm(x, num_groups, weight, bias)
    out, mean, rstd = group_norm_with_stats(x, num_groups, weight, bias)
    assert (out.shape, out.dtype, out.device) == (expected.shape, expected.dtype, expected.device)
    assert out.is_contiguous() == expected.is_contiguous()
    if x.dim() == 4:
        assert out.is_contiguous(memory_format=torch.channels_last) == \
            expected.is_contiguous(memory_format=torch.channels_last)
    assert mean.shape == rstd.shape == (0, num_groups)


@pytest.mark.parametrize("dtype, offset, scale", [
    (torch.float32, 1e4, 1.0),       # |mean| = 1e4 std
    (torch.float32, -1e4, 1.0),
    (torch.float32, 100.0, 0.01),
    (torch.float64, 1e8, 1.0),       # |mean| = 1e8 std in float64
], ids=str)
@pytest.mark.parametrize("shape, num_groups", [
    ((2, 8, 33, 31), 4),             # one CTA per slice
    ((1, 4, 1500, 1501), 2),         # several CTAs per slice: partial sums merged across CTAs
], ids=str)
def test_large_mean(shape, num_groups, dtype, offset, scale):
    """Statistics without cancellation when |mean| >> std (shifted sums, or Welford/Chan)."""
    x = (offset + scale * torch.randn(shape, dtype=torch.float64)).to(device="cuda", dtype=dtype)
    weight, bias = make_params(shape[1], "affine", dtype, device="cuda")
    check_forward(x, num_groups, weight, bias)


def test_module_matches_nn_groupnorm():
    torch.manual_seed(0)
    theirs = nn.GroupNorm(8, 64).cuda()
    with torch.no_grad():
        theirs.weight.normal_(1.0, 0.5)
        theirs.bias.normal_()
    ours = GroupNorm(8, 64).cuda()
    ours.load_state_dict(theirs.state_dict())
    x = torch.rand(4, 64, 33, 35, device="cuda")
    out = ours(x)
    atol, rtol = TOLERANCES[torch.float32]
    assert_close_report(out, theirs(x), 2 * atol, 2 * rtol, "GroupNorm vs nn.GroupNorm (CUDA)")
    assert_group_norm_close(out, x, 8, ours.weight, ours.bias)


# ------------------------------------------------------------------------------------------------ streams

def test_runs_on_the_current_stream():
    """The kernels must be queued on the caller's current stream. On a side stream we queue a ~0.1 s sleep, then
    overwrite the input, then call the operator: only if it runs on that stream, behind the copy, does it see the
    new values (PyTorch's streams are non-blocking: a kernel sent to the default stream instead would not wait
    for them). Only the side stream is synchronised, through an event."""
    shape, groups = (4, 32, 64, 64), 8
    x = make_input(shape, torch.float32, device="cuda")
    new_values = make_input(shape, torch.float32, mean=3.0, std=0.5, device="cuda")
    weight, bias = make_params(32, "affine", torch.float32, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    done = torch.cuda.Event()
    with torch.cuda.stream(side):
        torch.cuda._sleep(200_000_000)           # keeps `side` busy long after the calls below return
        x.copy_(new_values)
        out, mean, rstd = group_norm_with_stats(x, groups, weight, bias)
        done.record(side)
    done.synchronize()
    assert_group_norm_close(out, new_values, groups, weight, bias)
    assert_stats_close(mean, rstd, new_values, groups)


# ------------------------------------------------------------------------------------------------ devices

def test_tensor_on_a_device_that_is_not_current():
    if torch.cuda.device_count() < 2:
        pytest.skip(f"needs 2 GPUs, {torch.cuda.device_count()} visible")
    for current, target in ((0, 1), (1, 0)):
        with torch.cuda.device(current):
            x = make_input((2, 32, 33, 35), torch.float32, device=f"cuda:{target}")
            weight, bias = make_params(32, "affine", torch.float32, device=f"cuda:{target}")
            out = check_forward(x, 8, weight, bias, what=f"input on cuda:{target}, current device cuda:{current}")
            assert out.device == x.device and torch.cuda.current_device() == current
    x = make_input((2, 32, 5), torch.float32, device="cuda:1")
    with pytest.raises(RuntimeError, match=r"same device, .* cuda:1 \(input\) and cuda:0 \(weight\)"):
        group_norm(x, 8, torch.ones(32, device="cuda:0"), torch.zeros(32, device="cuda:1"))


# ------------------------------------------------------------------------------- more than 2^31 elements

def assert_close_to_float64_slicewise(out, mean, rstd, x, num_groups, weight, bias, eps=1e-5, chunk=2 ** 24):
    """`assert_group_norm_close` + `assert_stats_close` for tensors too large for a float64 copy: per (n, g)
    slice, two-pass float64 statistics on the GPU, then the output compared chunk by chunk (~1.5 GB of
    temporaries), with the same tolerances."""
    assert out.shape == x.shape and out.dtype == x.dtype and out.is_contiguous() and x.is_contiguous()
    n_total, channels = x.shape[0], x.shape[1]
    per_group = channels // num_groups
    hw = x.numel() // (n_total * channels)
    d = per_group * hw
    base_atol, rtol = TOLERANCES[x.dtype]
    u, stats_rtol = COMPUTE_ROUNDOFF[x.dtype], STATS_RTOL[x.dtype]
    device = x.device
    w64 = torch.ones(channels, dtype=torch.float64, device=device) if weight is None else weight.double()
    b64 = torch.zeros(channels, dtype=torch.float64, device=device) if bias is None else bias.double()
    xs, ys = x.view(n_total, num_groups, d), out.view(n_total, num_groups, d)
    for n in range(n_total):
        for g in range(num_groups):
            where = f"slice (n={n}, g={g})"
            xv, yv = xs[n, g], ys[n, g]
            mean64 = sum(xv[s:s + chunk].double().sum() for s in range(0, d, chunk)) / d
            var64 = sum((xv[s:s + chunk].double() - mean64).square().sum() for s in range(0, d, chunk)) / d
            rstd64 = (var64 + eps).rsqrt()
            got_mean, got_rstd = mean[n, g].double(), rstd[n, g].double()
            assert (got_rstd - rstd64).abs() <= stats_rtol * rstd64, \
                f"{where}: rstd {got_rstd.item():.9g}, float64 {rstd64.item():.9g}"
            assert (got_mean - mean64).abs() <= stats_rtol / rstd64 + 2 * u * mean64.abs(), \
                f"{where}: mean {got_mean.item():.9g}, float64 {mean64.item():.9g}"
            for s in range(0, d, chunk):
                e = min(s + chunk, d)
                xc = xv[s:e].double()
                c = g * per_group + torch.arange(s, e, device=device) // hw     # channel of each element
                a, shift = rstd64 * w64[c], b64[c]
                expected = (xc - mean64) * a + shift
                allowed = base_atol + rtol * expected.abs() + 4 * u * (xc.abs() * a.abs() + mean64.abs() * a.abs()
                                                                        + shift.abs())
                got = yv[s:e].double()
                bad = ~((got - expected).abs() <= allowed)
                if bool(bad.any()):
                    i = int(bad.to(torch.uint8).argmax())
                    raise AssertionError(
                        f"{where}: {int(bad.sum())} bad elements in [{s}, {e}); first at slice offset {s + i} "
                        f"(channel {int(c[i])}): got {got[i].item():.8g}, expected {expected[i].item():.8g}, "
                        f"allowed error {allowed[i].item():.3g}")


def require_free_memory(nbytes: int) -> None:
    free, total = torch.cuda.mem_get_info()
    free += torch.cuda.memory_reserved() - torch.cuda.memory_allocated()  # cached blocks are ours to reuse
    if free < nbytes:
        pytest.skip(f"needs {nbytes / 2**30:.1f} GiB of free GPU memory; {free / 2**30:.1f} of "
                    f"{total / 2**30:.1f} GiB free")


@pytest.mark.slow
@pytest.mark.parametrize("shape, num_groups, dtype", [
    # 2^31 + 64 elements (8.6 GB), 2 slices of 2^30 + 32: offsets inside one slice need 64 bits
    ((1, 8, 2 ** 28 + 8), 2, torch.float32),
    # 2.4e9 elements (9.7 GB), 72 slices of 2^25 + 6: slice starts past 2^31; odd HW: element-wise path
    ((9, 16, 2 ** 24 + 3), 8, torch.float32),
    # 2^31 + 64 elements in 4.3 GB: 16-bit tensors over 4 GiB, slices of 2^30 + 32
    ((1, 4, 2 ** 29 + 16), 2, torch.bfloat16),
    ((1, 4, 2 ** 29 + 16), 2, torch.float16),
], ids=str)
def test_more_than_2_31_elements(shape, num_groups, dtype):
    numel = math.prod(shape)
    assert numel > 2 ** 31
    nbytes = numel * dtype.itemsize
    require_free_memory(3 * nbytes + (3 << 30))  # input, its clone, output (in the poison block), reference chunks
    torch.cuda.empty_cache()
    channels = shape[1]
    x = torch.randn(shape, device="cuda", dtype=dtype)
    # Distinct statistics per channel, so reading the wrong slice cannot go unnoticed.
    x.add_((torch.arange(channels, device="cuda", dtype=torch.float32) * 0.25).to(dtype).view(1, channels, 1))
    weight, bias = make_params(channels, "affine", dtype, device="cuda")
    x_before = x.clone()
    poison_cuda_allocator(nbytes, copies=1)
    out, mean, rstd = group_norm_with_stats(x, num_groups, weight, bias)
    torch.cuda.synchronize()
    assert torch.equal(x, x_before), "the input was modified"
    del x_before
    assert_close_to_float64_slicewise(out, mean, rstd, x, num_groups, weight, bias)
    del x, out
    torch.cuda.empty_cache()


@pytest.mark.slow
def test_fused_plan():
    """The `fused` plan (one CTA per slice, two reads) is taken only with enough slices to fill the GPU (32 per
    SM) that are each too large to stay in a cluster's shared memory (> 16 x 200 KB): ~17 GB of float32 on a
    132-SM GPU. C/G = 4 with HW = 250001, so 16-byte vectors straddle channel boundaries."""
    sms = torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count
    shape, num_groups = (sms * 4, 32, 250_001), 8           # sms * 32 slices of 1,000,004 elements (4 MB)
    nbytes = math.prod(shape) * 4
    require_free_memory(2 * nbytes + (3 << 30))
    torch.cuda.empty_cache()
    x = torch.randn(shape, device="cuda")
    x.add_(torch.arange(32, device="cuda", dtype=torch.float32).view(1, 32, 1) * 0.25)
    plan = forward_plan(x, num_groups)
    assert plan_kind(plan) == ("fused", True), plan
    weight, bias = make_params(32, "affine", torch.float32, device="cuda")
    poison_cuda_allocator(nbytes, copies=1)
    out, mean, rstd = group_norm_with_stats(x, num_groups, weight, bias)
    assert_close_to_float64_slicewise(out, mean, rstd, x, num_groups, weight, bias)
    del x, out
    torch.cuda.empty_cache()


def _held_capacity_bytes() -> int:
    """Shared memory of the whole GPU (what the held plan keeps on chip per round of items)."""
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    return props.multi_processor_count * props.shared_memory_per_multiprocessor


def test_plan_rule_resident_held_resident():
    """The plan rule from the device's capacities: slices whose clusters are all resident at once, and slices
    in clusters of 1-2 CTAs, keep the resident plan (one read, no grid barrier); slices in clusters of 4-16 CTAs
    in numbers that need more waves, and 16-CTA clusters of a tensor within L2, take the held plan while the
    tensor is at most ~4x the GPU's shared memory; beyond that, more waves of the resident plan."""
    if not _is_hopper():
        pytest.skip("thread-block clusters of 16 need sm_90+")
    l2 = torch.cuda.get_device_properties(torch.cuda.current_device()).L2_cache_size
    smem = _held_capacity_bytes()
    # 160 KB slices of fp16 (clusters of 4 CTAs of 40 KB): 8 slices fit one wave on any Hopper part.
    one_wave = torch.empty(1, 8 * 10, 8192, device="cuda", dtype=torch.float16)
    assert plan_kind(forward_plan(one_wave, 8))[0] == "resident", forward_plan(one_wave, 8)
    # 32 KB slices (one CTA each) in many waves: still resident.
    small_slices = torch.empty(64, 512, 32, 32, device="cuda", dtype=torch.float16)
    assert plan_kind(forward_plan(small_slices, 32))[0] == "resident", forward_plan(small_slices, 32)
    # Slices of 1 MB (16-CTA clusters) within 80% of L2, and 512 KB ones (clusters of 8) in more than one wave.
    slice_elems = 128 * 4096
    within = max(1, int(0.8 * l2) // (2 * slice_elems))
    x = torch.randn(1, 4 * within, slice_elems // 4, device="cuda", dtype=torch.bfloat16)
    plan = forward_plan(x, within)
    assert plan_kind(plan)[0] == "held", plan
    check_forward(x, within, *make_params(4 * within, "affine", torch.bfloat16, device="cuda"), what=plan)
    waves = 4 * max(1, smem // (4 * slice_elems))               # ~smem bytes of 512 KB slices: several waves
    x = torch.randn(1, 4 * waves, slice_elems // 8, device="cuda", dtype=torch.bfloat16)
    assert plan_kind(forward_plan(x, waves))[0] == "held", forward_plan(x, waves)
    # Past ~4x the shared memory (5x here): the resident plan in waves.
    beyond = 5 * smem // (2 * slice_elems) + 1
    x = torch.empty(1, 4 * beyond, slice_elems // 4, device="cuda", dtype=torch.bfloat16)
    assert plan_kind(forward_plan(x, beyond))[0] == "resident", forward_plan(x, beyond)


# -------------------------------------------------------------------------------- KernelBench #35, full size

@pytest.mark.slow
def test_kernelbench_35_full_shape():
    """(112, 64, 512, 512) float32, 8 groups (7.5 GB): ModelNew against Model (nn.GroupNorm) within the
    harness's 1e-4, then against float64 slice by slice; the input unchanged."""
    shape, groups = (112, 64, 512, 512), 8
    nbytes = math.prod(shape) * 4
    require_free_memory(4 * nbytes + (3 << 30))  # input, its clone, reference output, our output
    torch.cuda.empty_cache()
    torch.manual_seed(0)
    x = torch.rand(shape, device="cuda")
    x_before = x.clone()
    model, model_new = Model(64, groups).cuda(), ModelNew(64, groups).cuda()
    with torch.no_grad():
        model.gn.weight.normal_(1.0, 0.5)
        model.gn.bias.normal_()
    model_new.load_state_dict(model.state_dict())
    with torch.no_grad():
        expected = model(x)
        poison_cuda_allocator(nbytes, copies=1)
        out = model_new(x)
    torch.cuda.synchronize()
    assert torch.allclose(out, expected, atol=1e-4, rtol=1e-4), \
        f"max abs difference to nn.GroupNorm {(out - expected).abs().max().item():.3g}"
    del expected
    poison_cuda_allocator(nbytes, copies=1)
    out_again, mean, rstd = group_norm_with_stats(x, groups, model_new.gn.weight.detach(), model_new.gn.bias.detach())
    assert torch.equal(out_again, out), "two calls on the same input differ"
    del out
    assert torch.equal(x, x_before), "the input was modified"
    del x_before
    assert_close_to_float64_slicewise(out_again, mean, rstd, x, groups, model.gn.weight.detach(),
                                      model.gn.bias.detach())
    del x, out_again
    torch.cuda.empty_cache()


# ------------------------------------------------------------------ every plan forced on small inputs

# (plan, shape, num_groups): inputs on which each plan's own edge cases run when the plan is forced through
# `group_norm_forward_with_plan` (the automatic choice would take another plan for most of them).
FORCED_PLAN_CASES = [
    ("small", (7, 6, 1), 3),
    ("resident", (3, 8, 100, 100), 2),
    ("streamed", (3, 8, 100, 100), 2),                          # each part whole in shared memory
    ("streamed", (5, 6, 37, 20), 3),                            # parts of 96 elements, the last one shorter
    ("streamed", (3, 10, 4), 1),                                # D = 40: trailing ranks own nothing
    ("streamed", (200, 4, 32, 32), 2),                          # 400 slices: many per persistent group
    # Thread-block clusters (devices without cooperative launches): the exchange through distributed shared memory
    ("streamed:cluster=16", (3, 10, 4), 1),
    ("streamed:cluster=16", (200, 4, 32, 32), 2),
    ("streamed:cluster=16,smem_kb=16,reg_vecs=2", (33, 6, 128, 129), 3),
    ("streamed:smem_kb=16,reg_vecs=2", (4, 8, 256, 256), 2),    # shared memory, registers and L2 tail
    ("streamed:smem_kb=16,reg_vecs=2", (33, 6, 128, 129), 3),   # vectors straddle channels
    ("streamed:smem_kb=1,reg_vecs=0", (6, 8, 256, 100), 4),     # mostly L2 tail
    ("streamed:cluster=8", (10, 8, 300, 300), 2),
    # No clusters: groups of a cooperative launch exchange their sums through global memory
    ("streamed:groups=8", (200, 4, 32, 32), 2),                 # many rounds: both parities of the partials reused
    ("streamed:groups=2", (9, 8, 300, 300), 2),                 # > 32 CTAs per slice; 2 slices at a time, odd count
    ("streamed:groups=3", (3, 10, 4), 1),                       # D = 40: most group ranks own nothing
    ("streamed:groups=7,smem_kb=16,reg_vecs=2", (33, 6, 128, 129), 3),  # vectors straddle channels; L2 tails
    ("fused", (3, 8, 100, 100), 2),
    ("split", (3, 8, 100, 100), 2),
    # HW a multiple of the vector but shorter than a thread's stride: each step of a thread over its vectors
    # crosses one or more whole channels, so every vector of the thread takes another channel's constants
    ("resident", (3, 8, 24, 24), 2),
    ("fused", (3, 8, 24, 24), 2),
    ("split", (2, 16, 40, 36), 4),
    ("fused", (2, 12, 8, 8), 3),                                # HW = 64: many channels per stride
    ("split:l2_keep_pct=0,pdl=0", (1, 4, 3000, 3000), 1),       # no L2 hints, plain launches
    ("split:l2_keep_pct=100", (2, 6, 999, 1001), 3),            # every item kept in L2; odd D: element-wise edges
    ("held", (3, 8, 100, 100), 2),                              # every item whole in shared memory, one round
    ("held", (3, 8, 24, 24), 2),                                # HW shorter than a thread's stride
    ("held", (2, 8, 181, 141), 4),                              # HW odd: float vectors straddle channels
    ("held", (2, 6, 999, 1001), 3),                             # D not a multiple of the vector: element-wise
    ("held:held_kb=4", (4, 8, 256, 256), 2),                    # several rounds, the first ones held, slices repeat
    ("held:held_kb=2", (1, 4, 300, 300), 1),                    # one slice of many items: folded once, two barriers
    ("held:grid_finalize=1,l2_keep_pct=0,ctas_per_sm=1", (3, 8, 100, 100), 2),  # second barrier forced, no hints
]


def _is_hopper() -> bool:
    return torch.cuda.get_device_capability()[0] >= 9


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=dtype_id)
@pytest.mark.parametrize("plan, shape, num_groups", FORCED_PLAN_CASES, ids=str)
def test_forced_plan_against_float64(plan, shape, num_groups, dtype):
    if plan.startswith("streamed") and not _is_hopper():
        pytest.skip("the streamed plan needs thread-block clusters and bulk copies (sm_90+)")
    from groupnorm_inline.extension import load

    for mean_offset in (0.0, 1e4):  # |mean| >> std as well
        x = make_input(shape, dtype, device="cuda")
        if mean_offset:
            x = (x.float() + mean_offset).to(dtype)
        weight, bias = make_params(shape[1], "float32 params" if dtype != torch.float32 else "affine", dtype,
                                   device="cuda")
        x_before = x.clone()
        poison_cuda_allocator(x.numel() * x.element_size())
        out, mean, rstd = load().group_norm_forward_with_plan(x, num_groups, weight, bias, 1e-5, plan)
        assert_close_to_float64_slicewise(out, mean, rstd, x, num_groups, weight, bias)
        assert_bitwise_equal(x, x_before, "input")


def test_forced_plan_errors():
    from groupnorm_inline.extension import load

    x = torch.rand(4, 8, 16, 16, device="cuda")
    with pytest.raises(RuntimeError, match="unknown plan 'bogus'"):
        load().group_norm_forward_with_plan(x, 2, None, None, 1e-5, "bogus")
    with pytest.raises(RuntimeError, match=r"plan 'small' cannot take slices of 1024 elements \(8 slices"):
        load().group_norm_forward_with_plan(x, 2, None, None, 1e-5, "small")
    with pytest.raises(RuntimeError, match=r"l2_keep_pct must be in \[0, 100\], got 101"):
        load().group_norm_forward_with_plan(x, 2, None, None, 1e-5, "split:l2_keep_pct=101")
    with pytest.raises(RuntimeError, match=r"l2_keep_pct must be in \[0, 100\], got -1"):
        load().group_norm_forward_with_plan(x, 2, None, None, 1e-5, "held:l2_keep_pct=-1")
    # 1 KB of shared memory per CTA would need far more than the held plan's 8 rounds of items for 32 MB
    big = torch.rand(4, 8, 512, 512, device="cuda")
    with pytest.raises(RuntimeError, match=r"plan 'held:held_kb=1' cannot take slices of 1048576 elements"):
        load().group_norm_forward_with_plan(big, 2, None, None, 1e-5, "held:held_kb=1")


def test_streamed_plan_takes_large_parts():
    """Slices of 8 MB in float32 and 4 MB in bfloat16 (the #35 kind, parts of 512 / 256 KB per CTA) take the
    one-read streamed plan on Hopper; parts under 256 KB that the resident plan cannot hold (3.5 MB slices),
    slices whose L2 tails would not fit half the L2 (32 MB slices), and slices too few for 16 per resident
    cluster (one round of the persistent clusters, or 4.6), stay with a plan that reads twice what it cannot
    hold (split, fused, or held where the tensor is within ~4x the GPU's shared memory)."""
    if not _is_hopper():
        pytest.skip("sm_90+ only")
    x = torch.empty(16, 64, 512, 512, device="cuda")
    assert plan_kind(forward_plan(x, 8)) == ("streamed", True), forward_plan(x, 8)
    # groups of 16 CTAs of one cooperative launch, not 16-CTA clusters (which cannot fill every GPC)
    assert "persistent groups of 16 CTAs" in forward_plan(x, 8), forward_plan(x, 8)
    assert plan_kind(forward_plan(x.bfloat16(), 8))[0] == "streamed", forward_plan(x.bfloat16(), 8)
    small_parts = torch.empty(8, 8, 114688, device="cuda")  # 3.5 MB slices: 224 KB per CTA of 16
    assert plan_kind(forward_plan(small_parts, 1))[0] in ("split", "fused", "held"), forward_plan(small_parts, 1)
    big_slices = torch.empty(2, 64, 1000, 1000, device="cuda")  # 32 MB slices: ~1.6 MB of L2 tail per CTA
    assert plan_kind(forward_plan(big_slices, 8))[0] in ("split", "fused"), forward_plan(big_slices, 8)
    one_round = torch.empty(8, 64, 38555, device="cuda")  # 8 slices of 9.9 MB, about one per resident cluster
    assert plan_kind(forward_plan(one_round, 1))[0] in ("split", "fused", "held"), forward_plan(one_round, 1)
    # 32 slices of 8 MB: under 16 rounds of the resident clusters (7 of 16 CTAs on an H100 or H200)
    few_rounds = torch.empty(1, 128, 1024, 1024, device="cuda", dtype=torch.float16)
    assert plan_kind(forward_plan(few_rounds, 32))[0] in ("split", "fused", "held"), forward_plan(few_rounds, 32)

"""KernelBench level 2 #92 (Conv2d -> GroupNorm -> Tanh -> HardSwish -> residual -> LogSumExp): contract,
kernels, accuracy.

CPU tests run the C++ kernels, which loop over the same tiles and slots as the CUDA kernels in the same
arithmetic order (csrc/level2_92_cpu.py); the `cuda` tests run the real shape through the harness flow and
the accuracy bar of the level 2 issue: margin max(|ours - ref| / (1e-4 + 1e-4 |ref|)) <= 0.3 over the 5
harness trials and 20 fresh seeds, against eager float32 and against a float64 reference.
"""

from __future__ import annotations

import pytest
import torch

from groupnorm_inline.problems import level2_92_conv_group_norm_logsumexp as problem
from groupnorm_inline.problems import level2_92_kernels as kernels
from level2_harness import (FRESH_SEED, FRESH_TRIALS, HARNESS_SEED, HARNESS_TRIALS, accuracy_margins,
                            allclose_margin, draw_seeds, float64_copy, poison_allocator, replay_harness, set_seed)
from utils import assert_close_report

ops = kernels.load()

# KernelBench's problem file, as the contract describes it (written out here, not read from a checkout).
REFERENCE_SOURCE = '''\
import torch
import torch.nn as nn

class Model(nn.Module):
    """
    Model that performs a convolution, applies Group Normalization, Tanh, HardSwish,
    Residual Addition, and LogSumExp.
    """
    def __init__(self, in_channels, out_channels, kernel_size, groups, eps=1e-5):
        super(Model, self).__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.group_norm = nn.GroupNorm(groups, out_channels, eps=eps)
        self.tanh = nn.Tanh()
        self.hard_swish = nn.Hardswish()

    def forward(self, x):
        # Convolution
        x_conv = self.conv(x)
        # Group Normalization
        x_norm = self.group_norm(x_conv)
        # Tanh
        x_tanh = self.tanh(x_norm)
        # HardSwish
        x_hard_swish = self.hard_swish(x_tanh)
        # Residual Addition
        x_res = x_conv + x_hard_swish
        # LogSumExp
        x_logsumexp = torch.logsumexp(x_res, dim=1, keepdim=True)
        return x_logsumexp

batch_size = 128
in_channels = 8
out_channels = 64
height, width = 128, 128
kernel_size = 3
groups = 16

def get_inputs():
    return [torch.rand(batch_size, in_channels, height, width)]

def get_init_inputs():
    return [in_channels, out_channels, kernel_size, groups]
'''

CANDIDATE_SOURCE = "from groupnorm_inline.problems.level2_92_conv_group_norm_logsumexp import ModelNew\n"
RECOMPUTE_CANDIDATE_SOURCE = (
    "import functools\n"
    "from groupnorm_inline.problems import level2_92_conv_group_norm_logsumexp as _p92\n"
    "ModelNew = functools.partial(_p92.ModelNew, conv_output='recompute')\n")
TENSOR_CORE_CANDIDATE_SOURCE = (
    "import functools\n"
    "from groupnorm_inline.problems import level2_92_conv_group_norm_logsumexp as _p92\n"
    "ModelNew = functools.partial(_p92.ModelNew, conv_kernel='3xtf32', conv_output='recompute')\n")

# The real input (128, 8, 128, 128) makes a 9.4 GMAC convolution: too much for CPU CI. CPU harness replays
# patch the exec'd reference namespace to a smaller batch and image (channels and groups as in the problem).
CPU_SHAPE_PATCH = {"batch_size": 2, "height": 21, "width": 19}

ACCURACY_BAR = 0.3

# (batch, in_channels, height, width, out_channels, groups)
SHAPES = [
    (2, 8, 20, 20, 64, 16),     # the problem's channels and groups
    (2, 5, 5, 7, 12, 3),        # odd image, 12 channels: 2 slices with 4 padding channels
    (1, 3, 9, 140, 24, 6),      # wider than one 128-column tile: two column tiles, the second partial
    (3, 16, 6, 6, 8, 2),        # 16 input channels: two staged chunks
    (1, 9, 7, 6, 128, 32),      # 128 output channels: 16 slices per pixel group
    (2, 4, 4, 4, 1, 1),         # one output channel, one slice
    (2, 2, 3, 3, 17, 17),       # a single output pixel; 17 channels, one channel per group, an empty slice
    (1, 8, 9, 131, 40, 8),      # OW = 129: not a multiple of 4 (scalar stores), 5 padded slices of 8
]


def models(cin, cout, groups, conv_output=kernels.DEFAULT_CONV_OUTPUT, seed=HARNESS_SEED, kernel_size=3,
           conv_kernel=kernels.DEFAULT_CONV_KERNEL):
    set_seed(seed)
    ref = problem.Model(cin, cout, kernel_size, groups)
    set_seed(seed)
    new = problem.ModelNew(cin, cout, kernel_size, groups, conv_kernel=conv_kernel, conv_output=conv_output)
    return ref, new


def reference64(model, x):
    with torch.no_grad():
        return float64_copy(model)(x.to(torch.float64))


# ---------------------------------------------------------------------------------------------- contract

def test_problem_module_matches_reference_file(monkeypatch):
    reference = {}
    exec(REFERENCE_SOURCE, reference)
    expected = {"batch_size": 128, "in_channels": 8, "out_channels": 64, "height": 128, "width": 128,
                "kernel_size": 3, "groups": 16}
    for name, value in expected.items():
        assert getattr(problem, name) == reference[name] == value, name
    assert problem.get_init_inputs() == reference["get_init_inputs"]() == [8, 64, 3, 16]
    calls = []

    def recording_rand(*size, **kwargs):
        calls.append((size, kwargs))
        return torch.empty(*size, device="meta")

    monkeypatch.setattr(torch, "rand", recording_rand)
    (x,) = problem.get_inputs()
    reference["get_inputs"]()
    assert calls == [((128, 8, 128, 128), {})] * 2, calls
    assert x.shape == (128, 8, 128, 128) and x.dtype == torch.float32


def test_reference_model_equals_problem_model():
    reference = {}
    exec(REFERENCE_SOURCE, reference)
    set_seed(42)
    theirs = reference["Model"](8, 64, 3, 16)
    set_seed(42)
    ours = problem.Model(8, 64, 3, 16)
    assert list(ours.state_dict()) == list(theirs.state_dict())
    assert all(torch.equal(a, b) for a, b in zip(ours.state_dict().values(), theirs.state_dict().values()))
    x = torch.rand(2, 8, 10, 11)
    assert torch.equal(ours(x), theirs(x))


@pytest.mark.parametrize("conv_output", kernels.CONV_OUTPUT_MODES)
def test_state_dict_equal_under_seed(conv_output):
    for init in (problem.get_init_inputs(), [5, 12, 3, 3, 1e-3]):
        set_seed(42)
        ref = problem.Model(*init)
        after_ref = torch.rand(4)
        set_seed(42)
        new = problem.ModelNew(*init, conv_output=conv_output)
        after_new = torch.rand(4)
        ref_sd, new_sd = ref.state_dict(), new.state_dict()
        assert list(ref_sd) == list(new_sd) == ["conv.weight", "conv.bias", "group_norm.weight", "group_norm.bias"]
        for key in ref_sd:
            assert torch.equal(ref_sd[key], new_sd[key]), key
        assert torch.equal(after_new, after_ref)
        assert new.group_norm.eps == ref.group_norm.eps


@pytest.mark.parametrize("candidate", [CANDIDATE_SOURCE, RECOMPUTE_CANDIDATE_SOURCE], ids=["default", "recompute"])
def test_harness_replay_cpu(candidate):
    margins = replay_harness(REFERENCE_SOURCE, candidate, torch.device("cpu"), shape_patch=CPU_SHAPE_PATCH)
    assert len(margins) == HARNESS_TRIALS and max(margins) <= ACCURACY_BAR, margins


# ---------------------------------------------------------------------------------------------- accuracy (CPU)

@pytest.mark.parametrize("conv_output", kernels.CONV_OUTPUT_MODES)
@pytest.mark.parametrize("batch,cin,h,w,cout,groups", SHAPES)
def test_matches_float64_cpu(batch, cin, h, w, cout, groups, conv_output):
    ref, new = models(cin, cout, groups, conv_output)
    x = torch.rand(batch, cin, h, w)
    x_before = x.clone()
    out = new(x)
    assert torch.equal(x, x_before), "ModelNew modified its input"
    assert out.shape == (batch, 1, h - 2, w - 2) and out.dtype == torch.float32 and out.is_contiguous()
    # Honest float32: the convolution has 9 * cin terms, the rest is elementwise plus a 64-term logsumexp.
    assert_close_report(out, reference64(ref, x), atol=1e-5, rtol=1e-5, what=conv_output)
    assert allclose_margin(out, ref(x)) <= ACCURACY_BAR


def test_single_value_per_group_raises_as_group_norm():
    ref, new = models(2, 17, 17)
    x = torch.rand(1, 2, 3, 3)
    with pytest.raises(ValueError, match="Expected more than 1 value per channel") as theirs:
        ref(x)
    with pytest.raises(ValueError, match="Expected more than 1 value per channel") as ours:
        new(x)
    assert str(ours.value) == str(theirs.value)


@pytest.mark.parametrize("conv_output", kernels.CONV_OUTPUT_MODES)
def test_conv_kernel_is_cuda_only_cpu(conv_output):
    """On the CPU every conv_kernel computes the direct float32 decomposition: bitwise the same output."""
    x = torch.rand(2, 8, 11, 13)
    outs = [models(8, 64, 16, conv_output, conv_kernel=kernel)[1](x) for kernel in kernels.CONV_KERNELS]
    assert all(torch.equal(outs[0], other) for other in outs[1:])


def test_store_and_recompute_agree_cpu():
    _, store = models(8, 64, 16, "store")
    _, recompute = models(8, 64, 16, "recompute")
    x = torch.rand(2, 8, 13, 17)
    assert_close_report(store(x), recompute(x), atol=2e-6, rtol=2e-6, what="store against recompute")


def test_inputs_far_from_zero_mean():
    """GroupNorm statistics of conv outputs with |mean| >> std (inputs near 1000): Chan merges, no cancellation."""
    ref, new = models(8, 64, 16)
    x = 1000.0 + torch.rand(2, 8, 12, 12)
    assert_close_report(new(x), reference64(ref, x), atol=1e-4, rtol=1e-5, what="|mean| >> std")


def test_unsupported_configurations_run_the_reference_ops():
    """Other kernel sizes (and strides, paddings) are left to PyTorch: the same numbers as Model."""
    for kernel_size in (1, 5, (3, 5)):
        ref, new = models(4, 8, 2, kernel_size=kernel_size)
        x = torch.rand(2, 4, 11, 12)
        with torch.no_grad():
            assert torch.equal(new(x), ref(x)), kernel_size


def test_non_contiguous_and_empty_inputs():
    _, new = models(8, 64, 16)
    x = torch.rand(2, 8, 10, 12).to(memory_format=torch.channels_last)
    assert torch.equal(new(x), new(x.contiguous()))
    out = new(torch.rand(0, 8, 10, 12))
    assert out.shape == (0, 1, 8, 10)


def test_bad_inputs_raise_clear_errors():
    _, new = models(8, 64, 16)
    with pytest.raises(RuntimeError, match="4-D input"):
        new(torch.rand(8, 10, 10))
    with pytest.raises(RuntimeError, match="to have 8 channels, but got 7 channels"):
        new(torch.rand(1, 7, 10, 10))
    with pytest.raises(RuntimeError, match="Kernel size can't be greater than actual input size"):
        new(torch.rand(1, 8, 2, 10))
    with pytest.raises(RuntimeError, match="float32"):
        new(torch.rand(1, 8, 10, 10, dtype=torch.float64))
    with pytest.raises(RuntimeError, match="float32, float16 or bfloat16"):
        new.double()(torch.rand(1, 8, 10, 10, dtype=torch.float64))
    with pytest.raises(TypeError, match="Tensor"):
        new(None)
    with pytest.raises(ValueError, match="conv_output must be one of"):
        problem.ModelNew(8, 64, 3, 16, conv_output="cache")
    with pytest.raises(ValueError, match="conv_kernel must be one of"):
        problem.ModelNew(8, 64, 3, 16, conv_kernel="tf32")
    with pytest.raises(ValueError, match="divisible"):  # nn.GroupNorm's own check, as in Model
        problem.ModelNew(8, 64, 3, 5)


def test_operator_rejects_bad_arguments():
    x = torch.rand(1, 4, 6, 6)
    w, b = torch.rand(8, 4, 3, 3), torch.rand(8)
    with pytest.raises(RuntimeError, match="divisible by num_groups"):
        ops.fused_forward(x, w, b, b, b, 3, 1e-5, True)
    with pytest.raises(RuntimeError, match=r"\(Cout, Cin, 3, 3\) weight"):
        ops.fused_forward(x, torch.rand(8, 4, 5, 5), b, b, b, 2, 1e-5, True)
    with pytest.raises(RuntimeError, match="gn_weight"):
        ops.fused_forward(x, w, b, torch.rand(7), b, 2, 1e-5, True)
    with pytest.raises(RuntimeError, match="conv_kernel must be 0"):
        ops.fused_forward(x, w, b, b, b, 2, 1e-5, True, 2)


def test_repr_and_module_tree():
    _, new = models(8, 64, 16, "recompute", conv_kernel="3xtf32")
    text = repr(new)
    assert "conv_kernel='3xtf32', conv_output='recompute'" in text and "Hardswish()" in text and "GroupNorm(16, 64" in text


# ---------------------------------------------------------------------------------------------- GPU

cuda = torch.device("cuda")


# The GPU result against the CPU kernels: the fp32 kernel sums in the CPU's order (equal up to the fast
# exponential); the 3xtf32 kernel sums each convolution value in its own order (about 1e-6 relative).
GPU_VS_CPU_TOL = {"fp32": 2e-6, "3xtf32": 1e-5}

# Beyond SHAPES: the 3xtf32 kernel's limits (Cin 16 is its widest input, Cin 17 and Cout 65 fall back to fp32).
CUDA_SHAPES = SHAPES + [
    (2, 16, 10, 133, 64, 16),   # 3xtf32: two input chunks, two column tiles
    (1, 17, 6, 8, 16, 4),       # Cin 17: the fp32 kernel
    (1, 4, 5, 6, 65, 5),        # Cout 65: the fp32 kernel
]


@pytest.mark.cuda
@pytest.mark.parametrize("conv_kernel", kernels.CONV_KERNELS)
@pytest.mark.parametrize("conv_output", kernels.CONV_OUTPUT_MODES)
@pytest.mark.parametrize("batch,cin,h,w,cout,groups", CUDA_SHAPES)
def test_matches_float64_cuda(batch, cin, h, w, cout, groups, conv_output, conv_kernel):
    ref, new = models(cin, cout, groups, conv_output, conv_kernel=conv_kernel)
    ref, new = ref.to(cuda), new.to(cuda)
    x = torch.rand(batch, cin, h, w, device=cuda)
    x_before = x.clone()
    poison_allocator(batch * (h - 2) * (w - 2) * 4, cuda)
    out = new(x)
    assert torch.equal(x, x_before)
    assert not torch.isnan(out).any(), "some outputs were never written"
    assert_close_report(out, reference64(ref, x), atol=1e-5, rtol=1e-5, what=conv_output)
    cpu_out = new.to("cpu")(x.cpu())
    tol = GPU_VS_CPU_TOL[conv_kernel]
    assert_close_report(out, cpu_out, atol=tol, rtol=tol, what="GPU against CPU kernels")


@pytest.mark.cuda
@pytest.mark.parametrize("candidate", [CANDIDATE_SOURCE, RECOMPUTE_CANDIDATE_SOURCE, TENSOR_CORE_CANDIDATE_SOURCE],
                         ids=["default", "recompute", "3xtf32"])
def test_harness_replay_cuda_real_shape(candidate):
    margins = replay_harness(REFERENCE_SOURCE, candidate, cuda)
    assert max(margins) <= ACCURACY_BAR, margins


@pytest.mark.cuda
@pytest.mark.slow
@pytest.mark.parametrize("conv_kernel", kernels.CONV_KERNELS)
@pytest.mark.parametrize("conv_output", kernels.CONV_OUTPUT_MODES)
def test_accuracy_bar_real_shape(conv_output, conv_kernel):
    """5 harness trials + 20 fresh seeds at the real shape: margin <= 0.3 against eager float32 and float64."""
    set_seed(42)
    init = problem.get_init_inputs()
    set_seed(42)
    ref = problem.Model(*init).to(cuda)
    set_seed(42)
    new = problem.ModelNew(*init, conv_kernel=conv_kernel, conv_output=conv_output).to(cuda)
    seeds = draw_seeds(HARNESS_TRIALS, HARNESS_SEED) + draw_seeds(FRESH_TRIALS, FRESH_SEED)
    worst32, worst64 = accuracy_margins(ref, new, problem.get_inputs, seeds, cuda)
    assert worst32 <= ACCURACY_BAR and worst64 <= ACCURACY_BAR, (worst32, worst64)


@pytest.mark.cuda
def test_more_than_128_channels_fall_back_on_cuda():
    ref, new = models(4, 136, 8)
    ref, new = ref.to(cuda), new.to(cuda)
    x = torch.rand(1, 4, 6, 6, device=cuda)
    with torch.no_grad():
        assert torch.equal(new(x), ref(x))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_precision_option_cpu(dtype):
    """KernelBench's precision option: Model, ModelNew and the input cast to dtype; allclose at 1e-2, the output
    in that dtype (ModelNew then runs PyTorch's ops in that dtype)."""
    ref, new = models(8, 64, 16)
    with torch.no_grad():
        for p in ref.group_norm.parameters():
            p.normal_()
    new.load_state_dict(ref.state_dict())
    ref, new = ref.to(dtype), new.to(dtype)
    set_seed(5)
    x = torch.rand(2, 8, 13, 11).to(dtype)
    with torch.no_grad():
        out, expected = new(x), ref(x)
    assert out.dtype == dtype and out.shape == expected.shape
    assert_close_report(out, expected, atol=1e-2, rtol=1e-2, what=str(dtype))

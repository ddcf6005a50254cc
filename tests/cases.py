"""Case tables shared by the CPU and CUDA forward tests: shapes, dtype/parameter modes, non-contiguous views,
and the input and parameter makers."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from groupnorm_inline import group_norm, group_norm_with_stats
from utils import assert_bitwise_equal, assert_group_norm_close, assert_stats_close, poison_cuda_allocator

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


def make_input(shape, dtype, mean=0.5, std=2.0, device="cpu"):
    """Normal values drawn in float64 and rounded once to `dtype` (the reference sees the rounded values)."""
    return (mean + std * torch.randn(shape, dtype=torch.float64)).to(device=device, dtype=dtype)


def make_params(channels, mode, dtype, device="cpu"):
    """(weight, bias) for `mode`; weight ~ 1 + 0.5 N(0, 1), bias ~ N(0, 1), so neither is the identity."""
    param_dtype = torch.float32 if mode == "float32 params" else dtype
    weight = (1 + 0.5 * torch.randn(channels, dtype=torch.float64)).to(device=device, dtype=param_dtype)
    bias = torch.randn(channels, dtype=torch.float64).to(device=device, dtype=param_dtype)
    return {
        "affine": (weight, bias),
        "float32 params": (weight, bias),
        "no affine": (None, None),
        "weight only": (weight, None),
        "bias only": (None, bias),
    }[mode]


# Non-contiguous inputs: name -> (shape of the base tensor, its memory format, the view taken of it). The output
# must have the strides F.group_norm gives on the same device (on the CPU channels_last(_3d) is kept for
# strides ordered like NHWC, sliced views too; CUDA returns contiguous outputs).
VIEWS = {
    "transposed H/W": ((2, 6, 5, 7), None, lambda b: b.transpose(2, 3)),
    "(N, L, C) permuted to (N, C, L)": ((3, 11, 6), None, lambda b: b.permute(0, 2, 1)),
    "(C, N) transposed to (N, C)": ((6, 4), None, lambda b: b.t()),
    "W sliced with step 2": ((2, 6, 5, 14), None, lambda b: b[..., ::2]),
    "channel slice": ((2, 9, 5, 7), None, lambda b: b[:, 2:8]),
    "batch slice (storage offset)": ((4, 6, 5, 7), None, lambda b: b[1:3]),
    "expanded batch (stride 0)": ((1, 6, 5, 7), None, lambda b: b.expand(3, 6, 5, 7)),
    "channels_last": ((2, 6, 5, 7), torch.channels_last, lambda b: b),
    "channels_last_3d": ((2, 6, 3, 5, 7), torch.channels_last_3d, lambda b: b),
    "channels_last, H sliced": ((2, 6, 10, 7), torch.channels_last, lambda b: b[:, :, ::2]),
    "channels_last_3d, channel slice": ((2, 9, 3, 5, 7), torch.channels_last_3d, lambda b: b[:, 1:7]),
    "channels_last from permute": ((2, 5, 7, 6), None, lambda b: b.permute(0, 3, 1, 2)),
}


def make_view(name, dtype, device="cpu"):
    """(view, base) for VIEWS[name]: the tensor handed to the operator (6 channels) and the one owning its
    storage."""
    shape, memory_format, take_view = VIEWS[name]
    base = make_input(shape, dtype, device=device)
    if memory_format is not None:
        base = base.contiguous(memory_format=memory_format)
    view = take_view(base)
    assert view.shape[1] == 6 and (not view.is_contiguous() or view.data_ptr() != base.data_ptr()), name
    return view, base


def check_forward(x, num_groups, weight=None, bias=None, eps=1e-5, what="output"):
    """Run the operator on x and check everything a caller can observe: the output against float64, the
    returned mean/rstd, the input bitwise unchanged, the output's strides as F.group_norm's on the CPU (which keeps the
    input's memory format; PyTorch's CUDA kernel returns NCHW, ours keeps channels-last on CUDA too), and
    group_norm == group_norm_with_stats[0]. On CUDA the caching allocator is first filled with NaN blocks of the
    output's size (together with the `poisoned_outputs` fixture: no unwritten element can pass). Returns the output.
    """
    x_before = x.clone(memory_format=torch.preserve_format)
    if x.is_cuda:
        poison_cuda_allocator(x.numel() * x.element_size(), device=x.device)
        poison_cuda_allocator(x.shape[0] * num_groups * 8, device=x.device)  # mean and rstd
    out, mean, rstd = group_norm_with_stats(x, num_groups, weight, bias, eps)
    assert_bitwise_equal(x, x_before, "input")
    assert out.device == mean.device == rstd.device == x.device
    assert_group_norm_close(out, x, num_groups, weight, bias, eps, what)
    assert_stats_close(mean, rstd, x, num_groups, eps)
    # The layout does not depend on weight and bias; the CPU kernel is PyTorch's statement of it.
    expected_layout = F.group_norm(x.detach().cpu(), num_groups, eps=eps)
    assert out.stride() == expected_layout.stride(), \
        f"{what}: strides {out.stride()}, F.group_norm on the CPU returns {expected_layout.stride()}"
    assert torch.equal(group_norm(x, num_groups, weight, bias, eps), out), "group_norm != group_norm_with_stats[0]"
    return out

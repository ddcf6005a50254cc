"""The GroupNorm family of KernelBench level 2: one fused operator for "elementwise chain -> GroupNorm ->
elementwise chain -> optional reduction", used by the problem modules after their convolution or GEMM.

    out = Output(Epilogue(GroupNorm(Pool(Prologue(x)))))

A problem module names its pieces (`group_norm_chain(x, gn, prologue=..., epilogue=..., output=...)`); the
kernels (csrc/fused_group_norm_cpu.py, csrc/fused_group_norm_cuda.py) have one compile-time functor per name
and build the (prologue, epilogue) pairs listed in their GN_FAMILY_CHAINS. Every piece computes what the
PyTorch op it replaces computes, in float32 for float32, float16 and bfloat16 data, rounding to the data's dtype
where each replaced op would (the output in the input's dtype). The same operator runs on the CPU (the C++ reference kernel, float64 statistics) and on CUDA.

Prologues (per element, before the statistics; vectors are per-channel parameters):
    identity, relu, gelu (erf), hardswish, silu (x * sigmoid(x)),
    add_scale_sigmoid [bias, scale]              sigmoid((x + bias) * scale)
    batch_norm_tanh [mean, invstd, weight, bias] tanh((x - mean) * invstd * weight + bias)
    silu_add [bias]                              x * sigmoid(x) + bias
    add_hardtanh_mish [bias]                     mish(hardtanh(x + bias, -1, 1))
Epilogues (per element, after the affine):
    identity, hardswish,
    hardtanh (min, max)                          clamp(z, min, max)
    min_clamp (cap, lo, hi)                      clamp(minimum(z, cap), lo, hi)
    scale_clamp [scale] (lo, hi)                 clamp(z * scale, lo, hi)
    leaky_relu_double (slope)                    t = leaky_relu(z, slope); t + t
    silu_mul_silu [w]                            t = silu(z) * w; silu(t)
Outputs: store (x's shape), mean_all (N,), mean_spatial (N, C), max_pool (N, C, H/k, W/k), min_channels (N, 1).
Layouts: x contiguous, or channels_last where a channels_last convolution produced it: on CUDA the store output of
the identity/gelu/relu/silu+hardswish chains is computed in place in that layout (and stored in it), and so is the
max-pooled batch_norm_tanh chain's (a cluster of two CTAs per sample, its pooled values in shared memory); any
other case reads a contiguous copy, a store output still given back in x's layout.
input_bias (C,): the bias of the convolution before the operator, added to x as it is read: on CUDA the problem
modules run their convolution without its bias (`convolution_deferring_bias`), which saves PyTorch's separate
bias-add kernel, a full read and write of the convolution's output.

Roundings reproduced for float16/bfloat16 data (KernelBench's precision option compares with the reference run in
that dtype, and a GroupNorm divides any difference in its input by the group's spread, so a one-unit difference
in one prologue value can become several units of the output):
  - every prologue/epilogue op rounds its result to the dtype where the PyTorch op it replaces ends, computing in
    float32 with PyTorch's formula on that device (sigmoid 1 / (1 + expf(-x)) rounded once; x * sigmoid(x) as two
    ops; hardswish x * clamp(x + 3, 0, 6) * (1/6) on CUDA, / 6 on the CPU; gelu x * 0.5 * (1 + erf(x / sqrt 2));
    BatchNorm (w * (x - mean)) * invstd + b rounded once, then tanh rounded once);
  - the statistics are taken over those rounded values, as the reference's GroupNorm takes them over its input;
  - the GroupNorm itself as the device's PyTorch kernel (`stats_mode`): on CUDA eps rounded to the dtype, the
    fused affine a = rstd * w, b = -a * mean + bias, z = a * v + b when H * W > 1, and mean/rstd rounded to the
    dtype before use where this PyTorch's CUDA kernel does so (up to 2.11, `cuda_rounds_statistics`); the CPU
    kernel's float32 statistics on the CPU;
  - z rounded to the dtype before the epilogue (the reference's GroupNorm output).
float32 data takes the accurate form (v - mean) * rstd * w + bias with float64-combined statistics.
"""

from __future__ import annotations

import math
import os

import torch

from ..csrc.conv3d_direct import CONV_DIRECT_SHAPES
from .family_kernels import ops as _family_ops  # builds the family kernels (first time on a machine)

PROLOGUES = {"identity": 0, "relu": 1, "gelu": 2, "hardswish": 3, "silu": 4, "add_scale_sigmoid": 5,
             "batch_norm_tanh": 6, "silu_add": 7, "add_hardtanh_mish": 8}
EPILOGUES = {"identity": 0, "hardswish": 1, "hardtanh": 2, "min_clamp": 3, "scale_clamp": 4,
             "leaky_relu_double": 5, "silu_mul_silu": 6}
OUTPUTS = {"store": 0, "mean_all": 1, "mean_spatial": 2, "max_pool": 3, "min_channels": 4}
# stats_mode bits of the operator (csrc/fused_group_norm_cpu.py: kStatsRound, kFusedAffine, kEpsRound).
STATS_ROUND, FUSED_AFFINE, EPS_ROUND = 1, 2, 4


def _torch_version() -> tuple[int, int]:
    major, minor = (int("".join(ch for ch in part if ch.isdigit()) or 0) for part in torch.__version__.split(".")[:2])
    return major, minor


def cuda_rounds_statistics() -> bool:
    """Whether this PyTorch's CUDA group_norm normalises float16/bfloat16 data with mean and rstd rounded to the
    data type. Up to 2.11 its kernel stores them in tensors of x's dtype and normalises with the stored values (the
    H100 runs with 2.11 match the rounded form, not the float32 one); a change of May 2026 keeps float32 copies for
    the output (2.14's kernels take float32 statistics), taken here as from 2.12 on. GROUPNORM_INLINE_GN_STATS_ROUND
    = 1 or 0 overrides the version rule."""
    forced = os.environ.get("GROUPNORM_INLINE_GN_STATS_ROUND", "").strip()
    if forced in ("0", "1"):
        return forced == "1"
    return _torch_version() < (2, 12)


def stats_mode(x: torch.Tensor, input_pool: int = 1) -> int:
    """The operator's stats_mode for x: how the reference GroupNorm on x's device turns its statistics into the
    output for x's dtype (see the module docstring). float32: 0 on every device (the accurate form). The
    GroupNorm's H*W is that of its input: x's, or the k x k max-pooled x's (input_pool = k)."""
    if x.dtype not in (torch.float16, torch.bfloat16):
        return 0
    if input_pool > 1 and x.dim() == 4:
        hw = (x.shape[2] // input_pool) * (x.shape[3] // input_pool)
    else:
        hw = math.prod(x.shape[2:])
    spatial = hw > 1
    mode = 0
    if x.device.type == "cuda":
        mode |= EPS_ROUND | (FUSED_AFFINE if spatial else 0) | (STATS_ROUND if cuda_rounds_statistics() else 0)
    return mode


def channel_vector(param: torch.Tensor, channels: int) -> torch.Tensor:
    """The (channels,) vector of a per-channel parameter that broadcasts along dim 1 of (N, C, *): shapes
    (C,) for 2-D inputs, (C, 1, ..., 1) or (1, C, 1, ..., 1) for N-D ones."""
    if param.numel() == channels and sum(d != 1 for d in param.shape) <= 1:
        return param.detach().reshape(channels)
    raise RuntimeError(f"expected a per-channel parameter of {channels} elements, got shape {tuple(param.shape)}")


def group_norm_chain(x: torch.Tensor, gn, prologue: str = "identity", prologue_vectors=(), prologue_scalars=(),
                     epilogue: str = "identity", epilogue_vectors=(), epilogue_scalars=(), input_pool: int = 1,
                     output: str = "store", output_pool: int = 1, input_bias=None) -> torch.Tensor:
    """One launch sequence of the family operator: `gn` (an nn.GroupNorm) applied to Pool(Prologue(x + input_bias)),
    then the epilogue and the output reduction. x: (N, C, *) float32/float16/bfloat16; never written. input_bias:
    None or the (C,) bias of the convolution before, as `convolution_deferring_bias` returns it. A channels_last x
    (a channels_last convolution's output) is read in place on CUDA where the kernels take it (the store output of
    the chains built for it, csrc/fused_group_norm_cpu.py), and the stored output keeps that layout."""
    channels = x.shape[1] if x.dim() >= 2 else 0
    weight = gn.weight.detach() if gn.weight is not None else x.new_ones(channels)
    bias = gn.bias.detach() if gn.bias is not None else x.new_zeros(channels)
    vectors = [channel_vector(v, channels) for v in tuple(prologue_vectors) + tuple(epilogue_vectors)]
    scalars = [float(s) for s in tuple(prologue_scalars) + tuple(epilogue_scalars)]
    x = x.detach()
    if not (x.is_contiguous() or x.is_contiguous(memory_format=_channels_last_format(x))):
        x = x.contiguous()
    return _family_ops.fused_group_norm(x, gn.num_groups, weight, bias, gn.eps,
                                        PROLOGUES[prologue], EPILOGUES[epilogue], vectors, scalars, input_pool,
                                        OUTPUTS[output], output_pool, stats_mode(x, input_pool),
                                        None if input_bias is None else input_bias.detach())


def _channels_last_format(x: torch.Tensor):
    """The channels-last memory format of a tensor of x's rank (contiguous_format where there is none)."""
    return {4: torch.channels_last, 5: torch.channels_last_3d}.get(x.dim(), torch.contiguous_format)


def _cached_weight(conv, name: str, make) -> torch.Tensor:
    """make(conv.weight) computed once per weight value: cached on the module under `name`, keyed by the weight's
    storage, version counter (in-place updates and load_state_dict bump it), dtype and device."""
    weight = conv.weight.detach()
    key = (weight.data_ptr(), weight._version, weight.dtype, weight.device)
    cached = conv.__dict__.get(name)
    if cached is None or cached[0] != key:
        cached = (key, make(weight))
        conv.__dict__[name] = cached
    return cached[1]


def _channels_last_weight(conv) -> torch.Tensor:
    """conv.weight in channels_last memory format (cached per weight value)."""
    return _cached_weight(conv, "_groupnorm_inline_channels_last_weight",
                          lambda w: w.contiguous(memory_format=_channels_last_format(w)))


def forward_form_padding(conv):
    """The padding of the forward convolution that equals `conv`, a transposed convolution of stride 1 (no output
    padding, no dilation, one group, zero padding mode, padding p <= k - 1 per dimension), or None for any other:
    conv_transpose(x, w, padding=p) = conv(x, w', padding=k - 1 - p) with w' = w with its two channel dimensions
    swapped and flipped along every spatial dimension (`forward_form_weight`)."""
    dims = len(conv.kernel_size)
    if not (conv.transposed and dims in (2, 3) and tuple(conv.stride) == (1,) * dims
            and tuple(conv.output_padding) == (0,) * dims and tuple(conv.dilation) == (1,) * dims
            and conv.groups == 1 and conv.padding_mode == "zeros" and not isinstance(conv.padding, str)):
        return None
    padding = tuple(k - 1 - p for k, p in zip(conv.kernel_size, conv.padding))
    return padding if min(padding) >= 0 else None


def forward_form_weight(weight: torch.Tensor) -> torch.Tensor:
    """The forward convolution's weight (C_out, C_in, k...) of a stride-1 transposed convolution's weight (C_in,
    C_out, k...): channel dimensions swapped, flipped along every spatial dimension, in channels_last format."""
    flipped = weight.transpose(0, 1).flip(list(range(2, weight.dim())))
    return flipped.contiguous(memory_format=_channels_last_format(flipped))


# (C_in, C_out, KD, K) of each CONV_DIRECT_SHAPES entry (its tile and outputs per thread dropped).
_DIRECT_CONVOLUTIONS = frozenset(shape[:4] for shape in CONV_DIRECT_SHAPES)


def _direct_convolution(conv, x: torch.Tensor) -> bool:
    """Whether the family's direct convolution kernel (csrc/conv3d_direct.py) takes conv(x): CUDA float32, a forward
    Conv2d or Conv3d of stride 1, no padding, no dilation, one group, a (C_in, C_out, kernel) the CUDA kernel is
    built for (CONV_DIRECT_SHAPES; the op itself runs PyTorch's 3-D convolution for others, which for a 2-D one
    would not be cuDNN's 2-D algorithm, so those keep the module's own call). It computes the float32 sums that
    cuDNN's NCHW algorithms compute for these few-channel inputs, faster at the shapes of #21, #23, #27, #83 and
    #85 (benchmarks/NOTES.md). Like the family operator it has no autograd: the problem modules are inference code."""
    # (A forward convolution, told by its attributes: an export may not name torch.nn layers.)
    dims = len(conv.kernel_size)
    if dims not in (2, 3) or x.dim() != dims + 2 or conv.transposed:
        return False
    kd, kh, kw = ((1,) if dims == 2 else ()) + tuple(conv.kernel_size)
    return ((conv.in_channels, conv.out_channels, kd, kh) in _DIRECT_CONVOLUTIONS and kh == kw
            and x.is_cuda and x.dtype == torch.float32
            and tuple(conv.stride) == (1,) * dims and conv.padding in ((0,) * dims, "valid")
            and tuple(conv.dilation) == (1,) * dims and conv.groups == 1 and conv.padding_mode == "zeros")


def _run_direct_convolution(conv, x: torch.Tensor) -> torch.Tensor:
    """conv(x) without its bias through the direct kernel; a 2-D convolution as the depth-1 3-D one (views)."""
    weight = conv.weight.detach()
    if x.dim() == 4:
        return _family_ops.conv3d_direct(x.unsqueeze(2), weight.unsqueeze(2)).squeeze(2)
    return _family_ops.conv3d_direct(x, weight)  # the op makes x contiguous


def convolution_deferring_bias(conv, x: torch.Tensor, defer: bool | None = None, channels_last: bool = False):
    """(y, bias): `conv` (an nn.Conv*d or nn.ConvTranspose*d) applied to x, and the bias still to be added (the
    family operator's `input_bias`), or None. defer None: on CUDA the convolution runs without its bias (PyTorch's
    cuDNN path adds the bias in an elementwise kernel of its own, a full read and write of y, and the operator adds
    it to each value it reads with the same rounding); on the CPU, where oneDNN adds the bias inside the
    convolution, (conv(x), None). defer True/False forces the choice. A deferred float32 CUDA Conv2d/Conv3d of stride
    1 without padding runs the family's direct kernel (`_direct_convolution`).

    channels_last (CUDA, float32, 4-D/5-D, transposed convolutions): run the convolution on x and its weight in
    channels_last memory format and return y in that layout, for a family operator that reads it in place. cuDNN runs
    a float32 transposed convolution as an NHWC kernel whatever the layout, an NCHW call between two layout
    transposes of its own: the channels_last call runs the same kernel without them and returns the same values
    (bitwise at the real shapes of #19/#60/#61 on an H200; benchmarks/conv_layout_check.py). Not taken in
    float16/bfloat16, where the two layouts' kernels differ (#60 in bfloat16: margin 1.69 against the NCHW
    reference at KernelBench's 1e-2), nor for forward convolutions, where cuDNN picks other algorithms per layout
    (TF32 in channels_last where NCHW runs full float32 for few input channels: margins 16-22 at 1e-4). At small
    shapes cuDNN may also choose different float32 kernels per layout (TF32 roundings apart). x is converted by the
    family's tiled transpose. On this path a transposed convolution of stride 1 runs as the forward convolution it
    equals (`forward_form_padding`, the weight converted once per value): cuDNN runs that with its fprop kernels
    instead of its dgrad ones, faster and with the same values at the family's shapes (bitwise at #19's and #61's on
    an H100: #61 0.824 against 2.480 ms, #19 2.821 against 2.865; benchmarks/conv_transpose_forward_check.py)."""
    channels_last = (channels_last and x.is_cuda and x.dtype == torch.float32 and x.dim() in (4, 5)
                     and conv.transposed and conv.padding_mode == "zeros")
    forward_padding = forward_form_padding(conv) if channels_last else None
    if channels_last:
        if not x.is_contiguous(memory_format=_channels_last_format(x)):
            x = _family_ops.to_channels_last(x)  # a strided x: one copy straight into channels_last
        weight = (_cached_weight(conv, "_groupnorm_inline_forward_form_weight", forward_form_weight)
                  if forward_padding is not None else _channels_last_weight(conv))
    else:
        weight = conv.weight
    if defer is None:
        defer = x.is_cuda
    if defer and _direct_convolution(conv, x):
        return _run_direct_convolution(conv, x), conv.bias
    if not channels_last and (conv.bias is None or not defer or conv.padding_mode != "zeros"):
        return conv(x), None
    keep_bias = conv.bias is not None and not defer
    if forward_padding is not None:  # torch.conv2d/conv3d: the export's static rules refuse torch.nn.functional
        y = (torch.conv2d, torch.conv3d)[len(conv.kernel_size) - 2](x, weight, conv.bias if keep_bias else None, 1,
                                                                     forward_padding)
    elif conv.transposed:  # torch.conv_transpose*d: the export's static rules refuse torch.nn.functional
        transposed = (torch.conv_transpose1d, torch.conv_transpose2d, torch.conv_transpose3d)[len(conv.kernel_size) - 1]
        y = transposed(x, weight, conv.bias if keep_bias else None, conv.stride, conv.padding, conv.output_padding,
                       conv.groups, conv.dilation)
    else:
        y = conv._conv_forward(x, weight, conv.bias if keep_bias else None)
    return y, (None if keep_bias else conv.bias)


def batch_norm_statistics(bn, x: torch.Tensor, input_bias=None):
    """(mean, invstd) per channel that `bn` (an nn.BatchNorm*d) normalises x + input_bias (x (N, C, *), input_bias
    None or (C,)) with in its forward, and the same update of its buffers: in training mode (or without running
    statistics) the batch's own mean and biased variance, running_mean/running_var moved by the momentum (the
    unbiased variance, as PyTorch) and num_batches_tracked counted; in eval mode the running statistics. A
    per-channel bias moves the mean only: the statistics are taken over x and the bias added to the mean."""
    factor = 0.0 if bn.momentum is None else bn.momentum
    if bn.training and bn.track_running_stats and bn.num_batches_tracked is not None:
        bn.num_batches_tracked.add_(1)
        factor = 1.0 / float(bn.num_batches_tracked) if bn.momentum is None else bn.momentum
    use_batch = bn.training or (bn.running_mean is None and bn.running_var is None)
    with torch.no_grad():
        if not use_batch:
            return bn.running_mean.float(), torch.rsqrt(bn.running_var.float() + bn.eps)
        # float32 statistics for half data too; one read of a channels_last CUDA x (a kernel of the family), else
        # PyTorch's var_mean.
        mean, var = _family_ops.channel_moments(x)
        if input_bias is not None:
            mean = mean + input_bias.detach().float()
        count = x.numel() // x.shape[1]
        if bn.training and bn.running_mean is not None and bn.running_var is not None:
            unbiased = var * (count / max(count - 1, 1))
            bn.running_mean.mul_(1.0 - factor).add_((mean * factor).to(bn.running_mean.dtype))
            bn.running_var.mul_(1.0 - factor).add_((unbiased * factor).to(bn.running_var.dtype))
        # 1 / sqrt(var + eps) with the sum and the root in float64, rounded once to float32: PyTorch's CUDA
        # BatchNorm adds the double eps to the float32 variance in double precision.
        return mean, (1.0 / torch.sqrt(var.double() + bn.eps)).float()


def batch_norm_affine(bn, channels: int, like: torch.Tensor):
    """(weight, bias) of `bn`, ones and zeros when it has no affine parameters."""
    weight = bn.weight.detach() if bn.weight is not None else like.new_ones(channels)
    bias = bn.bias.detach() if bn.bias is not None else like.new_zeros(channels)
    return weight, bias

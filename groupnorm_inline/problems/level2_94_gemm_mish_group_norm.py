"""KernelBench level 2, problem 94 (`94_Gemm_BiasAdd_Hardtanh_Mish_GroupNorm`).

`Model`, the constants and `get_inputs`/`get_init_inputs` reproduce the KernelBench problem file: x (1024, 8192)
from `torch.rand`, Linear 8192 -> 8192, a bias of shape (8192,), GroupNorm with 256 groups of 32 channels.

`ModelNew` takes the same positional constructor arguments, creates the same submodules and parameters in the
same order (Linear weight, Linear bias, then `torch.randn(bias_shape)`), so under one seed both hold identical
parameters and `state_dict`s. Its forward is a GEMM followed by one fused kernel for everything else (Linear
bias, bias, Hardtanh, Mish, GroupNorm) that reads the GEMM result once and writes the output once.

The GEMM, chosen by the keyword-only `gemm` argument:

  "fp32"    one IEEE float32 GEMM (TF32 forced off for it), exactly what eager PyTorch computes.
  "3xtf32"  split precision on tensor cores: x = x_hi + x_lo and W = W_hi + W_lo, each part a TF32 value
            (the high part rounded to nearest, the low part the rounded remainder), and
            x W^T ~= x_hi W_hi^T + (x_hi W_lo^T + x_lo W_hi^T); the two correction products are one GEMM
            of depth 2K over the side-by-side operands [x_hi | x_lo] and [W_lo | W_hi].
  "3xfp16"  the same three products with float16 parts (each row scaled by a power of two, the low part
            stored times 2^12), on tensor cores at twice the TF32 rate, accumulated in float32
            (`torch.mm(..., out_dtype=torch.float32)`, torch >= 2.8).

`k_splits` (split variants) cuts the depth of the large product x_hi W_hi^T into that many chunks whose
float32 results the epilogue adds: tensor cores accumulate with truncation, so shorter chains lose less.
The operand split of the weight is cached and recomputed when the weight changes (another tensor, another
storage, or an in-place update, seen through `weight._version`; writes through `weight.data` are not seen:
call `refresh_weight_split()` after them). Inference only: the output carries no autograd graph.
"""

import torch
import torch.nn as nn

from ..csrc.group_norm_cpu import with_namespace
from ..csrc.level2_94_cpu import P94_CPU_TEMPLATE, P94_NAMESPACE
from ..csrc.level2_94_cuda import P94_CUDA_TEMPLATE
from ..jit import ExtensionSpec, load

# The operators' torch.library namespace, the extension, and where its source templates live (an exporter
# builds a single file from these, under a namespace of its own).
OP_NAMESPACE = P94_NAMESPACE
SOURCE_TEMPLATES = {
    "cpp": "groupnorm_inline.csrc.level2_94_cpu:P94_CPU_TEMPLATE",
    "cuda": "groupnorm_inline.csrc.level2_94_cuda:P94_CUDA_TEMPLATE",
}
EXTENSION = ExtensionSpec(
    name="groupnorm_inline_p94",
    cpp_sources=(with_namespace(P94_CPU_TEMPLATE, OP_NAMESPACE),),
    cuda_sources=(with_namespace(P94_CUDA_TEMPLATE, OP_NAMESPACE),),
    description="the level 2 #94 kernels (operand split, fused epilogue)",
)

load(EXTENSION)
_ops = getattr(torch.ops, OP_NAMESPACE)

# split_rows formats (see csrc/level2_94_cpu.py).
_FORMAT = {"3xtf32": 0, "3xfp16": 1}
# float16 low parts are stored times 2^12, so the correction product is scaled back by 2^-12.
_FP16_CORRECTION_SCALE = 2.0 ** -12
_MAX_K_SPLITS = 7  # the epilogue sums at most 8 GEMM results: k_splits chunks plus the correction

GEMM_VARIANTS = ("fp32", "3xtf32", "3xfp16")
_HAS_MM_OUT_DTYPE = hasattr(torch.ops.aten.mm, "dtype")  # mm(float16, float16) -> float32, torch >= 2.8
# torch >= 2.9 selects TF32 for cuBLAS through `fp32_precision`; older releases through `allow_tf32`.
_HAS_FP32_PRECISION = isinstance(getattr(torch.backends.cuda.matmul, "fp32_precision", None), str)

# The default is the fastest variant that meets the accuracy bar (see benchmarks/check_level2_gpu.py).
DEFAULT_GEMM = "3xfp16" if _HAS_MM_OUT_DTYPE else "3xtf32"
DEFAULT_K_SPLITS = 1


class CublasFloat32Mode:
    """Context manager: float32 cuBLAS GEMMs in TF32 (`tf32=True`) or IEEE float32 inside, and no reduced
    precision reductions in float16 GEMMs; the process-wide settings are restored exactly on exit."""

    def __init__(self, tf32: bool):
        self.tf32 = tf32
        self.saved = None

    def __enter__(self):
        matmul = torch.backends.cuda.matmul
        if _HAS_FP32_PRECISION:
            precision = matmul.fp32_precision
            matmul.fp32_precision = "tf32" if self.tf32 else "ieee"
        else:
            precision = matmul.allow_tf32
            matmul.allow_tf32 = self.tf32
        self.saved = (precision, matmul.allow_fp16_reduced_precision_reduction)
        matmul.allow_fp16_reduced_precision_reduction = False
        return self

    def __exit__(self, *exc_info):
        matmul = torch.backends.cuda.matmul
        precision, reduced = self.saved
        if _HAS_FP32_PRECISION:
            matmul.fp32_precision = precision
        else:
            matmul.allow_tf32 = precision
        matmul.allow_fp16_reduced_precision_reduction = reduced
        return False


def _product(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a @ b.T in float32 for float32 (TF32 on CUDA inside CublasFloat32Mode) or float16 operands (float32
    accumulation and result). a: (M, K), b: (N, K), any strides with unit last stride."""
    if a.dtype == torch.float16:
        if a.is_cuda:
            return torch.mm(a, b.t(), out_dtype=torch.float32)
        return torch.mm(a.float(), b.float().t())  # exact products of float16 values, float32 sums
    return torch.mm(a, b.t())


def _chunked_products(a: torch.Tensor, b: torch.Tensor, splits: int) -> list:
    """[a_s @ b_s.T for each of `splits` chunks of the depth K]: (M, N) float32 results whose sum is a @ b.T."""
    if splits == 1:
        return [_product(a, b)]
    K = a.shape[1]
    if K % splits != 0:  # unequal chunks: one GEMM each
        return [_product(a_s, b_s) for a_s, b_s in zip(a.tensor_split(splits, dim=1), b.tensor_split(splits, dim=1))]
    # Equal chunks: one batched GEMM over strided views, (S, M, Kc) x (S, Kc, N) -> (S, M, N).
    a3 = a.unflatten(1, (splits, K // splits)).transpose(0, 1)
    b3 = b.unflatten(1, (splits, K // splits)).transpose(0, 1).transpose(1, 2)
    if a.dtype == torch.float16:
        out = torch.bmm(a3, b3, out_dtype=torch.float32) if a.is_cuda else torch.bmm(a3.float(), b3.float())
    else:
        out = torch.bmm(a3, b3)
    return list(out.unbind(0))


def _bias_vector(bias: torch.Tensor, features: int) -> torch.Tensor:
    """The (features,) vector that `x + bias` adds to every row, for biases that broadcast that way."""
    if bias.numel() == features and all(d == 1 for d in bias.shape[:-1]) and bias.dim() >= 1:
        return bias.reshape(features).contiguous()
    if bias.numel() == 1:
        return bias.reshape(1).expand(features).contiguous()
    raise RuntimeError(f"ModelNew supports a bias that broadcasts along the feature dimension, i.e. of shape "
                       f"({features},), (1, {features}) or a single value; got shape {tuple(bias.shape)}")


class Model(nn.Module):
    """
    A model that performs a GEMM, BiasAdd, Hardtanh, Mish, and GroupNorm operations in sequence
    (the KernelBench reference).
    """

    def __init__(self, in_features, out_features, bias_shape, num_groups):
        super(Model, self).__init__()
        self.gemm = nn.Linear(in_features, out_features)
        self.bias = nn.Parameter(torch.randn(bias_shape))
        self.hardtanh = nn.Hardtanh()
        self.mish = nn.Mish()
        self.groupnorm = nn.GroupNorm(num_groups=num_groups, num_channels=out_features)

    def forward(self, x):
        """
        Args:
            x (torch.Tensor): Input tensor of shape (batch_size, in_features).
        Returns:
            torch.Tensor: Output tensor of shape (batch_size, out_features).
        """
        x = self.gemm(x)
        x = x + self.bias
        x = self.hardtanh(x)
        x = self.mish(x)
        x = self.groupnorm(x)
        return x


class ModelNew(nn.Module):
    """`Model` as a GEMM plus one fused epilogue kernel; `gemm` picks the GEMM (see the module docstring)."""

    def __init__(self, in_features, out_features, bias_shape, num_groups, *, gemm: str = DEFAULT_GEMM,
                 k_splits: int = DEFAULT_K_SPLITS):
        super().__init__()
        # Same submodules and parameters, created in the same order as Model (the same RNG draws).
        self.gemm = nn.Linear(in_features, out_features)
        self.bias = nn.Parameter(torch.randn(bias_shape))
        self.hardtanh = nn.Hardtanh()  # kept for the module tree and repr; the fused kernel applies it
        self.mish = nn.Mish()
        self.groupnorm = nn.GroupNorm(num_groups=num_groups, num_channels=out_features)
        if gemm not in GEMM_VARIANTS:
            raise ValueError(f"gemm must be one of {GEMM_VARIANTS}, got {gemm!r}")
        if gemm == "3xfp16" and not _HAS_MM_OUT_DTYPE:
            raise RuntimeError(f"gemm='3xfp16' needs torch >= 2.8 (torch.mm with out_dtype); this is torch "
                               f"{torch.__version__}; use gemm='3xtf32'")
        if isinstance(k_splits, bool) or not isinstance(k_splits, int) or not 1 <= k_splits <= _MAX_K_SPLITS:
            raise ValueError(f"k_splits must be an int from 1 to {_MAX_K_SPLITS}, got {k_splits!r}")
        if gemm == "fp32" and k_splits != 1:
            raise ValueError("k_splits applies to the split-precision GEMMs ('3xtf32', '3xfp16'), not to 'fp32'")
        self.gemm_variant = gemm
        self.k_splits = k_splits
        self._weight_split = None  # (key, [W_lo | W_hi], row scales, the weight it was made from)

    def extra_repr(self) -> str:
        return f"gemm={self.gemm_variant!r}, k_splits={self.k_splits}"

    def _apply(self, fn, *args, **kwargs):
        self._weight_split = None  # .to()/.cuda()/.half() make new weights
        return super()._apply(fn, *args, **kwargs)

    def refresh_weight_split(self) -> None:
        """Drop the cached operand split of the weight (it is rebuilt at the next forward)."""
        self._weight_split = None

    def _split_weight(self, weight: torch.Tensor, fmt: int):
        key = (fmt, weight.data_ptr(), weight._version, weight.device, tuple(weight.shape))
        if self._weight_split is None or self._weight_split[0] != key:
            cat, scale = _ops.split_rows(weight.contiguous(), fmt, True)  # [W_lo | W_hi]
            # Holding `weight` keeps its storage alive, so no other tensor can get its address while cached.
            self._weight_split = (key, cat, scale, weight)
        return self._weight_split[1], self._weight_split[2]

    def _check_input(self, x, weight: torch.Tensor) -> None:
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"ModelNew.forward expected a Tensor, got {type(x).__name__}")
        in_features = weight.shape[1]
        if x.dim() != 2:
            raise RuntimeError(f"ModelNew expected a 2-D input of shape (batch, {in_features}), got shape "
                               f"{tuple(x.shape)}")
        if x.shape[1] != in_features:
            raise RuntimeError(f"mat1 and mat2 shapes cannot be multiplied ({x.shape[0]}x{x.shape[1]} and "
                               f"{in_features}x{weight.shape[0]})")
        if weight.dtype != torch.float32:
            raise RuntimeError(f"ModelNew computes in float32 only; its parameters are {weight.dtype}")
        if x.dtype != torch.float32:
            raise RuntimeError(f"expected input of dtype torch.float32 (the parameters' dtype), got {x.dtype}")
        if x.device != weight.device:
            raise RuntimeError(f"Expected all tensors to be on the same device, but found at least two devices, "
                               f"{x.device} (input) and {weight.device} (parameters)!")
        if x.device.type not in ("cpu", "cuda"):
            raise RuntimeError(f"ModelNew runs on CPU and CUDA devices, got {x.device}")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weight = self.gemm.weight.detach()
        self._check_input(x, weight)
        x = x.detach().contiguous()  # a copy only when x is not contiguous; x itself is never written
        out_features = weight.shape[0]
        gn = self.groupnorm
        gn_weight = gn.weight.detach() if gn.weight is not None else torch.ones_like(weight[:, 0])
        gn_bias = gn.bias.detach() if gn.bias is not None else torch.zeros_like(weight[:, 0])
        linear_bias = self.gemm.bias.detach() if self.gemm.bias is not None else torch.zeros_like(weight[:, 0])
        bias = _bias_vector(self.bias.detach(), out_features)
        row_scale = col_scale = None
        if self.gemm_variant == "fp32":
            with CublasFloat32Mode(tf32=False):
                parts = [torch.mm(x, weight.t())]
            scales = [1.0]
        else:
            fmt = _FORMAT[self.gemm_variant]
            K = x.shape[1]
            x_cat, x_scale = _ops.split_rows(x, fmt, False)      # [x_hi | x_lo], (M, 2K)
            w_cat, w_scale = self._split_weight(weight, fmt)     # [W_lo | W_hi], (N, 2K)
            with CublasFloat32Mode(tf32=True):
                correction = _product(x_cat, w_cat)              # x_hi W_lo^T + x_lo W_hi^T
                parts = _chunked_products(x_cat[:, :K], w_cat[:, K:], self.k_splits)  # x_hi W_hi^T
            if fmt == _FORMAT["3xfp16"]:
                scales = [1.0] * len(parts) + [_FP16_CORRECTION_SCALE]
                row_scale, col_scale = x_scale, w_scale
            else:
                scales = [1.0] * (len(parts) + 1)
            parts.append(correction)
        return _ops.epilogue(parts, scales, row_scale, col_scale, linear_bias, bias, gn_weight, gn_bias,
                             gn.num_groups, gn.eps)


batch_size = 1024
in_features = 8192
out_features = 8192
bias_shape = (out_features,)
num_groups = 256


def get_inputs():
    return [torch.rand(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features, bias_shape, num_groups]

"""The level 2 #94 extension and the Python side of its GEMMs (used by `level2_94_gemm_mish_group_norm.ModelNew`).

Importing this module builds nothing: `EXTENSION` is the build spec (an exporter embeds its sources under a
namespace of its own), `load()` builds on first use and returns the `torch.ops` namespace, and the name
`ops` (`from .level2_94_kernels import ops`) does the same on first access.

The GEMM variants (see the problem module for what each computes):

  "fp32"    one IEEE float32 GEMM;
  "3xtf32"  x W^T ~= x_hi W_hi^T + (x_hi W_lo^T + x_lo W_hi^T), TF32 parts in float32 storage;
  "3xfp16"  the same with float16 parts, each row scaled by a power of two (low parts stored times 2^12).

The correction x_hi W_lo^T + x_lo W_hi^T is one GEMM of depth 2K over the side-by-side operands
[x_hi | x_lo] (M, 2K) and [W_lo | W_hi] (N, 2K); the main product x_hi W_hi^T uses the halves of the same
buffers as strided views, so nothing is copied.
"""

from __future__ import annotations

import torch

from ..csrc.group_norm_cpu import with_namespace
from ..csrc.level2_94_cpu import P94_CPU_TEMPLATE, P94_NAMESPACE
from ..csrc.level2_94_cuda import P94_CUDA_TEMPLATE
from ..jit import ExtensionSpec, load as _jit_load

OP_NAMESPACE = P94_NAMESPACE
# Where the source templates live ("module:constant"); both spell the namespace GN_NAMESPACE.
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

GEMM_VARIANTS = ("fp32", "3xtf32", "3xfp16")
SPLIT_FORMAT = {"3xtf32": 0, "3xfp16": 1}  # split_rows formats (csrc/level2_94_cpu.py)
FP16_CORRECTION_SCALE = 2.0 ** -12         # float16 low parts are stored times 2^12
MAX_K_SPLITS = 7                           # the epilogue sums at most 8 GEMM results: chunks + correction

HAS_MM_OUT_DTYPE = hasattr(torch.ops.aten.mm, "dtype")  # mm(float16, float16) -> float32: torch >= 2.8
# torch >= 2.9 selects TF32 for cuBLAS through `fp32_precision`, older releases through `allow_tf32`.
_HAS_FP32_PRECISION = isinstance(getattr(torch.backends.cuda.matmul, "fp32_precision", None), str)

# The default GEMM is the fastest variant that meets the accuracy bar on the GPU
# (benchmarks/check_level2_gpu.py measures every variant and says which one that is).
DEFAULT_GEMM = "3xfp16" if HAS_MM_OUT_DTYPE else "3xtf32"
DEFAULT_K_SPLITS = 1

_ops = None


def load():
    """Build (first time on this machine) and load the extension; returns `torch.ops.<OP_NAMESPACE>`."""
    global _ops
    if _ops is None:
        _jit_load(EXTENSION)
        _ops = getattr(torch.ops, OP_NAMESPACE)
    return _ops


def __getattr__(name: str):
    if name == "ops":
        return load()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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


def product(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a @ b.T as float32 (M, N) for float32 operands (TF32 on CUDA inside CublasFloat32Mode(tf32=True)) or
    float16 operands (float32 accumulation and result). a: (M, K), b: (N, K), unit stride along K."""
    if a.dtype == torch.float16:
        if a.is_cuda:
            return torch.mm(a, b.t(), out_dtype=torch.float32)
        return torch.mm(a.float(), b.float().t())  # products of float16 values are exact in float32
    return torch.mm(a, b.t())


def chunked_products(a: torch.Tensor, b: torch.Tensor, splits: int) -> list:
    """The (M, N) float32 products of `splits` chunks of the depth K; their sum is a @ b.T."""
    if splits == 1:
        return [product(a, b)]
    K = a.shape[1]
    if K % splits != 0:  # unequal chunks: one GEMM each
        return [product(a_s, b_s) for a_s, b_s in zip(a.tensor_split(splits, dim=1), b.tensor_split(splits, dim=1))]
    # Equal chunks: one batched GEMM over strided views, (S, M, Kc) x (S, Kc, N) -> (S, M, N).
    a3 = a.unflatten(1, (splits, K // splits)).transpose(0, 1)
    b3 = b.unflatten(1, (splits, K // splits)).transpose(0, 1).transpose(1, 2)
    if a.dtype == torch.float16:
        out = torch.bmm(a3, b3, out_dtype=torch.float32) if a.is_cuda else torch.bmm(a3.float(), b3.float())
    else:
        out = torch.bmm(a3, b3)
    return list(out.unbind(0))


def bias_vector(bias: torch.Tensor, features: int) -> torch.Tensor:
    """The (features,) vector that `x + bias` adds to every row of x (features,) wide, for the biases that
    broadcast that way: shape (features,), (1, ..., 1, features), or a single value."""
    if bias.dim() >= 1 and bias.numel() == features and all(d == 1 for d in bias.shape[:-1]):
        return bias.reshape(features).contiguous()
    if bias.numel() == 1:
        return bias.reshape(1).expand(features).contiguous()
    raise RuntimeError(f"ModelNew supports a bias that broadcasts along the feature dimension, i.e. of shape "
                       f"({features},), (1, {features}) or a single value; got shape {tuple(bias.shape)}")

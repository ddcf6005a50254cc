"""The level 2 #92 extension (used by `level2_92_conv_group_norm_logsumexp.ModelNew`).

Importing this module builds nothing: `EXTENSION` is the build spec (an exporter embeds its sources under a
namespace of its own), `load()` builds on first use and returns the `torch.ops` namespace, and the name
`ops` (`from .level2_92_kernels import ops`) does the same on first access.
"""

from __future__ import annotations

import torch

from ..csrc.group_norm_cpu import with_namespace
from ..csrc.level2_92_cpu import P92_CPU_TEMPLATE, P92_NAMESPACE
from ..csrc.level2_92_cuda import P92_CUDA_TEMPLATE
from ..jit import ExtensionSpec, load as _jit_load

OP_NAMESPACE = P92_NAMESPACE
# Where the source templates live ("module:constant"); both spell the namespace GN_NAMESPACE.
SOURCE_TEMPLATES = {
    "cpp": "groupnorm_inline.csrc.level2_92_cpu:P92_CPU_TEMPLATE",
    "cuda": "groupnorm_inline.csrc.level2_92_cuda:P92_CUDA_TEMPLATE",
}
EXTENSION = ExtensionSpec(
    name="groupnorm_inline_p92",
    cpp_sources=(with_namespace(P92_CPU_TEMPLATE, OP_NAMESPACE),),
    cuda_sources=(with_namespace(P92_CUDA_TEMPLATE, OP_NAMESPACE),),
    description="the level 2 #92 kernels (fused conv, GroupNorm, logsumexp)",
)

# How the convolution is computed on CUDA. "fp32": the direct kernel, float32 FMAs. "3xtf32": an implicit GEMM on
# the TF32 tensor cores (sm_80+) with each operand split into high and low TF32 parts, three products
# accumulated in float32 (csrc/level2_92_tensor_core.py); it covers Cout <= 64 and Cin <= 16 and runs the fp32
# kernel elsewhere. The CPU kernels compute the fp32 decomposition for either.
CONV_KERNELS = ("fp32", "3xtf32")
CONV_KERNEL_CODES = {"fp32": 0, "3xtf32": 1}  # the operator's conv_kernel argument
# Defaults: the fastest pair that meets the accuracy bar on the GPU (benchmarks/check_level2_gpu.py). H200,
# torch 2.11, real shape: 3xtf32/store 0.651 ms, 3xtf32/recompute 0.894, fp32/recompute 1.603, fp32/store
# 1.731 (eager 3.517, torch.compile 1.319); margin to allclose(1e-4) 0.002 for every pair over 25 seeds.
DEFAULT_CONV_KERNEL = "3xtf32"

CONV_OUTPUT_MODES = ("store", "recompute")
# With the tensor-core convolution, writing its output once and reading it once beats computing it twice.
DEFAULT_CONV_OUTPUT = "store"
CUDA_MAX_OUT_CHANNELS = 128  # the CUDA kernels hold at most 16 slices of 8 channels per pixel group

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

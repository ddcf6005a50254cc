"""The GroupNorm family extension (used by the level 2 problem modules through `family`).

Importing this module builds nothing: `EXTENSION` is the build spec (an exporter embeds its sources under a
namespace of its own), `load()` builds on first use and returns the `torch.ops` namespace, and the name
`ops` (`from .family_kernels import ops`) does the same on first access.
"""

from __future__ import annotations

import torch

from ..csrc.fused_group_norm_cpu import FAMILY_CPU_TEMPLATE, FAMILY_NAMESPACE
from ..csrc.fused_group_norm_cuda import FAMILY_CUDA_TEMPLATE
from ..csrc.group_norm_cpu import with_namespace
from ..jit import ExtensionSpec, load as _jit_load

OP_NAMESPACE = FAMILY_NAMESPACE
# Where the source templates live ("module:constant"); both spell the namespace GN_NAMESPACE.
SOURCE_TEMPLATES = {
    "cpp": "groupnorm_inline.csrc.fused_group_norm_cpu:FAMILY_CPU_TEMPLATE",
    "cuda": "groupnorm_inline.csrc.fused_group_norm_cuda:FAMILY_CUDA_TEMPLATE",
}
EXTENSION = ExtensionSpec(
    name="groupnorm_inline_family",
    cpp_sources=(with_namespace(FAMILY_CPU_TEMPLATE, OP_NAMESPACE),),
    cuda_sources=(with_namespace(FAMILY_CUDA_TEMPLATE, OP_NAMESPACE),),
    description="the GroupNorm family kernel (prologue, GroupNorm, epilogue, output reduction)",
)

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

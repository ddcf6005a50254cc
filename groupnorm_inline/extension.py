"""The package's core extension: the GroupNorm operators in the `groupnorm_inline` torch.library namespace.

`load()` builds (first time on a machine) and loads it; afterwards the operators are reachable as
`torch.ops.groupnorm_inline.*`. Level-2 problem modules have extensions of their own.
"""

from __future__ import annotations

import torch

from .csrc.group_norm_autograd import GROUP_NORM_AUTOGRAD_TEMPLATE
from .csrc.group_norm_backward_cpu import GROUP_NORM_BACKWARD_CPU_TEMPLATE
from .csrc.group_norm_backward_cuda import GROUP_NORM_BACKWARD_CUDA_TEMPLATE
from .csrc.group_norm_cpu import GROUP_NORM_CPU_TEMPLATE, OP_NAMESPACE, with_namespace
from .csrc.group_norm_cuda import GROUP_NORM_FORWARD_CUDA_TEMPLATE
from .csrc.python_entry import PYTHON_ENTRY_SOURCE, PYTHON_MODULE_NAME
from .jit import ExtensionSpec, env, load as _jit_load, plan, python_module

SPEC = ExtensionSpec(
    name="groupnorm_inline_C",
    cpp_sources=(with_namespace(GROUP_NORM_CPU_TEMPLATE), with_namespace(GROUP_NORM_BACKWARD_CPU_TEMPLATE),
                 with_namespace(GROUP_NORM_AUTOGRAD_TEMPLATE)),
    cuda_sources=(with_namespace(GROUP_NORM_FORWARD_CUDA_TEMPLATE),
                  with_namespace(GROUP_NORM_BACKWARD_CUDA_TEMPLATE)),
    # The forward's direct entry from Python (eager calls): csrc/python_entry.py says why.
    python_entry_sources=(PYTHON_ENTRY_SOURCE,),
    python_module_name=PYTHON_MODULE_NAME,
    description="the GroupNorm kernels",
    openmp=True,  # the CPU kernels split their work with at::parallel_for
    cpu_vec_isa=True,  # and vectorise with at::vec: AVX2 / AVX-512 where ATen uses them (see env.cpu_vec_flags)
)

_ops = None


def load():
    """Build if needed, load, and return the `torch.ops.groupnorm_inline` namespace."""
    global _ops
    if _ops is None:
        _jit_load(SPEC)
        _ops = getattr(torch.ops, OP_NAMESPACE)
        from . import registration  # fake (meta) kernels and autograd for the operators just loaded

        registration.register()
    return _ops


def python_entry():
    """The extension's CPython module: `group_norm` and `group_norm_with_stats`, direct entries to the forward
    operator (csrc/python_entry.py). Loads the extension first if needed."""
    load()
    return python_module(SPEC)


_has_cuda: bool | None = None


def has_cuda_kernels() -> bool:
    """Whether the loaded (or to-be-loaded) build contains the CUDA kernels (planned once per process:
    hashing the sources costs ~0.1 ms, too much for every call)."""
    global _has_cuda
    if _has_cuda is None:
        _has_cuda = plan(SPEC).with_cuda
    return _has_cuda


def cuda_unavailable_reason() -> str:
    if not torch.version.cuda:
        return f"torch {torch.__version__} is a CPU-only build"
    if env.cuda_home() is None:
        return "no CUDA toolkit (nvcc) was found; set CUDA_HOME to one"
    return "GROUPNORM_INLINE_NO_CUDA is set"

"""Where the tests build exported single-file submissions, and whether those builds compile CUDA.

An export embeds the package's kernel sources under a namespace of its own, so each export build compiles
them once more. With a GPU every export must carry its CUDA kernels (the harness flow runs them). Without one,
nothing runs them: the package's CUDA sources are already compiled by the package's own build (CI's first
stage, warnings as errors), and the export's renaming of namespaces is compiled by nvcc in one export,
CUDA_EXPORT_KEY, whose CUDA build is the cheapest (about 80 s on 2 cores, against ~1000 s for level 1 #35's).
The other exports build their C++ kernels only, through the GROUPNORM_INLINE_NO_CUDA=1 switch they document,
which test_export checks they honour.
"""

from __future__ import annotations

from pathlib import Path

import torch

# The export whose build compiles its CUDA sources even without a GPU (where a toolkit is present).
CUDA_EXPORT_KEY = "2/92"


def export_builds_dir(tmp_path_factory) -> Path:
    """One TORCH_EXTENSIONS_DIR per test session, shared by test_cli and test_export: each export compiles once."""
    path = tmp_path_factory.getbasetemp() / "kernelbench-builds"
    path.mkdir(exist_ok=True)
    return path


def export_builds_cuda(key: str) -> bool:
    """Whether the export of problem `key` is built with its CUDA kernels here (toolkit permitting)."""
    return torch.cuda.is_available() or key == CUDA_EXPORT_KEY


def export_build_environment(key: str) -> dict[str, str]:
    """Environment overrides for a process that builds the export of `key` (see the module docstring)."""
    return {} if export_builds_cuda(key) else {"GROUPNORM_INLINE_NO_CUDA": "1"}

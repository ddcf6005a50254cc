"""groupnorm_inline: a fast GroupNorm for PyTorch, CUDA kernels compiled at first import.

    from groupnorm_inline import ModelNew, get_inputs, get_init_inputs   # KernelBench level 1 #35
    groupnorm_inline.group_norm(x, num_groups, weight, bias, eps)          # = F.group_norm
    groupnorm_inline.GroupNorm(num_groups, num_channels, eps=1e-5, affine=True)  # = nn.GroupNorm
"""

import sys

from . import extension
from .functional import group_norm, group_norm_with_stats
from .jit import ExtensionBuildError
from .modules import GroupNorm
from .problems.level1_35_group_norm import Model, ModelNew, get_init_inputs, get_inputs

__version__ = "0.1.0"

__all__ = ["group_norm", "group_norm_with_stats", "GroupNorm", "Model", "ModelNew", "get_inputs",
           "get_init_inputs", "ExtensionBuildError", "__version__"]

# Build (first time on this machine) and load the kernels now, so the first call pays nothing.
# Skipped while `python -m groupnorm_inline ...` locates its command module (sys.argv[0] is "-m" then):
# commands such as clear-cache and show-config must not trigger a build.
if not (sys.argv and sys.argv[0] == "-m"):
    extension.load()

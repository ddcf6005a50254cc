"""KernelBench problem modules, one per problem: reference `Model`, our `ModelNew`, `get_inputs`,
`get_init_inputs` and the module constants, exactly as the KernelBench problem file defines them.

`PROBLEMS` maps each problem's KernelBench level/number key to its module name, so tools can find them
without importing (and so building) every problem.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass


@dataclass(frozen=True)
class ProblemInfo:
    key: str          # "1/35"
    file_name: str    # KernelBench's file stem, "35_GroupNorm_"
    module: str       # module under groupnorm_inline.problems
    summary: str


PROBLEMS: dict[str, ProblemInfo] = {
    "1/35": ProblemInfo("1/35", "35_GroupNorm_", "level1_35_group_norm",
                        "GroupNorm, x (112, 64, 512, 512), 8 groups"),
    "2/94": ProblemInfo("2/94", "94_Gemm_BiasAdd_Hardtanh_Mish_GroupNorm", "level2_94_gemm_mish_group_norm",
                        "Linear 8192 -> 8192 on x (1024, 8192), +bias, Hardtanh, Mish, GroupNorm 256 groups"),
    "2/92": ProblemInfo("2/92", "92_Conv2d_GroupNorm_Tanh_HardSwish_ResidualAdd_LogSumExp",
                        "level2_92_conv_group_norm_logsumexp",
                        "Conv2d 8 -> 64 (3x3) on x (128, 8, 128, 128), GroupNorm 16 groups, Tanh, HardSwish, "
                        "residual, LogSumExp over channels"),
}


def find(name: str) -> ProblemInfo:
    """Look a problem up by key ("1/35") or KernelBench file name ("35_GroupNorm_", with or without .py)."""
    name = name.strip()
    if name.endswith(".py"):
        name = name[:-3]
    for info in PROBLEMS.values():
        if name in (info.key, info.file_name, info.module):
            return info
    known = ", ".join(f"{p.key} ({p.file_name})" for p in PROBLEMS.values())
    raise KeyError(f"unknown problem {name!r}; known problems: {known}")


def import_problem(name: str):
    """Import (and so build the kernels of) a problem module."""
    return importlib.import_module(f"{__name__}.{find(name).module}")

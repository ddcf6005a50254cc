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
    "2/11": ProblemInfo("2/11", "11_ConvTranspose2d_BatchNorm_Tanh_MaxPool_GroupNorm",
                        "level2_11_conv_transpose_batch_norm_tanh_pool_group_norm",
                        "ConvTranspose2d 64 -> 128 (5x5) on x (512, 64, 32, 32), BatchNorm, Tanh, MaxPool 2, "
                        "GroupNorm 8 groups"),
    "2/19": ProblemInfo("2/19", "19_ConvTranspose2d_GELU_GroupNorm", "level2_19_conv_transpose_gelu_group_norm",
                        "ConvTranspose2d 64 -> 64 (3x3) on x (128, 64, 256, 256), GELU, GroupNorm 8 groups"),
    "2/21": ProblemInfo("2/21", "21_Conv2d_Add_Scale_Sigmoid_GroupNorm", "level2_21_conv_add_scale_sigmoid_group_norm",
                        "Conv2d 8 -> 32 (3x3) on x (128, 8, 256, 256), +bias, *scale, Sigmoid, GroupNorm 8 groups"),
    "2/23": ProblemInfo("2/23", "23_Conv3d_GroupNorm_Mean", "level2_23_conv3d_group_norm_mean",
                        "Conv3d 3 -> 24 (3x3x3) on x (128, 3, 24, 32, 32), GroupNorm 8 groups, mean -> (128,)"),
    "2/27": ProblemInfo("2/27", "27_Conv3d_HardSwish_GroupNorm_Mean", "level2_27_conv3d_hardswish_group_norm_mean",
                        "Conv3d 3 -> 16 (4x4x4) on x (1024, 3, 16, 32, 32), HardSwish, GroupNorm 4 groups, "
                        "spatial mean -> (1024, 16)"),
    "2/30": ProblemInfo("2/30", "30_Gemm_GroupNorm_Hardtanh", "level2_30_gemm_group_norm_hardtanh",
                        "Linear 8192 -> 8192 on x (1024, 8192), GroupNorm 16 groups, Hardtanh(-2, 2)"),
    "2/37": ProblemInfo("2/37", "37_Matmul_Swish_Sum_GroupNorm", "level2_37_matmul_swish_sum_group_norm",
                        "Linear 1024 -> 4096 on x (32768, 1024), Swish, +bias, GroupNorm 64 groups"),
    "2/60": ProblemInfo("2/60", "60_ConvTranspose3d_Swish_GroupNorm_HardSwish",
                        "level2_60_conv_transpose3d_swish_group_norm_hardswish",
                        "ConvTranspose3d 3 -> 16 (3x3x3, stride 2) on x (128, 3, 16, 32, 32), Swish, GroupNorm 4 "
                        "groups, HardSwish"),
    "2/61": ProblemInfo("2/61", "61_ConvTranspose3d_ReLU_GroupNorm", "level2_61_conv_transpose3d_relu_group_norm",
                        "ConvTranspose3d 64 -> 128 (3x3x3) on x (16, 64, 32, 32, 32), ReLU, GroupNorm 8 groups"),
    "2/62": ProblemInfo("2/62", "62_Matmul_GroupNorm_LeakyReLU_Sum", "level2_62_matmul_group_norm_leaky_relu_sum",
                        "Linear 8192 -> 8192 on x (1024, 8192), GroupNorm 512 groups, LeakyReLU, x + x"),
    "2/75": ProblemInfo("2/75", "75_Gemm_GroupNorm_Min_BiasAdd", "level2_75_gemm_group_norm_min_bias",
                        "Linear 8192 -> 8192 on x (1024, 8192), GroupNorm 512 groups, min over features, "
                        "+bias -> (1, 8192, 1024, 1)"),
    "2/83": ProblemInfo("2/83", "83_Conv3d_GroupNorm_Min_Clamp_Dropout", "level2_83_conv3d_group_norm_min_clamp_dropout",
                        "Conv3d 3 -> 16 (3x3x3) on x (128, 3, 16, 64, 64), GroupNorm 8 groups, min, clamp, "
                        "Dropout(0.2)"),
    "2/85": ProblemInfo("2/85", "85_Conv2d_GroupNorm_Scale_MaxPool_Clamp", "level2_85_conv_group_norm_scale_pool_clamp",
                        "Conv2d 8 -> 64 (3x3) on x (128, 8, 128, 128), GroupNorm 16 groups, *scale, MaxPool 4, "
                        "clamp"),
    "2/88": ProblemInfo("2/88", "88_Gemm_GroupNorm_Swish_Multiply_Swish",
                        "level2_88_gemm_group_norm_swish_multiply_swish",
                        "Linear 8192 -> 8192 on x (1024, 8192), GroupNorm 256 groups, Swish, *weight, Swish"),
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

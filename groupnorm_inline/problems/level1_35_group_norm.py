"""KernelBench level 1, problem 35 (`35_GroupNorm_`): GroupNorm over (112, 64, 512, 512), 8 groups.

`Model`, the constants and `get_inputs`/`get_init_inputs` reproduce the KernelBench problem file: CPU
float32 inputs from `torch.rand`, `get_init_inputs() == [64, 8]`. `ModelNew` takes the same constructor
arguments and holds its parameters under the same `state_dict` keys (`gn.weight`, `gn.bias`).
"""

import torch
import torch.nn as nn

from ..modules import GroupNorm


class Model(nn.Module):
    """Simple model that performs Group Normalization (the KernelBench reference)."""

    def __init__(self, num_features: int, num_groups: int):
        super().__init__()
        self.gn = nn.GroupNorm(num_groups=num_groups, num_channels=num_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.gn(x)


class ModelNew(nn.Module):
    """`Model` with the GroupNorm computed by groupnorm_inline's kernels."""

    def __init__(self, num_features: int, num_groups: int):
        super().__init__()
        self.gn = GroupNorm(num_groups=num_groups, num_channels=num_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.gn(x)


batch_size = 112
features = 64
num_groups = 8
dim1 = 512
dim2 = 512


def get_inputs():
    x = torch.rand(batch_size, features, dim1, dim2)
    return [x]


def get_init_inputs():
    return [features, num_groups]

"""`GroupNorm`: an `nn.GroupNorm` whose forward runs our kernels.

Subclassing `nn.GroupNorm` keeps the constructor signature, parameter names, `state_dict`, `reset_parameters`
and `repr` identical to PyTorch's, whatever the installed torch version adds to them.
"""

from __future__ import annotations

import torch
from torch import nn

from .functional import group_norm


class GroupNorm(nn.GroupNorm):
    """Drop-in for `torch.nn.GroupNorm(num_groups, num_channels, eps=1e-5, affine=True)`."""

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return group_norm(input, self.num_groups, self.weight, self.bias, self.eps)


__all__ = ["GroupNorm"]

"""`GroupNorm`: an `nn.GroupNorm` whose forward runs our kernels, optionally with a fused activation.

Subclassing `nn.GroupNorm` keeps the constructor signature, parameter names, `state_dict`, `reset_parameters`
and `repr` identical to PyTorch's, whatever the installed torch version adds to them; the activation is an
extra keyword (no parameters, no buffers: the `state_dict` stays `nn.GroupNorm`'s).
"""

from __future__ import annotations

import torch
from torch import nn

from . import activations
from .functional import group_norm


class GroupNorm(nn.GroupNorm):
    """Drop-in for `torch.nn.GroupNorm(num_groups, num_channels, eps=1e-5, affine=True)`.

    `activation` (None, a name such as "silu", or a module such as `nn.SiLU()`) and `activation_params`
    make the forward `act(group_norm(x))` in one pass: `GroupNorm(32, 256, activation="silu")` replaces
    `nn.Sequential(nn.GroupNorm(32, 256), nn.SiLU())` (load the GroupNorm's state_dict as usual).
    """

    def __init__(self, num_groups: int, num_channels: int, eps: float = 1e-5, affine: bool = True, device=None,
                 dtype=None, activation=None, activation_params: dict | None = None) -> None:
        super().__init__(num_groups, num_channels, eps, affine, device, dtype)
        # Checked here, so a bad name fails at construction rather than at the first forward.
        self._activation = activations.resolve(activation, activation_params)
        self.activation = activations.name_of(self._activation[0])

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        code, alpha, beta = self._activation
        if code == 0:
            return group_norm(input, self.num_groups, self.weight, self.bias, self.eps)
        params = dict(zip((n for n, _ in activations.ACTIVATIONS[self.activation].params), (alpha, beta)))
        return group_norm(input, self.num_groups, self.weight, self.bias, self.eps, self.activation, params)

    def extra_repr(self) -> str:
        text = super().extra_repr()
        if self._activation[0] != 0:
            text += ", activation=" + activations.describe(*self._activation)
        return text


__all__ = ["GroupNorm"]

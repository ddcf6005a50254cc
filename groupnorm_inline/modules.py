"""`GroupNorm`: an `nn.GroupNorm` whose forward runs our kernels, optionally with a fused activation.

Subclassing `nn.GroupNorm` keeps the constructor signature, parameter names, `state_dict`, `reset_parameters`
and `repr` identical to PyTorch's, whatever the installed torch version adds to them; the activation is an
extra keyword (no parameters, no buffers: the `state_dict` stays `nn.GroupNorm`'s).
"""

from __future__ import annotations

import inspect

import torch
from torch import nn

from . import activations, functional


class GroupNorm(nn.GroupNorm):
    """Drop-in for `torch.nn.GroupNorm(num_groups, num_channels, eps=1e-5, affine=True)`.

    `activation` (None, a name such as "silu", or a module such as `nn.SiLU()`) and `activation_params`
    make the forward `act(group_norm(x))` in one pass: `GroupNorm(32, 256, activation="silu")` replaces
    `nn.Sequential(nn.GroupNorm(32, 256), nn.SiLU())` (load the GroupNorm's state_dict as usual).
    """

    def __init__(self, *args, activation=None, activation_params: dict | None = None, **kwargs) -> None:
        # Everything but the activation goes to nn.GroupNorm as given, so the arguments the installed torch
        # takes (bias= in newer releases) are taken here too.
        super().__init__(*args, **kwargs)
        # Checked here, so a bad name fails at construction rather than at the first forward.
        self._activation = activations.resolve(activation, activation_params)
        self.activation = activations.name_of(self._activation[0])

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        # The activation was resolved at construction: straight to the operator.
        return functional.forward_output(input, self.num_groups, self.weight, self.bias, self.eps, self._activation)

    def extra_repr(self) -> str:
        text = super().extra_repr()
        if self._activation[0] != 0:
            text += ", activation=" + activations.describe(*self._activation)
        return text


def _constructor_signature() -> inspect.Signature:
    """nn.GroupNorm.__init__'s signature with activation and activation_params added as keyword-only
    parameters: what `inspect.signature` and `help()` show for GroupNorm."""
    base = inspect.signature(nn.GroupNorm.__init__)
    extra = [inspect.Parameter("activation", inspect.Parameter.KEYWORD_ONLY, default=None),
             inspect.Parameter("activation_params", inspect.Parameter.KEYWORD_ONLY, default=None)]
    params = list(base.parameters.values())
    at = next((i for i, p in enumerate(params) if p.kind == inspect.Parameter.VAR_KEYWORD), len(params))
    return base.replace(parameters=params[:at] + extra + params[at:])


GroupNorm.__init__.__signature__ = _constructor_signature()

__all__ = ["GroupNorm"]

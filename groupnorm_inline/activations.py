"""The activations GroupNorm can apply in the same pass, y = act(group_norm(x)): names, parameters, codes.

The codes are the `gn_act::Kind` values of the kernels (csrc/activation.py); keep the two tables in step.
`resolve` turns what a user passes (a name and parameters, or an `nn.Module` such as `nn.SiLU()` or
`nn.LeakyReLU(0.2)`) into the (code, alpha, beta) triple the operators take, with a clear error for anything
else; `reference` is the same activation in PyTorch ops (tests, the double-backward formula).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class Activation:
    name: str
    code: int
    params: tuple[tuple[str, float], ...]          # (name, default) in the order (alpha, beta)
    torch_fn: Callable[[torch.Tensor, float, float], torch.Tensor]   # reference: fn(z, alpha, beta)


ACTIVATIONS: dict[str, Activation] = {a.name: a for a in (
    Activation("silu", 1, (), lambda z, a, b: F.silu(z)),
    Activation("gelu", 2, (), lambda z, a, b: F.gelu(z)),
    Activation("gelu_tanh", 3, (), lambda z, a, b: F.gelu(z, approximate="tanh")),
    Activation("relu", 4, (), lambda z, a, b: F.relu(z)),
    Activation("leaky_relu", 5, (("negative_slope", 0.01),), lambda z, a, b: F.leaky_relu(z, a)),
    Activation("mish", 6, (), lambda z, a, b: F.mish(z)),
    Activation("hardswish", 7, (), lambda z, a, b: F.hardswish(z)),
    Activation("hardtanh", 8, (("min_val", -1.0), ("max_val", 1.0)), lambda z, a, b: F.hardtanh(z, a, b)),
    Activation("sigmoid", 9, (), lambda z, a, b: torch.sigmoid(z)),
    Activation("tanh", 10, (), lambda z, a, b: torch.tanh(z)),
)}
_BY_CODE = {a.code: a for a in ACTIVATIONS.values()}
NONE = (0, 0.0, 0.0)  # no activation


def _from_module(module: nn.Module) -> tuple[str, dict]:
    """(name, params) of an activation module of a type the kernels implement."""
    if isinstance(module, nn.LeakyReLU):
        return "leaky_relu", {"negative_slope": module.negative_slope}
    if isinstance(module, nn.Hardtanh) and not isinstance(module, nn.ReLU6):
        return "hardtanh", {"min_val": module.min_val, "max_val": module.max_val}
    if isinstance(module, nn.ReLU6):
        return "hardtanh", {"min_val": 0.0, "max_val": 6.0}
    if isinstance(module, nn.GELU):
        return ("gelu_tanh" if module.approximate == "tanh" else "gelu"), {}
    simple = {nn.SiLU: "silu", nn.ReLU: "relu", nn.Mish: "mish", nn.Hardswish: "hardswish",
              nn.Sigmoid: "sigmoid", nn.Tanh: "tanh"}
    for cls, name in simple.items():
        if type(module) is cls:
            return name, {}
    raise ValueError(f"group_norm: activation module {type(module).__name__} is not supported; expected one of "
                     "nn.SiLU, nn.GELU, nn.ReLU, nn.LeakyReLU, nn.Mish, nn.Hardswish, nn.Hardtanh, nn.ReLU6, "
                     "nn.Sigmoid, nn.Tanh")


def resolve(activation, params: Mapping[str, float] | None = None) -> tuple[int, float, float]:
    """(code, alpha, beta) for `activation`: None, a name of ACTIVATIONS, or an activation nn.Module.

    `params` sets the named activation's parameters (leaky_relu: negative_slope; hardtanh: min_val, max_val);
    unknown names, wrong types and parameters the activation does not take raise."""
    if params is not None and not isinstance(params, Mapping):
        raise TypeError(f"group_norm: activation_params must be a dict, got {type(params).__name__}")
    if activation is None:
        if params:
            raise ValueError(f"group_norm: activation_params {dict(params)} given without an activation")
        return NONE
    if isinstance(activation, nn.Module):
        if params:
            raise ValueError("group_norm: activation_params cannot be combined with an activation module "
                             "(the module carries its own parameters)")
        activation, params = _from_module(activation)
    if not isinstance(activation, str):
        raise TypeError(f"group_norm: activation must be None, a str or an nn.Module, got "
                        f"{type(activation).__name__}")
    act = ACTIVATIONS.get(activation)
    if act is None:
        raise ValueError(f"group_norm: unknown activation '{activation}'; expected one of "
                         f"{', '.join(ACTIVATIONS)} (or None)")
    given = dict(params or {})
    values = []
    for name, default in act.params:
        value = given.pop(name, default)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise TypeError(f"group_norm: activation parameter {name} must be a number, got "
                            f"{type(value).__name__}")
        values.append(float(value))
    if given:
        takes = ", ".join(n for n, _ in act.params) or "no parameters"
        raise ValueError(f"group_norm: activation '{activation}' takes {takes}; got {', '.join(given)}")
    if act.name == "hardtanh" and values[0] > values[1]:
        raise ValueError(f"group_norm: hardtanh needs min_val <= max_val, got {values[0]} > {values[1]}")
    values += [0.0] * (2 - len(values))
    return act.code, values[0], values[1]


def name_of(code: int) -> str | None:
    return None if code == 0 else _BY_CODE[code].name


def describe(code: int, alpha: float, beta: float) -> str:
    """Text for repr: 'silu', 'leaky_relu(negative_slope=0.2)'."""
    if code == 0:
        return "none"
    act = _BY_CODE[code]
    args = ", ".join(f"{n}={v}" for (n, _), v in zip(act.params, (alpha, beta)))
    return f"{act.name}({args})" if args else act.name


def reference(z: torch.Tensor, code: int, alpha: float, beta: float) -> torch.Tensor:
    """act(z) in PyTorch ops (identity for code 0); differentiable."""
    return z if code == 0 else _BY_CODE[code].torch_fn(z, alpha, beta)


__all__ = ["ACTIVATIONS", "Activation", "resolve", "reference", "describe", "name_of", "NONE"]

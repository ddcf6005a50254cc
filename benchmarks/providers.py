"""What is timed for a row: ours, eager PyTorch, torch.compile, Liger-Kernel (optional, `liger_provider.py`)
and the row's traffic floor, as callables that take no arguments (their tensors are bound in) and return what
they allocate.

Rows with an activation time GroupNorm followed by it: ours in one pass (`activation=`), eager as two calls
(`F.group_norm` then e.g. `F.silu`), torch.compile of those same two calls (which Inductor may fuse).

The torch.compile baselines are compiled with `dynamic=False` (one specialised program per shape, as a user
with fixed shapes gets), and `torch._dynamo.reset()` runs before each row so that the per-function
recompile limit is never reached across rows (hitting it silently falls back to eager).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Callable

import torch
import torch._functorch.config
import torch.nn.functional as F

import groupnorm_inline


@dataclass
class Provider:
    name: str
    fn: Callable[[], object]
    result_bytes: int     # bytes of the tensors each call allocates and returns (not scratch)


def fresh_compile(fn: Callable) -> Callable:
    """torch.compile(fn) with default mode and static shapes, after clearing earlier rows' programs."""
    torch._dynamo.reset()
    return torch.compile(fn, mode="default", dynamic=False)


# Eager counterparts of the activations the suite uses with `group_norm(..., activation=name)`.
EAGER_ACTIVATIONS: dict[str, Callable] = {"silu": F.silu, "gelu": F.gelu, "relu": F.relu, "mish": F.mish}


def group_norm_functions(groups: int, eps: float, activation: str | None = None):
    """(ours, eager) callables of (x, weight, bias): GroupNorm, then `activation` when one is named; the
    eager one is also what torch.compile compiles."""
    if activation is not None and activation not in EAGER_ACTIVATIONS:
        raise ValueError(f"no eager counterpart for activation {activation!r}; known: {sorted(EAGER_ACTIVATIONS)}")
    act = EAGER_ACTIVATIONS.get(activation)

    def ours(x, weight, bias):
        if activation is None:
            return groupnorm_inline.group_norm(x, groups, weight, bias, eps)
        return groupnorm_inline.group_norm(x, groups, weight, bias, eps, activation=activation)

    def eager(x, weight, bias):
        y = F.group_norm(x, groups, weight, bias, eps)
        return y if act is None else act(y)

    return ours, eager


def forward_providers(x, weight, bias, groups: int, eps: float, with_compile: bool,
                      activation: str | None = None) -> list[Provider]:
    """Forward GroupNorm (+ activation) of x (N, C, *): ours, eager and (optionally) torch.compile."""
    ours, eager = group_norm_functions(groups, eps, activation)
    out_bytes = x.numel() * x.element_size()
    providers = [Provider("ours", lambda: ours(x, weight, bias), out_bytes),
                 Provider("eager", lambda: eager(x, weight, bias), out_bytes)]
    if with_compile:
        compiled = fresh_compile(eager)
        providers.append(Provider("compile", lambda: compiled(x, weight, bias), out_bytes))
    return providers


def liger_forward_provider(liger_fn: Callable, x, weight, bias) -> Provider:
    """Liger-Kernel's GroupNorm forward, `liger_fn(x, weight, bias)` from liger_provider.group_norm_function."""
    return Provider("liger", lambda: liger_fn(x, weight, bias), x.numel() * x.element_size())


def copy_provider(x) -> Provider:
    """The forward floor: `y.copy_(x)` into a tensor allocated once (created after the correctness checks,
    so that it is not held while the providers' outputs are compared)."""
    copy_target = torch.empty_like(x)
    return Provider("copy", lambda: copy_target.copy_(x), 0)


def _training_step(gn: Callable, x, weight, bias, dy):
    """Forward then backward of gn; returns (y, dx, dweight, dbias) without accumulating into .grad."""
    y = gn(x, weight, bias)
    return (y, *torch.autograd.grad(y, (x, weight, bias), dy))


def _backward_only(y, x, weight, bias, dy):
    """The backward of an already computed y (graph kept for the next call)."""
    return torch.autograd.grad(y, (x, weight, bias), dy, retain_graph=True)


def compiled_group_norm(groups: int, eps: float) -> Callable:
    """torch.compile of eager GroupNorm for the training rows (compiled on its first call)."""
    return fresh_compile(group_norm_functions(groups, eps)[1])


def training_providers(x, weight, bias, dy, groups: int, eps: float, compiled: Callable | None,
                       backward_only: bool, liger_fn: Callable | None = None) -> list[Provider]:
    """Forward + backward (or, with backward_only, the backward alone, timed on a graph kept alive with
    retain_graph) of ours, eager, when `compiled` is given (from `compiled_group_norm`) torch.compile, and when
    `liger_fn` is given Liger-Kernel; x, weight, bias require grad."""
    ours, eager = group_norm_functions(groups, eps)
    tensor_bytes = x.numel() * x.element_size()
    param_bytes = 2 * weight.numel() * weight.element_size()
    functions = [("ours", ours), ("eager", eager)]
    if compiled is not None:
        functions.append(("compile", compiled))
    if liger_fn is not None:
        functions.append(("liger", liger_fn))
    providers = []
    for name, gn in functions:  # default arguments bind this iteration's values into each lambda
        if backward_only:
            y = gn(x, weight, bias)
            providers.append(Provider(name, lambda y=y: _backward_only(y, x, weight, bias, dy),
                                      tensor_bytes + param_bytes))
        else:
            providers.append(Provider(name, lambda gn=gn: _training_step(gn, x, weight, bias, dy),
                                      2 * tensor_bytes + param_bytes))
    return providers


def retained_graph_compile_config():
    """Context for the training rows: torch.compile's backward frees ("donates") saved buffers by default,
    which forbids the retain_graph=True of the backward-only timing; donation saves memory, not time, so it
    is turned off, and one compiled function serves both the fwd+bwd and the bwd timings."""
    config = torch._functorch.config
    if hasattr(config, "donated_buffer"):
        return config.patch(donated_buffer=False)
    return contextlib.nullcontext()


def training_floor_provider(x, dy, backward_only: bool) -> Provider:
    """The training floor, named "copy" like the forward floor: forward + backward moves at least x -> y
    (read, write) and x, dy -> dx (2 reads, 1 write), done as `copy_` then `torch.add(x, dy, out=dx)`;
    the backward alone only the second."""
    x_plain = x.detach()
    y_floor = None if backward_only else torch.empty_like(x_plain)
    dx_floor = torch.empty_like(x_plain)

    def floor():
        if y_floor is not None:
            y_floor.copy_(x_plain)
        return torch.add(x_plain, dy, out=dx_floor)

    return Provider("copy", floor, 0)


def training_floor_bytes(x, backward_only: bool) -> int:
    """Minimal traffic: backward reads x, dy and writes dx; forward adds a read of x and a write of y."""
    tensor_bytes = x.numel() * x.element_size()
    return (3 if backward_only else 5) * tensor_bytes


__all__ = ["Provider", "EAGER_ACTIVATIONS", "fresh_compile", "group_norm_functions", "forward_providers",
           "liger_forward_provider", "copy_provider", "compiled_group_norm",
           "training_providers",
           "retained_graph_compile_config", "training_floor_provider", "training_floor_bytes"]

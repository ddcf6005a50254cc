"""Liger-Kernel's Triton GroupNorm as an optional provider: imported only if installed, and run only on the
rows it supports; every other row records why not ("not installed", "n/a: ...").

What Liger-Kernel offers (`liger_kernel.ops.group_norm.LigerGroupNormFunction`, wrapped by the module
`liger_kernel.transformers.LigerGroupNorm`): `apply(x, weight, bias, num_channels, num_groups, eps)`, an
autograd function with a Triton forward (one program per (sample, group), sums then normalisation) and
backward. It makes every tensor argument contiguous first, so a channels_last input is copied to NCHW inside
the call (its time includes that copy) and the output is NCHW; it keeps the statistics in the input's dtype
and has no fused activation. The module asserts inputs of at least 3 dims; the suite calls the function
with the module's contract.

The GPU machine has no internet: carry the wheel (see benchmarks/README.md, "Liger-Kernel"):

    pip download liger-kernel --no-deps -d build/wheels       # where there is internet
    pip install --no-deps build/wheels/liger_kernel-*.whl     # on the GPU machine (run_device_suite.sh does it)
"""

from __future__ import annotations

import importlib
from typing import Callable

import torch

NOT_INSTALLED = "not installed"

_state: dict[str, object] = {}


def _import():
    """(LigerGroupNormFunction or None, status); imported once per process."""
    if "status" not in _state:
        try:
            module = importlib.import_module("liger_kernel.ops.group_norm")
            _state["function"] = module.LigerGroupNormFunction
            _state["status"] = "available"
        except ModuleNotFoundError as error:
            missing = error.name or ""
            _state["function"] = None
            _state["status"] = (NOT_INSTALLED if missing.split(".")[0] == "liger_kernel"
                                else f"not importable: needs {missing}")
        except Exception as error:  # noqa: BLE001 - a broken install must not end the suite
            _state["function"] = None
            _state["status"] = f"not importable: {type(error).__name__}: {str(error).splitlines()[0][:120]}"
    return _state["function"], _state["status"]


def status() -> str:
    """"available", "not installed", or "not importable: why"."""
    return _import()[1]


def version() -> str | None:
    try:
        from importlib.metadata import version as dist_version

        return dist_version("liger-kernel")
    except Exception:  # noqa: BLE001 - PackageNotFoundError, or metadata missing
        return None


def unsupported_reason(shape: tuple[int, ...], device: torch.device, activation: str | None) -> str | None:
    """Why Liger's GroupNorm cannot run this row (None when it can); independent of whether it is installed."""
    if device.type != "cuda":
        return "Liger-Kernel's Triton kernels run on CUDA devices only"
    if activation is not None:
        return f"Liger-Kernel's GroupNorm has no fused activation ({activation})"
    if len(shape) < 3:
        return "LigerGroupNorm takes (N, C, *) inputs of at least 3 dims"
    return None


def row_status(shape: tuple[int, ...], device: torch.device, activation: str | None) -> str:
    """What the CSV's `liger` column says for a row before it runs: "timed" when Liger will be timed,
    otherwise "not installed", "not importable: ..." or "n/a: why"."""
    if status() != "available":
        return status()
    reason = unsupported_reason(shape, device, activation)
    return "timed" if reason is None else f"n/a: {reason}"


def layout_note(x: torch.Tensor) -> str:
    """A note for rows whose input Liger copies before its kernel runs."""
    if x.is_contiguous():
        return ""
    return "input copied to NCHW inside the call (ensure_contiguous), NCHW output"


def group_norm_function(groups: int, eps: float) -> Callable:
    """fn(x, weight, bias) -> Liger's GroupNorm of x (differentiable); only when status() is "available"."""
    function, state = _import()
    if function is None:
        raise RuntimeError(f"Liger-Kernel is {state}")

    def liger(x, weight, bias):
        return function.apply(x, weight, bias, x.shape[1], groups, eps)

    return liger


__all__ = ["NOT_INSTALLED", "status", "version", "unsupported_reason", "row_status", "layout_note",
           "group_norm_function"]

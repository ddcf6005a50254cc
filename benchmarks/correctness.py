"""Correctness checks run before any timing: each provider's output against a float64 GroupNorm computed
on the same device a few samples at a time (a float64 copy of a 7.5 GB input would not fit next to it)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

# (atol, rtol) of an output against the float64 GroupNorm of the same (already rounded) input. Outputs of
# GroupNorm are O(1); the bound covers one rounding to the output format (2^-24, 2^-11, 2^-8 relative) plus
# statistics accumulated in float32, with room to spare, and is far below what a wrong kernel produces.
REFERENCE_TOLERANCES = {
    torch.float64: (1e-10, 1e-10),
    torch.float32: (1e-5, 1e-5),
    torch.float16: (2e-3, 2e-3),
    torch.bfloat16: (1.6e-2, 1.6e-2),
}
# Against eager PyTorch: KernelBench's allclose tolerance (1e-4 in float32, 1e-2 in half precision).
EAGER_TOLERANCES = {
    torch.float64: (1e-8, 1e-8),
    torch.float32: (1e-4, 1e-4),
    torch.float16: (1e-2, 1e-2),
    torch.bfloat16: (1e-2, 1e-2),
}
# float64 elements of the reference computed at once (256 MB).
REFERENCE_CHUNK_ELEMENTS = 1 << 25


@dataclass
class Agreement:
    """How far an output is from what it is compared against."""
    max_abs_err: float = 0.0
    bad_elements: int = 0
    compared: int = 0

    @property
    def ok(self) -> bool:
        return self.bad_elements == 0 and self.compared > 0 and math.isfinite(self.max_abs_err)

    def add(self, actual: torch.Tensor, expected: torch.Tensor, atol: float, rtol: float) -> None:
        """Fold in one chunk; NaN/inf in `actual` count as bad (a comparison with NaN is False)."""
        err = (actual.to(torch.float64) - expected.to(torch.float64)).abs()
        bad = ~(err <= atol + rtol * expected.to(torch.float64).abs())
        self.bad_elements += int(bad.sum())
        self.compared += err.numel()
        worst = err.max().item() if err.numel() else 0.0
        self.max_abs_err = worst if math.isnan(worst) else max(self.max_abs_err, worst)


def _sample_chunks(n: int, per_sample: int):
    step = max(1, REFERENCE_CHUNK_ELEMENTS // max(1, per_sample))
    for start in range(0, n, step):
        yield start, min(n, start + step)


# float64 references of the activations the suite fuses (GroupNorm's output, then these).
REFERENCE_ACTIVATIONS = {"silu": F.silu, "gelu": F.gelu, "relu": F.relu, "mish": F.mish}


def check_against_float64(out: torch.Tensor, x: torch.Tensor, groups: int, weight, bias, eps: float,
                          activation: str | None = None) -> Agreement:
    """Compare `out` (N, C, *) with GroupNorm of x (then `activation`) in float64, a few samples at a time on
    x's device; any memory format (elements are compared by index)."""
    atol, rtol = REFERENCE_TOLERANCES[x.dtype]
    act = REFERENCE_ACTIVATIONS[activation] if activation is not None else None
    w64 = None if weight is None else weight.to(torch.float64)
    b64 = None if bias is None else bias.to(torch.float64)
    agreement = Agreement()
    per_sample = x[0].numel() if x.shape[0] else 0
    for start, stop in _sample_chunks(x.shape[0], per_sample):
        ref = F.group_norm(x[start:stop].to(torch.float64), groups, w64, b64, eps)
        if act is not None:
            ref = act(ref)
        agreement.add(out[start:stop], ref, atol, rtol)
        del ref
    return agreement


# Gradients against float64: max |grad - ref| <= tol * max(1, max |ref|). Scaled by the largest reference
# value because dweight and dbias are sums over N*HW terms (values in the thousands at large shapes).
GRADIENT_TOLERANCES = {torch.float64: 1e-10, torch.float32: 1e-4, torch.float16: 1e-2, torch.bfloat16: 5e-2}


def check_gradients_against_float64(grads, x, weight, bias, dy, groups: int, eps: float) -> tuple[bool, float, str]:
    """Compare (dx, dweight, dbias) with float64 autograd of GroupNorm, a few samples at a time.

    Returns (all within tolerance, max |dx - ref|, a note naming the gradients that are not)."""
    dx, dweight, dbias = grads
    tol = GRADIENT_TOLERANCES[x.dtype]
    w64 = weight.detach().to(torch.float64).requires_grad_()
    b64 = bias.detach().to(torch.float64).requires_grad_()
    dweight64 = torch.zeros_like(w64, requires_grad=False)  # (C,), summed over the chunks
    dbias64 = torch.zeros_like(b64, requires_grad=False)
    dx_err, dx_scale = 0.0, 1.0
    per_sample = x[0].numel() if x.shape[0] else 0
    for start, stop in _sample_chunks(x.shape[0], per_sample):
        x64 = x[start:stop].detach().to(torch.float64).requires_grad_()
        y64 = F.group_norm(x64, groups, w64, b64, eps)
        gx, gw, gb = torch.autograd.grad(y64, (x64, w64, b64), dy[start:stop].to(torch.float64))
        dx_err = max(dx_err, (dx[start:stop].to(torch.float64) - gx).abs().max().item())
        dx_scale = max(dx_scale, gx.abs().max().item())
        dweight64 += gw
        dbias64 += gb
        del x64, y64, gx
    failed = []
    if not dx_err <= tol * dx_scale:
        failed.append(f"dx err {dx_err:.3g} > {tol:g} x {dx_scale:.3g}")
    for name, got, ref in (("dweight", dweight, dweight64), ("dbias", dbias, dbias64)):
        err = (got.to(torch.float64) - ref).abs().max().item()
        scale = max(1.0, ref.abs().max().item())
        if not err <= tol * scale:
            failed.append(f"{name} err {err:.3g} > {tol:g} x {scale:.3g}")
    return not failed, dx_err, "; ".join(failed)


def check_against(out: torch.Tensor, expected: torch.Tensor, dtype: torch.dtype) -> Agreement:
    """Compare two outputs of the same shape (ours against eager) with KernelBench's tolerance."""
    atol, rtol = EAGER_TOLERANCES[dtype]
    agreement = Agreement()
    if out.shape != expected.shape:
        agreement.bad_elements, agreement.max_abs_err = max(1, out.numel()), float("inf")
        return agreement
    n = out.shape[0]
    per_sample = out[0].numel() if n else 0
    for start, stop in _sample_chunks(n, per_sample):
        agreement.add(out[start:stop], expected[start:stop], atol, rtol)
    return agreement


def kernelbench_margin(out: torch.Tensor, ref: torch.Tensor, tol: float = 1e-4) -> float:
    """max(|out - ref| / (tol + tol*|ref|)): allclose(atol=rtol=tol) passes when this is <= 1."""
    if out.shape != ref.shape:
        return float("inf")
    ref64 = ref.to(torch.float64)
    return ((out.to(torch.float64) - ref64).abs() / (tol + tol * ref64.abs())).max().item()


__all__ = ["Agreement", "REFERENCE_TOLERANCES", "EAGER_TOLERANCES", "check_against_float64", "check_against",
           "check_gradients_against_float64", "kernelbench_margin"]

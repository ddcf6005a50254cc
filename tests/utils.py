"""Comparison helpers for the tests: float64 references and mismatch reports that show where and by how much."""

from __future__ import annotations

import torch
import torch.nn.functional as F

# (atol, rtol) per dtype for a GroupNorm output compared with a float64 reference computed from the same
# (already rounded) input values. fp16/bf16 outputs are rounded once to their format (2^-11, 2^-8 relative).
TOLERANCES = {
    torch.float64: (1e-10, 1e-10),
    torch.float32: (1e-5, 1e-5),
    torch.float16: (2e-3, 2e-3),
    torch.bfloat16: (1.6e-2, 1.6e-2),
}


def reference_group_norm(x, num_groups, weight=None, bias=None, eps=1e-5):
    """float64 GroupNorm of x (any layout, any float dtype), computed on the CPU; returns float64."""
    x64 = x.detach().to("cpu", torch.float64)
    w64 = None if weight is None else weight.detach().to("cpu", torch.float64)
    b64 = None if bias is None else bias.detach().to("cpu", torch.float64)
    return F.group_norm(x64, num_groups, w64, b64, eps)


def assert_close_report(actual, expected, atol, rtol, what="output", max_report=8):
    """Assert |actual - expected| <= atol + rtol * |expected| elementwise (NaN never passes); on failure the
    message lists the first mismatching indices with both values and the worst error."""
    actual = actual.detach().to("cpu", torch.float64)
    expected = expected.detach().to("cpu", torch.float64)
    assert actual.shape == expected.shape, f"{what}: shape {tuple(actual.shape)} != expected {tuple(expected.shape)}"
    err = (actual - expected).abs()
    bad = ~(err <= atol + rtol * expected.abs())  # NaN compares False, so it is caught here
    if bad.any():
        idx = bad.nonzero()[:max_report]
        rows = [f"  at {tuple(i.tolist())}: got {actual[tuple(i)].item():.8g}, expected {expected[tuple(i)].item():.8g}"
                for i in idx]
        finite = err[~torch.isnan(err)]
        worst = finite.max().item() if finite.numel() else float("nan")
        raise AssertionError(
            f"{what}: {int(bad.sum())} of {bad.numel()} elements outside atol={atol:g}, rtol={rtol:g} "
            f"(max abs error {worst:.3g}); first mismatches:\n" + "\n".join(rows))


def poisoned_like(t: torch.Tensor) -> torch.Tensor:
    """A tensor of t's shape and dtype filled with NaN, to detect elements a kernel never writes."""
    return torch.full_like(t, float("nan"))

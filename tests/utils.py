"""Comparison helpers for the tests: float64 references and mismatch reports that show where and by how much."""

from __future__ import annotations

import torch
import torch.nn.functional as F

# (atol, rtol) per dtype for a GroupNorm output compared with a float64 reference computed from the same
# (already rounded) input values. Normalised outputs are O(1), so atol and rtol play the same role:
# - float64: 1e-10, far above the ~1e-16 rounding of a float64 computation, far below any real mistake.
# - float32: 1e-5 = ~170 float32 ulps at 1.0: the output's own rounding (6e-8) plus statistics accumulated in
#   float32 pieces over up to ~2^31 elements (relative error of rstd ~1e-7 here). A skipped or doubled element
#   moves y by O(1); an unbiased variance moves y by |y| / (2D), caught for slices of D <= ~5e4 elements.
# - float16: 2e-3 = 4 half-ulps at 1.0 (output rounding alone is 2^-11 = 4.9e-4 relative).
# - bfloat16: 1.6e-2 = 4 half-ulps at 1.0 (output rounding alone is 2^-8 = 3.9e-3 relative).
# `group_norm_atol` adds the conditioning term for inputs where |mean| >> std or var << eps.
TOLERANCES = {
    torch.float64: (1e-10, 1e-10),
    torch.float32: (1e-5, 1e-5),
    torch.float16: (2e-3, 2e-3),
    torch.bfloat16: (1.6e-2, 1.6e-2),
}


def reference_group_norm(x, num_groups, weight=None, bias=None, eps=1e-5):
    """float64 GroupNorm of x (any layout, any float dtype), computed on the CPU; returns float64 (NCHW-contiguous).

    Computed on an NCHW copy: PyTorch's CPU channels-last float64 kernel is the less accurate of its two where
    |mean| >> std (16 threads, (1,256,40,40) G32, mean 1e3 std 1.5: off by 2e-9 against a two-pass float64
    GroupNorm, its NCHW kernel by 3.5e-13)."""
    x64 = x.detach().to("cpu", torch.float64).contiguous()
    w64 = None if weight is None else weight.detach().to("cpu", torch.float64)
    b64 = None if bias is None else bias.detach().to("cpu", torch.float64)
    return F.group_norm(x64, num_groups, w64, b64, eps)


def assert_close_report(actual, expected, atol, rtol, what="output", max_report=8):
    """Assert |actual - expected| <= atol + rtol * |expected| elementwise (NaN never passes); on failure the
    message lists the first mismatching indices with both values and the worst error. `atol` is a number or a
    tensor broadcastable to `expected` (a per-element tolerance, see `group_norm_atol`)."""
    actual = actual.detach().to("cpu", torch.float64)
    expected = expected.detach().to("cpu", torch.float64)
    assert actual.shape == expected.shape, f"{what}: shape {tuple(actual.shape)} != expected {tuple(expected.shape)}"
    per_element = isinstance(atol, torch.Tensor)
    if per_element:
        atol = atol.detach().to("cpu", torch.float64).expand(expected.shape)
    allowed = atol + rtol * expected.abs()
    err = (actual - expected).abs()
    bad = ~(err <= allowed)  # NaN compares False, so it is caught here
    if bad.any():
        idx = bad.nonzero()[:max_report]
        rows = [f"  at {tuple(i.tolist())}: got {actual[tuple(i)].item():.8g}, expected {expected[tuple(i)].item():.8g}"
                + (f" (allowed error {allowed[tuple(i)].item():.3g})" if per_element else "")
                for i in idx]
        finite = err[~torch.isnan(err)]
        worst = finite.max().item() if finite.numel() else float("nan")
        atol_text = f"per-element atol (max {atol.max().item():.3g})" if per_element else f"atol={atol:g}"
        raise AssertionError(
            f"{what}: {int(bad.sum())} of {bad.numel()} elements outside {atol_text}, rtol={rtol:g} "
            f"(max abs error {worst:.3g}); first mismatches:\n" + "\n".join(rows))


def poisoned_like(t: torch.Tensor) -> torch.Tensor:
    """A tensor of t's shape and dtype filled with NaN, to detect elements a kernel never writes."""
    return torch.full_like(t, float("nan"))


# Unit roundoff of the type the kernels compute in: float32 for float32/float16/bfloat16 inputs, float64 for
# float64 inputs.
COMPUTE_ROUNDOFF = {torch.float64: 2.0 ** -53, torch.float32: 2.0 ** -24, torch.float16: 2.0 ** -24,
                     torch.bfloat16: 2.0 ** -24}

# Statistics (mean, rstd) against float64: rstd within this relative error, mean within this fraction of the
# slice's std sqrt(var + eps) (plus the rounding of the stored mean). float32 accumulation of a well-conditioned
# sum of up to 2^31 values stays well inside 1e-5; a naive E[x^2] - E[x]^2 does not when |mean| >> std.
STATS_RTOL = {torch.float64: 1e-10, torch.float32: 1e-5, torch.float16: 1e-5, torch.bfloat16: 1e-5}


def reference_stats(x, num_groups, eps=1e-5):
    """float64 (mean, rstd) of each (n, g) slice of x, each (N, G), on the CPU; biased variance as nn.GroupNorm."""
    n = x.shape[0]
    slices = x.detach().to("cpu", torch.float64).reshape(n, num_groups, -1)
    mean = slices.mean(dim=2)
    var = (slices - mean.unsqueeze(2)).square().mean(dim=2)
    return mean, (var + eps).rsqrt()


def group_norm_atol(x, num_groups, weight=None, bias=None, eps=1e-5):
    """Per-element absolute tolerance (float64, x's shape, CPU) for a GroupNorm output of x's dtype.

    TOLERANCES[dtype] covers the rounding of the output and of the statistics. On top of it comes the
    conditioning of y = x * a + (bias - mean * a), a = rstd * weight, which every fast kernel (PyTorch's too)
    evaluates in its compute type: each product and sum is rounded once, so the error can reach
    ~4u (|x| |a| + |mean| |a| + |bias|) (u: unit roundoff). This is negligible for ordinary data
    (|x| rstd ~ a few) but dominant when |mean| >> std or when var << eps makes rstd ~ 1/sqrt(eps).
    """
    base_atol, _ = TOLERANCES[x.dtype]
    u = COMPUTE_ROUNDOFF[x.dtype]
    n, c = x.shape[0], x.shape[1]
    mean, rstd = reference_stats(x, num_groups, eps)

    def per_channel(t):  # (N, G) -> (N, C)
        return t.repeat_interleave(c // num_groups, dim=1)

    w = torch.ones(c, dtype=torch.float64) if weight is None else weight.detach().to("cpu", torch.float64)
    b = torch.zeros(c, dtype=torch.float64) if bias is None else bias.detach().to("cpu", torch.float64)
    a = (per_channel(rstd) * w).abs()                                   # (N, C)
    fixed = per_channel(mean).abs() * a + b.abs()                       # (N, C)
    x64 = x.detach().to("cpu", torch.float64).reshape(n, c, -1).abs()   # (N, C, HW)
    bound = 4 * u * (x64 * a.unsqueeze(2) + fixed.unsqueeze(2))
    return (base_atol + bound).reshape(x.shape)


def assert_group_norm_close(out, x, num_groups, weight=None, bias=None, eps=1e-5, what="output"):
    """`out` (a GroupNorm of x) against the float64 reference, within TOLERANCES plus the conditioning term of
    `group_norm_atol`; also the shape and dtype of F.group_norm's output."""
    assert out.shape == x.shape, f"{what}: shape {tuple(out.shape)} != input shape {tuple(x.shape)}"
    assert out.dtype == x.dtype, f"{what}: dtype {out.dtype} != input dtype {x.dtype}"
    unwritten = torch.isnan(out)
    if bool(unwritten.any()):  # the inputs of the tests are finite: NaN is poison the kernel never overwrote
        raise AssertionError(f"{what}: {int(unwritten.sum())} of {out.numel()} elements never written (NaN), "
                             f"first at {unwritten.nonzero()[:4].tolist()}")
    _, rtol = TOLERANCES[x.dtype]
    expected = reference_group_norm(x, num_groups, weight, bias, eps)
    assert_close_report(out, expected, group_norm_atol(x, num_groups, weight, bias, eps), rtol, what)


def assert_stats_close(mean, rstd, x, num_groups, eps=1e-5):
    """mean/rstd returned by the operator, each (N, G), against float64 (see STATS_RTOL)."""
    n = x.shape[0]
    acc = torch.float64 if x.dtype == torch.float64 else torch.float32
    for name, t in (("mean", mean), ("rstd", rstd)):
        assert t.shape == (n, num_groups), f"{name}: shape {tuple(t.shape)} != {(n, num_groups)}"
        assert t.dtype == acc, f"{name}: dtype {t.dtype} != {acc}"
    mean64, rstd64 = reference_stats(x, num_groups, eps)
    rtol = STATS_RTOL[x.dtype]
    assert_close_report(rstd, rstd64, 0.0, rtol, "rstd")
    # The mean's error is judged against the slice's spread (1 / rstd), plus the rounding of storing it.
    assert_close_report(mean, mean64, rtol / rstd64, 2 * COMPUTE_ROUNDOFF[x.dtype], "mean")


def assert_bitwise_equal(actual, expected, what="tensor"):
    """Same shape, dtype and bits in every element (NaN and -0.0 included); the layouts may differ."""
    assert actual.shape == expected.shape and actual.dtype == expected.dtype, \
        f"{what}: {actual.dtype}{tuple(actual.shape)} != {expected.dtype}{tuple(expected.shape)}"
    size = actual.element_size()
    as_bytes = [t.contiguous().reshape(-1).view(torch.uint8).reshape(-1, size) for t in (actual, expected)]
    differs = (as_bytes[0] != as_bytes[1]).any(dim=1)  # per element, flat index
    if bool(differs.any()):
        first = [tuple(torch.unravel_index(i, actual.shape)) for i in differs.nonzero()[:4, 0]]
        raise AssertionError(f"{what} changed: {int(differs.sum())} elements differ, first at "
                             f"{[tuple(int(k) for k in idx) for idx in first]}")


def poison_cuda_allocator(nbytes: int, copies: int = 3, device=None) -> None:
    """Leave `copies` freed blocks of `nbytes` bytes filled with 0xFF in the CUDA caching allocator.

    0xFF bytes are NaN in every float dtype (float64/32/16, bfloat16), so a kernel output taken from these blocks
    by `empty_like` keeps NaN wherever the kernel does not write. Several copies, because the operator may
    allocate a temporary (e.g. a contiguous copy of the input) of the same size before its output.
    """
    blocks = [torch.full((nbytes,), 0xFF, dtype=torch.uint8, device=device or "cuda") for _ in range(copies)]
    del blocks  # back to the caching allocator, not to the driver: the next allocations reuse them
    torch.cuda.synchronize(device)

"""GPU check of the channels-last (NHWC / NDHWC) kernels in one process: build once, correctness, then timings.

    python benchmarks/channels_last_check.py [--out DIR] [--small] [--no-compile] [--no-bwd]

1. Forward correctness: channels-last inputs of random values (never zeros; some with mean 1e4 * std), every
   dtype, affine or not, no activation / SiLU / GELU / leaky_relu; the caching allocator is left holding
   NaN-filled blocks before each call so that an element never written stays NaN. Output, mean and rstd
   against float64 (F.group_norm in float64 on the GPU, then the activation), with the tolerance of
   tests/utils.group_norm_atol (dtype tolerance plus the conditioning term of |x| a + |mean| a + |b|).
2. Backward correctness: grad_input, grad_weight, grad_bias against float64 autograd of the same composite,
   error relative to (1 + max |reference|).
3. Timings (CUDA events, medians, L2 flushed before each call when the working set is under 200 MB): ours,
   eager F.group_norm, torch.compile of it and a plain copy of the same tensor (channels-last in and out);
   ratios ours/copy, eager/ours, compile/ours. Then training steps (forward + backward through autograd,
   grads of input, weight and bias) for ours, eager and compile.
`--small` runs a few small cases only, forward and backward (for compute-sanitizer). The log is written to
DIR/channels_last_check.txt (DIR: --out, else $OUT, else nothing).
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

LOG: list[str] = []
FWD_TOL = {torch.float32: 1e-5, torch.float64: 1e-10, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}
BWD_TOL = {torch.float32: 1e-4, torch.float64: 1e-9, torch.float16: 1e-2, torch.bfloat16: 6e-2}
UNIT_ROUNDOFF = {torch.float64: 2.0 ** -53}  # float32 compute for every other dtype
ACTS = [(None, None), ("silu", None), ("gelu", None), ("leaky_relu", {"negative_slope": 0.2})]


def log(msg: str = "") -> None:
    print(msg, flush=True)
    LOG.append(msg)


def cl(x: torch.Tensor) -> torch.Tensor:
    return x.contiguous(memory_format=torch.channels_last if x.dim() == 4 else torch.channels_last_3d)


def poison(nbytes: int, copies: int = 3) -> None:
    """Leave `copies` 0xFF-filled blocks (NaN in every float dtype) in the caching allocator."""
    blocks = [torch.full((nbytes + 4096,), 0xFF, dtype=torch.uint8, device="cuda") for _ in range(copies)]
    del blocks


def make_input(shape, dtype, mean=0.3, std=1.7):
    return cl((mean + std * torch.randn(shape, device="cuda", dtype=torch.float64)).to(dtype))


def make_params(C, dtype, affine):
    if not affine:
        return None, None
    return ((1 + 0.5 * torch.randn(C, device="cuda", dtype=torch.float64)).to(dtype),
            (0.5 * torch.randn(C, device="cuda", dtype=torch.float64)).to(dtype))


def act_ref(z, act, params):
    from groupnorm_inline import activations
    code, alpha, beta = activations.resolve(act, params)
    return activations.reference(z, code, alpha, beta)


def check_forward(gn, shape, G, dtype, affine=True, act=None, params=None, mean=0.3, std=1.7) -> bool:
    x = make_input(shape, dtype, mean, std)
    w, b = make_params(shape[1], dtype, affine)
    before = x.clone(memory_format=torch.preserve_format)
    poison(x.numel() * x.element_size())
    y, m, r = gn.group_norm_with_stats(x, G, w, b, 1e-5, activation=act, activation_params=params)
    torch.cuda.synchronize()
    x64 = x.double()
    w64 = None if w is None else w.double()
    b64 = None if b is None else b.double()
    ref = act_ref(F.group_norm(x64, G, w64, b64, 1e-5), act, params)
    N, C = shape[0], shape[1]
    xs = x64.reshape(N, G, -1)
    var, mu = torch.var_mean(xs, dim=2, unbiased=False)
    rstd = (var + 1e-5).rsqrt()
    u = UNIT_ROUNDOFF.get(dtype, 2.0 ** -24)
    a = rstd.repeat_interleave(C // G, dim=1) * (1.0 if w is None else w64.abs())                     # (N, C)
    fixed = mu.abs().repeat_interleave(C // G, dim=1) * a + (0.0 if b is None else b64.abs())
    view = (N, C) + (1,) * (len(shape) - 2)
    tol = FWD_TOL[dtype] * (1 + ref.abs()) + 4 * u * (x64.abs() * a.view(view) + fixed.view(view))
    if act is not None:
        tol = 2 * tol
    nan = int(torch.isnan(y).sum())
    err = (y.double() - ref).abs()
    bad = int((~(err <= tol)).sum())
    stats_ok = bool(((m.double() - mu).abs() <= 1e-5 / rstd + 2 * torch.finfo(m.dtype).eps * mu.abs()).all()) and \
        bool(((r.double() - rstd).abs() <= 1e-5 * rstd).all())
    layout_ok = y.is_contiguous(memory_format=torch.channels_last if len(shape) == 4 else torch.channels_last_3d)
    ok = bad == 0 and nan == 0 and stats_ok and layout_ok and torch.equal(x, before)
    if not ok:
        idx = (~(err <= tol)).nonzero()[:4].tolist()
        log(f"FAIL fwd {str(shape):22s} G={G} {dtype} affine={affine} act={act} mean={mean:g}: {bad} bad, nan={nan}, "
            f"max err {err.max().item():.3e}, stats_ok={stats_ok}, layout_ok={layout_ok}, first {idx}")
    return ok


def check_backward(gn, shape, G, dtype, affine=True, act=None, params=None, mean=0.3, std=1.7) -> bool:
    x = make_input(shape, dtype, mean, std).requires_grad_()
    w, b = make_params(shape[1], dtype, affine)
    leaves = [x] + ([w.requires_grad_(), b.requires_grad_()] if affine else [])
    grad = make_input(shape, dtype, 0.0, 1.0)
    poison(x.numel() * x.element_size())
    out = gn.group_norm(x, G, w, b, 1e-5, activation=act, activation_params=params)
    ours = torch.autograd.grad(out, leaves, grad)
    torch.cuda.synchronize()
    ref_leaves = [t.detach().double().requires_grad_() for t in leaves]
    ref = act_ref(F.group_norm(ref_leaves[0], G, *(ref_leaves[1:] if affine else (None, None)), 1e-5), act, params)
    theirs = torch.autograd.grad(ref, ref_leaves, grad.double())
    ok = True
    tol = BWD_TOL[dtype]
    for name, a, e in zip(("dx", "dw", "db"), ours, theirs):
        err = (a.double() - e).abs()
        allowed = tol * (1 + e.abs().max().item()) + tol * e.abs()
        nan = int(torch.isnan(a).sum())
        if nan or not bool((err <= allowed).all()):
            ok = False
            log(f"FAIL bwd {name} {str(shape):22s} G={G} {dtype} affine={affine} act={act} mean={mean:g}: "
                f"max err {err.max().item():.3e} (allowed {allowed.max().item():.3e}), nan={nan}")
    if not ours[0].is_contiguous(memory_format=torch.channels_last if len(shape) == 4 else torch.channels_last_3d):
        ok = False
        log(f"FAIL bwd {shape}: grad_input strides {ours[0].stride()} not channels-last")
    return ok


def time_fn(fn, iters=20, flush=False):
    flush_buf = torch.empty(256 * 1024 * 1024 // 4, device="cuda") if flush else None
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        if flush_buf is not None:
            flush_buf.fill_(1.0)
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        torch.cuda.synchronize()
        times.append(s.elapsed_time(e))
    return statistics.median(times)


def _name(shape, G, dtype, act):
    return f"{str(tuple(shape)):22s} G={G:<3d} {str(dtype).split('.')[-1]:8s} {act or '':5s}"


def bench_forward(gn, shape, G, dtype, act=None, with_compile=True):
    x = make_input(shape, dtype)
    w, b = make_params(shape[1], dtype, True)
    y = torch.empty_like(x)
    flush = 2 * x.numel() * x.element_size() < 200e6
    silu = act == "silu"

    def eager(t):
        out = F.group_norm(t, G, w, b, 1e-5)
        return F.silu(out) if silu else out

    t_copy = time_fn(lambda: y.copy_(x), flush=flush)
    t_ours = time_fn(lambda: gn.group_norm(x, G, w, b, 1e-5, activation=act), flush=flush)
    t_eager = time_fn(lambda: eager(x), flush=flush)
    t_comp = float("nan")
    if with_compile:
        torch._dynamo.reset()
        comp = torch.compile(eager, dynamic=False)
        t_comp = time_fn(lambda: comp(x), flush=flush)
    mb = x.numel() * x.element_size() / 1e6
    log(f"fwd {_name(shape, G, dtype, act)} {mb:7.1f} MB copy={t_copy * 1e3:8.1f}us ours={t_ours * 1e3:8.1f}us "
        f"eager={t_eager * 1e3:8.1f}us compile={t_comp * 1e3:8.1f}us | ours/copy={t_ours / t_copy:5.2f} "
        f"eager/ours={t_eager / t_ours:5.2f} compile/ours={t_comp / t_ours:5.2f}")
    return t_ours / t_copy, t_eager / t_ours, t_comp / t_ours


def bench_training(gn, shape, G, dtype, act=None, with_compile=True):
    x = make_input(shape, dtype).requires_grad_()
    w, b = make_params(shape[1], dtype, True)
    w.requires_grad_()
    b.requires_grad_()
    grad = make_input(shape, dtype, 0.0, 1.0)
    flush = 4 * x.numel() * x.element_size() < 200e6
    silu = act == "silu"

    def eager(t, w, b):
        out = F.group_norm(t, G, w, b, 1e-5)
        return F.silu(out) if silu else out

    def step(fn):
        return lambda: torch.autograd.grad(fn(x, w, b), (x, w, b), grad)

    ours_fn = lambda t, w, b: gn.group_norm(t, G, w, b, 1e-5, activation=act)  # noqa: E731
    t_ours = time_fn(step(ours_fn), flush=flush)
    t_eager = time_fn(step(eager), flush=flush)
    t_comp = float("nan")
    if with_compile:
        torch._dynamo.reset()
        comp = torch.compile(eager, dynamic=False)
        t_comp = time_fn(step(comp), flush=flush)
    log(f"train {_name(shape, G, dtype, act)} ours={t_ours * 1e3:8.1f}us eager={t_eager * 1e3:8.1f}us "
        f"compile={t_comp * 1e3:8.1f}us | eager/ours={t_eager / t_ours:5.2f} compile/ours={t_comp / t_ours:5.2f}")
    return t_eager / t_ours, t_comp / t_ours


def correctness(gn, small: bool, with_bwd: bool) -> bool:
    ok = True
    if small:
        for shape, G, dtype, act in [((2, 6, 5, 7), 3, torch.float32, None), ((2, 32, 9, 7), 8, torch.float16, "silu"),
                                     ((1, 20, 3, 4, 5), 2, torch.bfloat16, "gelu"), ((1, 3, 7, 5), 1, torch.float64, None),
                                     ((1, 2080, 3, 5), 8, torch.float32, None)]:
            ok &= check_forward(gn, shape, G, dtype, act=act)
            ok &= check_backward(gn, shape, G, dtype, act=act)
        return ok
    shapes = [((2, 3, 5, 7), 1), ((2, 6, 9, 11), 3), ((3, 20, 7, 9), 2), ((2, 32, 7, 9), 8), ((1, 1280, 8, 8), 32),
              ((1, 2080, 3, 5), 8), ((1, 4096, 3, 5), 1), ((40, 16, 4, 4), 4), ((1, 32, 64, 64), 8),
              ((2, 12, 3, 5, 7), 4), ((1, 64, 4, 6, 5), 8), ((2, 320, 128, 128), 32), ((1, 128, 256, 256), 32),
              ((4, 512, 33, 31), 32), ((1, 128, 8, 32, 32), 32)]
    for shape, G in shapes:
        for dtype in (torch.float32, torch.float16, torch.bfloat16, torch.float64):
            for affine in (True, False):
                for act, params in ACTS[:2] if affine else ACTS[:1]:
                    ok &= check_forward(gn, shape, G, dtype, affine, act, params)
            for act, params in ACTS:
                ok &= check_forward(gn, shape, G, dtype, True, act, params) if act in ("gelu", "leaky_relu") else True
                if with_bwd:
                    ok &= check_backward(gn, shape, G, dtype, True, act, params)
            if with_bwd:
                ok &= check_backward(gn, shape, G, dtype, False)
    for shape, G in [((1, 128, 64, 64), 32), ((2, 6, 40, 40), 3), ((1, 64, 3, 4, 50), 1)]:
        for dtype in (torch.float32, torch.float16, torch.bfloat16, torch.float64):
            ok &= check_forward(gn, shape, G, dtype, mean=1e4, std=1.0)
            if with_bwd and dtype in (torch.float32, torch.float64):
                ok &= check_backward(gn, shape, G, dtype, mean=1e4, std=1.0)
    # Large tensors: the grids of the timed rows.
    for shape, G, dtype in [((1, 128, 1024, 1024), 32, torch.float16), ((1, 128, 16, 128, 128), 32, torch.bfloat16),
                            ((8, 512, 64, 64), 32, torch.bfloat16)]:
        ok &= check_forward(gn, shape, G, dtype, act="silu")
        if with_bwd:
            ok &= check_backward(gn, shape, G, dtype)
    return ok


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT"))
    ap.add_argument("--small", action="store_true")
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--no-bwd", action="store_true")
    args = ap.parse_args()
    t0 = time.time()
    import groupnorm_inline as gn
    from groupnorm_inline import extension
    extension.load()
    log(f"device {torch.cuda.get_device_name()} torch {torch.__version__} import+build {time.time() - t0:.1f} s")
    torch.manual_seed(0)
    ok = correctness(gn, args.small, not args.no_bwd)
    log("correctness: " + ("ALL PASS" if ok else "FAILURES"))
    if not args.small:
        compile_ = not args.no_compile
        rows = [((1, 128, 1024, 1024), 32, torch.float16), ((1, 256, 512, 512), 32, torch.float16),
                ((1, 128, 1024, 1024), 32, torch.float32), ((2, 320, 128, 128), 32, torch.float16),
                ((2, 1280, 32, 32), 32, torch.bfloat16), ((8, 512, 64, 64), 32, torch.bfloat16),
                ((1, 128, 16, 128, 128), 32, torch.bfloat16), ((32, 320, 64, 64), 32, torch.float16)]
        fwd = [bench_forward(gn, s, G, dt, with_compile=compile_) for s, G, dt in rows]
        fwd.append(bench_forward(gn, (2, 320, 128, 128), 32, torch.float16, "silu", with_compile=compile_))
        gm = lambda v: math.exp(sum(math.log(x) for x in v) / len(v))  # noqa: E731
        log(f"forward geomean: ours/copy {gm([r[0] for r in fwd]):.2f}, eager/ours {gm([r[1] for r in fwd]):.2f}"
            + (f", compile/ours {gm([r[2] for r in fwd]):.2f}" if compile_ else ""))
        if not args.no_bwd:
            train = [bench_training(gn, (2, 320, 128, 128), 32, torch.float16, with_compile=compile_),
                     bench_training(gn, (2, 320, 128, 128), 32, torch.float16, "silu", with_compile=compile_),
                     bench_training(gn, (2, 1280, 32, 32), 32, torch.bfloat16, with_compile=compile_),
                     bench_training(gn, (8, 512, 64, 64), 32, torch.bfloat16, with_compile=compile_),
                     bench_training(gn, (1, 128, 16, 128, 128), 32, torch.bfloat16, with_compile=compile_)]
            log(f"training geomean: eager/ours {gm([r[0] for r in train]):.2f}"
                + (f", compile/ours {gm([r[1] for r in train]):.2f}" if compile_ else ""))
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "channels_last_check.txt"), "w") as f:
            f.write("\n".join(LOG) + "\n")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

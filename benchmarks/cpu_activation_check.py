"""CPU GroupNorm with a fused activation against eager PyTorch's GroupNorm followed by the activation.

Per row and activation, side by side in this one process (ours and eager alternating loop by loop, medians):

    fwd      no-grad forward: group_norm(x, G, w, b, activation=name) against act(F.group_norm(x, G, w, b))
    fwd+bwd  forward and backward (gradients of x, weight and bias)
    plain    our forward without an activation, for the cost of the epilogue itself

Before timing, each provider's forward is compared with a float64 reference (max abs error printed beside the
times). Rows: maps of diffusion sizes, many slices of short channels ((N, C) features, 2x2 maps), float32 and
bfloat16.

    python benchmarks/cpu_activation_check.py                 # every activation, every row
    python benchmarks/cpu_activation_check.py --quick         # SiLU and GELU on three rows
    python benchmarks/cpu_activation_check.py --threads 1 --activations silu,mish
    python benchmarks/cpu_activation_check.py --rows 2,3 --activations tanh   # indices into ROWS
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

_REPO_ROOT = Path(__file__).resolve().parent.parent
if (_REPO_ROOT / "groupnorm_inline").is_dir():
    sys.path.insert(1, str(_REPO_ROOT))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import groupnorm_inline  # noqa: E402
from groupnorm_inline import activations  # noqa: E402

ROWS = [  # (shape, groups, dtype)
    ((2, 320, 64, 64), 32, torch.float32),
    ((1, 128, 128, 128), 32, torch.bfloat16),
    ((16, 256, 2, 2), 32, torch.float32),
    ((8, 96, 3, 3), 32, torch.bfloat16),
    ((64, 64), 4, torch.float32),
    ((8, 1024), 4, torch.float32),
]
QUICK_ROWS = ROWS[:1] + ROWS[2:3] + ROWS[4:5]


def loop_us(fn, reps: int) -> float:
    start = time.perf_counter()
    for _ in range(reps):
        fn()
    return (time.perf_counter() - start) / reps * 1e6


def side_by_side(fns: dict, reps: int, rounds: int) -> dict:
    """Median us per call of each fn, their loops alternating round by round."""
    for fn in fns.values():
        fn()
    loops = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            loops[name].append(loop_us(fn, reps))
    return {name: statistics.median(v) for name, v in loops.items()}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--activations", default="", help="comma-separated names (default: every one)")
    ap.add_argument("--quick", action="store_true", help="SiLU and GELU on three rows")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--rows", default="", help="comma-separated row indices into ROWS (default: every row)")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    names = [n for n in args.activations.split(",") if n] or (["silu", "gelu"] if args.quick else
                                                               list(activations.ACTIVATIONS))
    rows = QUICK_ROWS if args.quick else ROWS
    if args.rows:
        rows = [ROWS[int(i)] for i in args.rows.split(",")]
    print(f"CPU, torch {torch.__version__}, {torch.get_num_threads()} threads; us per call (medians of "
          f"{args.rounds} alternating loops); err: max abs error of the forward against float64")
    print("| row | activation | fwd ours | fwd eager | ours/eager | fwd+bwd ours | fwd+bwd eager | ours/eager | "
          "plain fwd ours | err ours | err eager |")
    print("|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
    for shape, G, dtype in rows:
        torch.manual_seed(0)
        C = shape[1]
        x = (torch.randn(shape) * 2 + 0.5).to(dtype)
        w, b = torch.randn(C).to(dtype), torch.randn(C).to(dtype)
        g = torch.randn(shape).to(dtype)
        numel = x.numel()
        reps = max(2, min(2000, 2_000_000 // numel))
        for name in names:
            act = activations.ACTIVATIONS[name]
            alpha, beta = (dict(act.params).get(k, 0.0) for k in ("negative_slope", "max_val"))
            alpha = dict(act.params).get("min_val", alpha)

            def module(z, act=act, alpha=alpha, beta=beta):  # eager PyTorch's activation, default parameters
                return act.torch_fn(z, alpha, beta)

            ref = module(F.group_norm(x.double(), G, w.double(), b.double()))
            ours_out = groupnorm_inline.group_norm(x, G, w, b, activation=name)
            eager_out = module(F.group_norm(x, G, w, b))
            err_ours = (ours_out.double() - ref).abs().max().item()
            err_eager = (eager_out.double() - ref).abs().max().item()
            xl, wl, bl = (t.detach().clone().requires_grad_() for t in (x, w, b))

            def ours_fwd():
                with torch.no_grad():
                    return groupnorm_inline.group_norm(x, G, w, b, activation=name)

            def eager_fwd():
                with torch.no_grad():
                    return module(F.group_norm(x, G, w, b))

            def plain_fwd():
                with torch.no_grad():
                    return groupnorm_inline.group_norm(x, G, w, b)

            def ours_step():
                return torch.autograd.grad(groupnorm_inline.group_norm(xl, G, wl, bl, activation=name),
                                           (xl, wl, bl), g)

            def eager_step():
                return torch.autograd.grad(module(F.group_norm(xl, G, wl, bl)), (xl, wl, bl), g)

            t = side_by_side({"of": ours_fwd, "ef": eager_fwd, "pf": plain_fwd}, reps, args.rounds)
            s = side_by_side({"os": ours_step, "es": eager_step}, max(1, reps // 3), args.rounds)
            print(f"| {tuple(shape)} G{G} {str(dtype).split('.')[-1]} | {name} | {t['of']:.1f} | {t['ef']:.1f} | "
                  f"{t['of'] / t['ef']:.2f}x | {s['os']:.1f} | {s['es']:.1f} | {s['os'] / s['es']:.2f}x | "
                  f"{t['pf']:.1f} | {err_ours:.1e} | {err_eager:.1e} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

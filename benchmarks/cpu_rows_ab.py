"""CPU: ours against PyTorch on rows given on the command line, the two called alternately in one loop.

Each row is "N,C,H,W:groups:dtype:mode" (any rank from 2 up; dtype fp32, bf16, fp16, fp64), mode one of
    fwd     forward, NCHW                      cl      forward, channels-last (4-D) / channels_last_3d (5-D)
    silu    forward + SiLU (ours fused, PyTorch's GroupNorm then SiLU); clsilu: channels-last
    bwd     backward alone (autograd.grad of input, weight, bias through a saved graph); clbwd: channels-last
    fb      forward + backward;                 clfb: channels-last
    MODE+ACT  bwd, clbwd, fb or clfb with a fused activation (e.g. bwd+tanh): ours fused against PyTorch's
            GroupNorm then the same activation (ACT: one of the package's activation names)
Prints the median time of each over --reps calls (ours, PyTorch, ours, PyTorch, ... after 5 warm-up calls each)
and their ratio (ours / PyTorch: < 1, ours faster). The alternation is what makes a ratio meaningful on a noisy
machine: a burst of load slows both. Random problems (random_rows.py) call each provider once per round, so at
many threads a call can find the thread pool asleep; rows it flags are re-timed here.

    python benchmarks/cpu_rows_ab.py --threads 2 64,40,2,4:1:fp32:cl 32,128,3,2:32:fp32:clbwd

The script imports the package of the checkout it sits in (its folder goes first on sys.path, before PYTHONPATH):
to time another version, run that version's copy of the script (copy it into the other checkout if it has none).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout this script sits in

import groupnorm_inline  # noqa: E402

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16, "fp64": torch.float64}
MODES = ("fwd", "cl", "silu", "clsilu", "bwd", "clbwd", "fb", "clfb")
ACT_MODES = ("bwd", "clbwd", "fb", "clfb")
# PyTorch's own activation after its GroupNorm, by the package's names
TORCH_ACTS = {"silu": F.silu, "gelu": F.gelu, "gelu_tanh": lambda t: F.gelu(t, approximate="tanh"), "relu": F.relu,
              "leaky_relu": F.leaky_relu, "mish": F.mish, "hardswish": F.hardswish, "hardtanh": F.hardtanh,
              "sigmoid": torch.sigmoid, "tanh": torch.tanh}


def parse_row(row: str):
    shape, groups, dtype, mode = row.split(":")
    mode, _, act = mode.partition("+")
    if mode not in MODES:
        raise SystemExit(f"unknown mode {mode!r} in {row!r} (one of {', '.join(MODES)})")
    if act and (mode not in ACT_MODES or act not in TORCH_ACTS):
        raise SystemExit(f"{mode}+{act} in {row!r}: an activation ({', '.join(TORCH_ACTS)}) goes with "
                         f"{', '.join(ACT_MODES)} only")
    dims = tuple(int(s) for s in shape.split(","))
    if mode.startswith("cl") and len(dims) not in (4, 5):
        raise SystemExit(f"{mode} in {row!r}: channels-last takes a 4-D or 5-D shape, not {len(dims)}-D")
    return dims, int(groups), DTYPES[dtype], mode, act or None


def make_calls(shape, groups, dtype, mode, act=None):
    """(ours, PyTorch's): two argument-less callables doing the same work."""
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(shape, generator=gen, dtype=torch.float64).to(dtype)
    if mode.startswith("cl"):
        x = x.contiguous(memory_format=torch.channels_last if len(shape) == 4 else torch.channels_last_3d)
    w = torch.randn(shape[1], generator=gen, dtype=torch.float64).to(dtype)
    b = torch.randn(shape[1], generator=gen, dtype=torch.float64).to(dtype)
    kind = mode[2:] if mode.startswith("cl") else mode
    if kind in ("", "fwd"):
        return (lambda: groupnorm_inline.group_norm(x, groups, w, b)), (lambda: F.group_norm(x, groups, w, b))
    if kind == "silu":
        return (lambda: groupnorm_inline.group_norm(x, groups, w, b, activation="silu"),
                lambda: F.silu(F.group_norm(x, groups, w, b)))
    xr, wr, br = (t.clone().requires_grad_() for t in (x, w, b))
    # dy in the input's layout, as the layer after a channels-last GroupNorm hands it back (an NCHW dy would add a
    # transposing copy to both sides' backward)
    dy = torch.randn(shape, generator=gen, dtype=torch.float64).to(dtype).contiguous(
        memory_format=torch.channels_last if mode.startswith("cl") and len(shape) == 4
        else torch.channels_last_3d if mode.startswith("cl") else torch.contiguous_format)

    def ours_fwd():
        return groupnorm_inline.group_norm(xr, groups, wr, br, activation=act)

    def ref_fwd():
        y = F.group_norm(xr, groups, wr, br)
        return TORCH_ACTS[act](y) if act else y

    if kind == "bwd":
        y_ours, y_ref = ours_fwd(), ref_fwd()
        return (lambda: torch.autograd.grad(y_ours, (xr, wr, br), dy, retain_graph=True),
                lambda: torch.autograd.grad(y_ref, (xr, wr, br), dy, retain_graph=True))
    return (lambda: torch.autograd.grad(ours_fwd(), (xr, wr, br), dy),
            lambda: torch.autograd.grad(ref_fwd(), (xr, wr, br), dy))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("rows", nargs="+")
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's)")
    parser.add_argument("--reps", type=int, default=400)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; us, medians of {args.reps} calls each")
    for row in args.rows:
        ours, ref = make_calls(*parse_row(row))
        for _ in range(5):
            ours()
            ref()
        times_ours, times_ref = [], []
        for _ in range(args.reps):
            start = time.perf_counter()
            ours()
            times_ours.append(time.perf_counter() - start)
            start = time.perf_counter()
            ref()
            times_ref.append(time.perf_counter() - start)
        t_ours, t_ref = statistics.median(times_ours) * 1e6, statistics.median(times_ref) * 1e6
        print(f"{row:34s} ours {t_ours:9.1f}  torch {t_ref:9.1f}  ratio {t_ours / t_ref:5.2f}", flush=True)


if __name__ == "__main__":
    main()

"""Host time of one call, piece by piece: where a small training step spends its CPU time.

    python benchmarks/host_overhead.py            # log to $OUT/host_overhead.txt when OUT is set

A row whose kernels take tens of microseconds is timed by the host: Python, the dispatcher, autograd, the
allocator and the CUDA launch calls. For each row this prints the host time per call (calls queued back to back,
one synchronize at the end: with the GPU idle most of the time that is the CPU's time) of ours and eager, for
the forward alone, the forward under no_grad, the forward + torch.autograd.grad, and our two operators called
directly; then torch.profiler's CPU table of one training step of ours (self CPU time per op and CUDA API call),
which names whatever costs more than a launch.
"""

from __future__ import annotations

import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(__file__))
import groupnorm_inline  # noqa: E402
from groupnorm_inline import extension  # noqa: E402
from report import save_log  # noqa: E402
from timing import host_us_per_call  # noqa: E402

# (shape, groups, dtype, channels_last)
ROWS = [
    ((64, 32, 16, 16), 32, torch.float16, True),
    ((64, 32, 16, 16), 32, torch.float16, False),
    ((2, 320, 128, 128), 32, torch.float16, False),
    ((2, 320, 128, 128), 32, torch.bfloat16, True),
    ((2, 640, 64, 64), 32, torch.bfloat16, False),
    ((8, 320, 64, 64), 32, torch.float32, False),
    # Flagged by random rows of seed 20261204 (H200): a 2-D training step of 40 KB, 0.132 ms against eager's 0.110.
    ((64, 320), 32, torch.float16, False),
    ((16, 160), 16, torch.float64, False),
]
LOG: list[str] = []


def log(text: str = "") -> None:
    print(text, flush=True)
    LOG.append(text)


def row_functions(shape, groups, dtype, cl):
    x = torch.randn(shape, device="cuda", dtype=dtype) * 1.7 + 0.3
    if cl:
        x = x.contiguous(memory_format=torch.channels_last)
    w = (torch.randn(shape[1], device="cuda", dtype=dtype) * 0.5 + 1).requires_grad_()
    b = (torch.randn(shape[1], device="cuda", dtype=dtype) * 0.5).requires_grad_()
    x.requires_grad_()
    dy = torch.randn_like(x)
    ops = extension.load()
    with torch.no_grad():
        _, mean, rstd = ops.group_norm_forward.default(x, groups, w, b, 1e-5, 0, 0.0, 0.0)

    def ours_train():
        y = groupnorm_inline.group_norm(x, groups, w, b)
        return torch.autograd.grad(y, (x, w, b), dy)

    def eager_train():
        y = F.group_norm(x, groups, w, b)
        return torch.autograd.grad(y, (x, w, b), dy)

    def ours_no_grad():
        with torch.no_grad():
            return groupnorm_inline.group_norm(x, groups, w, b)

    def eager_no_grad():
        with torch.no_grad():
            return F.group_norm(x, groups, w, b)

    def op_forward():
        with torch.no_grad():
            return ops.group_norm_forward.default(x, groups, w, b, 1e-5, 0, 0.0, 0.0)

    def op_backward():
        with torch.no_grad():
            return ops.group_norm_backward.default(dy, x, mean, rstd, w, groups, [True, True, True], None, 0, 0.0,
                                                   0.0)

    y_ours = groupnorm_inline.group_norm(x, groups, w, b)
    y_eager = F.group_norm(x, groups, w, b)
    return {
        "ours fwd+grad": ours_train,
        "eager fwd+grad": eager_train,
        "ours fwd (grad on)": lambda: groupnorm_inline.group_norm(x, groups, w, b),
        "eager fwd (grad on)": lambda: F.group_norm(x, groups, w, b),
        "ours fwd no_grad": ours_no_grad,
        "eager fwd no_grad": eager_no_grad,
        "ours autograd.grad alone": lambda: torch.autograd.grad(y_ours, (x, w, b), dy, retain_graph=True),
        "eager autograd.grad alone": lambda: torch.autograd.grad(y_eager, (x, w, b), dy, retain_graph=True),
        "op group_norm_forward": op_forward,
        "op group_norm_backward": op_backward,
    }


def cpu_table(fn, calls: int = 20) -> str:
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    return prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=25, max_name_column_width=70)


def main() -> None:
    log(f"# host_overhead on {torch.cuda.get_device_name()}, torch {torch.__version__}")
    for shape, groups, dtype, cl in ROWS:
        log(f"\n## {shape} G{groups} {str(dtype)[6:]} {'channels_last' if cl else 'NCHW'}")
        fns = row_functions(shape, groups, dtype, cl)
        for name, fn in fns.items():
            log(f"  {name:28s} {host_us_per_call(fn, calls=300):8.1f} us/call")
        log("  profiler, ours fwd+grad (20 calls):")
        log(cpu_table(fns["ours fwd+grad"]))
        log("  profiler, eager fwd+grad (20 calls):")
        log(cpu_table(fns["eager fwd+grad"]))
    save_log("host_overhead.txt", LOG)


if __name__ == "__main__":
    main()

"""A/B of the resident backward's CTA size, call by call in one process: 512-thread CTAs against 256-thread ones
(GROUPNORM_INLINE_RESIDENT_BWD_THREADS, read by the operator on every call), and the automatic choice (unset).

    python benchmarks/resident_threads_check.py        # log to $OUT/resident_threads_check.txt when OUT is set

For each shape: the backward operator's GPU time (CUDA events, L2 flushed, median of 30 per setting, the two
settings interleaved so that drift hits both alike) and whether both settings give the same gradients. The
shapes are ones the resident path takes, with parts whose shared memory allows 2 or 3 CTAs per SM.
"""

from __future__ import annotations

import os
import statistics
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(__file__))
import groupnorm_inline  # noqa: E402
from groupnorm_inline import extension  # noqa: E402
from report import save_log  # noqa: E402
from timing import L2Flusher  # noqa: E402

ENV = "GROUPNORM_INLINE_RESIDENT_BWD_THREADS"
SHAPES = [  # (shape, groups, dtype): rows the resident path takes, smem-limited at 2 or 3 CTAs per SM
    ((128, 64, 126, 126), 16, torch.float32),
    ((32, 256, 64, 64), 32, torch.float32),
    ((8, 320, 64, 64), 32, torch.float32),
    ((64, 128, 64, 64), 32, torch.float32),
    ((64, 128, 128, 128), 32, torch.bfloat16),
    ((32, 256, 64, 64), 32, torch.bfloat16),
    ((2, 320, 128, 128), 32, torch.float16),
    ((8, 320, 64, 64), 32, torch.float16),
    ((16, 128, 96, 96), 32, torch.float32),
]
LOG: list[str] = []


def log(text: str) -> None:
    print(text, flush=True)
    LOG.append(text)


def set_threads(setting: str) -> None:
    if setting == "auto":
        os.environ.pop(ENV, None)
    else:
        os.environ[ENV] = setting


def main() -> int:
    ops = extension.load()
    flush = L2Flusher(torch.device("cuda"))
    log(f"# resident_threads_check on {torch.cuda.get_device_name()}, torch {torch.__version__}")
    for shape, groups, dtype in SHAPES:
        x = (torch.randn(shape, device="cuda") * 1.3 + 0.2).to(dtype)
        dy = torch.randn(shape, device="cuda").to(dtype)
        w = (torch.rand(shape[1], device="cuda") + 0.5).to(dtype)
        b = (torch.rand(shape[1], device="cuda") - 0.5).to(dtype)
        _, mean, rstd = groupnorm_inline.group_norm_with_stats(x, groups, w, b)

        def call():
            return ops.group_norm_backward.default(dy, x, mean, rstd, w, groups, [True, True, True], None, 0, 0.0,
                                                   0.0)

        times = {"512": [], "256": [], "auto": []}
        results = {}
        for setting in times:  # warm-up and the gradients of each setting
            set_threads(setting)
            results[setting] = [t.float() for t in call()]
            call()
        torch.cuda.synchronize()
        for _ in range(30):
            for setting in times:
                set_threads(setting)
                flush()
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                call()
                end.record()
                torch.cuda.synchronize()
                times[setting].append(start.elapsed_time(end))
        os.environ.pop(ENV, None)
        same = all(torch.allclose(a, c, rtol=1e-3, atol=1e-3 * (c.abs().max().item() + 1))
                   for other in ("256", "auto") for a, c in zip(results[other], results["512"]))
        t512, t256, tauto = (statistics.median(times[k]) for k in ("512", "256", "auto"))
        log(f"{str(shape):22s} G={groups:<3d} {str(dtype)[6:]:9s} 512: {t512:.4f} ms  256: {t256:.4f} ms  "
            f"256/512 = {t256 / t512:.3f}  automatic: {tauto:.4f} ms  gradients agree: {same}")
        del x, dy
        torch.cuda.empty_cache()
    save_log("resident_threads_check.txt", LOG)
    return 0


if __name__ == "__main__":
    sys.exit(main())

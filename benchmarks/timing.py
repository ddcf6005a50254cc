"""Timing and memory measurement for the benchmarks: CUDA events per call, L2 flushed between calls.

The method is KernelBench's: warm up first (the first call may compile), then time each call on its own
between two CUDA events recorded on the current stream, writing a 256 MB buffer before each call when the
working set is small enough to stay in L2 (H100/H200 L2 is 50-60 MB; a set under ~200 MB could partly
survive from one call to the next and flatter the time). The median is the headline number, mean and min
are kept beside it.
"""

from __future__ import annotations

import gc
import math
import statistics
import time
from dataclasses import dataclass
from typing import Callable

import torch

# KernelBench flushes L2 by writing a 256 MB tensor before each timed call.
L2_FLUSH_BYTES = 256 * 1024 * 1024
# Working sets at least this large cannot survive in L2 between calls: no flush needed.
FLUSH_BELOW_BYTES = 200 * 1000 * 1000


@dataclass(frozen=True)
class TimingPlan:
    """How many calls to make: `warmup` untimed, then between `min_iters` and `max_iters` timed calls,
    as many as fit in `target_s` seconds of measured time."""
    warmup: int = 3
    min_iters: int = 20
    max_iters: int = 100
    target_s: float = 1.0

    def iterations_for(self, estimate_ms: float) -> int:
        if estimate_ms <= 0 or not math.isfinite(estimate_ms):
            return self.max_iters
        fitting = int(self.target_s * 1000.0 / estimate_ms)
        return max(self.min_iters, min(self.max_iters, fitting))


DEFAULT_PLAN = TimingPlan()
QUICK_PLAN = TimingPlan(warmup=2, min_iters=20, max_iters=20, target_s=0.2)
CPU_SMOKE_PLAN = TimingPlan(warmup=1, min_iters=5, max_iters=5, target_s=0.05)


@dataclass(frozen=True)
class Timing:
    """Per-call times of one provider, in milliseconds."""
    median_ms: float
    mean_ms: float
    min_ms: float
    iters: int
    l2_flushed: bool


def _summarise(times_ms: list[float], l2_flushed: bool) -> Timing:
    return Timing(statistics.median(times_ms), statistics.fmean(times_ms), min(times_ms), len(times_ms),
                  l2_flushed)


class L2Flusher:
    """Writes a 256 MB buffer so that the next call starts with a cold L2 (allocated once, reused)."""

    def __init__(self, device: torch.device):
        self._buffer = torch.empty(L2_FLUSH_BYTES // 4, dtype=torch.int32, device=device)

    def __call__(self) -> None:
        self._buffer.fill_(0)


def needs_l2_flush(working_set_bytes: int) -> bool:
    return working_set_bytes < FLUSH_BELOW_BYTES


def time_cuda(fn: Callable[[], object], plan: TimingPlan, flusher: L2Flusher | None) -> Timing:
    """Median/mean/min of per-call GPU times of `fn` (CUDA events on the current stream).

    `flusher` (or None) runs before every call, outside the events. Results of `fn` are dropped right
    away so that allocator blocks are reused from call to call, as in a real model.
    """
    for _ in range(plan.warmup):
        fn()
    torch.cuda.synchronize()

    # A short probe to size the run: a 9 ms call gets ~100 calls, a 10 us call the maximum.
    probe_start, probe_end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    if flusher is not None:
        flusher()
    probe_start.record()
    fn()
    probe_end.record()
    torch.cuda.synchronize()
    iters = plan.iterations_for(probe_start.elapsed_time(probe_end))

    starts = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    for start, end in zip(starts, ends):
        if flusher is not None:
            flusher()
        start.record()
        fn()
        end.record()
    torch.cuda.synchronize()
    return _summarise([s.elapsed_time(e) for s, e in zip(starts, ends)], flusher is not None)


def host_us_per_call(fn: Callable[[], object], calls: int = 200, warmup: int = 10) -> float:
    """Microseconds per call of `fn` queued back to back, with one synchronize at the end: where the GPU is idle
    most of the time (small kernels), the host's time per call (Python, dispatch, autograd, launches)."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / calls * 1e6


def time_cpu(fn: Callable[[], object], plan: TimingPlan) -> Timing:
    """Median/mean/min wall time per call of a CPU function (no L2 flush: the CPU smoke mode only checks
    that the pipeline runs end to end, its numbers mean little)."""
    for _ in range(plan.warmup):
        fn()
    probe = time.perf_counter()
    fn()
    iters = plan.iterations_for((time.perf_counter() - probe) * 1000.0)
    times_ms = []
    for _ in range(iters):
        start = time.perf_counter()
        fn()
        times_ms.append((time.perf_counter() - start) * 1000.0)
    return _summarise(times_ms, False)


def peak_extra_memory_bytes(fn: Callable[[], object], result_bytes: int) -> int:
    """Device memory `fn` needs beyond what is already allocated (its inputs) and beyond the `result_bytes`
    it returns: the scratch of one call (peak of `torch.cuda.max_memory_allocated` after a reset)."""
    gc.collect()
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    result = fn()
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated()
    del result
    return peak - before - result_bytes


def free_device_bytes() -> int:
    """Free device memory, counting blocks PyTorch's allocator holds but does not use as free."""
    free, _total = torch.cuda.mem_get_info()
    return free + torch.cuda.memory_reserved() - torch.cuda.memory_allocated()


__all__ = ["TimingPlan", "DEFAULT_PLAN", "QUICK_PLAN", "CPU_SMOKE_PLAN", "Timing", "L2Flusher", "needs_l2_flush",
           "time_cuda", "time_cpu", "peak_extra_memory_bytes", "free_device_bytes", "L2_FLUSH_BYTES"]

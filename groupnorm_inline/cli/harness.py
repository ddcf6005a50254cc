"""The steps of KernelBench's evaluation, as the harness performs them (see the contract in the docs).

Reference and candidate are source strings `exec`'d into one dict; models are built on the CPU under
seed 42 and moved to the device in float32; correctness runs 5 seeded trials on the same input tensors
with `allclose(atol=rtol=1e-4)`; timing uses CUDA events on the current stream with 3 warm-ups and
100 trials (plus one discarded), each preceded by a synchronize and a 256 MB write that flushes L2.
`device="cpu"` runs the same steps on the CPU (timing by perf_counter, no L2 flush) for smoke runs.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field

import torch

HARNESS_SEED = 42
FP32_TOLERANCE = 1e-4
WARMUP_CALLS = 3
DISCARDED_TRIALS = 1
L2_FLUSH_BYTES = 256 * 1024 * 1024
_CHUNK = 1 << 24  # elements per chunk when comparing (keeps temporaries at ~128 MB for #35's 7.5 GB)


class CandidateError(Exception):
    """The candidate could not be loaded or run (the message says which step)."""


def set_seed(seed: int) -> None:
    """KernelBench's set_seed: the CPU generator and the current CUDA device's."""
    torch.manual_seed(seed)
    torch.cuda.manual_seed(seed)


def extensions_dir_prefix(build_dir: str) -> str:
    """The two lines the harness puts before a candidate when it has a build folder."""
    return "import os\n" f"os.environ['TORCH_EXTENSIONS_DIR'] = '{build_dir}'\n"


def load_reference(source: str, context: dict):
    """exec the reference into `context`; returns (Model, get_init_inputs, get_inputs)."""
    exec(compile(source, "<reference>", "exec"), context)
    return context["Model"], context["get_init_inputs"], context["get_inputs"]


def load_candidate(source: str, context: dict, build_dir: str | None):
    """exec the candidate (after the TORCH_EXTENSIONS_DIR prefix) into `context`; returns ModelNew."""
    if build_dir:
        source = extensions_dir_prefix(build_dir) + source
    try:
        code = compile(source, "<candidate>", "exec")
    except SyntaxError as exc:
        raise CandidateError(f"the candidate is not valid Python: {exc}") from None
    try:
        exec(code, context)
    except torch.cuda.OutOfMemoryError:
        raise
    except Exception as exc:  # a build error carries the compiler output
        raise CandidateError(f"the candidate failed to build or load: {type(exc).__name__}: {exc}") from exc
    model_new = context.get("ModelNew")
    if model_new is None:
        raise CandidateError("the candidate defines no ModelNew")
    return model_new


def to_device(value, device: str, dtype: torch.dtype):
    """The harness moves tensor inputs to the device in the evaluation dtype; other values stay."""
    return value.to(dtype=dtype).to(device=device) if isinstance(value, torch.Tensor) else value


def synchronize(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


@dataclass
class TrialResult:
    seed: int
    passed: bool
    max_abs_diff: float | None = None     # over finite differences
    mismatches: int | None = None         # elements outside atol + rtol * |ref|
    first_mismatch: str | None = None     # index, ours, reference
    inputs_unchanged: bool | None = None
    message: str = ""


def compare_outputs(out: torch.Tensor, ref: torch.Tensor, tol: float) -> tuple[float, int, str | None]:
    """(max abs diff, mismatch count, first mismatch) of the harness's `allclose(ref, out, atol=tol,
    rtol=tol)`: |ref - out| <= tol + tol * |out| (torch.allclose scales rtol by its second argument, the
    candidate's output), chunk by chunk so the temporaries stay small; NaN in either counts as a mismatch."""
    flat_out, flat_ref = out.reshape(-1), ref.reshape(-1)
    worst, count, first = 0.0, 0, None
    for start in range(0, flat_ref.numel(), _CHUNK):
        o = flat_out[start:start + _CHUNK].double()
        r = flat_ref[start:start + _CHUNK].double()
        diff = (o - r).abs()
        bad = ~(diff <= tol + tol * o.abs())
        finite = diff[torch.isfinite(diff)]
        if finite.numel():
            worst = max(worst, finite.max().item())
        n_bad = int(bad.sum().item())
        if n_bad and first is None:
            k = int(bad.nonzero()[0].item())
            index = tuple(torch.unravel_index(torch.tensor(start + k), tuple(ref.shape)))
            first = f"at {tuple(int(i) for i in index)}: ours {o[k].item():.8g}, reference {r[k].item():.8g}"
        count += n_bad
    return worst, count, first


def _bitwise_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    """a (any device) and b (CPU) hold the same bits, compared chunk by chunk on the CPU."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    ints = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[a.element_size()]
    fa, fb = a.reshape(-1), b.reshape(-1)
    for start in range(0, fa.numel(), _CHUNK):
        chunk = fa[start:start + _CHUNK].to("cpu")
        if not torch.equal(chunk.view(ints), fb[start:start + _CHUNK].view(ints)):
            return False
    return True


def correctness_trials(model, model_new, get_inputs, trials: int, device: str, dtype: torch.dtype, tol: float,
                       on_trial=None) -> list[TrialResult]:
    """KernelBench's correctness loop; also checks that ModelNew leaves its inputs unchanged."""
    torch.manual_seed(HARNESS_SEED)
    seeds = [int(torch.randint(0, 2**32 - 1, (1,)).item()) for _ in range(trials)]
    results = []
    for seed in seeds:
        set_seed(seed)
        host_inputs = get_inputs()
        inputs = [to_device(x, device, dtype) for x in host_inputs]
        # What the inputs held before ModelNew ran: the host tensors, or copies where .to() did not copy.
        pristine = [x.to(dtype=dtype).clone() if isinstance(x, torch.Tensor) and device == "cpu"
                    else (x.to(dtype=dtype) if isinstance(x, torch.Tensor) else x) for x in host_inputs]
        del host_inputs
        with torch.no_grad():
            ref = model(*inputs)
            synchronize(device)
            out = model_new(*inputs)
            synchronize(device)
        result = TrialResult(seed=seed, passed=False)
        result.inputs_unchanged = all(_bitwise_equal(x, p) for x, p in zip(inputs, pristine)
                                      if isinstance(x, torch.Tensor))
        if not isinstance(out, torch.Tensor):
            result.message = f"ModelNew returned {type(out).__name__}, the reference a Tensor"
        elif out.shape != ref.shape:
            result.message = f"output shape {tuple(out.shape)} != reference {tuple(ref.shape)}"
        else:
            result.max_abs_diff, result.mismatches, result.first_mismatch = compare_outputs(out, ref, tol)
            if result.mismatches:
                result.message = (f"{result.mismatches} of {ref.numel()} elements differ beyond atol=rtol={tol:g} "
                                  f"(max abs diff {result.max_abs_diff:.3g}); first {result.first_mismatch}")
            elif not result.inputs_unchanged:
                result.message = "ModelNew modified its input tensors"
            else:
                result.passed = True
        results.append(result)
        if on_trial:
            on_trial(result)
        del ref, out, inputs, pristine
    return results


@dataclass
class TimingResult:
    times_ms: list[float] = field(default_factory=list)
    peak_bytes: int | None = None       # peak allocation during one call, beyond what was allocated before
    scratch_bytes: int | None = None    # the same minus the output: temporaries

    def stats(self) -> dict:
        t = self.times_ms
        return {"mean_ms": statistics.fmean(t), "median_ms": statistics.median(t),
                "std_ms": statistics.pstdev(t), "min_ms": min(t), "max_ms": max(t), "trials": len(t),
                "peak_bytes": self.peak_bytes, "scratch_bytes": self.scratch_bytes}


def flush_l2(device: str) -> None:
    """Write 256 MB, as the harness does before each timed call, so no input stays in L2."""
    if device == "cuda":
        buffer = torch.empty(L2_FLUSH_BYTES // 8, dtype=torch.int64, device=device)
        buffer.fill_(42)
        del buffer


def _output_bytes(out) -> int:
    items = out if isinstance(out, (tuple, list)) else [out]
    return sum(t.numel() * t.element_size() for t in items if isinstance(t, torch.Tensor))


def measure_peak_memory(fn, args, device: str) -> tuple[int | None, int | None]:
    """(peak bytes, scratch bytes) of one call on the GPU; (None, None) on the CPU."""
    if device != "cuda":
        return None, None
    with torch.no_grad():
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        out = fn(*args)
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated() - base
        scratch = peak - _output_bytes(out)
        del out
    return peak, scratch


def time_calls(fn, args, device: str, trials: int, on_call=None) -> TimingResult:
    """The harness's timing loop: warm-ups, then trials + 1 calls (the first discarded), each preceded
    by a synchronize and an L2 flush, timed by CUDA events on the current stream (perf_counter on CPU)."""
    result = TimingResult()
    with torch.no_grad():
        for _ in range(WARMUP_CALLS):
            fn(*args)
            synchronize(device)
            if on_call:
                on_call()
        if device == "cuda":
            torch.cuda.empty_cache()
        for trial in range(trials + DISCARDED_TRIALS):
            synchronize(device)
            flush_l2(device)
            if device == "cuda":
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                fn(*args)
                end.record()
                torch.cuda.synchronize()
                elapsed = start.elapsed_time(end)
            else:
                t0 = time.perf_counter()
                fn(*args)
                elapsed = (time.perf_counter() - t0) * 1e3
            if trial >= DISCARDED_TRIALS:
                result.times_ms.append(elapsed)
            if on_call:
                on_call()
    result.peak_bytes, result.scratch_bytes = measure_peak_memory(fn, args, device)
    return result

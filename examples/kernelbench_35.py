"""KernelBench level 1 #35 (`35_GroupNorm_`), run the way KernelBench's evaluator runs a candidate.

    python examples/kernelbench_35.py                          # GPU, real shape (112, 64, 512, 512): ~23 GB
    python examples/kernelbench_35.py --reference 35_GroupNorm_.py --candidate my_submission.py
    python examples/kernelbench_35.py --small                  # the same flow at a small shape

The steps, in the evaluator's order:
  1. exec the reference source, then the candidate source, into one namespace; take `Model`, `get_inputs`,
     `get_init_inputs` from the reference and `ModelNew` from the candidate (by default the one-line
     candidate `from groupnorm_inline import ModelNew`);
  2. `set_seed(42)`, `get_init_inputs()`; `set_seed(42)`, `Model(*init)` on the CPU; `set_seed(42)`,
     `ModelNew(*init)` on the CPU; both moved to the device in float32;
  3. correctness: `torch.manual_seed(42)`, one seed per trial from `torch.randint(0, 2**32 - 1)`; per trial
     `set_seed(seed)`, `get_inputs()` moved to the device, reference, candidate on the same tensors, exact shape,
     `torch.allclose(atol=rtol=1e-4)`; we also check that the candidate left its inputs unchanged;
  4. timing: `set_seed(42)`, `get_inputs()`; per model 3 warm-up calls, then 1 + N calls (the first discarded),
     each preceded by a synchronize and an L2 flush (a 256 MB write), timed with CUDA events; the mean in ms.

With no GPU visible it runs on the CPU at a small shape (the real one needs ~23 GB for the input and the two
outputs) and times with the wall clock; it says so. Exit status 1 when a correctness trial fails.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

# The package's copy of the KernelBench problem file, and the one-line candidate.
REFERENCE_SOURCE = "from groupnorm_inline.problems.level1_35_group_norm import Model, get_inputs, get_init_inputs\n"
CANDIDATE_SOURCE = "from groupnorm_inline import ModelNew\n"

REAL_SHAPE = (112, 64, 512, 512)
SMALL_SHAPE = (4, 64, 128, 128)     # same channels and groups; 4M elements, 17 MB
SEED = 42
TOLERANCE = 1e-4                    # KernelBench's float32 atol = rtol


def set_seed(seed: int) -> None:
    torch.manual_seed(seed)
    torch.cuda.manual_seed(seed)


def load_problem(reference_src: str, candidate_src: str, build_dir: str | None) -> dict:
    """Exec both sources into one namespace, as the evaluator does; returns that namespace."""
    namespace: dict = {}
    if build_dir:  # what the evaluator prepends to the candidate when it has a build directory
        candidate_src = f"import os\nos.environ['TORCH_EXTENSIONS_DIR'] = {build_dir!r}\n" + candidate_src
    start = time.monotonic()
    exec(compile(reference_src, "<reference>", "exec"), namespace)
    exec(compile(candidate_src, "<candidate>", "exec"), namespace)
    print(f"reference and candidate loaded in {time.monotonic() - start:.1f} s "
          "(the first import of groupnorm_inline on a machine compiles its kernels)")
    for name in ("Model", "get_inputs", "get_init_inputs", "ModelNew"):
        if name not in namespace:
            raise SystemExit(f"error: `{name}` is defined by neither the reference nor the candidate source")
    return namespace


def check_correctness(model, model_new, get_inputs, device: torch.device, trials: int) -> bool:
    torch.manual_seed(SEED)
    seeds = [torch.randint(0, 2**32 - 1, (1,)).item() for _ in range(trials)]
    print(f"correctness: {trials} trials, allclose(atol=rtol={TOLERANCE:g})")
    passed = 0
    for trial, seed in enumerate(seeds, 1):
        set_seed(seed)
        cpu_inputs = get_inputs()
        inputs = [t.to(device) for t in cpu_inputs]
        # Kept to check the candidate does not write into its inputs (on the CPU, `.to` returned the same tensors).
        originals = [t.clone() for t in cpu_inputs] if device.type == "cpu" else cpu_inputs
        with torch.no_grad():
            out = model(*inputs)
            synchronize(device)
            out_new = model_new(*inputs)
            synchronize(device)
        if out_new.shape != out.shape:
            print(f"  trial {trial} (seed {seed}): FAIL, output shape {tuple(out_new.shape)}, "
                  f"expected {tuple(out.shape)}")
            continue
        ok, max_diff = compare(out_new, out)
        unchanged = all(inputs_equal(t, o) for t, o in zip(inputs, originals))
        passed += ok and unchanged
        print(f"  trial {trial} (seed {seed}): {'pass' if ok else 'FAIL'}, max |diff| {max_diff:.3g}, "
              f"inputs {'unchanged' if unchanged else 'MODIFIED'}")
        del out, out_new, inputs
    print(f"correctness: {'PASS' if passed == trials else 'FAIL'} ({passed}/{trials})")
    return passed == trials


def compare(out_new: torch.Tensor, out: torch.Tensor) -> tuple[bool, float]:
    """allclose(atol=rtol=1e-4) and the largest |difference|, one batch row at a time: whole-tensor
    temporaries would add 7.5 GB each at the real shape."""
    ok = all(torch.allclose(a, b, atol=TOLERANCE, rtol=TOLERANCE) for a, b in zip(out_new, out))
    row_max = torch.stack([(a - b).abs().max() for a, b in zip(out_new, out)])
    return ok, row_max.max().item()  # NaN anywhere shows as NaN


def inputs_equal(on_device: torch.Tensor, original: torch.Tensor) -> bool:
    """Compare batch row by batch row, so a 7.5 GB input never needs a second full copy on the host."""
    return all(torch.equal(on_device[i].cpu(), original[i]) for i in range(original.shape[0]))


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_model(model, inputs, device: torch.device, trials: int) -> list[float]:
    """Per-call times in ms: CUDA events after a synchronize and an L2 flush on the GPU, wall clock on the CPU."""
    flush = torch.empty(256 * 1024 * 1024 // 4, dtype=torch.int32, device=device) if device.type == "cuda" else None
    times = []
    with torch.no_grad():
        for _ in range(3):  # warm-up
            model(*inputs)
        for _ in range(trials + 1):
            synchronize(device)
            if flush is not None:
                flush.zero_()
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                model(*inputs)
                end.record()
                torch.cuda.synchronize(device)
                times.append(start.elapsed_time(end))
            else:
                begin = time.perf_counter()
                model(*inputs)
                times.append((time.perf_counter() - begin) * 1e3)
    return times[1:]  # the first timed call is discarded


def enough_gpu_memory(device: torch.device, shape: tuple[int, ...]) -> bool:
    """Input + reference output + candidate output + the flush buffer must fit in free memory."""
    needed = 3 * 4 * torch.Size(shape).numel() + 256 * 2**20
    free, _ = torch.cuda.mem_get_info(device)
    if needed > free:
        print(f"error: the shape {shape} needs about {needed / 2**30:.1f} GiB of GPU memory, "
              f"{free / 2**30:.1f} GiB are free; run with --small for the same flow at {SMALL_SHAPE}")
        return False
    return True


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reference", type=Path, help="a KernelBench problem file to exec instead of the package's copy")
    parser.add_argument("--candidate", type=Path, help="a candidate file to exec instead of the one-line import")
    parser.add_argument("--build-dir", help="set TORCH_EXTENSIONS_DIR in the candidate, as the evaluator does")
    parser.add_argument("--small", action="store_true", help=f"inputs of shape {SMALL_SHAPE} (always on the CPU)")
    parser.add_argument("--trials", type=int, default=5, help="correctness trials (default 5, as KernelBench)")
    parser.add_argument("--timing-trials", type=int, help="timed calls per model (default 100 on the GPU, 10 on the CPU)")
    args = parser.parse_args()

    # The candidate imports the package: make a checkout work without installing it.
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    reference_src = args.reference.read_text() if args.reference else REFERENCE_SOURCE
    candidate_src = args.candidate.read_text() if args.candidate else CANDIDATE_SOURCE

    on_gpu = torch.cuda.is_available()
    device = torch.device("cuda" if on_gpu else "cpu")
    small = args.small or not on_gpu
    shape = SMALL_SHAPE if small else REAL_SHAPE
    timing_trials = args.timing_trials or (100 if on_gpu else 10)
    if on_gpu:
        print(f"KernelBench level 1 #35 on {torch.cuda.get_device_name(device)}, torch {torch.__version__}")
        if not small and not enough_gpu_memory(device, shape):
            return 2
    else:
        print(f"KernelBench level 1 #35 on the CPU (no GPU visible), torch {torch.__version__}: the same flow at "
              f"the small shape {SMALL_SHAPE}; the real shape {REAL_SHAPE} needs ~23 GB and is meant for a GPU")

    ns = load_problem(reference_src, candidate_src, args.build_dir)
    get_inputs = ns["get_inputs"]
    if small:
        def get_inputs():  # noqa: F811  the reference's draw (CPU torch.rand), at the small shape
            return [torch.rand(*shape)]

    set_seed(SEED)
    init_inputs = ns["get_init_inputs"]()
    set_seed(SEED)
    model = ns["Model"](*init_inputs)
    set_seed(SEED)
    model_new = ns["ModelNew"](*init_inputs)
    model = model.to(device=device, dtype=torch.float32)
    model_new = model_new.to(device=device, dtype=torch.float32)
    print(f"init inputs {init_inputs}; input {shape} float32, {torch.Size(shape).numel() * 4 / 1e9:.3g} GB")

    correct = check_correctness(model, model_new, get_inputs, device, args.trials)
    if not correct:
        return 1

    set_seed(SEED)
    inputs = [t.to(device) for t in get_inputs()]
    how = "CUDA events, L2 flushed before each call" if on_gpu else "wall clock"
    print(f"timing: 3 warm-ups, {timing_trials} timed calls per model (+1 discarded), {how}")
    means = {}
    for label, m in (("Model (nn.GroupNorm)", model), ("ModelNew (groupnorm_inline)", model_new)):
        times = time_model(m, inputs, device, timing_trials)
        means[label] = statistics.mean(times)
        print(f"  {label:28s} mean {means[label]:8.3f} ms   median {statistics.median(times):8.3f}   "
              f"min {min(times):8.3f}   max {max(times):8.3f}")
    eager, ours = means.values()
    print(f"speedup of ModelNew over Model: {eager / ours:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())

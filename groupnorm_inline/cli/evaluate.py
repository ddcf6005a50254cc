"""`eval`: replay KernelBench's harness on a problem and report build time, correctness and speed.

The candidate is the problem's export (what a user submits) unless `--file` names another candidate
file. Steps, as the harness runs them: static rules; reference and candidate `exec`'d into one dict
(the candidate after the TORCH_EXTENSIONS_DIR prefix; its build is timed); seeded construction on the
CPU, then `.to(device, float32)`; correctness trials; timing of ours, eager `Model` and
`torch.compile(Model)` one after the other in this process; speedups and peak memory.

`--small` shrinks the module constants (from the problem's recipe) for a quick run; `--device cpu
--small` runs every step on the CPU, a smoke test for machines without a GPU.
"""

from __future__ import annotations

import json
import os
import sys
import time

import torch

from ..problems import ProblemInfo
from . import checker, harness, listing, problem_source, recipes
from .errors import EXIT_ENVIRONMENT, EXIT_FAILED, EXIT_USAGE, CliError
from .progress import Elapsed, Progress

SUSPICIOUS_SPEEDUP = 10.0


def _gb(nbytes: float) -> str:
    return f"{nbytes / 1e9:.1f} GB"


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else "(no message)"


def memory_estimate(reference: str, overrides: dict) -> tuple[int, int]:
    """(input bytes, output bytes) of the reference at its shapes, from a run on the meta device."""
    namespace: dict = {}
    with torch.device("meta"):
        exec(compile(reference, "<reference>", "exec"), namespace)
        namespace.update(overrides)
        inputs = namespace["get_inputs"]()
        in_bytes = sum(t.numel() * t.element_size() for t in inputs if isinstance(t, torch.Tensor))
        try:
            out = namespace["Model"](*namespace["get_init_inputs"]())(*inputs)
            out_bytes = harness._output_bytes(out)
        except Exception:  # an op without a meta kernel: assume an output as large as the input
            out_bytes = in_bytes
    return in_bytes, out_bytes


def _needed_bytes(in_bytes: int, out_bytes: int) -> int:
    """Inputs, the reference's and the candidate's outputs alive together, and the L2 flush buffer."""
    return in_bytes + 2 * out_bytes + harness.L2_FLUSH_BYTES


def _oom_message(info: ProblemInfo, in_bytes: int, out_bytes: int, small: bool, cap_gb: float | None) -> str:
    free, total = torch.cuda.mem_get_info()
    where = f"a cap of {cap_gb:g} GB (--max-memory)" if cap_gb else f"{_gb(total)} on {torch.cuda.get_device_name()}"
    hint = "" if small else "; --small runs reduced shapes"
    return (f"out of GPU memory at the {'reduced' if small else 'real'} shape of {info.key}: it needs about "
            f"{_gb(_needed_bytes(in_bytes, out_bytes))} (input {_gb(in_bytes)}, reference and candidate outputs "
            f"{_gb(out_bytes)} each, L2 flush 0.3 GB), {where}, {_gb(free)} free now{hint}")


def _check_device(args) -> None:
    if args.device == "cpu":
        if not args.small:
            raise CliError("--device cpu runs every step on the CPU, where the real shapes take far too long; "
                           "add --small", EXIT_USAGE)
        return
    if not torch.version.cuda:
        raise CliError(f"eval needs a CUDA GPU, and torch {torch.__version__} is a CPU-only build; "
                       "for a CPU smoke run use --device cpu --small", EXIT_ENVIRONMENT)
    if not torch.cuda.is_available():
        raise CliError("eval needs a CUDA GPU and none is visible (torch.cuda.is_available() is False); "
                       "for a CPU smoke run use --device cpu --small", EXIT_ENVIRONMENT)


def _candidate_source(info: ProblemInfo, args) -> tuple[str, str]:
    """(source, description) of the candidate."""
    if args.file:
        if not os.path.isfile(args.file):
            raise CliError(f"no such candidate file: {args.file}", EXIT_USAGE)
        with open(args.file) as f:
            return f.read(), args.file
    from . import export

    return export.export_source(info), f"the export of {info.key}"


class _Report:
    """Human lines on stdout and the JSON record, filled stage by stage."""

    def __init__(self, info: ProblemInfo, args):
        self.args = args
        self.data: dict = {"problem": {"key": info.key, "file_name": info.file_name}, "passed": False,
                           "error": None}

    def say(self, line: str) -> None:
        print(line, flush=True)

    def write_json(self) -> None:
        if self.args.json:
            with open(self.args.json, "w") as f:
                json.dump(self.data, f, indent=1)


def run(info: ProblemInfo, args) -> int:
    if args.trials < 1 or args.correctness_trials < 1:
        raise CliError("--trials and --correctness-trials must be at least 1", EXIT_USAGE)
    if args.max_memory is not None and args.max_memory <= 0:
        raise CliError("--max-memory must be a positive number of GB", EXIT_USAGE)
    if args.json and not os.path.isdir(os.path.dirname(os.path.abspath(args.json))):
        raise CliError(f"cannot write {args.json}: its folder does not exist", EXIT_USAGE)
    report = _Report(info, args)  # from here on, a failure is also recorded in the JSON file
    try:
        _check_device(args)
        overrides = recipes.recipe_for(info).small_constants if args.small else {}
        _evaluate(info, args, overrides, report)
    except CliError as exc:
        report.data["error"] = exc.message
        report.write_json()
        raise
    report.data["passed"] = True
    report.write_json()
    report.say("result: PASSED")
    return 0


def _evaluate(info: ProblemInfo, args, overrides: dict, report: _Report) -> None:
    from .. import __version__

    device = args.device
    say = report.say
    reference = problem_source.reference_source(info)
    source, described = _candidate_source(info, args)
    device_name = torch.cuda.get_device_name() if device == "cuda" else "CPU"
    report.data.update({"candidate": described, "device": device_name, "small": bool(args.small),
                        "versions": {"groupnorm_inline": __version__, "torch": torch.__version__,
                                     "cuda": torch.version.cuda, "python": sys.version.split()[0]},
                        "date": time.strftime("%Y-%m-%dT%H:%M:%S")})
    say(f"eval {info.key} ({info.file_name}) on {device_name}, torch {torch.__version__}, "
        f"groupnorm_inline {__version__}; candidate: {described}")

    if not args.skip_static_check:
        rules = checker.check_source(source)
        report.data["static_check"] = {"ok": rules.ok, "errors": [str(f) for f in rules.errors],
                                       "warnings": [str(f) for f in rules.warnings]}
        if not rules.ok:
            raise CliError(f"the candidate breaks KernelBench's static rules: {rules.errors[0]}"
                           + (f" (and {len(rules.errors) - 1} more)" if len(rules.errors) > 1 else ""), EXIT_FAILED)
        say(f"static rules: ok ({len(rules.warnings)} warnings)")

    in_bytes, out_bytes = memory_estimate(reference, overrides)
    inputs_text, init_text, _ = listing.reference_shapes(info, overrides)
    report.data["shapes"] = {"inputs": inputs_text, "init_inputs": init_text, "input_bytes": in_bytes,
                             "output_bytes": out_bytes, "estimated_bytes": _needed_bytes(in_bytes, out_bytes)}
    say(f"inputs: {inputs_text} ({_gb(in_bytes)}); init inputs: {init_text}"
        + (f"; needs about {_gb(_needed_bytes(in_bytes, out_bytes))} of GPU memory" if device == "cuda" else ""))

    if device == "cuda" and args.max_memory:
        total = torch.cuda.get_device_properties(0).total_memory
        torch.cuda.set_per_process_memory_fraction(min(1.0, args.max_memory * 1e9 / total))
    try:
        _run_stages(info, args, overrides, reference, source, report)
    except torch.cuda.OutOfMemoryError:
        raise CliError(_oom_message(info, in_bytes, out_bytes, args.small, args.max_memory),
                       EXIT_ENVIRONMENT) from None
    except RuntimeError as exc:  # an OOM surfacing through another layer (e.g. torch.compile)
        if device == "cuda" and "out of memory" in str(exc).lower():
            raise CliError(_oom_message(info, in_bytes, out_bytes, args.small, args.max_memory),
                           EXIT_ENVIRONMENT) from None
        raise


def _run_stages(info, args, overrides, reference, source, report: _Report) -> None:
    from ..jit import env

    device, dtype, say = args.device, torch.float32, report.say
    build_dir = args.build_dir or str(env.cache_root())
    if any(c in build_dir for c in "'\\\n"):
        raise CliError(f"the build folder {build_dir!r} holds a quote, backslash or newline, which the harness's "
                       "TORCH_EXTENSIONS_DIR line cannot carry; pass another --build-dir", EXIT_USAGE)
    os.makedirs(build_dir, exist_ok=True)

    # Construction, in the harness's order: Model is built before the candidate is even loaded.
    context: dict = {}
    Model, get_init_inputs, get_inputs = harness.load_reference(reference, context)
    context.update(overrides)
    harness.set_seed(harness.HARNESS_SEED)
    init_inputs = [harness.to_device(x, device, dtype) for x in get_init_inputs()]
    with torch.no_grad():
        harness.set_seed(harness.HARNESS_SEED)
        model = Model(*init_inputs)

    say(f"build: loading the candidate (TORCH_EXTENSIONS_DIR={build_dir}); a first build takes a minute or more")
    start = time.monotonic()
    try:
        with Elapsed("build", enabled=not args.quiet):
            ModelNew = harness.load_candidate(source, context, build_dir)
    except harness.CandidateError as exc:
        report.data["build"] = {"ok": False, "seconds": round(time.monotonic() - start, 1)}
        raise CliError(str(exc), EXIT_FAILED) from None
    build_s = time.monotonic() - start
    context.update(overrides)  # a candidate may define module constants of its own
    report.data["build"] = {"ok": True, "seconds": round(build_s, 1), "build_dir": build_dir}
    say(f"build: {build_s:.1f} s")

    try:
        with torch.no_grad():
            harness.set_seed(harness.HARNESS_SEED)
            model_new = ModelNew(*init_inputs)
            model = model.to(device=device, dtype=dtype)
            model_new = model_new.to(device=device, dtype=dtype)
    except torch.cuda.OutOfMemoryError:
        raise
    except Exception as exc:
        raise CliError(f"ModelNew(*get_init_inputs()) failed: {type(exc).__name__}: {_first_line(exc)}",
                       EXIT_FAILED) from None
    ref_keys, new_keys = sorted(model.state_dict()), sorted(model_new.state_dict())
    report.data["state_dict_keys_match"] = ref_keys == new_keys
    if ref_keys != new_keys:
        say(f"note: state_dict keys differ from Model's: {new_keys} vs {ref_keys}")

    tol = harness.FP32_TOLERANCE
    progress = Progress("correctness", args.correctness_trials, enabled=not args.quiet)
    with progress:
        try:
            trials = harness.correctness_trials(model, model_new, get_inputs, args.correctness_trials, device, dtype,
                                                tol, on_trial=lambda r: progress.step())
        except torch.cuda.OutOfMemoryError:
            raise
        except Exception as exc:
            raise CliError(f"running the models failed: {type(exc).__name__}: {_first_line(exc)}",
                           EXIT_FAILED) from None
    report.data["correctness"] = {
        "passed": all(t.passed for t in trials), "tolerance": tol,
        "trials": [{"seed": t.seed, "passed": t.passed, "max_abs_diff": t.max_abs_diff, "mismatches": t.mismatches,
                    "inputs_unchanged": t.inputs_unchanged, "message": t.message} for t in trials]}
    failed = [t for t in trials if not t.passed]
    worst = max((t.max_abs_diff for t in trials if t.max_abs_diff is not None), default=float("nan"))
    if failed:
        raise CliError(f"correctness: {len(failed)} of {len(trials)} trials failed; trial seed {failed[0].seed}: "
                       f"{failed[0].message}", EXIT_FAILED)
    say(f"correctness: {len(trials)}/{len(trials)} trials passed at atol=rtol={tol:g} "
        f"(max abs diff {worst:.3g}); inputs unchanged")
    if args.no_timing:
        return

    harness.set_seed(harness.HARNESS_SEED)
    inputs = [harness.to_device(x, device, dtype) for x in get_inputs()]
    candidates = [("ours", model_new), ("eager", model)]
    if not args.no_compile:
        candidates.append(("torch.compile", torch.compile(model, backend="inductor", mode="default")))
    timings = {}
    for name, fn in candidates:
        progress = Progress(f"timing {name}", harness.WARMUP_CALLS + args.trials + harness.DISCARDED_TRIALS,
                            enabled=not args.quiet)
        with progress:
            try:
                timings[name] = harness.time_calls(fn, inputs, device, args.trials, on_call=progress.step).stats()
            except torch.cuda.OutOfMemoryError:
                raise
            except Exception as exc:
                hint = "; --no-compile skips this baseline" if name == "torch.compile" else ""
                raise CliError(f"timing {name} failed: {type(exc).__name__}: {_first_line(exc)}{hint}",
                               EXIT_FAILED) from None
    report.data["timing"] = timings
    method = "CUDA events, L2 flushed" if device == "cuda" else "perf_counter"
    say(f"timing: {args.trials} trials + {harness.DISCARDED_TRIALS} discarded, {harness.WARMUP_CALLS} warm-ups, "
        f"{method}")
    say(f"  {'model':<15}{'mean ms':>10}{'median ms':>11}{'min ms':>9}{'peak MB':>10}{'scratch MB':>12}")
    for name, s in timings.items():
        peak = f"{s['peak_bytes'] / 2**20:.1f}" if s["peak_bytes"] is not None else "-"
        scratch = f"{s['scratch_bytes'] / 2**20:.1f}" if s["scratch_bytes"] is not None else "-"
        say(f"  {name:<15}{s['mean_ms']:>10.4g}{s['median_ms']:>11.4g}{s['min_ms']:>9.4g}{peak:>10}{scratch:>12}")
    ours = timings["ours"]["mean_ms"]
    speedups = {f"vs_{name.replace('torch.', '')}": timings[name]["mean_ms"] / ours
                for name in timings if name != "ours"}
    report.data["speedup"] = speedups
    report.data["suspicious_speedup"] = any(v > SUSPICIOUS_SPEEDUP for v in speedups.values())
    say("speedup (mean): " + ", ".join(f"{v:.2f}x {k.replace('_', ' ')}" for k, v in speedups.items()))
    if report.data["suspicious_speedup"]:
        say(f"warning: a speedup over {SUSPICIOUS_SPEEDUP:g}x; KernelBench flags this as suspicious")

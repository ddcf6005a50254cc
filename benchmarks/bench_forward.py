"""GroupNorm benchmark suite: ours against eager PyTorch, torch.compile, Liger-Kernel and a plain copy.

For every row: check correctness first (each provider against a float64 GroupNorm, ours against eager),
then time ours, eager, torch.compile, Liger-Kernel (when installed and applicable) and the row's traffic
floor in this one process, one after the other. Writes <out>/<device>-<date>.csv, a .png chart and a .md
table, and prints the table.

    python benchmarks/bench_forward.py                      # the forward suite on the GPU
    python benchmarks/bench_forward.py --families all --time-limit 420   # every new family (unet, vae, ...)
    python benchmarks/bench_forward.py --backward --problems  # plus training rows and level-2 problems
    python benchmarks/bench_forward.py --cpu-smoke --families everything --out /tmp/bench   # tiny, on the CPU
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path

# Benchmark the package of this checkout (it need not be installed): the repository root goes on the path
# right after this script's folder, ahead of any installed copy.
_REPO_ROOT = Path(__file__).resolve().parent.parent
if (_REPO_ROOT / "groupnorm_inline").is_dir():
    sys.path.insert(1, str(_REPO_ROOT))

import torch  # noqa: E402

import suite  # noqa: E402
import timing  # noqa: E402
from progress import Progress  # noqa: E402
from report import RunInfo, markdown_table, write_csv  # noqa: E402

DEFAULT_OUT = Path(__file__).resolve().parent / "results"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", help="only rows whose label contains one of these ';'-separated substrings "
                        "(spaces ignored, case-insensitive), e.g. '112,64,512;G32' or '#94'")
    parser.add_argument("--dtypes", help="only these dtypes, e.g. 'fp32,bf16' (fp32, bf16, fp16, fp64)")
    parser.add_argument("--families", help="row families, comma-separated: " + ", ".join(suite.FAMILIES)
                        + "; 'all' = every family but the original forward and training ones, 'everything' ="
                        " all of them (default: forward, plus training with --backward)")
    parser.add_argument("--memory-formats", help="only rows in these memory formats: nchw, channels_last (cl)")
    parser.add_argument("--list-families", action="store_true", help="print the families and their rows, then exit")
    parser.add_argument("--time-limit", type=float, metavar="SECONDS",
                        help="start no row after this many seconds; the rest are recorded as skipped (so one "
                        "device call always ends with its results written)")
    parser.add_argument("--quick", action="store_true", help="20 timed calls per provider, fewer warm-ups")
    parser.add_argument("--backward", action="store_true",
                        help="also time forward+backward and backward alone (needs autograd support)")
    parser.add_argument("--problems", action="store_true",
                        help="also time the level-2 KernelBench problems (ModelNew vs Model vs compile)")
    parser.add_argument("--no-forward", action="store_true",
                        help="leave out the forward rows (to run --backward/--problems on their own)")
    parser.add_argument("--model-kwargs", action="append", metavar="KEY:NAME=VALUE[,...]",
                        help="an extra problem row whose ModelNew gets these keyword arguments, e.g. "
                        "'2/94:gemm=fp32' (repeatable; implies --problems for that problem)")
    parser.add_argument("--no-compile", action="store_true", help="skip the torch.compile baselines")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"output folder (default {DEFAULT_OUT.name}/"
                        " next to this script)")
    parser.add_argument("--cpu-smoke", action="store_true",
                        help="tiny shapes on the CPU, wall-clock timing, no compile: checks the pipeline runs")
    return parser.parse_args(argv)


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def output_stem(out_dir: Path, info: RunInfo) -> Path:
    """<out>/<device-slug>-<date>, with -2, -3, ... when an earlier run of the day already wrote that name."""
    base = f"{_slug(info.device)}-{info.date}"
    stem, n = out_dir / base, 1
    while stem.with_suffix(".csv").exists():
        n += 1
        stem = out_dir / f"{base}-{n}"
    return stem


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if not (args.cpu_smoke or args.list_families) and not torch.cuda.is_available():
        print("no CUDA device is visible: run on a GPU machine, or use --cpu-smoke for the CPU pipeline check",
              file=sys.stderr)
        return 2
    try:
        dtypes = suite.parse_dtypes(args.dtypes)
        variant_rows = suite.parse_model_kwargs(args.model_kwargs)
    except ValueError as error:
        print(error, file=sys.stderr)
        return 2

    table = suite.CPU_SMOKE_FAMILIES if args.cpu_smoke else suite.FAMILIES
    try:
        chosen = suite.parse_families(args.families, table) if args.families else (
            ([] if args.no_forward else [table["forward"]]) + ([table["training"]] if args.backward else []))
        if args.families and args.backward and table["training"] not in chosen:
            chosen.append(table["training"])
        memory_formats = suite.parse_memory_formats(args.memory_formats)
    except ValueError as error:
        print(error, file=sys.stderr)
        return 2
    if args.list_families:
        for family in (chosen if args.families else table.values()):
            print(f"{family.name}: {family.about} ({', '.join(family.directions)})")
            for case in family.rows:
                print(f"    {case.label:40s} {case.about}")
        return 0
    planned = suite.plan_rows(chosen, args.rows, dtypes, memory_formats)
    # (problem key, ModelNew keyword arguments): each selected problem as it is, then the requested variants
    problem_rows = [(key, {}) for key in suite.select_problems(args.rows)] if args.problems else []
    problem_rows += variant_rows
    if not (planned or problem_rows):
        print("no rows selected", file=sys.stderr)
        return 2
    # Imported only now: importing the package builds its kernels the first time (about a minute), which a
    # mistyped option or a machine without a GPU should not cost.
    import runner as suite_runner

    if any(d != "forward" for _, directions in planned for d in directions) and not suite_runner.has_autograd():
        print("groupnorm_inline.group_norm is not differentiable in this build; no training rows", file=sys.stderr)
        planned = [(case, directions) for case, directions in planned if directions == ("forward",)]

    if args.cpu_smoke:
        torch.set_num_threads(1)  # tiny shapes: a thread pool only adds wake-up noise on a busy machine
    plan = (timing.CPU_SMOKE_PLAN if args.cpu_smoke else timing.QUICK_PLAN if args.quick else timing.DEFAULT_PLAN)
    device = torch.device("cpu") if args.cpu_smoke else torch.device("cuda", torch.cuda.current_device())
    info = suite_runner.describe_run(args.cpu_smoke)
    progress = Progress(len(planned) + len(problem_rows))
    training = sum(directions != ("forward",) for _, directions in planned)
    progress.message(f"GroupNorm benchmarks on {info.device}, torch {info.torch}, CUDA {info.cuda}, Liger-Kernel "
                     f"{info.liger_kernel}: {len(planned) - training} forward, {training} training, "
                     f"{len(problem_rows)} problem rows from {', '.join(f.name for f in chosen) or 'no families'}")

    settings = suite_runner.Settings(device, plan, with_compile=not (args.no_compile or args.cpu_smoke))
    runner = suite_runner.SuiteRunner(settings, progress)
    started = time.monotonic()

    def out_of_time() -> bool:
        return args.time_limit is not None and time.monotonic() - started > args.time_limit

    args.out.mkdir(parents=True, exist_ok=True)
    stem = output_stem(args.out, info)

    def write_tables() -> str:
        """The CSV and markdown table of every row so far (rewritten after each row: a run stopped from outside,
        a device call's time limit say, keeps what it measured)."""
        table = markdown_table(info, runner.records)
        write_csv(stem.with_suffix(".csv"), info, runner.records)
        stem.with_suffix(".md").write_text(table + "\n")
        return table

    limit_note = f"skipped: past the suite's time limit of {args.time_limit} s"
    for case, directions in planned:
        if out_of_time():
            runner.skip_row(case, directions, limit_note)
            continue
        if directions == ("forward",):
            runner.forward_row(case)
        else:
            runner.training_row(case, directions)
        write_tables()
    for key, model_kwargs in problem_rows:
        if out_of_time():
            progress.message(f"{key}: {limit_note}")
            continue
        runner.problem_row(key, model_kwargs)
        write_tables()

    table = write_tables()
    print(table)
    written = [stem.with_suffix(".csv"), stem.with_suffix(".md")]
    try:  # the chart is the one part that needs matplotlib: without it, the numbers are still kept
        from plot import plot_results
    except ImportError as error:
        progress.message(f"no chart: {error}; install matplotlib, then run: python benchmarks/plot.py "
                         f"{stem.with_suffix('.csv')}")
    else:
        plot_results(info, runner.records, stem.with_suffix(".png"))
        written.append(stem.with_suffix(".png"))
    progress.message("wrote " + ", ".join(map(str, written)))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""`python -m groupnorm_inline <command>`: KernelBench export and evaluation, configuration, cache.

    list                          the KernelBench problems this package serves, with their shapes
    export PROBLEM [-o FILE]      a self-contained submission file for KernelBench's scripted flow
    check FILE...                 KernelBench's static rules on candidate files
    eval PROBLEM [--trials N]     the KernelBench harness flow: build, correctness, timing vs eager/compile
    show-config                   versions, toolkit, archs, cache folder, build state (builds nothing)
    clear-cache                   remove this package's build folders from the cache root

Expected failures end with one line on stderr and a non-zero exit (see `errors`): 1 the candidate failed,
2 bad arguments, 3 this machine cannot run it. Commands import only what they need: `list`,
`show-config` and `clear-cache` never build the extension.
"""

from __future__ import annotations

import argparse
import os
import sys

from .errors import EXIT_ENVIRONMENT, EXIT_USAGE, CliError


def _problem_info(name: str):
    from ..problems import find

    try:
        return find(name)
    except KeyError as exc:
        raise CliError(exc.args[0], EXIT_USAGE) from None


def _cmd_list(args) -> int:
    from . import listing

    print(listing.problems_table())
    return 0


def _cmd_export(args) -> int:
    from . import export

    info = _problem_info(args.problem)
    text = export.export_source(info)
    if args.output in (None, "-"):
        sys.stdout.write(text)
    else:
        directory = os.path.dirname(os.path.abspath(args.output))
        if not os.path.isdir(directory):
            raise CliError(f"cannot write {args.output}: no folder {directory}", EXIT_USAGE)
        with open(args.output, "w") as f:
            f.write(text)
        print(f"wrote {args.output}: KernelBench {info.key} ({info.file_name}), {len(text.splitlines())} lines; "
              f"passes KernelBench's static rules", file=sys.stderr)
    return 0


def _cmd_check(args) -> int:
    from . import checker

    failed = 0
    for path in args.files:
        if not os.path.isfile(path):
            raise CliError(f"no such file: {path}", EXIT_USAGE)
        with open(path) as f:
            report = checker.check_source(f.read(), backend=args.backend)
        print(f"{path}: {'ok' if report.ok else 'REJECTED'} ({len(report.errors)} errors, "
              f"{len(report.warnings)} warnings)")
        for finding in report.errors:
            print(f"  error   {finding}")
        for finding in report.warnings:
            print(f"  warning {finding}")
        failed += not report.ok
    return 1 if failed else 0


def _cmd_eval(args) -> int:
    from . import evaluate

    return evaluate.run(_problem_info(args.problem), args)


def _cmd_show_config(args) -> int:
    from . import config

    return config.show(as_json=args.json)


def _cmd_clear_cache(args) -> int:
    from . import cache

    return cache.clear(dry_run=args.dry_run)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m groupnorm_inline",
                                     description="groupnorm_inline: KernelBench tooling and build cache")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("list", help="KernelBench problems served, with shapes")
    p.set_defaults(run=_cmd_list)

    p = sub.add_parser("export", help="write a self-contained KernelBench submission file")
    p.add_argument("problem", help="level/number (1/35) or KernelBench file name (35_GroupNorm_)")
    p.add_argument("-o", "--output", help="file to write (default: stdout)")
    p.set_defaults(run=_cmd_export)

    p = sub.add_parser("check", help="apply KernelBench's static rules to candidate files")
    p.add_argument("files", nargs="+")
    p.add_argument("--backend", default="cuda", help="KernelBench backend whose presence rule applies (default cuda)")
    p.set_defaults(run=_cmd_check)

    p = sub.add_parser("eval", help="replay the KernelBench harness: build, correctness, timing")
    p.add_argument("problem", help="level/number (1/35) or KernelBench file name (35_GroupNorm_)")
    p.add_argument("--file", help="candidate file to evaluate (default: the export of the problem)")
    p.add_argument("--trials", type=int, default=100, help="timed calls per model (default 100, plus one discarded)")
    p.add_argument("--correctness-trials", type=int, default=5, help="correctness trials (default 5)")
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda",
                   help="cuda (default; what KernelBench measures) or cpu (a smoke run: needs --small)")
    p.add_argument("--small", action="store_true", help="reduced shapes from the problem's recipe")
    p.add_argument("--build-dir", help="TORCH_EXTENSIONS_DIR the harness prefix sets (default: the cache root)")
    p.add_argument("--no-compile", action="store_true", help="skip the torch.compile baseline")
    p.add_argument("--no-timing", action="store_true", help="stop after the correctness trials")
    p.add_argument("--skip-static-check", action="store_true", help="do not apply KernelBench's static rules")
    p.add_argument("--max-memory", type=float, metavar="GB",
                   help="cap this process's GPU memory (e.g. to see whether a run fits a smaller GPU)")
    p.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.set_defaults(run=_cmd_eval)

    p = sub.add_parser("show-config", help="versions, toolkit, archs, cache folder, build state")
    p.add_argument("--json", action="store_true", help="print JSON instead of text")
    p.set_defaults(run=_cmd_show_config)

    p = sub.add_parser("clear-cache", help="remove this package's build folders from the cache root")
    p.add_argument("--dry-run", action="store_true", help="only print what would be removed")
    p.set_defaults(run=_cmd_clear_cache)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.run(args)
    except CliError as exc:
        print(f"groupnorm_inline {args.command}: error: {exc.message}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print(f"groupnorm_inline {args.command}: interrupted", file=sys.stderr)
        return 130
    except MemoryError:
        print(f"groupnorm_inline {args.command}: error: out of host memory", file=sys.stderr)
        return EXIT_ENVIRONMENT


__all__ = ["main", "build_parser", "CliError"]

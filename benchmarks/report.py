"""Benchmark records: one per (row, provider); the ratios between providers of one row; CSV and markdown.

Every ratio is taken between providers timed in the same process, one after the other, on the same tensor.
"""

from __future__ import annotations

import csv
import math
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

# Providers, in the order they are timed and shown. "copy" is the traffic floor of the row: a plain
# device-to-device copy of the input for a forward row, x + dy -> dx for a backward row.
PROVIDERS = ("ours", "eager", "compile", "copy")


@dataclass
class RunInfo:
    """What the numbers were measured on; repeated on every CSV line so files can be concatenated."""
    device: str
    torch: str
    cuda: str
    package: str
    date: str
    timer: str      # "cuda-events" or "wall-clock" (CPU smoke mode)


@dataclass
class Record:
    section: str                  # "forward", "fwd+bwd", "bwd" or "problem"
    row: str                      # label, e.g. "(112,64,512,512) G8 fp32" or "L2 #94 ..."
    shape: str                    # "112x64x512x512"
    groups: int
    dtype: str
    provider: str                 # one of PROVIDERS
    median_ms: float = math.nan
    mean_ms: float = math.nan
    min_ms: float = math.nan
    iters: int = 0
    l2_flushed: bool = False
    traffic_bytes: int = 0        # minimal HBM traffic of the row (read + write), the copy's bytes
    ratio_to_copy: float = math.nan
    speedup_vs_eager: float = math.nan
    speedup_vs_compile: float = math.nan
    gbps: float = math.nan        # traffic_bytes / median time
    copy_fraction: float = math.nan   # copy time / this time: the fraction of copy bandwidth reached
    extra_mem_bytes: float = math.nan  # peak device memory beyond inputs and outputs
    correct: str = ""             # "yes", "no", or "" (not checked: the copy)
    max_abs_err: float = math.nan     # against float64
    max_abs_diff_vs_eager: float = math.nan
    kb_margin: float = math.nan   # max |out - eager| / (1e-4 + 1e-4 |eager|); KernelBench passes at <= 1
    note: str = ""                # what went wrong, was skipped, or was measured besides
    about: str = ""               # what the row stands for


CSV_COLUMNS = [f.name for f in fields(RunInfo)] + [f.name for f in fields(Record)]


def fill_ratios(records: list[Record]) -> None:
    """Fill ratio_to_copy, speedups, GB/s and copy_fraction of one row's records from their medians."""
    by_provider = {r.provider: r for r in records if math.isfinite(r.median_ms)}
    copy, eager, compiled = (by_provider.get(p) for p in ("copy", "eager", "compile"))
    for r in by_provider.values():
        if copy is not None:
            r.ratio_to_copy = r.median_ms / copy.median_ms
            r.copy_fraction = copy.median_ms / r.median_ms
        if eager is not None:
            r.speedup_vs_eager = eager.median_ms / r.median_ms
        if compiled is not None:
            r.speedup_vs_compile = compiled.median_ms / r.median_ms
        if r.traffic_bytes:
            r.gbps = r.traffic_bytes / (r.median_ms * 1e-3) / 1e9


def _csv_value(value):
    if isinstance(value, float):
        return "" if math.isnan(value) else f"{value:.6g}"
    return value


def write_csv(path: Path, info: RunInfo, records: list[Record]) -> None:
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=CSV_COLUMNS)
        writer.writeheader()
        for r in records:
            writer.writerow({k: _csv_value(v) for k, v in {**asdict(info), **asdict(r)}.items()})


def read_csv(path: Path) -> tuple[RunInfo | None, list[Record]]:
    """Records (and the run info of the first line) from a CSV that `write_csv` wrote."""
    floats = {f.name for f in fields(Record) if f.type == "float"}
    ints = {f.name for f in fields(Record) if f.type == "int"}
    records, info = [], None
    with open(path, newline="") as f:
        for line in csv.DictReader(f):
            if info is None:
                info = RunInfo(**{k.name: line[k.name] for k in fields(RunInfo)})
            values = {}
            for fld in fields(Record):
                text = line.get(fld.name, "")
                if fld.name in floats:
                    values[fld.name] = float(text) if text else math.nan
                elif fld.name in ints:
                    values[fld.name] = int(text) if text else 0
                elif fld.name == "l2_flushed":
                    values[fld.name] = text == "True"
                else:
                    values[fld.name] = text
            records.append(Record(**values))
    return info, records


def rows_in_order(records: list[Record]) -> list[tuple[str, str]]:
    """(section, row) pairs in first-seen order."""
    seen: dict[tuple[str, str], None] = {}
    for r in records:
        seen.setdefault((r.section, r.row), None)
    return list(seen)


def lookup(records: list[Record]) -> dict[tuple[str, str, str], Record]:
    return {(r.section, r.row, r.provider): r for r in records}


@dataclass
class Summary:
    geomean_vs_compile: float = math.nan   # over the forward rows that have both timings
    geomean_vs_eager: float = math.nan
    rows_with_compile: int = 0
    flags: list[str] = field(default_factory=list)


def _geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else math.nan


def summarise(records: list[Record]) -> Summary:
    """Geometric-mean speedups of ours over the forward rows, and flags: rows where ours is slower than
    eager or compile, rows whose correctness check failed, rows that errored."""
    summary = Summary()
    table = lookup(records)
    vs_compile, vs_eager = [], []
    for section, row in rows_in_order(records):
        ours = table.get((section, row, "ours"))
        if ours is None:
            continue
        if ours.correct == "no":
            detail = f" ({ours.note})" if ours.note else ""
            summary.flags.append(f"{section} {row}: ours FAILED the correctness check{detail}")
        if not math.isfinite(ours.median_ms):
            summary.flags.append(f"{section} {row}: ours not timed ({ours.note})")
            continue
        for baseline, speedup in (("eager", ours.speedup_vs_eager), ("compile", ours.speedup_vs_compile)):
            if math.isfinite(speedup) and speedup < 1.0:
                summary.flags.append(f"{section} {row}: ours is slower than {baseline} ({speedup:.2f}x)")
        if section == "forward":
            if math.isfinite(ours.speedup_vs_compile):
                vs_compile.append(ours.speedup_vs_compile)
            if math.isfinite(ours.speedup_vs_eager):
                vs_eager.append(ours.speedup_vs_eager)
    summary.geomean_vs_compile, summary.geomean_vs_eager = _geomean(vs_compile), _geomean(vs_eager)
    summary.rows_with_compile = len(vs_compile)
    return summary


def _fmt(value: float, spec: str, suffix: str = "") -> str:
    return f"{value:{spec}}{suffix}" if math.isfinite(value) else "-"


def _fmt_bytes(value: float) -> str:
    if not math.isfinite(value):
        return "-"
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if abs(value) >= scale:
            return f"{value / scale:.3g} {unit}"
    return f"{value:.0f} B"


def markdown_table(info: RunInfo, records: list[Record]) -> str:
    """The results as a markdown table, one line per row, with the run's device and versions above it."""
    table = lookup(records)
    lines = [f"Device: {info.device} · torch {info.torch} · CUDA {info.cuda} · groupnorm_inline {info.package}"
             f" · {info.date}", "",
             "| section | row | ours ms | eager ms | compile ms | copy ms | ours/copy | eager/ours | compile/ours"
             " | copy BW fraction | ours extra mem | correct |",
             "|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|:-:|"]
    for section, row in rows_in_order(records):
        get = lambda p: table.get((section, row, p))  # noqa: E731
        ours = get("ours")
        if ours is None:
            continue
        ms = [_fmt(get(p).median_ms, ".3f") if get(p) else "-" for p in PROVIDERS]
        lines.append(" | ".join([
            f"| {section}", row, *ms,
            _fmt(ours.ratio_to_copy, ".2f", "x"), _fmt(ours.speedup_vs_eager, ".2f", "x"),
            _fmt(ours.speedup_vs_compile, ".2f", "x"), _fmt(ours.copy_fraction, ".2f"),
            _fmt_bytes(ours.extra_mem_bytes), (ours.correct or "-") + " |"]))
    summary = summarise(records)
    lines.append("")
    lines.append(f"Geometric mean speedup of ours over torch.compile (forward rows, {summary.rows_with_compile}):"
                 f" {_fmt(summary.geomean_vs_compile, '.2f', 'x')}; over eager:"
                 f" {_fmt(summary.geomean_vs_eager, '.2f', 'x')}")
    lines.append("")
    if summary.flags:
        lines.append("Flagged:")
        lines.extend(f"- {flag}" for flag in summary.flags)
    else:
        lines.append("Flagged: none (ours is correct and at least as fast as eager and compile on every row)")
    return "\n".join(lines)


__all__ = ["PROVIDERS", "RunInfo", "Record", "CSV_COLUMNS", "fill_ratios", "write_csv", "read_csv",
           "rows_in_order", "lookup", "Summary", "summarise", "markdown_table"]

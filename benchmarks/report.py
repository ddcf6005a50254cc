"""Benchmark records: one per (row, provider); the ratios between providers of one row; CSV and markdown.

Every ratio is taken between providers timed in the same process, one after the other, on the same tensor.
"""

from __future__ import annotations

import csv
import math
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

# Providers, in the order they are timed and shown. "liger" is Liger-Kernel's Triton GroupNorm (optional);
# "copy" is the traffic floor of the row: a plain device-to-device copy of the input for a forward row,
# x + dy -> dx for a backward row.
PROVIDERS = ("ours", "eager", "compile", "liger", "copy")
BASELINES = ("eager", "compile", "liger")   # what ours' speedups are taken over
# Directions of a row; problem rows are forward (inference) rows of a whole KernelBench model.
DIRECTIONS = ("forward", "fwd+bwd", "bwd")


@dataclass
class RunInfo:
    """What the numbers were measured on; repeated on every CSV line so files can be concatenated."""
    device: str
    torch: str
    cuda: str
    package: str
    date: str
    timer: str      # "cuda-events" or "wall-clock" (CPU smoke mode)
    liger_kernel: str = ""   # Liger-Kernel's version, or why it is absent ("not installed")


@dataclass(kw_only=True)
class Record:
    section: str                  # the row's family ("unet", "vae", ..., "forward", "training") or "problem"
    direction: str = "forward"    # "forward", "fwd+bwd" (a training step of the layer) or "bwd" (backward alone)
    row: str                      # label, e.g. "(112,64,512,512) G8 fp32", "(2,320,128,128) G32 fp16 CL +silu"
    shape: str                    # "112x64x512x512"
    groups: int
    dtype: str
    memory_format: str = ""       # "NCHW", "NCDHW", "contiguous", "channels_last" or "channels_last_3d"
    activation: str = ""          # the activation applied after GroupNorm ("silu"), empty for none
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
    speedup_vs_liger: float = math.nan
    gbps: float = math.nan        # traffic_bytes / median time
    copy_fraction: float = math.nan   # copy time / this time: the fraction of copy bandwidth reached
    extra_mem_bytes: float = math.nan  # peak device memory beyond inputs and outputs
    correct: str = ""             # "yes", "no", or "" (not checked: the copy)
    max_abs_err: float = math.nan     # against float64
    max_abs_diff_vs_eager: float = math.nan
    kb_margin: float = math.nan   # max |out - eager| / (1e-4 + 1e-4 |eager|); KernelBench passes at <= 1
    liger: str = ""               # Liger-Kernel on this row: "timed", "not installed" or "n/a: why"
    note: str = ""                # what went wrong, was skipped, or was measured besides
    about: str = ""               # what the row stands for


CSV_COLUMNS = [f.name for f in fields(RunInfo)] + [f.name for f in fields(Record)]


def fill_ratios(records: list[Record]) -> None:
    """Fill ratio_to_copy, speedups, GB/s and copy_fraction of one row's records from their medians."""
    by_provider = {r.provider: r for r in records if math.isfinite(r.median_ms)}
    copy = by_provider.get("copy")
    for r in by_provider.values():
        if copy is not None:
            r.ratio_to_copy = r.median_ms / copy.median_ms
            r.copy_fraction = copy.median_ms / r.median_ms
        for baseline in BASELINES:
            if baseline in by_provider:
                setattr(r, f"speedup_vs_{baseline}", by_provider[baseline].median_ms / r.median_ms)
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


# CSVs written before the families existed: section was the direction ("forward", "fwd+bwd", "bwd").
_OLD_SECTION_FAMILY = {"forward": "forward", "fwd+bwd": "training", "bwd": "training"}


def read_csv(path: Path) -> tuple[RunInfo | None, list[Record]]:
    """Records (and the run info of the first line) from a CSV that `write_csv` wrote, older layouts included."""
    floats = {f.name for f in fields(Record) if f.type == "float"}
    ints = {f.name for f in fields(Record) if f.type == "int"}
    records, info = [], None
    with open(path, newline="") as f:
        for line in csv.DictReader(f):
            if info is None:
                info = RunInfo(**{k.name: line.get(k.name) or "" for k in fields(RunInfo)})
            values = {}
            for fld in fields(Record):
                text = line.get(fld.name) or ""
                if fld.name in floats:
                    values[fld.name] = float(text) if text else math.nan
                elif fld.name in ints:
                    values[fld.name] = int(text) if text else 0
                elif fld.name == "l2_flushed":
                    values[fld.name] = text == "True"
                else:
                    values[fld.name] = text
            if "direction" not in line:
                values["direction"] = values["section"] if values["section"] in DIRECTIONS else "forward"
                values["section"] = _OLD_SECTION_FAMILY.get(values["section"], values["section"])
            records.append(Record(**values))
    return info, records


RowKey = tuple  # (section, direction, row)


def rows_in_order(records: list[Record]) -> list[RowKey]:
    """(section, direction, row) keys in first-seen order."""
    seen: dict[RowKey, None] = {}
    for r in records:
        seen.setdefault((r.section, r.direction, r.row), None)
    return list(seen)


def lookup(records: list[Record]) -> dict[tuple[str, str, str, str], Record]:
    """(section, direction, row, provider) -> record."""
    return {(r.section, r.direction, r.row, r.provider): r for r in records}


def row_name(key: RowKey) -> str:
    """"unet (2,320,128,128) G32 fp16 CL", with the direction when it is not the forward."""
    section, direction, row = key
    return f"{section} {row}" if direction == "forward" else f"{section} {direction} {row}"


@dataclass
class Summary:
    geomean_vs_compile: float = math.nan   # over the forward rows (not problems) that have both timings
    geomean_vs_eager: float = math.nan
    geomean_vs_liger: float = math.nan
    rows_with_compile: int = 0
    rows_with_liger: int = 0
    flags: list[str] = field(default_factory=list)
    liger_absent: dict[str, list[str]] = field(default_factory=dict)   # reason -> rows Liger did not run


def _geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else math.nan


def summarise(records: list[Record]) -> Summary:
    """Geometric-mean speedups of ours over the forward rows, and flags: rows where ours is slower than
    eager, compile or Liger, rows whose correctness check failed, rows that errored; and the rows where
    Liger did not run, by reason."""
    summary = Summary()
    table = lookup(records)
    speedups: dict[str, list[float]] = {b: [] for b in BASELINES}
    for key in rows_in_order(records):
        section, direction, row = key
        ours = table.get((*key, "ours"))
        if ours is None:
            continue
        name = row_name(key)
        liger = table.get((*key, "liger"))
        if liger is not None and liger.liger and liger.liger != "timed":
            summary.liger_absent.setdefault(liger.liger, []).append(name)
        elif liger is not None and liger.correct == "no":
            summary.flags.append(f"{name}: Liger-Kernel failed its check ({liger.note})")
        if ours.correct == "no":
            detail = f" ({ours.note})" if ours.note else ""
            summary.flags.append(f"{name}: ours FAILED the correctness check{detail}")
        if not math.isfinite(ours.median_ms):
            summary.flags.append(f"{name}: ours not timed ({ours.note})")
            continue
        for baseline in BASELINES:
            speedup = getattr(ours, f"speedup_vs_{baseline}")
            if math.isfinite(speedup) and speedup < 1.0:
                summary.flags.append(f"{name}: ours is slower than {baseline} ({speedup:.2f}x)")
            if direction == "forward" and section != "problem" and math.isfinite(speedup):
                speedups[baseline].append(speedup)
    summary.geomean_vs_compile = _geomean(speedups["compile"])
    summary.geomean_vs_eager = _geomean(speedups["eager"])
    summary.geomean_vs_liger = _geomean(speedups["liger"])
    summary.rows_with_compile, summary.rows_with_liger = len(speedups["compile"]), len(speedups["liger"])
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


def _ms_cell(record: Record | None) -> str:
    if record is None:
        return "-"
    if math.isfinite(record.median_ms):
        return f"{record.median_ms:.3f}"
    if record.provider == "liger" and record.liger and record.liger != "timed":
        return "n/a"
    return "-"


def markdown_table(info: RunInfo, records: list[Record]) -> str:
    """The results as a markdown table, one line per row, with the run's device and versions above it."""
    table = lookup(records)
    liger_text = f" · Liger-Kernel {info.liger_kernel}" if info.liger_kernel else ""
    lines = [f"Device: {info.device} · torch {info.torch} · CUDA {info.cuda} · groupnorm_inline {info.package}"
             f"{liger_text} · {info.date}", "",
             "| family | direction | row | ours ms | eager ms | compile ms | liger ms | copy ms | ours/copy"
             " | eager/ours | compile/ours | liger/ours | ours err | liger err | copy BW fraction | ours extra mem"
             " | correct |",
             "|---|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|:-:|"]
    for key in rows_in_order(records):
        section, direction, row = key
        get = lambda p: table.get((*key, p))  # noqa: E731
        ours = get("ours")
        if ours is None:
            continue
        liger = get("liger")
        lines.append(" | ".join([
            f"| {section}", direction, row, *[_ms_cell(get(p)) for p in PROVIDERS],
            _fmt(ours.ratio_to_copy, ".2f", "x"), _fmt(ours.speedup_vs_eager, ".2f", "x"),
            _fmt(ours.speedup_vs_compile, ".2f", "x"), _fmt(ours.speedup_vs_liger, ".2f", "x"),
            _fmt(ours.max_abs_err, ".1e"), _fmt(liger.max_abs_err, ".1e") if liger else "-",
            _fmt(ours.copy_fraction, ".2f"), _fmt_bytes(ours.extra_mem_bytes), (ours.correct or "-") + " |"]))
    summary = summarise(records)
    lines.append("")
    lines.append(f"Geometric mean speedup of ours over torch.compile (forward rows, {summary.rows_with_compile}):"
                 f" {_fmt(summary.geomean_vs_compile, '.2f', 'x')}; over eager:"
                 f" {_fmt(summary.geomean_vs_eager, '.2f', 'x')}; over Liger-Kernel"
                 f" ({summary.rows_with_liger} rows): {_fmt(summary.geomean_vs_liger, '.2f', 'x')}")
    lines.append("")
    lines.append("err: max |output - float64 reference| (dx for training rows).")
    if summary.liger_absent:
        lines.append("")
        lines.append("Liger-Kernel not timed:")
        for reason, rows in summary.liger_absent.items():
            shown = rows if len(rows) <= 6 else rows[:6] + [f"... {len(rows) - 6} more"]
            lines.append(f"- {reason}: {', '.join(shown)}")
    lines.append("")
    if summary.flags:
        lines.append("Flagged:")
        lines.extend(f"- {flag}" for flag in summary.flags)
    else:
        lines.append("Flagged: none (ours is correct and at least as fast as every baseline on every row)")
    return "\n".join(lines)


__all__ = ["PROVIDERS", "BASELINES", "DIRECTIONS", "RunInfo", "Record", "CSV_COLUMNS", "fill_ratios", "write_csv",
           "read_csv", "rows_in_order", "lookup", "row_name", "Summary", "summarise", "markdown_table"]


def save_log(name: str, lines: list[str]) -> Path | None:
    """Write `lines` to $OUT/name (the device runs' log folder) when OUT is set; returns the path written."""
    import os

    out = os.environ.get("OUT")
    if not out:
        return None
    path = Path(out, name)
    path.write_text("\n".join(lines) + "\n")
    return path

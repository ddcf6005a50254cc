"""Where a kernel's warps wait, line by line: sums Nsight Compute's warp-state samples per CUDA source line.

    ncu --import report.ncu-rep --page source --print-source cuda --csv > source.csv
    python benchmarks/ncu_source_summary.py source.csv [--top 40] [--sources DIR]

The CSV holds one block per profiled kernel (the extension is built with -lineinfo, so the source view maps
samples to the lines of the generated cuda.cu). For each kernel this prints its total samples and the `--top` lines
with the most, each with its share, its cumulative share in source order of the listed lines, and the line's text.
Every warp of a cooperative kernel stays resident for the whole launch, so a line's share of the samples is about
its share of the kernel's time.
"""

from __future__ import annotations

import argparse
import csv
import io
import re
import sys


def sample_column(header: list[str]) -> int:
    """The column of all warp-state samples (names vary a little between Nsight Compute versions)."""
    for i, name in enumerate(header):
        if re.search(r"warp stall sampling \(all", name, re.I):
            return i
    for i, name in enumerate(header):
        if "sampl" in name.lower():
            return i
    raise SystemExit(f"no sample column in {header}")


def blocks(text: str):
    """(title, rows) per kernel: the CSV repeats a header line per kernel, after a title line."""
    title, lines = "", []
    for line in text.splitlines():
        if line.startswith('"#') or line.startswith("#") or ("Kernel" in line and "," not in line):
            if lines:
                yield title, lines
            title, lines = line.strip().strip('"'), []
            continue
        lines.append(line)
    if lines:
        yield title, lines


def summarize(title: str, lines: list[str], top: int) -> None:
    rows = list(csv.reader(io.StringIO("\n".join(lines))))
    header_at = next((i for i, r in enumerate(rows) if any("Source" in c for c in r)), None)
    if header_at is None:
        return
    header = rows[header_at]
    col = sample_column(header)
    src = next(i for i, c in enumerate(header) if c.strip() in ("Source", "# Source") or "Source" in c)
    line_col = next((i for i, c in enumerate(header) if c.strip() in ("Line", "#", "Line Number")), None)
    samples = []
    for k, r in enumerate(rows[header_at + 1:]):
        if len(r) <= max(col, src):
            continue
        try:
            n = float(r[col].replace(",", "") or 0)
        except ValueError:
            continue
        where = r[line_col] if line_col is not None else str(k + 1)
        samples.append((where, r[src].strip(), n))
    total = sum(n for _, _, n in samples)
    if total <= 0:
        return
    print(f"\n== {title}: {total:.0f} samples")
    best = sorted(samples, key=lambda s: -s[2])[:top]
    keep = {id(s) for s in best}
    cumulative = 0.0
    for s in samples:
        if id(s) not in keep:
            continue
        cumulative += s[2]
        print(f"  {s[2] / total:6.1%} {cumulative / total:6.1%}  {s[0]:>6}  {s[1][:110]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("csv", help="ncu --page source --print-source cuda --csv output")
    parser.add_argument("--top", type=int, default=40, help="lines listed per kernel (default 40)")
    args = parser.parse_args()
    text = open(args.csv, encoding="utf-8", errors="replace").read()
    found = False
    for title, lines in blocks(text):
        summarize(title, lines, args.top)
        found = True
    if not found:
        print("no kernel blocks found", file=sys.stderr)


if __name__ == "__main__":
    main()

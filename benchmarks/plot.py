"""The results chart: per row, ours' speedup over eager, torch.compile and Liger-Kernel (where it ran), and
the fraction of the copy's bandwidth each provider reaches. Also a command: `python benchmarks/plot.py RESULTS.csv [OUT.png]`.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only; no display needed (CI, headless GPU machines)
import matplotlib.pyplot as plt  # noqa: E402
import matplotlib.ticker  # noqa: E402

from report import RunInfo, Record, lookup, read_csv, rows_in_order, summarise  # noqa: E402

SPEEDUP_COLORS = {"eager": "#4C72B0", "compile": "#DD8452", "liger": "#8172B3"}
FRACTION_COLORS = {"ours": "#55A868", "eager": "#4C72B0", "compile": "#DD8452", "liger": "#8172B3"}
BASELINE_NAMES = {"eager": "eager", "compile": "torch.compile", "liger": "Liger-Kernel"}


MAX_LABEL_CHARS = 44


def _row_label(key: tuple[str, str, str]) -> str:
    """"unet (2,320,128,128) G32 fp16 CL", the direction in brackets when it is not the forward."""
    section, direction, row = key
    prefix = "" if section == "forward" and direction == "forward" else f"{section} "
    label = prefix + (row if direction == "forward" else f"[{direction}] {row}")
    return label if len(label) <= MAX_LABEL_CHARS else label[:MAX_LABEL_CHARS - 1] + "\u2026"


def _value(record: Record | None, attribute: str) -> float:
    value = getattr(record, attribute) if record is not None else math.nan
    return value if math.isfinite(value) else 0.0


def _annotate(ax, bars, values, spec):
    for bar, value in zip(bars, values):
        if value > 0:
            ax.annotate(f"{value:{spec}}", (bar.get_width(), bar.get_y() + bar.get_height() / 2),
                        xytext=(3, 0), textcoords="offset points", va="center", fontsize=7)


def plot_results(info: RunInfo, records: list[Record], path: Path) -> None:
    """Write the chart for `records` to `path` (PNG)."""
    table = lookup(records)
    rows = [key for key in rows_in_order(records) if (*key, "ours") in table]
    labels = [_row_label(key) for key in rows]
    count = max(1, len(rows))
    fig, (ax_speed, ax_frac) = plt.subplots(1, 2, figsize=(15, 1.6 + 0.5 * count), sharey=True,
                                            gridspec_kw={"width_ratios": [1.2, 1]},
                                            layout="constrained")  # makes room for the two-line title
    positions = list(range(count))

    # Left: ours' speedup over each baseline, as bars growing from 1x: right of the line ours is
    # faster, left of it slower. Log scale, so 0.5x and 2x lie equally far from 1x.
    speedups = []
    shown = [b for b in ("eager", "compile", "liger")
             if any(_value(table.get((*key, "ours")), f"speedup_vs_{b}") for key in rows)]
    bar = 0.8 / max(1, len(shown))
    for i, baseline in enumerate(shown):  # not timed in this run (--no-compile, no Liger): no empty legend entry
        values = [_value(table.get((*key, "ours")), f"speedup_vs_{baseline}") for key in rows]
        speedups += [v for v in values if v > 0]
        offsets = [p + (i - (len(shown) - 1) / 2) * bar for p in positions]
        widths = [v - 1.0 if v > 0 else 0.0 for v in values]
        ax_speed.barh(offsets, widths, left=1.0, height=bar, color=SPEEDUP_COLORS[baseline],
                      label=f"over {BASELINE_NAMES[baseline]}")
        for offset, value in zip(offsets, values):
            if value > 0:
                ax_speed.annotate(f"{value:.2f}x", (value, offset), xytext=(3 if value >= 1 else -3, 0),
                                  textcoords="offset points", va="center", ha="left" if value >= 1 else "right",
                                  fontsize=6)
    ax_speed.axvline(1.0, color="black", linewidth=1)
    ax_speed.set_xscale("log", base=2)
    low, high = min(speedups + [1.0]), max(speedups + [1.0])
    ax_speed.set_xlim(min(0.5, low / 1.6), max(2.0, high * 1.6))  # room for the labels at the bar ends
    ax_speed.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _pos: f"{v:g}x"))
    ax_speed.set_xlabel("speedup of ours (log scale; right of 1x: faster than PyTorch)")
    ax_speed.set_title("Speedup of ours")
    ax_speed.legend(loc="best", fontsize=8)

    # Right: copy time / provider time, the fraction of a plain copy's bandwidth each provider reaches.
    fraction_values = []
    present = [p for p in ("ours", "compile", "eager", "liger")
               if any(_value(table.get((*key, p)), "copy_fraction") for key in rows)]
    share = 0.8 / max(1, len(present))
    for i, provider in enumerate(present):
        values = [_value(table.get((*key, provider)), "copy_fraction") for key in rows]
        fraction_values += values
        offsets = [p + (i - (len(present) - 1) / 2) * share for p in positions]
        bars = ax_frac.barh(offsets, values, height=share, color=FRACTION_COLORS[provider],
                            label=BASELINE_NAMES.get(provider, provider))
        _annotate(ax_frac, bars, values, ".2g")
    ax_frac.axvline(1.0, color="black", linewidth=1)
    ax_frac.set_xlim(0, max([1.15] + [1.1 * v for v in fraction_values]))
    ax_frac.set_xlabel("copy time / time (1 = as fast as a copy)")
    ax_frac.set_title("Fraction of copy bandwidth")
    ax_frac.legend(loc="best", fontsize=8)

    ax_speed.set_yticks(positions)
    ax_speed.set_yticklabels(labels, fontsize=8)
    ax_speed.invert_yaxis()  # first row at the top, as in the table
    for ax in (ax_speed, ax_frac):
        ax.grid(axis="x", alpha=0.3)

    summary = summarise(records)
    geomean = (f"geomean speedup over torch.compile {summary.geomean_vs_compile:.2f}x"
               if math.isfinite(summary.geomean_vs_compile) else "no torch.compile timings")
    if math.isfinite(summary.geomean_vs_liger):
        geomean += f", over Liger-Kernel {summary.geomean_vs_liger:.2f}x"
    fig.suptitle(f"groupnorm_inline {info.package} GroupNorm on {info.device} ({info.date})\n"
                 f"torch {info.torch}, CUDA {info.cuda}; medians of {info.timer} timings; {geomean}", fontsize=10)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str]) -> int:
    if not argv or len(argv) > 2:
        print("usage: python benchmarks/plot.py RESULTS.csv [OUT.png]", file=sys.stderr)
        return 2
    csv_path = Path(argv[0])
    out = Path(argv[1]) if len(argv) > 1 else csv_path.with_suffix(".png")
    info, records = read_csv(csv_path)
    if info is None:
        print(f"{csv_path}: no records", file=sys.stderr)
        return 1
    plot_results(info, records, out)
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))


__all__ = ["plot_results"]

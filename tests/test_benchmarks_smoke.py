"""The benchmark suite's CPU smoke mode runs end to end (CSV, chart, table), and its ratio and flag logic
is right on hand-made records."""

from __future__ import annotations

import csv
import importlib.util
import math
import subprocess
import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"

# Forward rows of suite.CPU_SMOKE_FORWARD_ROWS and the training row of CPU_SMOKE_BACKWARD_ROWS (timed as
# "fwd+bwd" and "bwd"); without a GPU there is no torch.compile, so each row has ours, eager and copy.
EXPECTED_ROWS = {
    ("forward", "(2,8,6,6) G2 fp32"), ("forward", "(2,8,6,6) G2 bf16"), ("forward", "(3,6,5,7) G3 fp32"),
    ("forward", "(2,4,3,4,5) G1 fp32"), ("forward", "(16,64) G64 fp32"),
    ("fwd+bwd", "(2,8,6,6) G2 fp32"), ("bwd", "(2,8,6,6) G2 fp32"),
}
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _load_report_module():
    """benchmarks/report.py under a name of its own (benchmarks/ is a script folder, not a package)."""
    spec = importlib.util.spec_from_file_location("groupnorm_benchmarks_report", BENCHMARKS / "report.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is created
    spec.loader.exec_module(module)
    return module


def test_cpu_smoke_writes_csv_chart_and_table(tmp_path):
    command = [sys.executable, str(BENCHMARKS / "bench_forward.py"), "--cpu-smoke", "--backward", "--out",
               str(tmp_path)]
    run = subprocess.run(command, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, f"exit {run.returncode}\nstdout:\n{run.stdout}\nstderr:\n{run.stderr[-4000:]}"

    csv_files = list(tmp_path.glob("*.csv"))
    assert len(csv_files) == 1, f"expected one CSV in the output folder, found {csv_files}"
    stem = csv_files[0].with_suffix("")
    assert stem.name.startswith("cpu-"), stem.name
    with open(csv_files[0], newline="") as f:
        lines = list(csv.DictReader(f))

    rows = {(line["section"], line["row"]) for line in lines}
    assert rows == EXPECTED_ROWS, f"rows differ: missing {EXPECTED_ROWS - rows}, unexpected {rows - EXPECTED_ROWS}"
    for section, row in EXPECTED_ROWS:
        providers = {line["provider"]: line for line in lines if (line["section"], line["row"]) == (section, row)}
        assert set(providers) == {"ours", "eager", "copy"}, f"{section} {row}: providers {sorted(providers)}"
        for name, line in providers.items():
            assert float(line["median_ms"]) > 0, f"{section} {row} {name}: median_ms {line['median_ms']!r}"
            assert int(line["iters"]) >= 5, f"{section} {row} {name}: only {line['iters']} timed calls"
        ours = providers["ours"]
        assert ours["correct"] == "yes", f"{section} {row}: ours not correct: {ours['note']}"
        assert float(ours["max_abs_err"]) < 2e-2, f"{section} {row}: max_abs_err {ours['max_abs_err']}"
        # ratios are consistent with the medians of the same row
        ratio = float(ours["median_ms"]) / float(providers["copy"]["median_ms"])
        assert math.isclose(float(ours["ratio_to_copy"]), ratio, rel_tol=1e-4), (ours["ratio_to_copy"], ratio)
        speedup = float(providers["eager"]["median_ms"]) / float(ours["median_ms"])
        assert math.isclose(float(ours["speedup_vs_eager"]), speedup, rel_tol=1e-4)
        assert ours["device"].startswith("CPU") and ours["timer"] == "wall-clock"

    png = stem.with_suffix(".png").read_bytes()
    assert png.startswith(PNG_MAGIC) and len(png) > 10_000, f"chart missing or too small ({len(png)} bytes)"
    table = stem.with_suffix(".md").read_text()
    assert "| forward | (3,6,5,7) G3 fp32 |" in table
    assert table.strip() in run.stdout, "the markdown table is printed to stdout"


def test_ratios_geomean_and_flags():
    report = _load_report_module()
    Record = report.Record

    def row(name, ours_ms, eager_ms, compile_ms, copy_ms, correct="yes"):
        times = {"ours": ours_ms, "eager": eager_ms, "compile": compile_ms, "copy": copy_ms}
        records = [Record(section="forward", row=name, shape="1x1", groups=1, dtype="fp32", provider=p,
                          median_ms=t, traffic_bytes=2_000_000, correct=correct if p == "ours" else "")
                   for p, t in times.items()]
        report.fill_ratios(records)
        return records

    fast = row("fast", 1.0, 4.0, 2.0, 0.5)          # 2x over compile
    slow = row("slow", 3.0, 2.0, 4.0, 1.0)          # slower than eager, 1.33x over compile
    wrong = row("wrong", 1.0, 1.5, 1.0, 0.9, correct="no")
    ours_fast = fast[0]
    assert math.isclose(ours_fast.ratio_to_copy, 2.0) and math.isclose(ours_fast.copy_fraction, 0.5)
    assert math.isclose(ours_fast.speedup_vs_eager, 4.0) and math.isclose(ours_fast.speedup_vs_compile, 2.0)
    assert math.isclose(ours_fast.gbps, 2.0)  # 2 MB in 1 ms

    summary = report.summarise(fast + slow + wrong)
    expected_geomean = (2.0 * (4.0 / 3.0) * 1.0) ** (1 / 3)
    assert math.isclose(summary.geomean_vs_compile, expected_geomean), summary.geomean_vs_compile
    assert summary.rows_with_compile == 3
    flagged = "\n".join(summary.flags)
    assert "slow: ours is slower than eager" in flagged, flagged
    assert "wrong: ours FAILED" in flagged, flagged
    assert "fast" not in flagged, flagged

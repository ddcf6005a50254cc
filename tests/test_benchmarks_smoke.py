"""The benchmark suite's CPU smoke mode runs end to end (CSV, chart, table) over every row family, with the
memory-format, activation, direction and Liger-Kernel columns; its ratio, flag, family-selection and
old-CSV logic is right on hand-made inputs."""

from __future__ import annotations

import csv
import importlib.util
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"

# (family, direction, row) of suite.CPU_SMOKE_FAMILIES with --families everything; without a GPU there is no
# torch.compile and no Liger-Kernel timing, so each row has ours, eager and copy timed, and a Liger record
# saying why Liger did not run.
EXPECTED_ROWS = {
    ("forward", "forward", "(2,8,6,6) G2 fp32"), ("forward", "forward", "(2,8,6,6) G2 bf16"),
    ("forward", "forward", "(3,6,5,7) G3 fp32"), ("forward", "forward", "(2,4,3,4,5) G1 fp32"),
    ("forward", "forward", "(16,64) G64 fp32"),
    ("training", "fwd+bwd", "(2,8,6,6) G2 fp32"), ("training", "bwd", "(2,8,6,6) G2 fp32"),
    ("unet", "forward", "(2,16,6,6) G4 fp32"), ("unet", "forward", "(2,16,6,6) G4 fp32 CL"),
    ("vae", "forward", "(1,8,12,12) G2 bf16 CL"),
    ("video", "forward", "(1,8,3,4,5) G4 bf16 CL"), ("video", "forward", "(1,8,3,4,5) G4 bf16"),
    ("small-slices", "forward", "(16,8,2,2) G8 fp32"),
    ("kb35", "forward", "(3,8,8,8) G2 fp32 CL"),
    ("gn-silu", "forward", "(2,8,6,6) G2 fp32 +silu"), ("gn-silu", "forward", "(2,8,6,6) G2 fp32 CL +silu"),
    ("training-half", "fwd+bwd", "(2,8,6,6) G2 bf16"), ("training-half", "fwd+bwd", "(2,8,6,6) G2 bf16 CL"),
}
# What the memory_format column says for each kind of row.
EXPECTED_FORMATS = {"(2,16,6,6) G4 fp32 CL": "channels_last", "(1,8,3,4,5) G4 bf16 CL": "channels_last_3d",
                    "(1,8,3,4,5) G4 bf16": "NCDHW", "(2,16,6,6) G4 fp32": "NCHW", "(16,64) G64 fp32": "contiguous"}
LIGER_ON_CPU = ("not installed", "n/a: Liger-Kernel's Triton kernels run on CUDA devices only")
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _load_module(name: str):
    """benchmarks/<name>.py under a name of its own (benchmarks/ is a script folder, not a package)."""
    spec = importlib.util.spec_from_file_location(f"groupnorm_benchmarks_{name}", BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is created
    spec.loader.exec_module(module)
    return module


def _load_report_module():
    return _load_module("report")


def test_cpu_smoke_writes_csv_chart_and_table(tmp_path):
    command = [sys.executable, str(BENCHMARKS / "bench_forward.py"), "--cpu-smoke", "--families", "everything",
               "--out", str(tmp_path)]
    run = subprocess.run(command, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, f"exit {run.returncode}\nstdout:\n{run.stdout}\nstderr:\n{run.stderr[-4000:]}"

    csv_files = list(tmp_path.glob("*.csv"))
    assert len(csv_files) == 1, f"expected one CSV in the output folder, found {csv_files}"
    stem = csv_files[0].with_suffix("")
    assert stem.name.startswith("cpu-"), stem.name
    with open(csv_files[0], newline="") as f:
        reader = csv.DictReader(f)
        lines = list(reader)
    for column in ("section", "direction", "memory_format", "activation", "liger", "speedup_vs_liger",
                   "liger_kernel"):
        assert column in reader.fieldnames, f"CSV has no {column} column: {reader.fieldnames}"

    rows = {(line["section"], line["direction"], line["row"]) for line in lines}
    assert rows == EXPECTED_ROWS, f"rows differ: missing {EXPECTED_ROWS - rows}, unexpected {rows - EXPECTED_ROWS}"
    for key in EXPECTED_ROWS:
        section, direction, row = key
        providers = {line["provider"]: line for line in lines if (line["section"], line["direction"], line["row"]) == key}
        assert set(providers) == {"ours", "eager", "liger", "copy"}, f"{key}: providers {sorted(providers)}"
        for name in ("ours", "eager", "copy"):
            line = providers[name]
            assert float(line["median_ms"]) > 0, f"{key} {name}: median_ms {line['median_ms']!r}"
            assert int(line["iters"]) >= 5, f"{key} {name}: only {line['iters']} timed calls"
        liger = providers["liger"]
        assert liger["liger"] in LIGER_ON_CPU and liger["median_ms"] == "" and liger["note"] == liger["liger"], liger
        ours = providers["ours"]
        assert ours["liger"] == liger["liger"], "every line of a row carries the row's Liger status"
        assert ours["correct"] == "yes", f"{key}: ours not correct: {ours['note']}"
        # Forward outputs are O(1). Gradients are not: with x ~ U[0, 1) (std 0.29, rstd 3.5), weight < 1.5 and
        # |dy| up to 4, |dx| reaches 16-32, where one bfloat16 rounding is up to 2^-8 x 32 = 0.125 (the
        # runner's own check is relative to the largest |dx|; this bound only catches a gross error).
        limit = 0.125 if direction != "forward" and ours["dtype"] == "bf16" else 2e-2
        assert float(ours["max_abs_err"]) < limit, f"{key}: max_abs_err {ours['max_abs_err']}"
        assert ours["activation"] == ("silu" if row.endswith("+silu") else ""), (key, ours["activation"])
        assert ours["memory_format"] in ("channels_last", "channels_last_3d") if " CL" in row else \
            ours["memory_format"] in ("NCHW", "NCDHW", "contiguous"), (key, ours["memory_format"])
        if row in EXPECTED_FORMATS:
            assert ours["memory_format"] == EXPECTED_FORMATS[row], (key, ours["memory_format"])
        # ratios are consistent with the medians of the same row
        ratio = float(ours["median_ms"]) / float(providers["copy"]["median_ms"])
        assert math.isclose(float(ours["ratio_to_copy"]), ratio, rel_tol=1e-4), (ours["ratio_to_copy"], ratio)
        speedup = float(providers["eager"]["median_ms"]) / float(ours["median_ms"])
        assert math.isclose(float(ours["speedup_vs_eager"]), speedup, rel_tol=1e-4)
        assert ours["speedup_vs_liger"] == ""
        assert ours["device"].startswith("CPU") and ours["timer"] == "wall-clock"

    png = stem.with_suffix(".png").read_bytes()
    assert png.startswith(PNG_MAGIC) and len(png) > 10_000, f"chart missing or too small ({len(png)} bytes)"
    table = stem.with_suffix(".md").read_text()
    assert "| forward | forward | (3,6,5,7) G3 fp32 |" in table
    assert "| gn-silu | forward | (2,8,6,6) G2 fp32 CL +silu |" in table
    assert "| training-half | fwd+bwd | (2,8,6,6) G2 bf16 CL |" in table
    assert "Liger-Kernel not timed:" in table
    assert table.strip() in run.stdout, "the markdown table is printed to stdout"


def test_time_limit_skips_the_remaining_rows(tmp_path):
    """A limit of 0 s starts no row: every planned row is recorded as skipped, and the files are still written."""
    command = [sys.executable, str(BENCHMARKS / "bench_forward.py"), "--cpu-smoke", "--families", "unet,gn-silu",
               "--time-limit", "0", "--out", str(tmp_path)]
    run = subprocess.run(command, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stderr[-4000:]
    with open(next(tmp_path.glob("*.csv")), newline="") as f:
        lines = list(csv.DictReader(f))
    assert {line["section"] for line in lines} == {"unet", "gn-silu"} and len(lines) == 4, lines
    assert all("time limit" in line["note"] and line["median_ms"] == "" for line in lines), lines


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


def test_liger_ratios_and_flags():
    report = _load_report_module()
    Record = report.Record
    times = {"ours": 1.0, "eager": 3.0, "compile": 1.5, "liger": 0.8, "copy": 0.5}
    records = [Record(section="unet", direction="forward", row="r", shape="1x1", groups=1, dtype="fp16",
                      memory_format="channels_last", provider=p, median_ms=t, liger="timed", correct="yes")
               for p, t in times.items()]
    report.fill_ratios(records)
    ours = records[0]
    assert math.isclose(ours.speedup_vs_liger, 0.8) and math.isclose(ours.speedup_vs_compile, 1.5)
    na = [Record(section="gn-silu", direction="forward", row="s", shape="1x1", groups=1, dtype="fp16",
                 activation="silu", provider=p, median_ms=t, liger="n/a: no fused activation")
          for p, t in (("ours", 1.0), ("eager", 2.0), ("copy", 0.5))]
    na.append(Record(section="gn-silu", direction="forward", row="s", shape="1x1", groups=1, dtype="fp16",
                     activation="silu", provider="liger", liger="n/a: no fused activation",
                     note="n/a: no fused activation"))
    report.fill_ratios(na)
    summary = report.summarise(records + na)
    assert "unet r: ours is slower than liger (0.80x)" in summary.flags, summary.flags
    assert summary.liger_absent == {"n/a: no fused activation": ["gn-silu s"]}
    assert summary.rows_with_liger == 1 and math.isclose(summary.geomean_vs_liger, 0.8)
    info = report.RunInfo(device="d", torch="t", cuda="c", package="p", date="today", timer="cuda-events",
                          liger_kernel="0.8.5")
    table = report.markdown_table(info, records + na)
    assert "Liger-Kernel 0.8.5" in table and "| gn-silu | forward | s | 1.000 | 2.000 | - | n/a | 0.500 |" in table, table
    assert "- n/a: no fused activation: gn-silu s" in table, table


OLD_CSV = BENCHMARKS / "results" / "nvidia-h100-2026-11-22-2.csv"   # written before the families existed


def test_old_csv_layout_is_read():
    """A CSV written before the families (section = direction, no direction/liger columns) still loads, and
    its table and chart can be redrawn."""
    report = _load_report_module()
    info, records = report.read_csv(OLD_CSV)
    assert info.device.startswith("NVIDIA H100") and info.liger_kernel == ""
    pairs = {(r.section, r.direction) for r in records}
    assert pairs == {("forward", "forward"), ("training", "fwd+bwd"), ("training", "bwd")}, pairs
    first = records[0]
    assert first.row == "(112,64,512,512) G8 fp32" and first.provider == "ours" and first.median_ms > 0
    assert math.isnan(first.speedup_vs_liger) and first.liger == "" and first.memory_format == ""
    table = report.markdown_table(info, records)
    assert "| training | bwd | (56,64,512,512) G8 fp32 |" in table, table


def test_families_selection_and_cases():
    suite = _load_module("suite")
    chosen = suite.parse_families("kb35,forward", suite.FAMILIES)
    assert [f.name for f in chosen] == ["kb35", "forward"]
    planned = suite.plan_rows(chosen, "112,64,512,512", None)
    labels = [case.label for case, _ in planned]
    # #35 fp32 NCHW is in both families: it runs once, under kb35; forward's bf16/fp16 rows remain.
    assert labels.count("(112,64,512,512) G8 fp32") == 1 and planned[0][0].family == "kb35", labels
    assert "(112,64,512,512) G8 fp16" in labels and "(112,64,512,512) G8 fp32 CL" in labels
    assert [f.name for f in suite.parse_families("all", suite.FAMILIES)] == list(suite.NEW_FAMILIES)
    with pytest.raises(ValueError, match="unknown family 'unets'"):
        suite.parse_families("unets", suite.FAMILIES)
    cl_only = suite.plan_rows(suite.parse_families("all", suite.FAMILIES), None, None,
                              suite.parse_memory_formats("cl"))
    assert cl_only and all(case.memory_format == "channels_last" for case, _ in cl_only)
    assert {d for _, dirs in suite.plan_rows([suite.FAMILIES["training-half"]], None, None) for d in dirs} == {"fwd+bwd"}
    with pytest.raises(ValueError, match="channels_last needs a 4-D or 5-D shape"):
        suite.Case((4, 8, 16), 2, torch.float32, memory_format="channels_last")
    video = next(c for c in suite.FAMILIES["video"].rows if c.memory_format == "channels_last")
    assert video.torch_memory_format == torch.channels_last_3d and video.layout_name == "channels_last_3d"
    # The issue's representative shapes are all in the new families.
    shapes = {case.shape for name in suite.NEW_FAMILIES for case in suite.FAMILIES[name].rows}
    for shape in [(1, 320, 64, 64), (2, 320, 128, 128), (1, 512, 128, 128), (2, 1280, 32, 32), (2, 640, 64, 64),
                  (1, 128, 512, 512), (1, 256, 256, 256), (1, 128, 1024, 1024), (1, 128, 8, 128, 128),
                  (64, 32, 16, 16), (128, 64, 8, 8), (112, 64, 512, 512)]:
        assert shape in shapes, shape


def test_liger_applicability():
    liger = _load_module("liger_provider")
    cuda, cpu = torch.device("cuda"), torch.device("cpu")
    assert liger.unsupported_reason((2, 320, 64, 64), cuda, None) is None
    assert liger.unsupported_reason((1, 128, 8, 128, 128), cuda, None) is None    # 5-D: flattened per group
    assert "no fused activation (silu)" in liger.unsupported_reason((2, 320, 64, 64), cuda, "silu")
    assert "at least 3 dims" in liger.unsupported_reason((1024, 8192), cuda, None)
    assert "CUDA devices only" in liger.unsupported_reason((2, 320, 64, 64), cpu, None)
    assert liger.status() in ("available", "not installed") or liger.status().startswith("not importable")
    x = torch.rand(1, 4, 3, 3).contiguous(memory_format=torch.channels_last)
    assert "copied to NCHW" in liger.layout_note(x) and liger.layout_note(x.contiguous()) == ""


STAND_IN_LIGER = r"""
import sys
sys.path[:0] = [{benchmarks!r}, {root!r}]
import torch.nn.functional as F
import liger_provider

# Liger-Kernel as if installed and applicable on the CPU, with eager GroupNorm standing in for its kernel: the
# suite's Liger code paths (checks, timing, ratios, columns) run without a GPU.
liger_provider._state.update(status="available", function=None)
liger_provider.version = lambda: "stand-in"
liger_provider.unsupported_reason = lambda shape, device, activation: (
    f"no fused activation ({{activation}})" if activation else None)
liger_provider.group_norm_function = lambda groups, eps: (
    lambda x, weight, bias: F.group_norm(x, groups, weight, bias, eps))
import bench_forward
sys.exit(bench_forward.main(["--cpu-smoke", "--families", "unet,gn-silu,training-half,training", "--out", {out!r}]))
"""


def test_liger_columns_with_a_stand_in(tmp_path):
    code = STAND_IN_LIGER.format(benchmarks=str(BENCHMARKS), root=str(BENCHMARKS.parent), out=str(tmp_path))
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, f"exit {run.returncode}\nstderr:\n{run.stderr[-4000:]}"
    with open(next(tmp_path.glob("*.csv")), newline="") as f:
        lines = list(csv.DictReader(f))
    assert {line["liger_kernel"] for line in lines} == {"stand-in"}
    by_key = {(line["section"], line["direction"], line["row"], line["provider"]): line for line in lines}
    timed = [k for k, line in by_key.items() if k[3] == "liger" and line["liger"] == "timed"]
    assert {k[:2] for k in timed} == {("unet", "forward"), ("training-half", "fwd+bwd"), ("training", "fwd+bwd"),
                                      ("training", "bwd")}, timed
    for key in timed:
        liger, eager, ours = by_key[key], by_key[key[:3] + ("eager",)], by_key[key[:3] + ("ours",)]
        assert float(liger["median_ms"]) > 0 and liger["correct"] == "yes", liger
        # The stand-in is eager GroupNorm on the same (unseeded, random) inputs: its error column must be eager's,
        # exactly. (A fixed bound here failed at random: bfloat16 gradients of some draws are off by 0.09.)
        assert float(liger["max_abs_err"]) == float(eager["max_abs_err"]), (liger, eager)
        speedup = float(liger["median_ms"]) / float(ours["median_ms"])
        assert math.isclose(float(ours["speedup_vs_liger"]), speedup, rel_tol=1e-4), (ours["speedup_vs_liger"], speedup)
    cl = by_key[("unet", "forward", "(2,16,6,6) G4 fp32 CL", "liger")]
    assert "copied to NCHW" in cl["note"], cl["note"]
    silu = by_key[("gn-silu", "forward", "(2,8,6,6) G2 fp32 +silu", "liger")]
    assert silu["liger"] == "n/a: no fused activation (silu)" and silu["median_ms"] == "", silu
    table = next(tmp_path.glob("*.md")).read_text()
    assert "over Liger-Kernel (" in table and "- n/a: no fused activation (silu): gn-silu" in table, table


def test_cpu_kernels_check_quick_table(tmp_path):
    """benchmarks/cpu_kernels_check.py --quick: every row of its table checked against float64 (check <= 1), with
    times, ratios and the page-fault column (ours / PyTorch per call, forward; forward + backward)."""
    out = tmp_path / "cpu.md"
    command = [sys.executable, str(BENCHMARKS / "cpu_kernels_check.py"), "--quick", "--reps", "1", "--threads", "1",
               "--out", str(out)]
    run = subprocess.run(command, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, f"exit {run.returncode}\nstdout:\n{run.stdout}\nstderr:\n{run.stderr[-4000:]}"
    rows = [line for line in out.read_text().splitlines() if line.startswith("| 1 |")]
    assert len(rows) == 2 * 4 * 2, rows  # two shapes x four dtypes x two layouts
    for line in rows:
        cells = [c.strip() for c in line.strip("|").split("|")]
        assert len(cells) == 12, line
        assert float(cells[10]) <= 1.0, f"check failed: {line}"
        assert all(float(cells[i].strip("*")) > 0 for i in (4, 5, 6, 7, 8, 9)), line
        forward, training = cells[11].split("; ")
        for pair in (forward, training):
            ours, theirs = pair.split(" / ")
            assert float(ours) >= 0 and float(theirs) >= 0, line


def test_cpu_rows_ab_every_mode():
    """benchmarks/cpu_rows_ab.py: one line per row with both times and their ratio, for every mode (and two with an
    activation); an unknown mode, or an activation on a mode that takes none, is refused by name."""
    modes = ["fwd", "cl", "silu", "clsilu", "bwd", "clbwd", "fb", "clfb", "bwd+tanh", "clfb+silu"]
    rows = [f"2,8,3,5:2:{'bf16' if i % 2 else 'fp32'}:{mode}" for i, mode in enumerate(modes)]
    command = [sys.executable, str(BENCHMARKS / "cpu_rows_ab.py"), "--threads", "1", "--reps", "3", *rows]
    run = subprocess.run(command, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, f"exit {run.returncode}\nstdout:\n{run.stdout}\nstderr:\n{run.stderr[-4000:]}"
    lines = [line.split() for line in run.stdout.splitlines() if line.startswith("2,8,3,5:")]
    assert [line[0] for line in lines] == rows, run.stdout
    for line in lines:
        assert line[1] == "ours" and line[3] == "torch" and line[5] == "ratio", line
        ours, torch_time, ratio = float(line[2]), float(line[4]), float(line[6])
        assert ours > 0 and torch_time > 0 and abs(ratio - ours / torch_time) < 0.03 + 0.03 * ratio, line
    bad = subprocess.run([sys.executable, str(BENCHMARKS / "cpu_rows_ab.py"), "2,8,3,5:2:fp32:sideways"],
                         capture_output=True, text=True, timeout=900)
    assert bad.returncode != 0 and "unknown mode 'sideways'" in bad.stdout + bad.stderr
    bad = subprocess.run([sys.executable, str(BENCHMARKS / "cpu_rows_ab.py"), "2,8,3,5:2:fp32:fwd+tanh"],
                         capture_output=True, text=True, timeout=900)
    assert bad.returncode != 0 and "fwd+tanh" in bad.stdout + bad.stderr


@pytest.mark.parametrize("script", sorted(p.name for p in BENCHMARKS.glob("*.py")))
def test_benchmark_script_compiles(script, tmp_path):
    """Every benchmark script at least parses and compiles here: most of them need a GPU to run, so CI would
    otherwise not notice a syntax error in one until it reaches the device."""
    import py_compile
    py_compile.compile(str(BENCHMARKS / script), cfile=str(tmp_path / "script.pyc"), doraise=True)

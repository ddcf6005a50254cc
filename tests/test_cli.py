"""`python -m groupnorm_inline ...`: list, show-config, clear-cache, check, eval and their failure modes.

Every command runs in a subprocess, as users run it, with GROUPNORM_INLINE_CACHE_DIR pointing at a
temporary folder: commands that must not build can then be seen not to.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from groupnorm_inline.jit import manifest
from groupnorm_inline.problems import PROBLEMS

from export_builds import export_build_environment, export_builds_dir

REPO_ROOT = Path(__file__).resolve().parents[1]


def run_cli(*args, cache_dir=None, env_overrides=None, timeout=900):
    environ = dict(os.environ, PYTHONPATH=str(REPO_ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    environ.pop("TORCH_EXTENSIONS_DIR", None)
    if cache_dir is not None:
        environ["GROUPNORM_INLINE_CACHE_DIR"] = str(cache_dir)
    environ.update(env_overrides or {})
    return subprocess.run([sys.executable, "-m", "groupnorm_inline", *args], cwd=REPO_ROOT, env=environ,
                          capture_output=True, text=True, timeout=timeout)


def assert_one_line_error(proc, code, *fragments):
    """Exit `code`, exactly one line on stderr naming the problem, and no traceback."""
    # torch's own log lines (glog style, "W1122 01:29:28.28 ..."), e.g. cpp_extension's "No CUDA runtime", aside.
    lines = [line for line in proc.stderr.splitlines() if line.strip() and not re.match(r"[IWE]\d{4} ", line)]
    assert proc.returncode == code, f"exit {proc.returncode}, expected {code}\n{proc.stdout}\n{proc.stderr}"
    assert "Traceback" not in proc.stderr, proc.stderr
    assert len(lines) == 1, f"expected one line on stderr, got:\n{proc.stderr}"
    for fragment in fragments:
        assert fragment in lines[0], f"{fragment!r} not in {lines[0]!r}"


# ---------------------------------------------------------------- commands that never build


def test_list_shows_problems_and_shapes_without_building(tmp_path):
    proc = run_cli("list", cache_dir=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "1/35" in proc.stdout and "35_GroupNorm_" in proc.stdout
    assert "float32(112, 64, 512, 512)" in proc.stdout and "init inputs: 64, 8" in proc.stdout
    for fragment in ("2/94   94_Gemm_BiasAdd_Hardtanh_Mish_GroupNorm", "inputs: float32(1024, 8192)",
                     "init inputs: 8192, 8192, (8192,), 256",
                     "--small inputs: float32(6, 96); init inputs: 96, 256, (256,), 8",
                     "2/92   92_Conv2d_GroupNorm_Tanh_HardSwish_ResidualAdd_LogSumExp",
                     "inputs: float32(128, 8, 128, 128)", "--small inputs: float32(2, 8, 21, 19)",
                     "generated from the source of groupnorm_inline.problems.level2_94_gemm_mish_group_norm"):
        assert fragment in proc.stdout, proc.stdout
    assert proc.stdout.count("export/eval: yes") == len(PROBLEMS) and "no recipe yet" not in proc.stdout
    for key in ("2/11", "2/19", "2/21", "2/23", "2/27", "2/30", "2/37", "2/60", "2/61", "2/62", "2/75", "2/83", "2/85",
                "2/88"):
        assert f"{key}   {PROBLEMS[key].file_name}" in proc.stdout
    assert list(tmp_path.iterdir()) == [], "list started a build"


@pytest.mark.parametrize("file_name, key", [("94_Gemm_BiasAdd_Hardtanh_Mish_GroupNorm", "2/94"),
                                            ("92_Conv2d_GroupNorm_Tanh_HardSwish_ResidualAdd_LogSumExp.py", "2/92")])
def test_export_by_kernelbench_file_name(file_name, key, tmp_path):
    """A level 2 problem exported by its KernelBench file name is its export by level/number; nothing builds."""
    by_name = run_cli("export", file_name, cache_dir=tmp_path)
    by_key = run_cli("export", key, cache_dir=tmp_path)
    assert by_name.returncode == 0 and by_key.returncode == 0, by_name.stderr + by_key.stderr
    assert by_name.stdout == by_key.stdout and "class ModelNew(nn.Module):" in by_name.stdout
    assert f"_export_l{key.replace('/', '_')}_" in by_name.stdout
    assert list(tmp_path.iterdir()) == [], "export started a build"


def test_show_config_reports_plan_without_building(tmp_path):
    proc = run_cli("show-config", cache_dir=tmp_path)
    assert proc.returncode == 0, proc.stderr
    for fragment in ("groupnorm_inline ", "torch ", "target archs:", f"cache root: {tmp_path}",
                     "extension groupnorm_inline_C", "state: not built"):
        assert fragment in proc.stdout, proc.stdout
    assert list(tmp_path.iterdir()) == [], "show-config started a build"


def test_show_config_sees_a_finished_build(tmp_path):
    config = json.loads(run_cli("show-config", "--json", cache_dir=tmp_path).stdout)
    core = next(e for e in config["extensions"] if e["name"] == "groupnorm_inline_C")
    assert core["built"] is False and core["build_dir"].startswith(str(tmp_path))
    assert config["torch"] == torch.__version__ and config["cache_root_from"] == "GROUPNORM_INLINE_CACHE_DIR"
    # What a finished build leaves behind (see groupnorm_inline.jit.build).
    build_dir = Path(core["build_dir"])
    build_dir.mkdir(parents=True)
    (build_dir / "libgn.so").write_bytes(b"\x7fELF" + bytes(range(256)) * 4)
    manifest.write(build_dir, core["key"], build_dir / "libgn.so", seconds=1.5)
    core = next(e for e in json.loads(run_cli("show-config", "--json", cache_dir=tmp_path).stdout)["extensions"]
                if e["name"] == "groupnorm_inline_C")
    assert core["built"] is True and core["seconds"] == 1.5, core
    # A truncated library is reported as the loader sees it: not loadable, and why.
    with open(build_dir / "libgn.so", "r+b") as f:
        f.truncate(100)
    core = next(e for e in json.loads(run_cli("show-config", "--json", cache_dir=tmp_path).stdout)["extensions"]
                if e["name"] == "groupnorm_inline_C")
    assert core["built"] is False and "truncated" in core["reason"], core
    (build_dir / "build_info.json").write_text(json.dumps({"key": "another", "library": "libgn.so"}))
    core = next(e for e in json.loads(run_cli("show-config", "--json", cache_dir=tmp_path).stdout)["extensions"]
                if e["name"] == "groupnorm_inline_C")
    assert core["built"] is False and "another build" in core["reason"]


def test_clear_cache_removes_only_our_entries(tmp_path):
    ours = ["groupnorm_inline_C-py311-torch2.14.1-cpu-0123456789abcdef",
            "groupnorm_inline_C-py312-torch2.11.0-cu130-sm90_100-fedcba9876543210",
            "groupnorm_inline_export_l1_35_0a1b2c3d_cuda_4e5f6a7b"]
    foreign = ["other_extension", "groupnorm_inline_notes", "my-build-0123456789abcdef"]
    for name in ours + foreign:
        (tmp_path / name).mkdir()
        (tmp_path / name / "lib.so").write_bytes(b"x" * 1000)
    (tmp_path / (ours[0] + ".lock")).write_text("")
    (tmp_path / "foreign.lock").write_text("")
    # A build in progress: another process holds this entry's build lock.
    busy = "groupnorm_inline_C-py311-torch2.14.1-cpu-aaaaaaaaaaaaaaaa"
    (tmp_path / busy).mkdir()
    (tmp_path / (busy + ".lock")).write_text("4242\n")
    holder = os.open(tmp_path / (busy + ".lock"), os.O_RDWR)
    fcntl.flock(holder, fcntl.LOCK_EX)
    try:
        dry = run_cli("clear-cache", "--dry-run", cache_dir=tmp_path)
        assert dry.returncode == 0 and dry.stdout.count("would remove") == 4, dry.stdout
        assert all((tmp_path / name).exists() for name in ours)
        proc = run_cli("clear-cache", cache_dir=tmp_path)
    finally:
        os.close(holder)
    assert proc.returncode == 0, proc.stderr
    left = sorted(p.name for p in tmp_path.iterdir())
    assert left == sorted(foreign + ["foreign.lock", busy, busy + ".lock"]), left
    assert "process 4242 holds its build lock" in proc.stdout
    assert "4 entries removed" in proc.stdout


def test_clear_cache_on_missing_root(tmp_path):
    proc = run_cli("clear-cache", cache_dir=tmp_path / "absent")
    assert proc.returncode == 0 and "nothing to remove" in proc.stdout
    assert not (tmp_path / "absent").exists()


# ---------------------------------------------------------------- bad input


@pytest.mark.parametrize("command", [["export", "9/99"], ["eval", "9/99"], ["export", "36_RMSNorm_"]])
def test_unknown_problem_is_one_line_and_exit_2(command, tmp_path):
    assert_one_line_error(run_cli(*command, cache_dir=tmp_path), 2, "unknown problem", "1/35 (35_GroupNorm_)")


def test_check_of_missing_file(tmp_path):
    assert_one_line_error(run_cli("check", str(tmp_path / "nope.py")), 2, "no such file")


def test_check_rejects_a_fallback(tmp_path):
    path = tmp_path / "candidate.py"
    path.write_text("from torch.utils.cpp_extension import load_inline\nK = '__global__'\n"
                    "try:\n    import x\nexcept ImportError:\n    x = None\n")
    proc = run_cli("check", str(path))
    assert proc.returncode == 1 and "REJECTED" in proc.stdout and "'try'" in proc.stdout, proc.stdout


def test_eval_without_gpu_is_one_line_and_exit_3(tmp_path):
    proc = run_cli("eval", "1/35", cache_dir=tmp_path, env_overrides={"CUDA_VISIBLE_DEVICES": ""})
    assert_one_line_error(proc, 3, "needs a CUDA GPU", "--device cpu --small")


def test_eval_on_cpu_needs_small(tmp_path):
    assert_one_line_error(run_cli("eval", "1/35", "--device", "cpu", cache_dir=tmp_path), 2, "add --small")


# ---------------------------------------------------------------- eval on the CPU

# Candidates written in plain PyTorch: they need no build, so the harness logic is tested in seconds.
_WRONG_CANDIDATE = '''
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, num_features, num_groups):
        super().__init__()
        self.gn = nn.GroupNorm(num_groups, num_features)

    def forward(self, x):
        y = self.gn(x)
        y[0, 0, 0, 0] += 0.01
        return y
'''

_INPLACE_CANDIDATE = '''
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, num_features, num_groups):
        super().__init__()
        self.gn = nn.GroupNorm(num_groups, num_features)

    def forward(self, x):
        y = self.gn(x)
        x.mul_(2.0)
        return y
'''


@pytest.mark.parametrize("candidate, fragment", [
    (_WRONG_CANDIDATE, "elements differ beyond atol=rtol=0.0001"),
    (_INPLACE_CANDIDATE, "modified its input tensors"),
    ("import torch\n", "defines no ModelNew"),
    ("def broken(:\n", "not valid Python"),
])
def test_eval_reports_failing_candidates(candidate, fragment, tmp_path):
    path = tmp_path / "candidate.py"
    path.write_text(candidate)
    result = tmp_path / "result.json"
    proc = run_cli("eval", "1/35", "--device", "cpu", "--small", "--file", str(path), "--skip-static-check",
                   "--no-timing", "--quiet", "--json", str(result), cache_dir=tmp_path)
    assert_one_line_error(proc, 1, fragment)
    data = json.loads(result.read_text())
    assert data["passed"] is False and fragment in data["error"]


def test_eval_applies_static_rules_to_candidates(tmp_path):
    path = tmp_path / "candidate.py"
    path.write_text(_WRONG_CANDIDATE)
    proc = run_cli("eval", "1/35", "--device", "cpu", "--small", "--file", str(path), cache_dir=tmp_path)
    assert_one_line_error(proc, 1, "static rules", "__global__")


# The inputs each problem's --small run draws (the recipes' small constants).
SMALL_INPUTS = {"1/35": "float32(2, 64, 30, 30)", "2/94": "float32(6, 96)", "2/92": "float32(2, 8, 21, 19)",
                "2/85": "float32(2, 3, 13, 15)"}


@pytest.mark.parametrize("key", sorted(SMALL_INPUTS))
def test_eval_cpu_smoke_run_of_the_export(key, tmp_path, tmp_path_factory):
    """The whole flow on the CPU at the reduced shape: export, build (shared with test_export), seeded
    construction, 5 trials, timing of ours and eager."""
    result = tmp_path / "result.json"
    proc = run_cli("eval", key, "--device", "cpu", "--small", "--trials", "3", "--no-compile",
                   "--build-dir", str(export_builds_dir(tmp_path_factory)), "--json", str(result),
                   cache_dir=tmp_path, env_overrides=export_build_environment(key), timeout=1800)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "result: PASSED" in proc.stdout
    data = json.loads(result.read_text())
    assert data["passed"] and data["error"] is None and data["static_check"]["ok"]
    assert data["shapes"]["inputs"] == SMALL_INPUTS[key]
    trials = data["correctness"]["trials"]
    assert len(trials) == 5 and all(t["passed"] and t["inputs_unchanged"] for t in trials)
    assert len({t["seed"] for t in trials}) == 5
    assert max(t["max_abs_diff"] for t in trials) < 1e-4
    assert set(data["timing"]) == {"ours", "eager"} and data["timing"]["ours"]["trials"] == 3
    assert data["state_dict_keys_match"] is True
    assert data["speedup"]["vs_eager"] > 0


# ---------------------------------------------------------------- on a GPU


@pytest.mark.cuda
def test_eval_out_of_memory_is_one_line(tmp_path, tmp_path_factory):
    """At the real #35 shape (~23 GB) under a 2 GB cap: one line with the estimate, exit 3."""
    proc = run_cli("eval", "1/35", "--max-memory", "2", "--no-timing", "--quiet",
                   "--build-dir", str(export_builds_dir(tmp_path_factory)), cache_dir=tmp_path, timeout=1800)
    assert_one_line_error(proc, 3, "out of GPU memory", "needs about 22.8 GB", "--max-memory")


@pytest.mark.cuda
@pytest.mark.parametrize("key", sorted(SMALL_INPUTS))
def test_eval_small_on_gpu(key, tmp_path, tmp_path_factory):
    """--small on the GPU: the export's CUDA kernels at the reduced shape through the harness flow."""
    result = tmp_path / "result.json"
    proc = run_cli("eval", key, "--small", "--trials", "5", "--no-compile", "--quiet", "--json", str(result),
                   "--build-dir", str(export_builds_dir(tmp_path_factory)), cache_dir=tmp_path, timeout=1800)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = json.loads(result.read_text())
    assert data["passed"] and data["shapes"]["inputs"] == SMALL_INPUTS[key]
    trials = data["correctness"]["trials"]
    assert len(trials) == 5 and all(t["passed"] and t["inputs_unchanged"] for t in trials), trials
    assert data["timing"]["ours"]["trials"] == 5


@pytest.mark.cuda
@pytest.mark.slow
@pytest.mark.parametrize("key", sorted(SMALL_INPUTS))
def test_eval_full_flow_on_gpu(key, tmp_path, tmp_path_factory):
    """The complete harness replay at the real shape, with timing of ours, eager and torch.compile."""
    result = tmp_path / "result.json"
    proc = run_cli("eval", key, "--trials", "20", "--quiet", "--json", str(result),
                   "--build-dir", str(export_builds_dir(tmp_path_factory)), cache_dir=tmp_path, timeout=1800)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = json.loads(result.read_text())
    assert data["passed"] and set(data["timing"]) == {"ours", "eager", "torch.compile"}
    for stats in data["timing"].values():
        assert stats["trials"] == 20 and stats["min_ms"] > 0 and stats["peak_bytes"] > 0
    assert data["speedup"]["vs_eager"] > 0 and data["speedup"]["vs_compile"] > 0


# ---------------------------------------------------------------- harness helpers (in process)


def test_compare_outputs_is_the_harness_allclose():
    from groupnorm_inline.cli.harness import compare_outputs

    ref = torch.zeros(3, 4, 5, dtype=torch.float64)
    out = ref.clone()
    out[0, 1, 2] = 1.00005e-4  # within tol + tol * |out|, not within tol + tol * |ref|: allclose(ref, out) passes
    assert torch.allclose(ref, out, atol=1e-4, rtol=1e-4)
    worst, mismatches, first = compare_outputs(out, ref, 1e-4)
    assert mismatches == 0 and worst == pytest.approx(1.00005e-4) and first is None
    out[1, 2, 3] = float("nan")
    out[2, 0, 1] = 0.5
    worst, mismatches, first = compare_outputs(out, ref, 1e-4)
    assert mismatches == 2 and worst == 0.5 and first.startswith("at (1, 2, 3): ours nan")


def test_bitwise_equal_sees_any_change():
    from groupnorm_inline.cli.harness import _bitwise_equal

    x = torch.rand(1000)
    assert _bitwise_equal(x, x.clone())
    y = x.clone()
    y[999] = torch.nextafter(y[999], torch.tensor(2.0))
    assert not _bitwise_equal(y, x)
    assert not _bitwise_equal(torch.tensor([-0.0]), torch.tensor([0.0]))

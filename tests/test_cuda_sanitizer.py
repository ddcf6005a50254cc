"""compute-sanitizer over the CUDA kernels on small cases covering every launch path: memcheck (out-of-bounds and
misaligned accesses), racecheck (shared-memory hazards), synccheck (barrier misuse), initcheck (reads of device
memory nobody wrote, e.g. a partial-sums buffer with a hole). Each tool runs the script below in a fresh process
(~1-3 min each: the tools slow down loading torch's own CUDA libraries too)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import groupnorm_inline
from groupnorm_inline.jit import env

pytestmark = [pytest.mark.cuda, pytest.mark.slow]

# Inputs are made on the CPU and copied over, and the references computed on the CPU, so that almost every
# kernel the tools watch is one of ours.
SANITIZED_SCRIPT = r"""
import torch
import torch.nn.functional as F

import groupnorm_inline

CASES = [
    # (shape, groups, dtype, affine, misaligned)
    ((2, 6, 7, 9), 3, torch.float32, True, False),      # one CTA per slice, vectors crossing channels
    ((1, 8, 300, 301), 2, torch.float32, True, False),  # few long slices: split plan (partial sums, finalize)
    ((3, 5, 99, 97), 5, torch.float16, True, False),    # odd slice length: element-wise path
    ((4, 32, 16, 16), 8, torch.bfloat16, False, False), # no affine
    ((2, 4, 1000), 2, torch.float64, True, False),
    ((2, 8, 64, 64), 4, torch.float32, True, True),     # data pointer not 16-byte aligned
    ((1, 4, 200, 203), 2, torch.float16, True, True),   # misaligned, split plan
    ((5, 12), 12, torch.float32, True, False),          # (N, C), one element per slice
]
torch.manual_seed(0)
for shape, groups, dtype, affine, misaligned in CASES:
    n = 1
    for s in shape:
        n *= s
    storage = torch.randn(n + 1, dtype=torch.float64).to(dtype)
    x_cpu = (storage[1:] if misaligned else storage[:n]).view(shape)
    x = storage.cuda()[1:].view(shape) if misaligned else x_cpu.cuda()
    w_cpu = torch.randn(shape[1]).to(dtype) if affine else None
    b_cpu = torch.randn(shape[1]).to(dtype) if affine else None
    out = groupnorm_inline.group_norm(x, groups, None if w_cpu is None else w_cpu.cuda(),
                                      None if b_cpu is None else b_cpu.cuda())
    expected = F.group_norm(x_cpu.double(), groups, None if w_cpu is None else w_cpu.double(),
                            None if b_cpu is None else b_cpu.double())
    err = (out.cpu().double() - expected).abs().max().item()
    assert err < 5e-2, (shape, dtype, err)
torch.cuda.synchronize()
print("sanitized script done")
"""


def find_compute_sanitizer() -> str | None:
    home = env.cuda_home()
    candidates = [shutil.which("compute-sanitizer")]
    if home:
        candidates += [os.path.join(home, "bin", "compute-sanitizer"),
                       os.path.join(home, "compute-sanitizer", "compute-sanitizer")]
    return next((c for c in candidates if c and os.access(c, os.X_OK)), None)


@pytest.mark.parametrize("tool", ["memcheck", "racecheck", "synccheck", "initcheck"])
def test_compute_sanitizer_finds_nothing(tool, tmp_path):
    sanitizer = find_compute_sanitizer()
    if sanitizer is None:
        pytest.skip("compute-sanitizer not found (on PATH or in the CUDA toolkit)")
    script = tmp_path / "sanitized.py"
    script.write_text(SANITIZED_SCRIPT)
    repo_root = Path(groupnorm_inline.__file__).resolve().parent.parent
    run_env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(repo_root), os.environ.get("PYTHONPATH")])))
    result = subprocess.run([sanitizer, "--tool", tool, "--error-exitcode", "9", "--print-limit", "20",
                             sys.executable, str(script)], capture_output=True, text=True, timeout=900, env=run_env)
    report = (result.stdout + result.stderr)[-6000:]
    assert result.returncode == 0, f"compute-sanitizer --tool {tool} exit code {result.returncode}:\n{report}"
    assert "sanitized script done" in result.stdout, report
    # memcheck/synccheck/initcheck close with "ERROR SUMMARY: 0 errors"; racecheck with
    # "RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)".
    summary = "RACECHECK SUMMARY: 0 hazards displayed (0 errors" if tool == "racecheck" else "ERROR SUMMARY: 0 errors"
    assert summary in result.stdout + result.stderr, report

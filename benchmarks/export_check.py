"""Does an exported single-file submission run as fast as the package's ModelNew? One process, side by side.

    python benchmarks/export_check.py --problems 2/92,2/94

For each problem: `export_source` writes the submission to a temporary folder, the file is imported as its own
module (it builds its own extensions, operators renamed, as KernelBench's scripted flow loads it), and the
package's ModelNew, the exported ModelNew and the reference Model are built the way the harness builds them
(`torch.manual_seed(42)` before each, float32 on the GPU) on the same get_inputs(). Outputs of the package and
of the export are compared bitwise (same kernels, same inputs: they must agree exactly), then each is timed with
CUDA events and an L2 flush before every call, alternating package / export / reference in three rounds so that
clock drift touches all of them alike. Log: $OUT/export_check.txt when OUT is set.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from timing import L2Flusher, TimingPlan, time_cuda  # noqa: E402

LOG: list[str] = []


def log(text: str = "") -> None:
    print(text, flush=True)
    LOG.append(text)


def load_export(key: str, folder: str):
    from groupnorm_inline.cli import export
    from groupnorm_inline.problems import find

    text = export.export_source(find(key))
    path = os.path.join(folder, f"export_{key.replace('/', '_')}.py")
    with open(path, "w") as f:
        f.write(text)
    spec = importlib.util.spec_from_file_location(f"export_{key.replace('/', '_')}", path)
    module = importlib.util.module_from_spec(spec)
    start = time.time()
    spec.loader.exec_module(module)  # builds the file's own extensions
    return module, time.time() - start


def build(cls, init_inputs):
    torch.manual_seed(42)
    return cls(*init_inputs).cuda().eval()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--problems", default="2/92")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    from groupnorm_inline.problems import find

    flusher = L2Flusher(torch.device("cuda"))
    plan = TimingPlan(warmup=3, min_iters=20, max_iters=100, target_s=0.5)
    log(f"# export_check on {torch.cuda.get_device_name()}, torch {torch.__version__}, "
        f"TORCH_CUDA_ARCH_LIST={os.environ.get('TORCH_CUDA_ARCH_LIST', '(unset)')}")
    ok = True
    with tempfile.TemporaryDirectory() as folder:
        for key in [k.strip() for k in args.problems.split(",") if k.strip()]:
            package = importlib.import_module(f"groupnorm_inline.problems.{find(key).module}")
            exported, build_s = load_export(key, folder)
            init = package.get_init_inputs()
            torch.manual_seed(42)
            inputs = [t.cuda() if isinstance(t, torch.Tensor) else t for t in package.get_inputs()]
            ours, theirs, ref = build(package.ModelNew, init), build(exported.ModelNew, init), build(package.Model, init)
            with torch.no_grad():
                a, b = ours(*inputs), theirs(*inputs)
                torch.cuda.synchronize()
                same = torch.equal(a, b)
                ok &= same
                times = {"package": [], "export": [], "eager": []}
                for _ in range(args.rounds):
                    for name, model in (("package", ours), ("export", theirs), ("eager", ref)):
                        times[name].append(time_cuda(lambda m=model: m(*inputs), plan, flusher).median_ms)
            med = {k: statistics.median(v) for k, v in times.items()}
            log(f"{key}: export built in {build_s:.0f} s; outputs bitwise equal: {same}; median of {args.rounds} "
                f"rounds (ms): package {med['package']:.3f}, export {med['export']:.3f} "
                f"(export / package {med['export'] / med['package']:.3f}), eager {med['eager']:.3f}; per round "
                + ", ".join(f"{k} " + "/".join(f"{t:.3f}" for t in v) for k, v in times.items()))
    out = os.environ.get("OUT")
    if out:
        os.makedirs(out, exist_ok=True)
        with open(os.path.join(out, "export_check.txt"), "w") as f:
            f.write("\n".join(LOG) + "\n")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

"""One KernelBench family problem's ModelNew at its real shape, run twice (a warm-up, then the call to profile),
for Nsight Compute:

    ncu --kernel-name regex:cl_pooled --launch-skip 1 --launch-count 1 --section SpeedOfLight \\
        python benchmarks/ncu_family.py --problem 11
"""

from __future__ import annotations

import argparse
import sys

import torch


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problem", required=True, help="the level 2 problem number, e.g. 11")
    args = parser.parse_args()
    sys.argv = ["-m"]  # build only the extensions the problem imports (see groupnorm_inline/__init__.py)
    from groupnorm_inline.problems import import_problem  # noqa: PLC0415

    module = import_problem(f"2/{args.problem}" if "/" not in args.problem else args.problem)
    torch.manual_seed(0)
    model = module.ModelNew(*module.get_init_inputs()).cuda()
    inputs = [t.cuda() if isinstance(t, torch.Tensor) else t for t in module.get_inputs()]
    with torch.no_grad():
        for _ in range(2):
            model(*inputs)
    torch.cuda.synchronize()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

#!/usr/bin/env bash
# The row-family suite in one GPU machine call (no internet there): install a carried Liger-Kernel wheel if
# one is present, then build the package (first import) and run bench_forward.py over the families.
#
#   pip download liger-kernel --no-deps -d build/wheels     # beforehand, on a machine with internet
#   bash benchmarks/run_device_suite.sh                     # on the GPU machine, from the repository root
#
# Environment: FAMILIES (default "all"), TIME_LIMIT (seconds after which no new row starts; default 300, so
# that build + rows + outputs stay under 8 minutes on an H100/H200), OUT (output folder; default
# benchmarks/results), PYTHON (default python). Extra arguments go to bench_forward.py (e.g. --quick,
# --memory-formats cl, --rows '1,128').
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python}
OUT_DIR=${OUT:-benchmarks/results}
mkdir -p "$OUT_DIR"
LOG="$OUT_DIR/suite-$(date +%Y%m%d-%H%M%S).log"

shopt -s nullglob
wheels=(build/wheels/liger_kernel-*.whl)
if ((${#wheels[@]})); then
    # --no-deps: Liger-Kernel needs torch and triton, which a CUDA build of torch brings; --no-index: offline.
    "$PYTHON" -m pip install --quiet --no-deps --no-index "${wheels[-1]}" 2>&1 | tee -a "$LOG"
else
    echo "no build/wheels/liger_kernel-*.whl: the Liger-Kernel column will say 'not installed'" | tee -a "$LOG"
fi

start=$(date +%s)
"$PYTHON" -m groupnorm_inline show-config 2>&1 | tee -a "$LOG"
"$PYTHON" -c "import groupnorm_inline" 2>&1 | tee -a "$LOG"      # the build, timed apart from the rows
echo "build/load: $(( $(date +%s) - start )) s" | tee -a "$LOG"
"$PYTHON" benchmarks/bench_forward.py --families "${FAMILIES:-all}" --time-limit "${TIME_LIMIT:-300}" \
    --out "$OUT_DIR" "$@" 2>&1 | tee -a "$LOG"
echo "total: $(( $(date +%s) - start )) s; log $LOG" | tee -a "$LOG"

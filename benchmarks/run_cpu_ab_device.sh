#!/usr/bin/env bash
# The device machine's host CPU: this checkout against the package in $BASELINE (a folder holding another
# version's groupnorm_inline/ and benchmarks/, e.g. `git archive <commit> groupnorm_inline benchmarks | tar -x -C
# build/base`), both CPU-only builds with warnings as errors, each into its own cache. Then pytest -m "not cuda" of
# the CPU kernels' tests on this checkout (unless NO_TESTS=1), then benchmarks/cpu_rows_ab.py over the rows given
# as arguments, baseline and this checkout alternating, $ROUNDS rounds (default 2), at each thread count of
# $THREADS (default "2 16"). Logs under $OUT.
#     BASELINE=build/base bash benchmarks/run_cpu_ab_device.sh 32,256,4,4:32:fp32:clbwd 8,64,32,32:32:fp32:bwd+tanh
set -uo pipefail
cd "$(dirname "$0")/.."
export GROUPNORM_INLINE_NO_CUDA=1 GROUPNORM_INLINE_WERROR=1
source benchmarks/device_env.sh
BASELINE=$(realpath "${BASELINE:?set BASELINE to a folder with the baseline package}")
baseline_cache=${GROUPNORM_INLINE_CACHE_DIR}-baseline
(cd "$BASELINE" && GROUPNORM_INLINE_CACHE_DIR=$baseline_cache PYTHONPATH="$BASELINE" "$PYTHON" -c \
    "import groupnorm_inline, torch; groupnorm_inline.group_norm(torch.randn(2, 4, 3), 2)") \
    > "$OUT/build-baseline.log" 2>&1 &
"$PYTHON" -c "import groupnorm_inline, torch; groupnorm_inline.group_norm(torch.randn(2, 4, 3), 2)" \
    > "$OUT/build-this.log" 2>&1
wait
tail -n 2 "$OUT/build-this.log" "$OUT/build-baseline.log"
echo "builds: $(elapsed)"
lscpu | grep -E "Model name|^CPU\(s\)" | tee "$OUT/cpu-model.txt"
if [[ "${NO_TESTS:-0}" != 1 ]]; then
    timeout 400 "$PYTHON" -m pytest tests/test_cpu_kernels.py tests/test_backward.py tests/test_activations.py \
        -m "not cuda" -q -p no:cacheprovider --tb=short 2>&1 | tail -n 15 | tee "$OUT/pytest-cpu.txt"
    echo "tests: $(elapsed)"
fi
for threads in ${THREADS:-2 16}; do
    for round in $(seq "${ROUNDS:-2}"); do
        for which in baseline this; do
            echo "== $threads threads, round $round, $which" | tee -a "$OUT/cpu-ab.txt"
            if [[ $which == baseline ]]; then
                (cd "$BASELINE" && GROUPNORM_INLINE_CACHE_DIR=$baseline_cache PYTHONPATH="$BASELINE" timeout 300 \
                    "$PYTHON" benchmarks/cpu_rows_ab.py --threads "$threads" --reps "${REPS:-300}" "$@")
            else
                timeout 300 "$PYTHON" benchmarks/cpu_rows_ab.py --threads "$threads" --reps "${REPS:-300}" "$@"
            fi 2>&1 | grep "ratio" | tee -a "$OUT/cpu-ab.txt"
        done
    done
done
echo "done: $(elapsed)"

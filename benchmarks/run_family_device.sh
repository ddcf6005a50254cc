#!/usr/bin/env bash
# The KernelBench-family GPU checks in one machine call: build the three extensions they use at once, then the
# steps named on the command line, each logged to $OUT.
#
#   bash benchmarks/run_family_device.sh tests sanitizer profile check compile
#
# Steps:
#   tests      pytest -m cuda of the family's test file (the real GPU kernels against eager and float64);
#              $TESTS_K narrows it (pytest -k)
#   cltests    pytest of the channels-last CUDA kernels (tests/test_channels_last_cuda.py), failures in full
#   clsanitizer  compute-sanitizer memcheck over channels_last_check.py --small (forward and backward)
#   rows       benchmarks/profile_rows.py over $PROFILE_ROWS (kernels of ours, eager, compile per row)
#   sanitizer  compute-sanitizer memcheck on the family's small CUDA tests (pooled input, input_bias,
#              channels_last input, pooled channels_last input, channel moments, the transpose)
#   bnstats    BatchNorm statistics of #11's convolution output: torch.var_mean against torch.batch_norm_stats
#   profile    benchmarks/profile_family.py over $PROFILE_PROBLEMS (default: the convolution problems)
#   check      benchmarks/check_kernelbench_family.py --no-compile over $CHECK_PROBLEMS (default: all)
#   compile    the same, timing only, with torch.compile, over $COMPILE_PROBLEMS
#   convvariants  benchmarks/conv_direct_variants.py: every tile of the direct convolution against cuDNN at the
#              family's real convolution shapes (correctness against float64, timings)
#   export     benchmarks/export_check.py over $EXPORT_PROBLEMS (default 2/92): the exported single file
#              against the package's ModelNew in one process (bitwise equal outputs, side-by-side timings)
# Environment: OUT (log folder, default benchmarks/results/device), GROUPNORM_INLINE_CACHE_DIR (default /tmp/gnc).
set -uo pipefail
cd "$(dirname "$0")/.."
source benchmarks/device_env.sh

# Three builds at once (the core kernels, the family operator, #94's GEMM kernels: one long nvcc each). The
# package builds its core kernels when imported, except while Python starts a module with -m; the two other
# builds pose as that case (argv[0] "-m") so that each compiles only its own extension.
"$PYTHON" -c "import groupnorm_inline" > "$OUT/build-core.log" 2>&1 &
"$PYTHON" -c "import sys; sys.argv = ['-m']; from groupnorm_inline.problems import family_kernels; \
family_kernels.load()" > "$OUT/build-family.log" 2>&1 &
"$PYTHON" -c "import sys; sys.argv = ['-m']; from groupnorm_inline.problems import level2_94_kernels; \
level2_94_kernels.load()" > "$OUT/build-p94.log" 2>&1 &
if [[ " $* " == *" export "* ]]; then  # #92's kernels too, for the package side of the export check
    "$PYTHON" -c "import sys; sys.argv = ['-m']; from groupnorm_inline.problems import level2_92_kernels; \
level2_92_kernels.load()" > "$OUT/build-p92.log" 2>&1 &
fi
if [[ " $* " == *" convvariants "* ]]; then  # the variants' own extension
    "$PYTHON" -c "import sys; sys.argv = ['-m']; sys.path.insert(0, 'benchmarks'); import conv_direct_variants as c; \
c.build(c.variants())" > "$OUT/build-conv-variants.log" 2>&1 &
fi
wait
tail -n 2 "$OUT"/build-*.log
echo "build/load: $(elapsed)"

for step in "$@"; do
    echo "== $step ($(elapsed))"
    case $step in
    tests)
        timeout 400 "$PYTHON" -m pytest tests/test_kernelbench_family.py -m cuda -q -p no:cacheprovider \
            ${TESTS_K:+-k "$TESTS_K"} 2>&1 | tail -n 30 | tee "$OUT/pytest-family-cuda.txt" ;;
    cltests)
        timeout 400 "$PYTHON" -m pytest tests/test_channels_last_cuda.py -m cuda -q -p no:cacheprovider --tb=short \
            2>&1 | tail -n 80 | tee "$OUT/pytest-channels-last-cuda.txt" ;;
    clsanitizer)
        timeout 300 compute-sanitizer --tool memcheck --error-exitcode 3 "$PYTHON" benchmarks/channels_last_check.py \
            --small --no-compile 2>&1 | tail -n 20 | tee "$OUT/sanitizer-channels-last.txt"
        echo "compute-sanitizer exit: $?" | tee -a "$OUT/sanitizer-channels-last.txt" ;;
    rows)
        timeout 300 "$PYTHON" benchmarks/profile_rows.py --rows "${PROFILE_ROWS:-}" 2>&1 | tail -n 150 ;;
    sanitizer)
        timeout 300 compute-sanitizer --tool memcheck --error-exitcode 3 "$PYTHON" -m pytest \
            tests/test_kernelbench_family.py -m cuda -q -p no:cacheprovider \
            -k "pooled_input or (input_bias and float32) or (channels_last_input and dtype0) or to_channels_last or conv3d or direct_kernel or (pooled_channels_last and not 512x64) or channel_moments" \
            2>&1 | tail -n 20 | tee "$OUT/sanitizer-family.txt"
        echo "compute-sanitizer exit: $?" | tee -a "$OUT/sanitizer-family.txt" ;;
    bnstats)
        "$PYTHON" - <<'EOF' 2>&1 | tee "$OUT/bnstats.txt"
import sys
import torch
sys.path.insert(0, "benchmarks")
from timing import L2Flusher, TimingPlan, time_cuda
x = torch.rand(512, 128, 34, 34, device="cuda") - 0.3
flusher, plan = L2Flusher(torch.device("cuda")), TimingPlan(warmup=3, min_iters=10, max_iters=50, target_s=0.5)
copy_ms = time_cuda(lambda: x.clone(), plan, flusher).mean_ms
vm = time_cuda(lambda: torch.var_mean(x, dim=[0, 2, 3], unbiased=False), plan, flusher).mean_ms
bs = time_cuda(lambda: torch.batch_norm_stats(x, 1e-5), plan, flusher).mean_ms
var, mean = torch.var_mean(x.double(), dim=[0, 2, 3], unbiased=False)
m2, invstd = torch.batch_norm_stats(x, 1e-5)
err = ((m2.double() - mean).abs().max().item(), (invstd.double() - 1 / torch.sqrt(var + 1e-5)).abs().max().item())
print(f"(512,128,34,34) fp32: copy {copy_ms:.3f} ms, var_mean {vm:.3f} ms, batch_norm_stats {bs:.3f} ms; "
      f"batch_norm_stats errors vs float64 (mean, invstd): {err[0]:.2e}, {err[1]:.2e}")
EOF
        ;;
    profile)
        timeout 300 "$PYTHON" benchmarks/profile_family.py --problems "${PROFILE_PROBLEMS:-11,19,21,23,27,60,61,83,85}" \
            2>&1 | tail -n 150 ;;
    check)
        timeout 560 "$PYTHON" benchmarks/check_kernelbench_family.py --no-compile ${CHECK_PROBLEMS:+--problems $CHECK_PROBLEMS} \
            2>&1 | tail -n 40 ;;
    convvariants)
        timeout 300 "$PYTHON" benchmarks/conv_direct_variants.py 2>&1 | tail -n 60 ;;
    export)
        timeout 400 "$PYTHON" benchmarks/export_check.py --problems "${EXPORT_PROBLEMS:-2/92}" 2>&1 | tail -n 20 ;;
    compile)
        timeout 560 "$PYTHON" benchmarks/check_kernelbench_family.py --timing-only \
            ${COMPILE_PROBLEMS:+--problems $COMPILE_PROBLEMS} 2>&1 | tail -n 40 ;;
    *) echo "unknown step $step" ;;
    esac
done
echo "total: $(elapsed)"

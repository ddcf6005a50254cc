#!/usr/bin/env bash
# The core operator's GPU checks in one machine call: build once, then the steps named on the command line,
# each logged to $OUT.
#
#   bash benchmarks/run_core_device.sh tests bwdcheck bwdpaths plans host sanitizer
#
# Steps:
#   tests      pytest -m cuda of the core op's GPU tests (backward, forward, channels-last, activations);
#              $TESTS_K narrows it (pytest -k)
#   fwdtests   pytest -m cuda of tests/test_cuda_forward.py alone (the NCHW forward plans, automatic and forced)
#   bwdcheck   benchmarks/check_backward_gpu.py: gradients against float64 with poisoned outputs, then ours /
#              eager / torch.compile backward timings
#   bwdpaths   the backward's long-row paths side by side, call by call: benchmarks/backward_path_check.py (row,
#              resident, the rule's choice, a streaming floor)
#   plans      benchmarks/plan_check.py timings of the forward plans $PLAN_VARIANTS (default
#              "auto;split;resident;fused") over $PLAN_ROWS (default "waves"); PLAN_COMPILE=1 adds torch.compile
#   forced     pytest -m cuda of tests/test_cuda_forward.py -k forced_plan: every forward plan forced by name on its
#              edge-case inputs, float64 references, poisoned outputs
#   sanplans   compute-sanitizer memcheck over benchmarks/plan_check.py --small (every forced plan's small cases)
#   werror     the C++ operators alone built with warnings as errors by this machine's host compiler (into a cache
#              of their own; the CUDA build of the other steps is left as it is)
#   planchecks benchmarks/plan_check.py's correctness cases (every plan forced, float64 references, poisoned
#              outputs), then compute-sanitizer memcheck over its --small cases
#   host       benchmarks/host_overhead.py: host time per call, piece by piece, of the small training rows
#   overhead   benchmarks/bench_overhead.py on the CPU and the GPU: host time per call of ours against
#              nn.GroupNorm at tiny shapes; with $BASELINE, the baseline's too
#   cputests   this machine's CPU: pytest -m "not cuda" of the CPU kernels' tests (tests/test_cpu_kernels.py,
#              test_backward.py, test_activations.py) on the build of the other steps, then bench_overhead.py
#              --shapes short (float32 and bfloat16, the host's threads capped at $CPU_THREADS, default 2)
#   apitests   pytest (CPU and CUDA cases) of the Python entry and the operators' contract: errors, opcheck,
#              torch.compile, functional and module tests
#   jit        pytest tests/test_jit.py -k package: the package's own build (CUDA included) recorded and loaded as
#              the JIT layer lays it out (attempt folder, library moved up, manifest)
#   random     benchmarks/random_rows.py on the GPU: $RANDOM_ROWS problems (default 60) of seed $RANDOM_SEED
#              (default 4), at most $RANDOM_LIMIT s of drawing (default 300), the table to $OUT
#   cpurandom  the same on this machine's CPU at $CPU_THREADS threads (default 4), seed $RANDOM_SEED
#   flagged    benchmarks/profile_rows.py --set flagged: kernels, event time and host time per call of the rows
#              random_rows.py flagged as slower than a baseline (ours, eager, compile); $FLAGGED_ROWS: some of them
#   sanitizer  compute-sanitizer memcheck over benchmarks/sanitizer_cases.py, with the automatic plans and paths,
#              then with the channels-last forward's fused and partly held plans forced (each with its groups
#              folded per CTA and finalised once: GROUPNORM_INLINE_CL_FOLD=1, 0) and three launches, then with
#              each backward path (row, resident) forced
#   racecheck  compute-sanitizer racecheck over the channels-last forward cases of sanitizer_cases.py (the block
#              plan's shared and distributed shared memory), automatic plans
#   cltimes    benchmarks/channels_last_forward_times.py over $CL_ROWS (default "all") with the plans $CL_PLANS
#              (default "fused,three") forced beside the automatic one, and $CL_ENVS (NAME=VALUE settings, comma
#              separated) each as a column of its own; CL_KERNELS=1 adds the profiler's kernel times
#   suite      benchmarks/bench_forward.py over $SUITE_FAMILIES (default "all"): the row-family suite's CSV
#   cltrace    benchmarks/cl_trace.py over $CL_TRACE_ROWS (default: its own few-MB and large rows): the single
#              channels-last launch's phases from each CTA's %globaltimer stamps (the block plan where the op
#              takes it; CL_TRACE_PLAN=fused: the cooperative launch); with $BASELINE, the baseline's trace
#              first (its log under $OUT/baseline)
#   unaligned  benchmarks/unaligned_check.py --kernels --backward: NCHW slices and rows that are not a whole number
#              of 16-byte vectors, forward and backward, vectors with element-wise edges against element-wise,
#              eager, torch.compile and the floor; with $BASELINE, the baseline's forward rows first (its log under
#              $OUT/baseline); $UNALIGNED_ROWS, $UNALIGNED_BACKWARD_ROWS: some rows of each (indices)
#   fwdab      benchmarks/nchw_forward_ab.py: every NCHW forward plan's rows checked against float64 and their kernels
#              timed, with $BASELINE the baseline's build first, $AB_ROUNDS times (default 1); $AB_ROWS: indices
#   clsource   Nsight Compute over benchmarks/ncu_rows.py --rows $NCU_ROWS (default channels_last) for the kernels
#              matching $NCU_KERNELS (default cl_, the channels-last ones; gn_held for --rows held): the summary
#              sections to ncu-cl-summary.txt and per-SASS-instruction stall samples to ncu-cl-source.csv (tens of
#              MB: sum it on the device before bringing it back)
#   clmemory   DRAM bytes, L2 hit rate, occupancy and duration of the channels-last kernels over
#              benchmarks/ncu_rows.py --rows $NCU_ROWS (default channels_last_large), once per NAME=VALUE of
#              $CL_MEMORY_SETTINGS (default: each forward plan, fused and three, forced)
#   metrics    Nsight Compute's duration, instructions, issue activity, registers and DRAM bytes of the kernels
#              matching $NCU_KERNELS (default gn_held) over benchmarks/ncu_rows.py --rows $NCU_ROWS (default held)
#   depth      benchmarks/micro/stream_depth.cu: two-pass streaming speed against bytes in flight per SM
#   clab       this checkout against the package in $BASELINE (a folder holding another version's
#              groupnorm_inline/, built at the start into its own cache): Nsight Compute's kernel time, shared
#              memory bank conflicts and registers of every channels-last kernel, forward and backward, over
#              benchmarks/ncu_rows.py --rows channels_last_kinds --backward, then channels_last_forward_times.py
#              --rows $CL_ROWS (default all) --kernels for baseline, then this, $CL_ROUNDS times (default 2)
# Environment: OUT (log folder, default benchmarks/results/device), GROUPNORM_INLINE_CACHE_DIR (default /tmp/gnc).
set -uo pipefail
cd "$(dirname "$0")/.."
source benchmarks/device_env.sh

if [[ -n "${BASELINE:-}" ]]; then  # the baseline's build beside this checkout's (clab)
    BASELINE=$(realpath "$BASELINE")
    baseline_env=(env PYTHONPATH="$BASELINE:$PYTHONPATH" GROUPNORM_INLINE_CACHE_DIR=/tmp/gnc-baseline)
    # From the baseline's folder: `python -c` puts the working directory first on sys.path.
    (cd "$BASELINE" && "${baseline_env[@]}" "$PYTHON" -c "import groupnorm_inline; print(groupnorm_inline.__file__)") \
        > "$OUT/build-baseline.log" 2>&1 &
    baseline_build=$!
fi
"$PYTHON" -c "import groupnorm_inline; print(groupnorm_inline.__file__)" > "$OUT/build-core.log" 2>&1
tail -n 3 "$OUT/build-core.log"
echo "build/load: $(elapsed)"

for step in "$@"; do
    echo "== $step ($(elapsed))"
    case $step in
    tests)
        timeout 500 "$PYTHON" -m pytest tests/test_backward.py tests/test_cuda_forward.py \
            tests/test_channels_last_cuda.py tests/test_activations.py -m cuda -q -p no:cacheprovider --tb=short \
            ${TESTS_K:+-k "$TESTS_K"} 2>&1 | tail -n 40 | tee "$OUT/pytest-core-cuda.txt" ;;
    fwdtests)
        timeout 300 "$PYTHON" -m pytest tests/test_cuda_forward.py -m cuda -q -p no:cacheprovider --tb=short \
            ${TESTS_K:+-k "$TESTS_K"} 2>&1 | tail -n 20 | tee "$OUT/pytest-cuda-forward.txt" ;;
    bwdcheck)
        timeout 500 "$PYTHON" benchmarks/check_backward_gpu.py --out "$OUT" 2>&1 | tail -n 40 ;;
    bwdpaths)
        timeout 300 "$PYTHON" benchmarks/backward_path_check.py 2>&1 | tail -n 20 ;;
    plans)
        timeout 300 "$PYTHON" benchmarks/plan_check.py --no-check --rows "${PLAN_ROWS:-waves}" \
            --variants "${PLAN_VARIANTS:-auto;split;resident;fused}" ${PLAN_COMPILE:+--compile} --out "$OUT" 2>&1 \
            | grep -v "^  timing" \
            | tail -n 40 ;;
    forced)
        timeout 200 "$PYTHON" -m pytest tests/test_cuda_forward.py -m cuda -k forced_plan -q -p no:cacheprovider \
            --tb=short > "$OUT/pytest-forced-plans.txt" 2>&1
        tail -n 15 "$OUT/pytest-forced-plans.txt" ;;
    sanplans)
        timeout 300 compute-sanitizer --tool memcheck --error-exitcode 3 "$PYTHON" benchmarks/plan_check.py --small \
            --no-timing --out "$OUT/sanitized" > "$OUT/sanitizer-plans.txt" 2>&1
        echo "compute-sanitizer exit (plan_check --small): $?" | tee -a "$OUT/sanitizer-plans.txt"
        tail -n 8 "$OUT/sanitizer-plans.txt" ;;
    werror)
        GROUPNORM_INLINE_NO_CUDA=1 GROUPNORM_INLINE_WERROR=1 GROUPNORM_INLINE_CACHE_DIR=/tmp/gnc-werror-cpu \
            timeout 300 "$PYTHON" -c "import groupnorm_inline" > "$OUT/build-werror-cpu.log" 2>&1
        echo "C++ build with warnings as errors: exit $?"
        tail -n 5 "$OUT/build-werror-cpu.log" ;;
    planchecks)
        timeout 300 "$PYTHON" benchmarks/plan_check.py --no-timing --out "$OUT/plan-checks" 2>&1 | grep -v "^ok " \
            | tail -n 20
        timeout 300 compute-sanitizer --tool memcheck --error-exitcode 3 "$PYTHON" benchmarks/plan_check.py --small \
            --no-timing --out "$OUT/sanitized" 2>&1 | tail -n 6 | tee "$OUT/sanitizer-plans.txt"
        echo "compute-sanitizer exit (plan_check --small): ${PIPESTATUS[0]}" | tee -a "$OUT/sanitizer-plans.txt" ;;
    host)
        timeout 300 "$PYTHON" benchmarks/host_overhead.py 2>&1 | grep "##\|us/call" ;;
    overhead)
        timeout 200 "$PYTHON" benchmarks/bench_overhead.py --device all 2>&1 | tee "$OUT/bench-overhead.txt" \
            | grep -v "^\[groupnorm"
        if [[ -n "${BASELINE:-}" ]]; then
            wait "$baseline_build"
            (cd "$BASELINE" && timeout 200 "${baseline_env[@]}" "$PYTHON" benchmarks/bench_overhead.py --device all) \
                2>&1 | tee "$OUT/bench-overhead-baseline.txt" | grep -v "^\[groupnorm"
        fi ;;
    jit)
        timeout 300 "$PYTHON" -m pytest tests/test_jit.py -k package -q -p no:cacheprovider --tb=short 2>&1 \
            | tail -n 5 | tee "$OUT/pytest-jit.txt"
        ls -la "$GROUPNORM_INLINE_CACHE_DIR"/groupnorm_inline_C-*/ "$GROUPNORM_INLINE_CACHE_DIR"/groupnorm_inline_C-*/attempt-* \
            2>&1 | tee -a "$OUT/pytest-jit.txt" ;;
    random)
        timeout 580 "$PYTHON" benchmarks/random_rows.py --rows "${RANDOM_ROWS:-60}" --seed "${RANDOM_SEED:-4}" \
            --time-limit "${RANDOM_LIMIT:-300}" --out "$OUT" 2>&1 | grep -v "^\[groupnorm" | tail -n 100 ;;
    cpurandom)
        timeout 580 "$PYTHON" benchmarks/random_rows.py --device cpu --threads "${CPU_THREADS:-4}" \
            --rows "${RANDOM_ROWS:-60}" --seed "${RANDOM_SEED:-4}" --time-limit "${RANDOM_LIMIT:-300}" --out "$OUT" \
            2>&1 | grep -v "^\[groupnorm" | tail -n 100 ;;
    cputests)
        timeout 300 "$PYTHON" -m pytest tests/test_cpu_kernels.py tests/test_backward.py tests/test_activations.py \
            -m "not cuda" -q -p no:cacheprovider --tb=short 2>&1 | tail -n 30 | tee "$OUT/pytest-cpu.txt"
        lscpu | grep -E "Model name|^CPU\(s\)|Flags" | sed 's/Flags:.*\(avx512f\).*/Flags: ... avx512f .../' \
            | tee "$OUT/cpu-model.txt"
        for dt in float32 bfloat16; do
            timeout 150 "$PYTHON" benchmarks/bench_overhead.py --device cpu --shapes short --dtype $dt \
                --threads "${CPU_THREADS:-2}" --calls 300 2>&1 | grep -v "^\[groupnorm" | tee -a "$OUT/bench-short-cpu.txt"
        done ;;
    apitests)
        timeout 400 "$PYTHON" -m pytest tests/test_errors.py tests/test_opcheck.py tests/test_compile.py \
            tests/test_functional.py tests/test_module.py -q -p no:cacheprovider --tb=short 2>&1 | tail -n 30 \
            | tee "$OUT/pytest-api.txt" ;;
    flagged)
        timeout 400 "$PYTHON" benchmarks/profile_rows.py --set flagged ${FLAGGED_ROWS:+--rows "$FLAGGED_ROWS"} 2>&1 | tail -n 150 ;;
    sanitizer)
        timeout 300 compute-sanitizer --tool memcheck --error-exitcode 3 "$PYTHON" benchmarks/sanitizer_cases.py \
            2>&1 | tail -n 12 | tee "$OUT/sanitizer-core.txt"
        echo "compute-sanitizer exit (automatic paths): $?" | tee -a "$OUT/sanitizer-core.txt"
        for plan_fold in fused:0 fused:1 partial:0 partial:1 three:0; do  # plan, GROUPNORM_INLINE_CL_FOLD
            plan=${plan_fold%:*} fold=${plan_fold#*:}
            GROUPNORM_INLINE_CL_FORWARD_PLAN=$plan GROUPNORM_INLINE_CL_FOLD=$fold timeout 300 compute-sanitizer \
                --tool memcheck --error-exitcode 3 "$PYTHON" benchmarks/sanitizer_cases.py 2>&1 | tail -n 12 \
                | tee -a "$OUT/sanitizer-core.txt"
            echo "compute-sanitizer exit (channels-last $plan forced, fold $fold): ${PIPESTATUS[0]}" \
                | tee -a "$OUT/sanitizer-core.txt"
        done
        for path in row resident; do
            GROUPNORM_INLINE_BACKWARD_PATH=$path timeout 300 compute-sanitizer --tool memcheck --error-exitcode 3 \
                "$PYTHON" benchmarks/sanitizer_cases.py 2>&1 | tail -n 12 | tee -a "$OUT/sanitizer-core.txt"
            echo "compute-sanitizer exit ($path path forced): ${PIPESTATUS[0]}" | tee -a "$OUT/sanitizer-core.txt"
        done ;;
    racecheck)
        timeout 400 compute-sanitizer --tool racecheck --error-exitcode 3 "$PYTHON" benchmarks/sanitizer_cases.py \
            --channels-last --forward 2>&1 | tail -n 12 | tee "$OUT/racecheck-core.txt"
        echo "compute-sanitizer racecheck exit: ${PIPESTATUS[0]}" | tee -a "$OUT/racecheck-core.txt" ;;
    cltimes)
        timeout 400 "$PYTHON" benchmarks/channels_last_forward_times.py --rows "${CL_ROWS:-all}" \
            --plans "${CL_PLANS:-fused,three}" ${CL_ENVS:+--envs "$CL_ENVS"} --iters 30 --out "$OUT" \
            ${CL_KERNELS:+--kernels} \
            2>&1 | tail -n 30 ;;
    suite)
        FAMILIES=${SUITE_FAMILIES:-all} TIME_LIMIT=${SUITE_TIME_LIMIT:-420} timeout 560 \
            bash benchmarks/run_device_suite.sh 2>&1 | tail -n 30 ;;
    cltrace)
        if [[ -n "${BASELINE:-}" ]]; then  # the baseline's trace first, into a log of its own
            wait "$baseline_build"
            mkdir -p "$OUT/baseline"
            OUT="$OUT/baseline" timeout 300 "${baseline_env[@]}" "$PYTHON" benchmarks/cl_trace.py \
                ${CL_TRACE_ROWS:+--rows "$CL_TRACE_ROWS"} ${CL_TRACE_PLAN:+--plan "$CL_TRACE_PLAN"} 2>&1 | tail -n 120
        fi
        timeout 300 "$PYTHON" benchmarks/cl_trace.py ${CL_TRACE_ROWS:+--rows "$CL_TRACE_ROWS"} \
            ${CL_TRACE_PLAN:+--plan "$CL_TRACE_PLAN"} 2>&1 | tail -n 120 ;;
    unaligned)
        if [[ -n "${BASELINE:-}" ]]; then
            wait "$baseline_build"
            timeout 400 "${baseline_env[@]}" "$PYTHON" benchmarks/unaligned_check.py --kernels --no-compile \
                ${UNALIGNED_ROWS:+--rows "$UNALIGNED_ROWS"} --out "$OUT/baseline" 2>&1 | tail -n 30
        fi
        timeout 500 "$PYTHON" benchmarks/unaligned_check.py --kernels --backward ${UNALIGNED_ROWS:+--rows "$UNALIGNED_ROWS"} \
            ${UNALIGNED_BACKWARD_ROWS:+--backward-rows "$UNALIGNED_BACKWARD_ROWS"} --out "$OUT" 2>&1 | tail -n 40 ;;
    fwdab)
        for round in $(seq 1 "${AB_ROUNDS:-1}"); do
            if [[ -n "${BASELINE:-}" ]]; then
                wait "$baseline_build" 2>/dev/null
                timeout 250 "${baseline_env[@]}" "$PYTHON" benchmarks/nchw_forward_ab.py --label "baseline $round" \
                    ${AB_ROWS:+--rows "$AB_ROWS"} --out "$OUT" 2>&1 | grep -v "^\[groupnorm" | tail -n 30
            fi
            timeout 250 "$PYTHON" benchmarks/nchw_forward_ab.py --label "this $round" ${AB_ROWS:+--rows "$AB_ROWS"} \
                --out "$OUT" 2>&1 | grep -v "^\[groupnorm" | tail -n 30
        done ;;
    clsource)
        timeout 400 ncu --profile-from-start off -k regex:"${NCU_KERNELS:-cl_}" --set full --import-source yes \
            -o "$OUT/ncu-cl" -f "$PYTHON" benchmarks/ncu_rows.py --rows "${NCU_ROWS:-channels_last}" 2>&1 | tail -n 8
        ncu --import "$OUT/ncu-cl.ncu-rep" --print-summary per-kernel > "$OUT/ncu-cl-summary.txt" 2>&1
        ncu --import "$OUT/ncu-cl.ncu-rep" --page details --csv > "$OUT/ncu-cl-details.csv" 2>&1
        ncu --import "$OUT/ncu-cl.ncu-rep" --page source --print-source sass --csv > "$OUT/ncu-cl-source.csv" 2>&1
        rm -f "$OUT/ncu-cl.ncu-rep"
        wc -c "$OUT"/ncu-cl-* ;;
    clmemory)
        metrics=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sector_hit_rate.pct
        metrics+=,sm__warps_active.avg.pct_of_peak_sustained_active,launch__registers_per_thread,launch__grid_size
        metrics+=,launch__occupancy_limit_registers,dram__throughput.avg.pct_of_peak_sustained_elapsed
        plans="GROUPNORM_INLINE_CL_FORWARD_PLAN=fused GROUPNORM_INLINE_CL_FORWARD_PLAN=three"
        for setting in ${CL_MEMORY_SETTINGS:-$plans}; do
            echo "-- $setting" | tee -a "$OUT/ncu-cl-memory.txt"
            env "$setting" timeout 300 ncu --profile-from-start off --metrics "$metrics" \
                "$PYTHON" benchmarks/ncu_rows.py --rows "${NCU_ROWS:-channels_last_large}" 2>&1 | grep -v "^==PROF==" \
                | tee -a "$OUT/ncu-cl-memory.txt" | tail -n 60
        done ;;
    metrics)
        metrics=gpu__time_duration.sum,smsp__inst_executed.sum,launch__registers_per_thread,launch__grid_size
        metrics+=,sm__warps_active.avg.pct_of_peak_sustained_active,smsp__issue_active.avg.pct_of_peak_sustained_active
        metrics+=,dram__bytes_read.sum,dram__bytes_write.sum,launch__occupancy_limit_registers
        timeout 200 ncu --profile-from-start off -k regex:"${NCU_KERNELS:-gn_held}" --metrics "$metrics" \
            "$PYTHON" benchmarks/ncu_rows.py --rows "${NCU_ROWS:-held}" 2>&1 | grep -v "^==PROF==" \
            | sed 's/(const T1 \*.*) (/(/' | tee "$OUT/ncu-metrics.txt" | tail -n 80 ;;
    depth)
        nvcc -O3 -std=c++17 -arch=sm_90a -o "$OUT/stream_depth" benchmarks/micro/stream_depth.cu \
            && timeout 300 "$OUT/stream_depth" 2>&1 | tee "$OUT/stream-depth.txt"
        rm -f "$OUT/stream_depth" ;;
    clab)
        wait "${baseline_build:?clab needs BASELINE}"
        tail -n 1 "$OUT/build-baseline.log"
        metrics=gpu__time_duration.sum,launch__registers_per_thread,launch__grid_size,launch__block_size
        metrics+=,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum
        metrics+=,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum
        metrics+=,smsp__sass_inst_executed_op_shared_st.sum,smsp__sass_inst_executed_op_shared_ld.sum
        for which in baseline this; do
            runner=(env); [[ $which == baseline ]] && runner=("${baseline_env[@]}")
            "${runner[@]}" timeout 200 ncu --profile-from-start off -k regex:'cl_' --metrics "$metrics" \
                "$PYTHON" benchmarks/ncu_rows.py --rows channels_last_kinds --backward 2>&1 | grep -v "^==PROF==" \
                > "$OUT/ncu-clab-$which.txt"
            tail -n 8 "$OUT/ncu-clab-$which.txt"
        done
        for round in $(seq 1 "${CL_ROUNDS:-2}"); do
            for which in baseline this; do
                runner=(env); [[ $which == baseline ]] && runner=("${baseline_env[@]}")
                "${runner[@]}" timeout 200 "$PYTHON" benchmarks/channels_last_forward_times.py \
                    --rows "${CL_ROWS:-all}" --kernels --iters 15 --label "$which $round" --out "$OUT" 2>&1 | tail -n 3
            done
        done ;;
    *) echo "unknown step $step" ;;
    esac
done
echo "total: $(elapsed)"

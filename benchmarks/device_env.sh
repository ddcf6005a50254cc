# Sourced by the device scripts (run_core_device.sh, run_family_device.sh): the environment every step shares,
# from the repository root. OUT: log folder (default benchmarks/results/device); GROUPNORM_INLINE_CACHE_DIR: the
# build cache (default /tmp/gnc, so that every step and subprocess of one call finds the one build).
export OUT=${OUT:-benchmarks/results/device}
export GROUPNORM_INLINE_CACHE_DIR=${GROUPNORM_INLINE_CACHE_DIR:-/tmp/gnc}
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0}
PYTHON=${PYTHON:-python}
mkdir -p "$OUT" "$GROUPNORM_INLINE_CACHE_DIR"
start=$(date +%s)
elapsed() { echo "$(( $(date +%s) - start )) s"; }

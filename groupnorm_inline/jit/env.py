"""Where builds live and what they are built for: environment variables, toolkit and arch discovery.

Every knob the JIT layer reads from the environment is read here, so the README's table and the code
cannot drift apart:

    GROUPNORM_INLINE_CACHE_DIR       root of our build cache (beats TORCH_EXTENSIONS_DIR)
    TORCH_EXTENSIONS_DIR             honoured when set (KernelBench sets it per build)
    GROUPNORM_INLINE_VERBOSE=1       show the compiler's own output
    GROUPNORM_INLINE_CUDA_ARCH_LIST  target archs, e.g. "9.0" or "8.0;9.0+PTX" (beats TORCH_CUDA_ARCH_LIST)
    GROUPNORM_INLINE_NO_CUDA=1       build only the C++ CPU kernels even where CUDA could be built
    GROUPNORM_INLINE_LOCK_TIMEOUT    seconds to wait for another process's build (default 3600)
"""

from __future__ import annotations

import os
import platform
import re
import shutil
import subprocess
import sys
from functools import lru_cache
from pathlib import Path

import torch

# The arch a CUDA build targets when no GPU is visible and nothing is configured: Hopper, the
# generation this package is tuned for (and what CI compiles).
DEFAULT_ARCH_LIST = "9.0"


def _env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


def verbose() -> bool:
    return _env_flag("GROUPNORM_INLINE_VERBOSE")


def lock_timeout_s() -> float:
    return float(os.environ.get("GROUPNORM_INLINE_LOCK_TIMEOUT", "3600"))


def cache_root() -> Path:
    """Folder under which every build directory is created."""
    for var in ("GROUPNORM_INLINE_CACHE_DIR", "TORCH_EXTENSIONS_DIR"):
        value = os.environ.get(var)
        if value:
            return Path(value).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "groupnorm_inline"


# at::vec's implementation per ATen CPU capability: the compiler flags and macro ATen's own kernels of that
# capability are built with (the macro selects the implementation in ATen/cpu/vec/vec.h).
# -Wno-maybe-uninitialized with AVX-512: gcc 12 reports a false "may be used uninitialized" inside its own
# avx512fintrin.h wherever ATen's Vectorized<Half>/<BFloat16> conversions are inlined (those intrinsics start
# from _mm512_undefined_*()); the warning is about headers this package does not own, and CI builds with -Werror.
_VEC_ISA_FLAGS = {
    "AVX512": ["-mavx512f", "-mavx512dq", "-mavx512vl", "-mavx512bw", "-mavx2", "-mfma", "-mf16c",
               "-DCPU_CAPABILITY_AVX512", "-Wno-maybe-uninitialized"],
    "AVX2": ["-mavx2", "-mfma", "-mf16c", "-DCPU_CAPABILITY_AVX2"],
}


@lru_cache(maxsize=None)
def cpu_vec_flags() -> list[str]:
    """Compiler flags that give the C++ sources' `at::vec::Vectorized` this machine's vector instructions.

    Without them Vectorized<float> is ATen's portable fallback (an array of 8 floats that gcc may or may not
    vectorise with SSE2; in the CPU kernels it does not, and they run ~10x slower than PyTorch's AVX2/AVX-512
    kernels). The extension is compiled on the machine that runs it (load_inline), so it can target that
    machine's vector ISA as ATen itself does at run time: the level ATen dispatches its own kernels to
    (torch.backends.cpu.get_cpu_capability(), which honours ATEN_CPU_CAPABILITY=default/avx2/avx512) picks
    the flags, and the flags are part of the build key, so a cache shared with a machine of another level never
    hands it a binary it cannot run. The namespace macro CPU_CAPABILITY is given a name of our own, so the inline
    at::vec functions compiled here never share a symbol with another library's build of them. x86-64 only; on
    other machines (and at capability DEFAULT) at::vec's defaults apply (NEON on aarch64).
    """
    if platform.machine().lower() not in ("x86_64", "amd64") or sys.platform.startswith("win"):
        return []
    capability = torch.backends.cpu.get_cpu_capability()
    flags = _VEC_ISA_FLAGS.get(capability)
    if flags is None:
        return []
    return flags + [f"-DCPU_CAPABILITY=gn_inline_{capability.lower()}"]


@lru_cache(maxsize=None)
def openmp_flags() -> list[str]:
    """Compiler and linker flags that let the C++ sources' `at::parallel_for` use torch's thread pool.

    at::parallel_for is an inline template: with torch's OpenMP backend its loops are split across threads only
    in code compiled with OpenMP, and run on one thread otherwise. So, where torch runs on OpenMP and the
    compiler is gcc on Linux (whose -fopenmp links libgomp.so.1, the soname of the copy torch loads, so the
    process keeps one OpenMP runtime and torch.set_num_threads governs both): ["-fopenmp"]. Elsewhere (torch's
    native thread pool, whose parallel_for is compiled into libtorch; macOS; clang without omp.h): none.
    """
    if not sys.platform.startswith("linux"):
        return []
    if "parallel backend: OpenMP" not in torch.__config__.parallel_info():
        return []
    compiler = os.environ.get("CXX", "c++")  # the compiler torch.utils.cpp_extension builds with
    try:
        probe = subprocess.run([compiler, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return []
    if probe.returncode != 0 or "clang" in probe.stdout.lower():
        return []
    return ["-fopenmp"]


@lru_cache(maxsize=None)
def cuda_home() -> str | None:
    """The CUDA toolkit to compile with, or None when there is none (or torch is a CPU build).

    Looked for in CUDA_HOME, CUDA_PATH, /usr/local/cuda, then beside `nvcc` on PATH; a folder counts only
    if it holds bin/nvcc and include/cuda_runtime.h (an `nvcc` on PATH may be a wrapper script, and
    torch's own guess falls back to /usr/local when no GPU is visible).
    """
    if not torch.version.cuda:
        return None
    candidates = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"]
    nvcc_on_path = shutil.which("nvcc")
    if nvcc_on_path:
        candidates.append(str(Path(nvcc_on_path).resolve().parent.parent))
    for home in candidates:
        if home and (Path(home) / "bin" / "nvcc").is_file() and (Path(home) / "include" / "cuda_runtime.h").is_file():
            return str(Path(home))
    return None


def cuda_build_enabled() -> bool:
    """Whether the CUDA kernels are built: a CUDA build of torch and a toolkit, GPU or not."""
    return not _env_flag("GROUPNORM_INLINE_NO_CUDA") and cuda_home() is not None


@lru_cache(maxsize=None)
def nvcc_version() -> str:
    """`nvcc --version`'s release line; part of the cache key (a toolkit upgrade rebuilds)."""
    home = cuda_home()
    if home is None:
        return "none"
    try:
        out = subprocess.run([os.path.join(home, "bin", "nvcc"), "--version"], capture_output=True,
                             text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError) as exc:  # nvcc present but not runnable
        return f"unrunnable ({exc})"
    match = re.search(r"release ([0-9.]+), V([0-9.]+)", out)
    return match.group(2) if match else out.strip().splitlines()[-1:][0] if out.strip() else "unknown"


def arch_list() -> list[str]:
    """Target archs as sorted strings like "9.0" or "9.0+PTX"."""
    configured = os.environ.get("GROUPNORM_INLINE_CUDA_ARCH_LIST") or os.environ.get("TORCH_CUDA_ARCH_LIST")
    if configured:
        entries = [e for e in re.split(r"[;\s,]+", configured.strip()) if e]
    elif torch.cuda.is_available():
        entries = sorted({"%d.%d" % torch.cuda.get_device_capability(i) for i in range(torch.cuda.device_count())})
    else:
        entries = [DEFAULT_ARCH_LIST]
    for entry in entries:
        if not re.fullmatch(r"\d+\.\d+[a-f]?(\+PTX)?", entry):
            raise ValueError(
                f"groupnorm_inline: cannot parse CUDA arch {entry!r} (from the arch list {configured!r}); "
                "expected entries like '9.0', '9.0a' or '9.0+PTX' separated by ';'")
    return sorted(set(entries))


def gencode_flags(archs: list[str]) -> list[str]:
    """nvcc -gencode flags for the arch list ("9.0+PTX" also embeds compute_90 PTX)."""
    flags = []
    for entry in archs:
        base = entry.replace("+PTX", "")
        num = base.replace(".", "")
        flags.append(f"-gencode=arch=compute_{num},code=sm_{num}")
        if entry.endswith("+PTX"):
            flags.append(f"-gencode=arch=compute_{num},code=compute_{num}")
    return flags


def python_tag() -> str:
    return f"py{sys.version_info.major}{sys.version_info.minor}"

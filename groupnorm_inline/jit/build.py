"""Build-and-load of inline C++/CUDA sources: the one place in the package that calls `load_inline`.

What this layer adds over a bare `load_inline` (whose cache path ignores the torch version and the target
archs, and whose lock file hangs every later import when a build is killed):

* the build directory is named by a hash of everything the binary depends on (source text, flags, torch,
  CUDA and Python versions, target archs), so an upgrade or an edit never loads a stale library;
* an OS file lock (`flock`, released by the kernel when its holder dies) serialises builds across
  processes; after taking it we look again, because another process may have finished the build while
  we waited;
* every build compiles in a fresh `attempt-<pid>-<random>` subfolder, and only the finished library is
  moved up into the build directory (the subfolder keeps the sources, for the line info of profilers):
  the compilers of a killed build outlive it (ninja starts each command in a process group of its own,
  so killing the Python process and its group leaves them running) and keep writing objects by path
  into their own attempt folder, never into the next build's; a killed `load_inline`'s `lock` file
  stays in its abandoned attempt folder, which the next builder removes;
* a finished build is recorded in a manifest, `build_info.json`, with the library's size and sha256
  (`manifest.py`); later processes check the library against it and load it, or, when it is damaged
  (truncated by a full disk, a partial copy of the cache) or the manifest is missing or corrupt, rebuild it
  in a cleaned folder after one stderr line saying why (loading a truncated library dies with SIGBUS);
* one stderr line when a build starts and one with its duration; compiler output only when verbose;
* a failed build raises `ExtensionBuildError` carrying the compiler's error text.

Extensions are loaded with `torch.ops.load_library`: they register their operators with
`TORCH_LIBRARY`, so they are reachable as `torch.ops.<namespace>.<op>`. An extension with
`python_entry_sources` also defines a CPython module (`python_module_name`) with direct entry points to its
operators, for eager calls where the OpOverload's boxed call is a large share of the time; `python_module`
imports it from the same library.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import torch

from . import env, manifest

# Bump when the layout of a build directory or the meaning of the key changes.
_LAYOUT_VERSION = 1

_loaded: dict[str, Path] = {}          # spec name -> loaded library, per process
_modules: dict[str, object] = {}       # spec name -> its CPython module (python_entry_sources), per process
_process_lock = threading.Lock()       # threads of one process build one at a time


class ExtensionBuildError(RuntimeError):
    """A build failed; the message carries the compiler's output."""


@dataclass(frozen=True)
class ExtensionSpec:
    """What to compile. `cuda_sources` is dropped when no CUDA toolkit is usable."""

    name: str                                   # library prefix, e.g. "groupnorm_inline_C"
    cpp_sources: tuple[str, ...]
    cuda_sources: tuple[str, ...] = ()
    # C++ sources compiled after cpp_sources into the same translation unit, defining the CPython module
    # python_module_name (its PyInit_<python_module_name>) that `python_module` imports. Kept apart from
    # cpp_sources because an exported single-file submission takes cpp_sources only. The name is fixed, not
    # the library's: load_inline renames a library it builds twice in one process (name_v1).
    python_entry_sources: tuple[str, ...] = ()
    python_module_name: str = ""
    extra_cflags: tuple[str, ...] = ("-O3",)
    # --split-compile=0: nvcc optimises the one translation unit load_inline writes in parallel, on every core
    # (the CUDA file holds ~200 kernel instantiations; serial, its build took ~5 minutes on a 16-core machine).
    extra_cuda_cflags: tuple[str, ...] = ("-O3", "-lineinfo", "--split-compile=0")
    description: str = ""                       # shown in the build log line
    # Compile and link the C++ sources with OpenMP where torch itself runs on it (env.openmp_flags):
    # at::parallel_for is an inline template, and without -fopenmp it runs every loop on one thread.
    openmp: bool = False
    # Compile the C++ sources for this machine's vector ISA (env.cpu_vec_flags: at::vec's AVX2 / AVX-512
    # implementation, as ATen dispatches its own kernels here), not for the compiler's baseline target.
    cpu_vec_isa: bool = False
    extra: dict = field(default_factory=dict, compare=False)


@dataclass(frozen=True)
class BuildPlan:
    """A spec resolved against this machine: what exactly gets compiled, and where."""

    spec: ExtensionSpec
    with_cuda: bool
    archs: tuple[str, ...]
    cflags: tuple[str, ...]
    cuda_cflags: tuple[str, ...]
    key: str
    directory: Path
    ldflags: tuple[str, ...] = ()

    @property
    def library_name(self) -> str:
        return f"{self.spec.name}_{self.key[:16]}"


def _strict_flags() -> tuple[list[str], list[str]]:
    """Warning flags; GROUPNORM_INLINE_WERROR=1 (set by CI) turns every warning into an error."""
    # -Wno-array-bounds, -Wno-stringop-overflow: gcc 13 at -O3 reports a false out-of-bounds memmove inside
    # libstdc++'s std::vector<bool>::reserve wherever it inlines torch::autograd::Function::apply (the forward's
    # autograd kernel), under both names; the warning's location is the library header, so no pragma in our
    # sources reaches it.
    cflags = ["-Wall", "-Wextra", "-Wno-array-bounds", "-Wno-stringop-overflow"]
    cuda_cflags = ["-Xcompiler=-Wall,-Wextra"]
    if os.environ.get("GROUPNORM_INLINE_WERROR", "") == "1":
        cflags.append("-Werror")
        cuda_cflags += ["-Xcompiler=-Werror", "-Werror=all-warnings"]
    return cflags, cuda_cflags


def plan(spec: ExtensionSpec) -> BuildPlan:
    with_cuda = bool(spec.cuda_sources) and env.cuda_build_enabled()
    archs = tuple(env.arch_list()) if with_cuda else ()
    warn_c, warn_cuda = _strict_flags()
    openmp = tuple(env.openmp_flags()) if spec.openmp else ()
    isa = tuple(env.cpu_vec_flags()) if spec.cpu_vec_isa else ()
    cflags = tuple(spec.extra_cflags) + tuple(warn_c) + isa + openmp
    ldflags = openmp
    if with_cuda:
        cflags += ("-DGROUPNORM_INLINE_WITH_CUDA",)
    cuda_cflags = tuple(spec.extra_cuda_cflags) + tuple(warn_cuda) + tuple(env.gencode_flags(list(archs)))
    payload = {
        "layout": _LAYOUT_VERSION,
        "name": spec.name,
        "cpp_sources": list(spec.cpp_sources),
        "python_entry_sources": list(spec.python_entry_sources),
        "cuda_sources": list(spec.cuda_sources) if with_cuda else [],
        "cflags": list(cflags),
        "cuda_cflags": list(cuda_cflags) if with_cuda else [],
        "ldflags": list(ldflags),
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "nvcc": env.nvcc_version() if with_cuda else None,
        "archs": list(archs),
        "python": env.python_tag(),
    }
    key = hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()
    flavour = ("cu" + (torch.version.cuda or "").replace(".", "") + "-sm" + "_".join(
        a.replace(".", "").replace("+PTX", "ptx") for a in archs)) if with_cuda else "cpu"
    torch_tag = torch.__version__.split("+")[0]
    dirname = f"{spec.name}-{env.python_tag()}-torch{torch_tag}-{flavour}-{key[:16]}"
    return BuildPlan(spec, with_cuda, archs, cflags, cuda_cflags, key, env.cache_root() / dirname, ldflags)


class _FileLock:
    """Exclusive `flock` on a file beside the build directory; the kernel drops it if we die."""

    def __init__(self, path: Path, timeout_s: float, what: str):
        self.path, self.timeout_s, self.what = path, timeout_s, what
        self.fd: int | None = None

    def __enter__(self):
        import fcntl

        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        start, told = time.monotonic(), False
        while True:
            try:
                fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as exc:
                if exc.errno not in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                    raise
            waited = time.monotonic() - start
            if not told:
                holder = self._holder()
                print(f"[groupnorm_inline] waiting for {holder} to finish building {self.what} "
                      f"(build lock {self.path})", file=sys.stderr, flush=True)
                told = True
            if waited > self.timeout_s:
                os.close(self.fd)
                raise TimeoutError(
                    f"groupnorm_inline: gave up after {waited:.0f} s waiting for the build lock {self.path} "
                    f"held by {self._holder()}; raise GROUPNORM_INLINE_LOCK_TIMEOUT or stop that process")
            time.sleep(0.2)
        os.ftruncate(self.fd, 0)
        os.write(self.fd, f"{os.getpid()}\n".encode())
        return self

    def _holder(self) -> str:
        try:
            pid = self.path.read_text().strip()
        except OSError:
            pid = ""
        return f"process {pid}" if pid else "another process"

    def __exit__(self, *exc):
        import fcntl

        if self.fd is not None:
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)
            self.fd = None


# Prefix of the subfolder one build attempt compiles in (see the module docstring).
ATTEMPT_PREFIX = "attempt-"


def _clean(directory: Path) -> None:
    """Empty a build folder whose build is damaged or unfinished; we hold its build lock.

    Everything goes: the library, the manifest and the attempt folders of builds that were killed. The library
    is unlinked, not overwritten, so a process that still has the old one mapped keeps its pages. An attempt
    folder is removed as far as it can be: a killed build's compiler may still be creating files in it (it
    fails once the folder is gone), and what it leaves is removed by the next clean."""
    for entry in directory.iterdir():
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=entry.name.startswith(ATTEMPT_PREFIX))
        else:
            entry.unlink()


def _compile(p: BuildPlan) -> Path:
    if p.with_cuda:
        # torch picks its toolkit once, when cpp_extension is first imported, and guesses /usr/local
        # when no GPU is visible: point it at the toolkit we found, before and after that import.
        os.environ.setdefault("CUDA_HOME", env.cuda_home())
    from torch.utils import cpp_extension

    if p.with_cuda:
        cpp_extension.CUDA_HOME = env.cuda_home()
    p.directory.mkdir(parents=True, exist_ok=True)
    attempt = p.directory / f"{ATTEMPT_PREFIX}{os.getpid()}-{uuid.uuid4().hex[:8]}"
    attempt.mkdir()
    what = p.spec.description or p.spec.name
    target = f"CUDA (archs {', '.join(p.archs)}) + C++" if p.with_cuda else "C++ (CPU only)"
    # Measured: the C++ alone ~1 minute on 2 cores; with CUDA ~4 minutes on 16 cores, ~8 on 2 (sm_90).
    expect = "several minutes (once; later imports load it)" if p.with_cuda else "a few minutes (once; later imports load it)"
    print(f"[groupnorm_inline] building {what}: {target} into {p.directory}; this takes {expect}",
          file=sys.stderr, flush=True)
    start = time.monotonic()
    try:
        path = cpp_extension.load_inline(
            name=p.library_name,
            cpp_sources=list(p.spec.cpp_sources) + list(p.spec.python_entry_sources),
            cuda_sources=list(p.spec.cuda_sources) if p.with_cuda else None,
            extra_cflags=list(p.cflags),
            extra_cuda_cflags=list(p.cuda_cflags) if p.with_cuda else None,
            extra_ldflags=list(p.ldflags) or None,
            build_directory=str(attempt),
            verbose=env.verbose(),
            with_cuda=p.with_cuda,
            is_python_module=False,
        )
    except (RuntimeError, OSError, ImportError) as exc:
        raise ExtensionBuildError(
            f"groupnorm_inline: building {what} failed after {time.monotonic() - start:.1f} s in {attempt}.\n"
            f"Set GROUPNORM_INLINE_VERBOSE=1 to see every compiler command.\n{exc}") from exc
    # The library goes up into the build directory under the plan's name (load_inline appends "_v1" when one
    # process builds a name twice); a rename within one file system keeps the inode this process has loaded.
    built = Path(path)
    library = p.directory / f"{p.library_name}{built.suffix}"
    os.replace(built, library)
    # The objects go (a changed input makes a new directory, so they are never reused); the sources stay, as
    # the compiler saw them: the CUDA line info (-lineinfo) points profilers and compute-sanitizer at them.
    for leftover in [*attempt.glob("*.o"), attempt / "lock"]:
        leftover.unlink(missing_ok=True)
    try:
        manifest.write(p.directory, p.key, library, with_cuda=p.with_cuda, archs=list(p.archs),
                       torch=torch.__version__, seconds=round(time.monotonic() - start, 1))
    except OSError as exc:
        raise ExtensionBuildError(
            f"groupnorm_inline: built {what} in {p.directory} but could not record it in "
            f"{manifest.FILE_NAME} ({exc.strerror or exc}); is the disk full?") from exc
    print(f"[groupnorm_inline] built {what} in {time.monotonic() - start:.1f} s", file=sys.stderr, flush=True)
    return library


def load(spec: ExtensionSpec) -> Path:
    """Build `spec` if no finished build exists, load it into this process, return the library path."""
    with _process_lock:
        if spec.name in _loaded:
            return _loaded[spec.name]
        p = plan(spec)
        library = manifest.verify(p.directory, p.key).library
        if library is None:
            with _FileLock(p.directory.with_name(p.directory.name + ".lock"), env.lock_timeout_s(),
                           p.spec.description or p.spec.name):
                # Look again under the lock: another process may have built it while we waited.
                verdict = manifest.verify(p.directory, p.key)
                library = verdict.library
                if library is None:
                    if verdict.problem is not None:
                        print(f"[groupnorm_inline] rebuilding {p.spec.description or p.spec.name}: "
                              f"{verdict.problem}", file=sys.stderr, flush=True)
                        _clean(p.directory)
                    library = _compile(p)
        torch.ops.load_library(str(library))
        _loaded[spec.name] = library
        return library


def python_module(spec: ExtensionSpec):
    """The CPython module that `spec`'s python_entry_sources define, imported from its library (built and
    loaded first if needed)."""
    if not (spec.python_entry_sources and spec.python_module_name):
        raise ValueError(f"groupnorm_inline: extension {spec.name} defines no Python entry points "
                         "(python_entry_sources and python_module_name)")
    library = load(spec)
    with _process_lock:
        module = _modules.get(spec.name)
        if module is None:
            import importlib.machinery
            import importlib.util

            # CPython calls PyInit_<name> in the library, already mapped by torch.ops.load_library (no second
            # copy). The module is not put in sys.modules: only the package's Python holds it.
            name = spec.python_module_name
            loader = importlib.machinery.ExtensionFileLoader(name, str(library))
            module_spec = importlib.util.spec_from_file_location(name, str(library), loader=loader)
            module = importlib.util.module_from_spec(module_spec)
            loader.exec_module(module)
            _modules[spec.name] = module
        return module


def loaded_plan(spec: ExtensionSpec) -> BuildPlan:
    """The plan `load` would use (for show-config and tests); builds nothing."""
    return plan(spec)

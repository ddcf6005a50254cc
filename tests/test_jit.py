"""The JIT layer (groupnorm_inline.jit): cache keys and folders, build logging, cross-process locking, recovery
from killed builds and from damaged libraries (the manifest's size and sha256), build failures, and what the
package's own build contains.

Builds use tiny test-only extensions (tests/jit_worker.py: one TORCH_LIBRARY operator under a namespace unique
to the test) in temporary cache folders; each build compiles one C++ file (~30 s of one core), nine in all.
Second processes run tests/jit_worker.py, which imports the package from the test run's own cache first.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import torch

import groupnorm_inline
from groupnorm_inline import extension
from groupnorm_inline.jit import ExtensionBuildError, env, load, manifest, plan, python_module
from jit_worker import MARKER, tiny_spec

WORKER = Path(__file__).with_name("jit_worker.py")
REPO_ROOT = Path(groupnorm_inline.__file__).resolve().parent.parent
# The environment before any test changed it: second processes import the package from this test run's cache.
SESSION_ENV = dict(os.environ)
CACHE_VARS = ("GROUPNORM_INLINE_CACHE_DIR", "TORCH_EXTENSIONS_DIR")
# Generous: a tiny build is ~20 s alone, but the machine may be busy; a hang is what these limits catch.
WORKER_TIMEOUT_S = 300


def unique_namespace() -> str:
    return f"gntest_{uuid.uuid4().hex[:12]}"


def plan_under(spec, cache_dir, var="GROUPNORM_INLINE_CACHE_DIR"):
    """The plan a process with only `var` = cache_dir set (of the two cache variables) makes for spec."""
    with pytest.MonkeyPatch.context() as m:
        for name in CACHE_VARS:
            m.delenv(name, raising=False)
        m.setenv(var, str(cache_dir))
        return plan(spec)


def start_worker(namespace, cache_dir, var="GROUPNORM_INLINE_CACHE_DIR", **popen_kwargs):
    worker_env = dict(SESSION_ENV)
    worker_env["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT)] + [p for p in [SESSION_ENV.get("PYTHONPATH")] if p])
    return subprocess.Popen([sys.executable, str(WORKER), namespace, str(cache_dir), "--cache-var", var],
                            env=worker_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            **popen_kwargs)


def finish_worker(proc, what):
    """Wait for a worker; a hang past WORKER_TIMEOUT_S fails the test (and the worker is killed)."""
    try:
        out, err = proc.communicate(timeout=WORKER_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        pytest.fail(f"{what}: still running after {WORKER_TIMEOUT_S} s (hung?); stderr:\n{err[-3000:]}")
    assert proc.returncode == 0, f"{what}: exit code {proc.returncode}; stderr:\n{err[-3000:]}"
    assert out.strip() == "42", f"{what}: printed {out!r}"
    return err


def jit_lines(stderr: str, namespace: str) -> list[str]:
    """The JIT layer's lines about the test extension of `namespace`."""
    return [line for line in stderr.splitlines() if line.startswith("[groupnorm_inline]") and namespace in line]


def after_marker(stderr: str) -> str:
    assert MARKER in stderr, f"the worker did not get past importing the package; stderr:\n{stderr[-3000:]}"
    return stderr.split(MARKER, 1)[1].lstrip("\n")


BUILDING = re.compile(r"\[groupnorm_inline\] building test extension (\w+): C\+\+ \(CPU only\) into (\S+); ")
BUILT = re.compile(r"\[groupnorm_inline\] built test extension (\w+) in \d+\.\d s")
REBUILDING = re.compile(r"\[groupnorm_inline\] rebuilding test extension (\w+): (.+)")


# ----------------------------------------------------------------------------------------------- cache keys

def test_cache_key_covers_sources_flags_and_versions(monkeypatch):
    spec = tiny_spec(unique_namespace())
    base = plan(spec)
    assert plan(spec).key == base.key and plan(spec).directory == base.directory  # deterministic
    variants = {
        "source text": dataclasses.replace(spec, cpp_sources=(spec.cpp_sources[0] + "// one more comment\n",)),
        "compiler flags": dataclasses.replace(spec, extra_cflags=("-O2",)),
        "Python entry source": dataclasses.replace(spec, python_entry_sources=("// an entry\n",),
                                                   python_module_name="entry"),
    }
    for what, variant in variants.items():
        assert plan(variant).key != base.key, what
        assert plan(variant).directory != base.directory, what

    with monkeypatch.context() as m:
        m.setenv("GROUPNORM_INLINE_WERROR", "0" if os.environ.get("GROUPNORM_INLINE_WERROR") == "1" else "1")
        assert plan(spec).key != base.key, "warnings-as-errors flag"
    with monkeypatch.context() as m:
        m.setattr(torch, "__version__", "2.99.0+cu999")
        upgraded = plan(spec)
        assert upgraded.key != base.key, "torch version"
        assert "torch2.99.0" in upgraded.directory.name
    with monkeypatch.context() as m:
        m.setattr(torch.version, "cuda", "99.9")
        assert plan(spec).key != base.key, "torch's CUDA version"
    assert plan(spec).key == base.key  # everything restored


@pytest.fixture
def cuda_toolkit(monkeypatch):
    """Plans with CUDA sources as a machine with a CUDA toolkit makes them (GROUPNORM_INLINE_NO_CUDA unset)."""
    if env.cuda_home() is None:
        pytest.skip("no CUDA toolkit (or a CPU build of torch): CUDA archs are not part of any build here")
    monkeypatch.delenv("GROUPNORM_INLINE_NO_CUDA", raising=False)
    for var in ("GROUPNORM_INLINE_CUDA_ARCH_LIST", "TORCH_CUDA_ARCH_LIST"):
        monkeypatch.delenv(var, raising=False)


def test_cache_key_covers_cuda_archs_and_nvcc(monkeypatch, cuda_toolkit):
    spec = tiny_spec(unique_namespace(), with_cuda_source=True)
    monkeypatch.setenv("GROUPNORM_INLINE_CUDA_ARCH_LIST", "9.0")
    sm90 = plan(spec)
    assert sm90.with_cuda and sm90.archs == ("9.0",)
    assert "-gencode=arch=compute_90,code=sm_90" in sm90.cuda_cflags

    monkeypatch.setenv("GROUPNORM_INLINE_CUDA_ARCH_LIST", "9.0;8.0")
    two = plan(spec)
    assert two.archs == ("8.0", "9.0") and two.key != sm90.key and two.directory != sm90.directory
    assert "-gencode=arch=compute_80,code=sm_80" in two.cuda_cflags

    monkeypatch.setenv("GROUPNORM_INLINE_CUDA_ARCH_LIST", "9.0+PTX")
    ptx = plan(spec)
    assert ptx.key != sm90.key and "-gencode=arch=compute_90,code=compute_90" in ptx.cuda_cflags

    # Our variable beats TORCH_CUDA_ARCH_LIST, which is used when ours is unset.
    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", "8.0")
    assert plan(spec).archs == ("9.0+PTX",)
    monkeypatch.delenv("GROUPNORM_INLINE_CUDA_ARCH_LIST")
    assert plan(spec).archs == ("8.0",)

    monkeypatch.setenv("GROUPNORM_INLINE_CUDA_ARCH_LIST", "9.0")
    monkeypatch.setattr(env, "nvcc_version", lambda: "99.9.999")
    assert plan(spec).key != sm90.key, "nvcc version"

    monkeypatch.setenv("GROUPNORM_INLINE_CUDA_ARCH_LIST", "sm_90")
    with pytest.raises(ValueError, match="cannot parse CUDA arch 'sm_90'"):
        plan(spec)


def test_default_arch_without_gpu(cuda_toolkit):
    """No GPU visible and no arch list: CUDA is still built, for the default arch 9.0."""
    if torch.cuda.is_available():
        pytest.skip("a GPU is visible: the default arch list is the visible GPUs' (checked below)")
    p = plan(tiny_spec(unique_namespace(), with_cuda_source=True))
    assert p.with_cuda and p.archs == (env.DEFAULT_ARCH_LIST,) == ("9.0",)


@pytest.mark.cuda
def test_default_archs_are_the_visible_gpus(cuda_toolkit):
    p = plan(tiny_spec(unique_namespace(), with_cuda_source=True))
    visible = {"%d.%d" % torch.cuda.get_device_capability(i) for i in range(torch.cuda.device_count())}
    assert set(p.archs) == visible


def test_no_cuda_variable_plans_cpu_only(monkeypatch):
    monkeypatch.setenv("GROUPNORM_INLINE_NO_CUDA", "1")
    assert not env.cuda_build_enabled()
    for spec in (tiny_spec(unique_namespace(), with_cuda_source=True), extension.SPEC):
        p = plan(spec)
        assert not p.with_cuda and p.archs == ()
        assert "-cpu-" in p.directory.name
        assert "-DGROUPNORM_INLINE_WITH_CUDA" not in p.cflags


# ------------------------------------------------------------------------------------------- cache folders

def test_cache_folder_variables(monkeypatch, tmp_path):
    spec = tiny_spec(unique_namespace())
    for var in CACHE_VARS:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert plan(spec).directory.parent == tmp_path / "xdg" / "groupnorm_inline"       # our own folder

    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path / "torch_extensions"))
    assert plan(spec).directory.parent == tmp_path / "torch_extensions"               # honoured (KernelBench)

    monkeypatch.setenv("GROUPNORM_INLINE_CACHE_DIR", str(tmp_path / "ours"))
    assert plan(spec).directory.parent == tmp_path / "ours"                           # ours beats it


# ------------------------------------------------------------------------------------------------- builds

def test_build_logs_start_and_end_then_a_second_process_hits_the_cache(monkeypatch, tmp_path, capfd):
    namespace = unique_namespace()
    spec = tiny_spec(namespace)
    monkeypatch.setenv("GROUPNORM_INLINE_CACHE_DIR", str(tmp_path))
    capfd.readouterr()
    load(spec)
    lines = jit_lines(capfd.readouterr().err, namespace)
    assert len(lines) == 2, lines
    start, end = BUILDING.match(lines[0]), BUILT.fullmatch(lines[1])
    assert start and end, lines
    p = plan(spec)
    assert Path(start.group(2)) == p.directory and p.directory.parent == tmp_path
    assert getattr(torch.ops, namespace).times_two(21) == 42

    info = json.loads((p.directory / "build_info.json").read_text())
    assert info["key"] == p.key and info["with_cuda"] is False and (p.directory / info["library"]).is_file()

    # The same spec in this process again: already loaded, silent.
    load(spec)
    assert jit_lines(capfd.readouterr().err, namespace) == []
    # A second process: a cache hit, nothing at all on stderr once the package is imported.
    monkeypatch.delenv("GROUPNORM_INLINE_CACHE_DIR")
    err = finish_worker(start_worker(namespace, tmp_path), "second process")
    assert after_marker(err) == "", f"a cache hit printed:\n{after_marker(err)}"


def test_two_processes_at_once_build_once(tmp_path):
    namespace = unique_namespace()
    workers = [start_worker(namespace, tmp_path) for _ in range(2)]
    errs = [finish_worker(w, f"process {i}") for i, w in enumerate(workers)]
    lines = [line for err in errs for line in jit_lines(err, namespace)]
    assert sum(bool(BUILDING.match(line)) for line in lines) == 1, lines
    assert sum(bool(BUILT.fullmatch(line)) for line in lines) == 1, lines


def compiler_groups(library_name: str) -> set[int]:
    """Process groups of the running compiler commands of a build of `library_name` (their command lines
    define TORCH_EXTENSION_NAME as it)."""
    flag = f"-DTORCH_EXTENSION_NAME={library_name}".encode()
    groups = set()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if flag in (proc / "cmdline").read_bytes():
                groups.add(os.getpgid(int(proc.name)))
        except (OSError, ProcessLookupError):  # gone meanwhile
            continue
    return groups


def signal_groups(groups, sig):
    for group in groups:
        try:
            os.killpg(group, sig)
        except ProcessLookupError:
            pass


def listing(directory: Path) -> dict[str, tuple[int, int]]:
    """Every file under `directory` -> (size, mtime in ns)."""
    return {str(f.relative_to(directory)): (f.stat().st_size, f.stat().st_mtime_ns)
            for f in sorted(directory.rglob("*")) if f.is_file()}


@pytest.mark.skipif(not Path("/proc/self/cmdline").exists(), reason="finds the compilers through /proc")
def test_build_killed_halfway_does_not_block_the_next(tmp_path):
    """A process killed (SIGKILL) while its compiler runs leaves its build lock, load_inline's `lock` file and
    a live compiler behind; the next process must build and load without waiting, and nothing the orphaned
    compiler writes later may touch the new build.

    ninja starts each command in a process group of its own, so killing the Python process and its whole group
    leaves the compiler running, writing its objects by path into the killed build's folder. The orphan is
    stopped while the next process builds and resumed after it finished: whatever it writes must land in its
    own abandoned attempt folder, not in the finished build. The stale `lock` file is the other trap: older torch
    (its FileBaton) takes its mere existence for a running build and waits forever. The test uses
    TORCH_EXTENSIONS_DIR, the folder KernelBench hands out."""
    namespace = unique_namespace()
    p = plan_under(tiny_spec(namespace), tmp_path, "TORCH_EXTENSIONS_DIR")
    build_dir = p.directory
    victim = start_worker(namespace, tmp_path, "TORCH_EXTENSIONS_DIR", start_new_session=True)
    orphans: set[int] = set()
    try:
        deadline = time.monotonic() + WORKER_TIMEOUT_S
        while not compiler_groups(p.library_name):
            assert victim.poll() is None, f"the build finished or failed before it could be killed: {victim.communicate()}"
            assert time.monotonic() < deadline, "the compiler never started"
            time.sleep(0.05)
        os.killpg(victim.pid, signal.SIGKILL)
        victim.communicate()
        orphans = compiler_groups(p.library_name)
        assert orphans, "the killed build's compiler died with it: this test no longer covers orphaned compilers"
        signal_groups(orphans, signal.SIGSTOP)
        assert list(build_dir.glob("attempt-*/lock")) and not (build_dir / "build_info.json").exists()

        err = finish_worker(start_worker(namespace, tmp_path, "TORCH_EXTENSIONS_DIR"), "build after a killed build")
        assert "waiting for" not in err, err
        lines = jit_lines(err, namespace)
        assert sum(bool(BUILT.fullmatch(line)) for line in lines) == 1
        rebuilding = [m.group(2) for m in map(REBUILDING.fullmatch, lines) if m]
        assert rebuilding == ["a previous build in this folder did not finish"], lines
        finished = listing(build_dir)
        top = sorted(f for f in finished if "/" not in f)
        assert top == ["build_info.json", f"{p.library_name}.so"], finished
        kept = [f for f in finished if "/" in f]       # the new attempt's sources, no objects
        assert kept and all(f.startswith("attempt-") and not f.endswith(".o") for f in kept), kept
        assert len({f.split("/")[0] for f in kept}) == 1 and any(f.endswith("/main.cpp") for f in kept), kept

        # The orphan runs to its end; it can only fail to write into its removed folder.
        signal_groups(orphans, signal.SIGCONT)
        deadline = time.monotonic() + WORKER_TIMEOUT_S
        while compiler_groups(p.library_name) & orphans:
            assert time.monotonic() < deadline, "the orphaned compiler did not finish"
            time.sleep(0.1)
        orphans = set()   # gone: their group ids may be reused
        assert listing(build_dir) == finished, "the killed build's compiler wrote into the finished build"
        assert manifest.verify(build_dir, p.key).library
        err = finish_worker(start_worker(namespace, tmp_path, "TORCH_EXTENSIONS_DIR"), "load after the orphan")
        assert after_marker(err) == "", f"a cache hit printed:\n{after_marker(err)}"
    finally:
        if victim.poll() is None:
            os.killpg(victim.pid, signal.SIGKILL)
            victim.communicate()
        signal_groups(orphans, signal.SIGKILL)


def test_failed_build_raises_with_the_compiler_error(monkeypatch, tmp_path):
    namespace = unique_namespace()
    spec = tiny_spec(namespace, broken=True)
    monkeypatch.setenv("GROUPNORM_INLINE_CACHE_DIR", str(tmp_path))
    with pytest.raises(ExtensionBuildError) as raised:
        load(spec)
    message = str(raised.value)
    assert f"building test extension {namespace} failed" in message
    assert "error:" in message, message                                   # the compiler's diagnostic ...
    assert f"{namespace}_syntax_error" in message, message                # ... quoting the broken line
    assert isinstance(raised.value, RuntimeError)
    assert not (plan(spec).directory / "build_info.json").exists()


# ----------------------------------------------------------------------------- damaged libraries and manifests

def fake_build(directory: Path, key: str, size: int = 4096) -> Path:
    """A build folder as a finished build leaves it, with a stand-in library (never loaded)."""
    directory.mkdir(parents=True)
    library = directory / "libfake.so"
    library.write_bytes(bytes((i * 7 + 3) % 256 for i in range(size)))
    manifest.write(directory, key, library, with_cuda=False)
    return library


def test_manifest_records_size_and_sha256_atomically(tmp_path):
    library = fake_build(tmp_path / "b", "k" * 64)
    info = json.loads((tmp_path / "b" / "build_info.json").read_text())
    assert info["size"] == 4096 and info["library"] == "libfake.so" and info["key"] == "k" * 64
    assert info["sha256"] == hashlib.sha256(library.read_bytes()).hexdigest()
    assert sorted(p.name for p in (tmp_path / "b").iterdir()) == ["build_info.json", "libfake.so"]  # no temp file
    verdict = manifest.verify(tmp_path / "b", "k" * 64)
    assert verdict.library == library and verdict.problem is None
    assert manifest.verify(tmp_path / "absent", "k" * 64) == manifest.Verdict(None, None)  # nothing built: no reason


def _truncate(lib: Path, manifest_file: Path):
    with open(lib, "r+b") as f:
        f.truncate(lib.stat().st_size // 3)


def _flip_a_byte(lib: Path, manifest_file: Path):
    data = bytearray(lib.read_bytes())
    data[len(data) // 2] ^= 0xFF
    lib.write_bytes(bytes(data))


def _delete_manifest(lib: Path, manifest_file: Path):
    manifest_file.unlink()


def _garble_manifest(lib: Path, manifest_file: Path):
    manifest_file.write_text(manifest_file.read_text()[:40])


def _old_manifest(lib: Path, manifest_file: Path):
    info = json.loads(manifest_file.read_text())
    del info["size"], info["sha256"]
    manifest_file.write_text(json.dumps(info))


def _delete_library(lib: Path, manifest_file: Path):
    lib.unlink()


DAMAGE = {  # what is done to a finished build -> the reason the loader gives for rebuilding it
    "truncated library": (_truncate, r"its library \S+\.so is \d+ bytes, the manifest says \d+ \(truncated since it was built\)"),
    "one byte changed": (_flip_a_byte, r"its library \S+\.so has sha256 [0-9a-f]{12}\.\.\., the manifest says [0-9a-f]{12}\.\.\. \(damaged since it was built\)"),
    "manifest deleted": (_delete_manifest, r"its manifest build_info\.json is missing \(library \S+\.so cannot be checked\)"),
    "manifest garbled": (_garble_manifest, r"its manifest build_info\.json is corrupt \(.+\)"),
    "manifest without checksum": (_old_manifest, r"its manifest build_info\.json records no size and sha256 \(written by an older version\)"),
    "library deleted": (_delete_library, r"its library \S+\.so is missing"),
}


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_manifest_verify_names_the_damage(tmp_path, damage):
    key = "k" * 64
    library = fake_build(tmp_path / "b", key)
    DAMAGE[damage][0](library, tmp_path / "b" / "build_info.json")
    verdict = manifest.verify(tmp_path / "b", key)
    assert verdict.library is None, damage
    assert re.fullmatch(DAMAGE[damage][1], verdict.problem), verdict.problem


def test_manifest_of_another_build_is_not_trusted(tmp_path):
    fake_build(tmp_path / "b", "k" * 64)
    verdict = manifest.verify(tmp_path / "b", "j" * 64)
    assert verdict.library is None and "belongs to another build" in verdict.problem


@pytest.fixture(scope="module")
def finished_build(tmp_path_factory):
    """(namespace, cache root) of one finished tiny build, made by a second process; tests copy it."""
    namespace, root = unique_namespace(), tmp_path_factory.mktemp("finished_build")
    finish_worker(start_worker(namespace, root), "first build")
    return namespace, root


def damaged_copy(finished_build, tmp_path, damage: str) -> Path:
    """A copy of the finished build's cache root under tmp_path, damaged as DAMAGE[damage] says; its build dir."""
    namespace, root = finished_build
    shutil.copytree(root, tmp_path, dirs_exist_ok=True)
    build_dir = plan_under(tiny_spec(namespace), tmp_path).directory
    info = json.loads((build_dir / "build_info.json").read_text())
    DAMAGE[damage][0](build_dir / info["library"], build_dir / "build_info.json")
    return build_dir


@pytest.mark.parametrize("damage", ["truncated library", "one byte changed", "manifest deleted"])
def test_damaged_build_is_rebuilt_with_the_reason(finished_build, tmp_path, damage):
    """The next process (a fresh import: loading a truncated library would kill it with SIGBUS) says why on
    one stderr line, builds again in a cleaned folder, records the new library and runs it."""
    namespace = finished_build[0]
    build_dir = damaged_copy(finished_build, tmp_path, damage)
    err = finish_worker(start_worker(namespace, tmp_path), f"load after: {damage}")
    lines = jit_lines(after_marker(err), namespace)
    assert len(lines) == 3, lines
    rebuilding = REBUILDING.fullmatch(lines[0])
    assert rebuilding and re.fullmatch(DAMAGE[damage][1], rebuilding.group(2)), lines
    assert BUILDING.match(lines[1]) and BUILT.fullmatch(lines[2]), lines
    verdict = manifest.verify(build_dir, plan_under(tiny_spec(namespace), tmp_path).key)
    assert verdict.library is not None, verdict.problem
    # The repaired build is a plain cache hit for the process after.
    err = finish_worker(start_worker(namespace, tmp_path), "load after the rebuild")
    assert after_marker(err) == "", f"a cache hit printed:\n{after_marker(err)}"


def test_two_processes_find_a_damaged_build_and_rebuild_it_once(finished_build, tmp_path):
    """Both see the truncated library; one takes the build lock and rebuilds, the other waits, looks again
    under the lock, finds the repaired build and loads it."""
    namespace = finished_build[0]
    damaged_copy(finished_build, tmp_path, "truncated library")
    workers = [start_worker(namespace, tmp_path) for _ in range(2)]
    errs = [finish_worker(w, f"process {i}") for i, w in enumerate(workers)]
    lines = [line for err in errs for line in jit_lines(after_marker(err), namespace)]
    assert sum(bool(REBUILDING.fullmatch(line)) for line in lines) == 1, lines
    assert sum(bool(BUILDING.match(line)) for line in lines) == 1, lines
    assert sum(bool(BUILT.fullmatch(line)) for line in lines) == 1, lines


# ---------------------------------------------------------------------------------- the package's own build

def test_package_build_contains_the_cuda_kernels_when_a_toolkit_is_found():
    """Where a CUDA toolkit is found (CI has one), the package's extension was built with its CUDA sources:
    a CUDA compile error would have failed the import, and a silently CPU-only build fails here."""
    if not env.cuda_build_enabled():
        pytest.skip(f"no CUDA build on this machine: {extension.cuda_unavailable_reason()}")
    p = plan(extension.SPEC)
    assert p.with_cuda and p.archs
    info = json.loads((p.directory / "build_info.json").read_text())
    assert info["with_cuda"] is True and info["key"] == p.key and info["archs"] == list(p.archs)
    assert torch._C._dispatch_has_kernel_for_dispatch_key("groupnorm_inline::group_norm_forward", "CUDA")


def test_package_build_is_recorded():
    """The package's loaded build matches its plan on this machine (CPU-only or not)."""
    p = plan(extension.SPEC)
    info = json.loads((p.directory / "build_info.json").read_text())
    assert info["key"] == p.key and info["with_cuda"] == p.with_cuda
    assert torch._C._dispatch_has_kernel_for_dispatch_key("groupnorm_inline::group_norm_forward", "CPU")


def test_package_python_entry_is_its_library():
    """The package's direct Python entries come from its own library (the module python_module imports from
    it, once per process); an extension without entry sources says so rather than importing anything."""
    entry = extension.python_entry()
    assert python_module(extension.SPEC) is entry
    assert Path(entry.__file__).resolve() == load(extension.SPEC).resolve()
    assert entry.__name__ == extension.SPEC.python_module_name
    assert callable(entry.group_norm) and callable(entry.group_norm_with_stats)
    with pytest.raises(ValueError, match="defines no Python entry points"):
        python_module(tiny_spec(unique_namespace()))

"""The manifest of a finished build (`build_info.json` beside the library): what was built, and the library's
size and sha256, so that a damaged library is rebuilt instead of loaded.

Loading a truncated shared library (a disk that filled up during a copy, an interrupted rsync of the cache)
does not raise: the dynamic loader maps the file and the process dies with SIGBUS ("Bus error") when it
touches a page past the end. Checking the size and the hash first turns that into a rebuild.

The manifest is written after the build succeeded, into a temporary file that is renamed over the final name
(atomic on POSIX file systems), after the library and the manifest were flushed to disk: a manifest that
exists names a library that was complete when it was written.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

FILE_NAME = "build_info.json"
_CHUNK = 1 << 20   # 1 MiB reads: hashing the ~12 MB CUDA library takes 13-30 ms on a busy 2-core machine


@dataclass(frozen=True)
class Verdict:
    """What a build folder holds: `library` when it may be loaded, otherwise `problem` says why not
    (None when there is simply no build there yet, which needs no explanation)."""

    library: Path | None
    problem: str | None = None
    info: dict | None = None


def path(directory: Path) -> Path:
    return directory / FILE_NAME


def sha256_of(file: Path) -> str:
    digest = hashlib.sha256()
    with open(file, "rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _fsync(file: Path) -> None:
    fd = os.open(file, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write(directory: Path, key: str, library: Path, **details) -> dict:
    """Record a finished build of `key` whose library is `library` (inside `directory`); returns the manifest.

    Raises OSError when the manifest cannot be written (e.g. the disk is full): the caller must not treat the
    build as finished then, or every later import would find no manifest and build again without saying why.
    """
    _fsync(library)
    info = {"key": key, "library": library.name, "size": library.stat().st_size, "sha256": sha256_of(library),
            **details, "built_at": time.strftime("%Y-%m-%dT%H:%M:%S")}
    final = path(directory)
    tmp = final.with_name(f"{FILE_NAME}.tmp-{os.getpid()}")
    try:
        with open(tmp, "w") as f:
            f.write(json.dumps(info, indent=1))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, final)
    except OSError:
        tmp.unlink(missing_ok=True)
        raise
    try:
        _fsync(directory)  # the rename itself reaches the disk
    except OSError:        # some file systems refuse fsync on a directory; the rename is still atomic
        pass
    return info


def verify(directory: Path, key: str) -> Verdict:
    """Check the build in `directory` against its manifest; never raises for a damaged or missing build."""
    if not directory.is_dir():
        return Verdict(None)
    manifest = path(directory)
    try:
        text = manifest.read_text()
    except FileNotFoundError:
        libraries = sorted(p.name for p in directory.glob("*.so"))
        if libraries:
            return Verdict(None, f"its manifest {FILE_NAME} is missing (library {libraries[0]} cannot be checked)")
        return Verdict(None, "a previous build in this folder did not finish")
    except OSError as exc:
        return Verdict(None, f"its manifest {FILE_NAME} cannot be read ({exc.strerror or exc})")
    try:
        info = json.loads(text)
        if not isinstance(info, dict):
            raise ValueError("not a JSON object")
    except ValueError as exc:
        return Verdict(None, f"its manifest {FILE_NAME} is corrupt ({exc})")
    if info.get("key") != key:
        return Verdict(None, f"its manifest {FILE_NAME} belongs to another build", info)
    name, size, sha = info.get("library"), info.get("size"), info.get("sha256")
    if not isinstance(name, str) or not name or "/" in name:
        return Verdict(None, f"its manifest {FILE_NAME} names no library", info)
    if not isinstance(size, int) or not isinstance(sha, str):
        return Verdict(None, f"its manifest {FILE_NAME} records no size and sha256 (written by an older version)",
                       info)
    library = directory / name
    try:
        actual = library.stat().st_size
    except OSError:
        return Verdict(None, f"its library {name} is missing", info)
    if actual != size:
        return Verdict(None, f"its library {name} is {actual} bytes, the manifest says {size} "
                             f"({'truncated' if actual < size else 'changed'} since it was built)", info)
    try:
        digest = sha256_of(library)
    except OSError as exc:
        return Verdict(None, f"its library {name} cannot be read ({exc.strerror or exc})", info)
    if digest != sha:
        return Verdict(None, f"its library {name} has sha256 {digest[:12]}..., the manifest says {sha[:12]}... "
                             "(damaged since it was built)", info)
    return Verdict(library, None, info)

"""`clear-cache`: remove this package's build folders from the current cache root, and nothing else.

The cache root may be TORCH_EXTENSIONS_DIR, shared with other projects, so only names this package
creates are touched:

* package builds `<spec name>-py311-torch2.x-<cpu|cuXYZ-smNN>-<16 hex>` and their `.lock` files
  (`groupnorm_inline.jit.build.plan` names them);
* builds of exported files `<namespace>_export_l<level>_<number>_<8 hex>_<cuda|cpu>_<8 hex>`.

A folder whose build lock another process holds, or holding the `lock` file of a running (or killed)
load_inline build, is left alone and reported.
"""

from __future__ import annotations

import errno
import fcntl
import os
import re
import shutil
from pathlib import Path

_PACKAGE_BUILD = r"-py\d+-torch[0-9A-Za-z.]+-(?:cpu|cu\d*-sm[0-9a-z_]*)-[0-9a-f]{16}"
_EXPORT_BUILD = re.compile(r"^groupnorm_inline\w*_export_l\d+_\d+_[0-9a-f]{8}_(?:cuda|cpu)_[0-9a-f]{8}$")


def _spec_names() -> set[str]:
    from .config import _extension_specs

    return {spec.name for spec in _extension_specs()}


def is_our_entry(name: str, spec_names: set[str]) -> bool:
    """Whether a cache-root entry name is one this package creates."""
    stem = name[:-len(".lock")] if name.endswith(".lock") else name
    prefixes = "|".join(re.escape(n) for n in sorted(spec_names | {"groupnorm_inline"}, key=len, reverse=True))
    if re.fullmatch(rf"(?:{prefixes})\w*{_PACKAGE_BUILD}", stem):
        return True
    return not name.endswith(".lock") and bool(_EXPORT_BUILD.match(name))


def _size(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file() and not f.is_symlink())


class _HeldLock:
    """Take the build lock of a cache entry without waiting: `holder` says who has it if we could not."""

    def __init__(self, lock: Path):
        self.lock, self.fd, self.holder = lock, None, None

    def __enter__(self):
        try:
            self.fd = os.open(self.lock, os.O_RDWR)
        except FileNotFoundError:
            return self
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno not in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                raise
            pid = self.lock.read_text().strip()
            self.holder = f"process {pid}" if pid else "another process"
        return self

    def __exit__(self, *exc):
        if self.fd is not None:
            os.close(self.fd)  # closing drops the flock


def _remove(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path)
    elif path.exists():
        path.unlink()


def clear(dry_run: bool = False, root: Path | None = None) -> int:
    from ..jit import env

    root = root or env.cache_root()
    if not root.is_dir():
        print(f"cache root {root} does not exist: nothing to remove")
        return 0
    names = _spec_names()
    removed, kept, freed = 0, 0, 0
    handled: set[Path] = set()  # lock files dealt with together with their folder
    for entry in sorted(root.iterdir()):
        if entry in handled or entry.is_symlink() or not is_our_entry(entry.name, names):
            continue
        lock = entry if entry.name.endswith(".lock") else entry.with_name(entry.name + ".lock")
        handled.add(lock)
        # Holding the build lock while removing keeps a build from starting in a half-removed folder.
        with _HeldLock(lock) as held:
            if held.holder:
                print(f"kept    {entry}: {held.holder} holds its build lock")
                kept += 1
                continue
            if entry.is_dir() and (entry / "lock").exists():
                print(f"kept    {entry}: it holds load_inline's lock file, so a build may be running there "
                      "(remove the folder by hand if none is)")
                kept += 1
                continue
            targets = [entry] + ([lock] if lock != entry and lock.exists() else [])
            for target in targets:
                size = _size(target)
                if not dry_run:
                    _remove(target)
                print(f"{'would remove' if dry_run else 'removed'} {target} ({size / 2**20:.1f} MB)")
                removed += 1
                freed += size
    verb = "would free" if dry_run else "freed"
    print(f"{removed} entries {'to remove' if dry_run else 'removed'} from {root}, {verb} {freed / 2**20:.1f} MB"
          + (f"; {kept} kept" if kept else ""))
    return 0

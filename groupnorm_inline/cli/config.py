"""`show-config`: what a build would use on this machine and whether it already exists. Builds nothing.

Each extension's build folder comes from `groupnorm_inline.jit.plan` (the same function the loader
uses) and its state from the manifest (`build_info.json`) a finished build leaves there, checked as the loader
checks it.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch


def _extension_specs():
    """The package's core extension plus those of every problem recipe, once each."""
    from .. import extension
    from . import recipes

    specs = {extension.SPEC.name: extension.SPEC}
    for recipe in recipes.RECIPES.values():
        for spec in recipe.extensions():
            specs.setdefault(spec.name, spec)
    return list(specs.values())


def build_state(directory: Path, key: str) -> dict:
    """Whether `directory` holds a loadable build of `key`: its manifest (`build_info.json`) checked the way the
    loader checks it (key, library size and sha256); otherwise the reason the next import will build."""
    from ..jit import manifest

    verdict = manifest.verify(directory, key)
    if verdict.library is None:
        return {"built": False, "reason": verdict.problem or "no finished build"}
    info = verdict.info or {}
    return {"built": True, "library": str(verdict.library), "built_at": info.get("built_at"),
            "seconds": info.get("seconds"), "with_cuda": info.get("with_cuda")}


def _cache_root_source() -> str:
    for var in ("GROUPNORM_INLINE_CACHE_DIR", "TORCH_EXTENSIONS_DIR"):
        if os.environ.get(var):
            return var
    return "default"


def _arch_source() -> str:
    for var in ("GROUPNORM_INLINE_CUDA_ARCH_LIST", "TORCH_CUDA_ARCH_LIST"):
        if os.environ.get(var):
            return var
    return "visible GPUs" if torch.cuda.is_available() else "default (no GPU visible)"


def collect() -> dict:
    from .. import __version__, extension
    from ..jit import env, plan

    gpus = []
    if torch.cuda.is_available():
        for i in range(torch.cuda.device_count()):
            p = torch.cuda.get_device_properties(i)
            gpus.append({"index": i, "name": p.name, "capability": f"{p.major}.{p.minor}",
                         "memory_gb": round(p.total_memory / 1e9, 1)})
    home = env.cuda_home()
    config = {
        "groupnorm_inline": __version__, "package_dir": str(Path(__file__).resolve().parents[1]),
        "python": sys.version.split()[0], "torch": torch.__version__, "torch_cuda": torch.version.cuda,
        "gpus": gpus, "cuda_toolkit": home, "nvcc": env.nvcc_version() if home else None,
        "cuda_build_enabled": env.cuda_build_enabled(),
        "cuda_unavailable_reason": None if env.cuda_build_enabled() else extension.cuda_unavailable_reason(),
        "cache_root": str(env.cache_root()), "cache_root_from": _cache_root_source(),
        "environment": {k: v for k, v in sorted(os.environ.items())
                        if k.startswith("GROUPNORM_INLINE_") or k in ("TORCH_EXTENSIONS_DIR", "TORCH_CUDA_ARCH_LIST",
                                                                      "CUDA_HOME", "CUDA_PATH")},
    }
    try:
        config["archs"], config["archs_from"] = env.arch_list(), _arch_source()
    except ValueError as exc:
        config["archs"], config["archs_from"] = None, str(exc)
    config["extensions"] = []
    for spec in _extension_specs():
        entry = {"name": spec.name, "description": spec.description}
        try:
            p = plan(spec)
        except ValueError as exc:  # an unparsable arch list
            entry["error"] = str(exc)
        else:
            entry.update({"with_cuda": p.with_cuda, "archs": list(p.archs), "key": p.key,
                          "build_dir": str(p.directory), **build_state(p.directory, p.key)})
        config["extensions"].append(entry)
    return config


def _text(c: dict) -> str:
    gpus = "; ".join(f"{g['index']}: {g['name']} (sm_{g['capability'].replace('.', '')}, {g['memory_gb']} GB)"
                     for g in c["gpus"]) or "none visible"
    lines = [
        f"groupnorm_inline {c['groupnorm_inline']} ({c['package_dir']})",
        f"python {c['python']}, torch {c['torch']} (CUDA {c['torch_cuda'] or 'none: CPU build'})",
        f"GPUs: {gpus}",
        f"CUDA toolkit: {c['cuda_toolkit'] or 'none found'}" + (f" (nvcc {c['nvcc']})" if c["nvcc"] else ""),
        f"CUDA kernels: {'part of the build (toolkit found)' if c['cuda_build_enabled'] else 'not built: ' + str(c['cuda_unavailable_reason'])}",
        f"target archs: {', '.join(c['archs']) if c['archs'] else 'invalid'} (from {c['archs_from']})",
        f"cache root: {c['cache_root']} (from {c['cache_root_from']})",
    ]
    for e in c["extensions"]:
        lines.append(f"extension {e['name']}" + (f" ({e['description']})" if e["description"] else "") + ":")
        if "error" in e:
            lines.append(f"  cannot plan the build: {e['error']}")
            continue
        target = f"CUDA (archs {', '.join(e['archs'])}) + C++" if e["with_cuda"] else "C++ only"
        lines.append(f"  build: {target} in {e['build_dir']}")
        if e["built"]:
            lines.append(f"  state: built {e['built_at']} in {e['seconds']} s ({Path(e['library']).name})")
        else:
            fresh = e["reason"] == "no finished build"
            lines.append(f"  state: {'not built' if fresh else 'to be rebuilt'} ({e['reason']}); "
                         f"the {'first' if fresh else 'next'} import builds it")
    if c["environment"]:
        lines.append("environment: " + ", ".join(f"{k}={v}" for k, v in c["environment"].items()))
    return "\n".join(lines)


def show(as_json: bool = False) -> int:
    config = collect()
    print(json.dumps(config, indent=1) if as_json else _text(config))
    return 0

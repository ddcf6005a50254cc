"""The JIT layer: environment and cache paths (`env`), build-and-load with locking and logging (`build`), and
the manifest that records each finished build's library size and sha256 (`manifest`)."""

from .build import ExtensionBuildError, ExtensionSpec, load, plan, python_module
from . import env, manifest

__all__ = ["ExtensionBuildError", "ExtensionSpec", "load", "plan", "python_module", "env", "manifest"]

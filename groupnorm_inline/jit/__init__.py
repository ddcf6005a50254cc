"""The JIT layer: environment and cache paths (`env`), build-and-load with locking and logging (`build`)."""

from .build import ExtensionBuildError, ExtensionSpec, load, plan
from . import env

__all__ = ["ExtensionBuildError", "ExtensionSpec", "load", "plan", "env"]

"""`list`: the problems, their KernelBench names, input shapes and constructor arguments.

Shapes come from running the reference's `get_inputs()` under the meta device: exact, instant, and no
memory (the #35 input alone is 7.5 GB).
"""

from __future__ import annotations

import torch

from ..problems import PROBLEMS, ProblemInfo
from . import problem_source, recipes


def describe_inputs(values) -> str:
    parts = []
    for v in values:
        parts.append(f"{str(v.dtype).replace('torch.', '')}{tuple(v.shape)}" if isinstance(v, torch.Tensor) else repr(v))
    return ", ".join(parts)


def reference_shapes(info: ProblemInfo, overrides: dict | None = None) -> tuple[str, str, int]:
    """(inputs, init inputs, input bytes) of the reference, with module constants optionally overridden."""
    namespace: dict = {}
    with torch.device("meta"):
        exec(compile(problem_source.reference_source(info), f"<reference {info.file_name}>", "exec"), namespace)
        namespace.update(overrides or {})
        inputs = namespace["get_inputs"]()
        init = namespace["get_init_inputs"]()
    nbytes = sum(t.numel() * t.element_size() for t in inputs if isinstance(t, torch.Tensor))
    return describe_inputs(inputs), describe_inputs(init), nbytes


def problems_table() -> str:
    lines = []
    for info in PROBLEMS.values():
        inputs, init, nbytes = reference_shapes(info)
        recipe = recipes.RECIPES.get(info.key)
        lines += [f"{info.key:6} {info.file_name}  ({info.summary})",
                  f"       inputs: {inputs}  ({nbytes / 1e9:.2f} GB)",
                  f"       init inputs: {init}",
                  f"       module: groupnorm_inline.problems.{info.module}",
                  f"       export/eval: {export_summary(recipe)}"]
        if recipe and recipe.small_constants:
            small_inputs, small_init, _ = reference_shapes(info, recipe.small_constants)
            lines.append(f"       --small inputs: {small_inputs}"
                         + (f"; init inputs: {small_init}" if small_init != init else ""))
    return "\n".join(lines)


def export_summary(recipe) -> str:
    """Where the export's ModelNew comes from (no module is imported, nothing is built)."""
    if recipe is None:
        return "no recipe yet"
    if recipe.model_module:
        return f"yes; ModelNew generated from the source of {recipe.model_module}"
    return "yes; ModelNew written in its recipe (groupnorm_inline.cli.recipes)"

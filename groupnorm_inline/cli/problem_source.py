"""KernelBench-style source text of a problem, read from its module in `groupnorm_inline.problems`.

Each problem module reproduces the KernelBench problem file (imports, `Model`, module constants,
`get_inputs`, `get_init_inputs`) and adds the package's `ModelNew`. The tools need two texts cut from it,
read with `ast` so nothing is imported (importing a problem may build kernels):

* `reference_source`: the KernelBench problem file itself (the module minus its docstring, imports from
  this package and `ModelNew`), which the harness `exec`s to get `Model`, `get_inputs`, `get_init_inputs`;
* `inputs_source`: only the constants and functions after `Model` (`get_inputs`, `get_init_inputs`, ...)
  plus the imports they need, appended to a single-file export for local runs.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

from .. import problems
from ..problems import ProblemInfo


def problem_path(info: ProblemInfo) -> Path:
    return Path(problems.__file__).resolve().parent / f"{info.module}.py"


@dataclass(frozen=True)
class ProblemParts:
    imports: tuple[str, ...]       # absolute imports not from this package, as written
    model: str                     # `class Model` and anything else the reference needs (helpers)
    inputs: tuple[str, ...]        # constants and functions: get_inputs, get_init_inputs, ...


def _is_own_import(node: ast.stmt) -> bool:
    if isinstance(node, ast.ImportFrom):
        return node.level > 0 or (node.module or "").split(".")[0] == "groupnorm_inline"
    return isinstance(node, ast.Import) and any(a.name.split(".")[0] == "groupnorm_inline" for a in node.names)


def _starts_inputs(node: ast.stmt) -> bool:
    """The inputs section starts at the first module constant or input function."""
    return isinstance(node, ast.Assign | ast.AnnAssign) or (
        isinstance(node, ast.FunctionDef) and node.name in ("get_inputs", "get_init_inputs"))


def problem_parts(info: ProblemInfo) -> ProblemParts:
    """Split the problem module into imports, model definitions and input definitions."""
    text = problem_path(info).read_text()
    tree = ast.parse(text)
    imports, model, inputs = [], [], []
    for i, node in enumerate(tree.body):
        segment = ast.get_source_segment(text, node, padded=True)
        if isinstance(node, ast.FunctionDef | ast.ClassDef) and node.decorator_list:
            start = min(d.lineno for d in node.decorator_list)  # keep decorators with their definition
            segment = "\n".join(text.splitlines()[start - 1:node.end_lineno])
        if i == 0 and isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            continue  # module docstring (written about the package, not the problem)
        if isinstance(node, ast.Import | ast.ImportFrom):
            if not _is_own_import(node):
                imports.append(segment)
        elif isinstance(node, ast.ClassDef) and node.name == "ModelNew":
            continue
        elif isinstance(node, ast.ClassDef) or not (inputs or _starts_inputs(node)):
            model.append(segment)  # Model and the helpers defined before the inputs section
        else:
            inputs.append(segment)
    for needed in ("get_inputs", "get_init_inputs"):
        if not any(s.startswith(f"def {needed}(") for s in inputs):
            raise ValueError(f"problem module {info.module} defines no {needed}() after its classes")
    if not any(s.startswith("class Model(") for s in model):
        raise ValueError(f"problem module {info.module} defines no class Model")
    return ProblemParts(tuple(imports), "\n\n\n".join(model), tuple(inputs))


def _join_inputs(inputs: tuple[str, ...]) -> str:
    """Constants one per line, two blank lines around each function or class."""
    out, previous_def = [], False
    for segment in inputs:
        is_def = segment.startswith(("def ", "class ", "@"))
        if out:
            out.append("\n\n\n" if is_def or previous_def else "\n")
        out.append(segment)
        previous_def = is_def
    return "".join(out) + "\n"


def reference_source(info: ProblemInfo) -> str:
    """The KernelBench problem file of `info` (what the harness reads as the reference)."""
    parts = problem_parts(info)
    return "\n".join(parts.imports) + "\n\n\n" + parts.model + "\n\n\n" + _join_inputs(parts.inputs)


def _bound_by_import(statement: str) -> set[str]:
    names = set()
    for node in ast.parse(statement).body:
        if isinstance(node, ast.Import | ast.ImportFrom):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
    return names


def inputs_source(info: ProblemInfo) -> tuple[tuple[str, ...], str]:
    """(imports, text) of the problem's constants and input functions; only the imports that text uses (a
    reference's `import torch.nn.functional as F`, needed by its Model alone, would trip KernelBench's checker
    in an export)."""
    parts = problem_parts(info)
    text = _join_inputs(parts.inputs)
    used = {node.id for node in ast.walk(ast.parse(text)) if isinstance(node, ast.Name)}
    return tuple(i for i in parts.imports if _bound_by_import(i) & used), text

"""`export`: one self-contained Python file that KernelBench's scripted flow accepts as a submission.

The file carries the package's own C++/CUDA source strings (taken from the problem's ExtensionSpecs, so
nothing is copied by hand), comments stripped, with every operator namespace renamed to
`<namespace>_export_l<level>_<number>_<digest>`: a torch.library namespace can be defined once per
process, and the harness may run the file where groupnorm_inline itself is loaded (or run an edited
export beside an older one). It builds with a single `load_inline` call per extension and defines
`ModelNew` plus the problem's `get_inputs`/`get_init_inputs`. The Python comes from the problem's recipe:
for the level 2 problems it is generated from the package's own problem and kernels modules
(`python_glue`), so it is never a second copy kept by hand either. Two checks guard the file: every
package operator namespace its Python calls is one its extensions define, and it rebinds none of the
reference's names in the namespace the harness shares with it.

Why `is_python_module=False` and `torch.ops` rather than `functions=` (pybind): the sources already
register their operators with `TORCH_LIBRARY`, as the package loads them; the dispatcher then picks the
CUDA or the C++ kernel by the input's device, and no pybind11 module is generated.

The file cannot catch an exception (KernelBench rejects `try`), so it avoids raising one where it can:
it finds the CUDA toolkit the way `groupnorm_inline.jit.env` does (torch's own guess takes the parent of
whatever `nvcc` is on PATH, and falls back to /usr/local when no GPU is visible), passes explicit
`-gencode` flags unless TORCH_CUDA_ARCH_LIST is set (with no GPU visible load_inline would index an empty
device list; sm_90 then), builds only the C++ kernels when there is no toolkit, and skips the build when
this process already has the operators.
"""

from __future__ import annotations

import ast
import hashlib
import re
import textwrap
from dataclasses import dataclass

from ..jit import ExtensionSpec, env
from ..problems import ProblemInfo
from . import checker, cxx_text, problem_source, recipes
from .errors import EXIT_FAILED, CliError

# What groupnorm_inline.jit.build.plan adds to the C++ flags of a build that includes the CUDA sources.
CUDA_BUILD_DEFINE = "-DGROUPNORM_INLINE_WITH_CUDA"

# Target arch when no GPU is visible and TORCH_CUDA_ARCH_LIST is unset: Hopper, as groupnorm_inline.jit.env.
DEFAULT_CAPABILITY = (9, 0)

_BASE_IMPORTS = ("import hashlib", "import os", "import platform", "import shutil", "import sys", "",
                 "import torch", "import torch.nn as nn")

# Runs in the exported file. Reads _EXTENSIONS (rendered above it). Kept free of the words KernelBench rejects.
_LOADER = r'''
def _cpu_build_flags(openmp, vec_isa):
    """The C++ flags groupnorm_inline.jit.env adds to a build: this machine's at::vec instruction set (as ATen
    dispatches its own kernels) and OpenMP where torch runs on it, so the kernels split their work over the
    threads and round as the package's do. (No compiler probe: the builds here use gcc.)"""
    flags = []
    if vec_isa and platform.machine().lower() in ("x86_64", "amd64") and not sys.platform.startswith("win"):
        capability = torch.backends.cpu.get_cpu_capability()
        if capability in _VEC_ISA_FLAGS:
            flags += list(_VEC_ISA_FLAGS[capability]) + ["-DCPU_CAPABILITY=gn_inline_" + capability.lower()]
    if openmp and sys.platform.startswith("linux") and "parallel backend: OpenMP" in torch.__config__.parallel_info():
        flags.append("-fopenmp")
    return flags


def _env_flag(name):
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


def _cuda_toolkit():
    """The first of CUDA_HOME, CUDA_PATH, /usr/local/cuda and the toolkit of the nvcc on PATH (links
    resolved) holding both bin/nvcc and include/cuda_runtime.h; None when torch is a CPU build, when
    GROUPNORM_INLINE_NO_CUDA=1 asks for the C++ kernels only, or when there is no such folder."""
    if not torch.version.cuda or _env_flag("GROUPNORM_INLINE_NO_CUDA"):
        return None
    candidates = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"]
    nvcc = shutil.which("nvcc")
    if nvcc:
        candidates.append(os.path.dirname(os.path.dirname(os.path.realpath(nvcc))))
    for home in candidates:
        if home and os.path.isfile(os.path.join(home, "bin", "nvcc")) and os.path.isfile(
                os.path.join(home, "include", "cuda_runtime.h")):
            return home
    return None


def _arch_flags():
    """-gencode flags for the visible GPUs, or for _DEFAULT_CAPABILITY when none is visible (load_inline's
    own detection fails then); none when TORCH_CUDA_ARCH_LIST is set, which load_inline reads itself.
    A build made without a GPU thus has the same flags as a run on a GPU of the default arch: no rebuild."""
    if os.environ.get("TORCH_CUDA_ARCH_LIST"):
        return []
    if torch.cuda.is_available():
        capabilities = sorted({torch.cuda.get_device_capability(i) for i in range(torch.cuda.device_count())})
    else:
        capabilities = [_DEFAULT_CAPABILITY]
    return ["-gencode=arch=compute_%d%d,code=sm_%d%d" % (major, minor, major, minor) for major, minor in capabilities]


def _load_extensions():
    """Build each extension (the first time in this TORCH_EXTENSIONS_DIR) and load it, unless this
    process already has its operators (an earlier exec of this file)."""
    toolkit = _cuda_toolkit()
    if toolkit:
        os.environ.setdefault("CUDA_HOME", toolkit)
    from torch.utils import cpp_extension

    if toolkit:
        cpp_extension.CUDA_HOME = toolkit  # torch guessed its toolkit at import; use the one found above
    # The build name carries the torch version: load_inline's own cache key does not.
    torch_tag = hashlib.sha256(torch.__version__.encode()).hexdigest()[:8]
    for ext in _EXTENSIONS:
        if ext["probe_op"] and hasattr(getattr(torch.ops, ext["namespace"]), ext["probe_op"]):
            continue
        with_cuda = toolkit is not None and len(ext["cuda_sources"]) > 0
        cpu_flags = _cpu_build_flags(ext["openmp"], ext["cpu_vec_isa"])
        cflags = list(ext["cflags"]) + (list(ext["cuda_build_cflags"]) if with_cuda else []) + cpu_flags
        cuda_cflags = list(ext["cuda_cflags"]) + (_arch_flags() if with_cuda else [])
        cpp_extension.load_inline(
            name=ext["namespace"] + ("_cuda_" if with_cuda else "_cpu_") + torch_tag,
            cpp_sources=list(ext["cpp_sources"]),
            cuda_sources=list(ext["cuda_sources"]) if with_cuda else None,
            extra_cflags=cflags,
            extra_cuda_cflags=cuda_cflags if with_cuda else None,
            extra_ldflags=["-fopenmp"] if "-fopenmp" in cpu_flags else None,
            with_cuda=with_cuda,
            is_python_module=False,
            verbose=_env_flag("GROUPNORM_INLINE_VERBOSE"),
        )


_load_extensions()
'''


@dataclass(frozen=True)
class EmbeddedExtension:
    """One ExtensionSpec as the exported file carries it: sources stripped and renamed."""

    origin: str                        # spec name and description, for the file's comments
    namespace: str | None              # the (renamed) namespace its TORCH_LIBRARY block defines
    probe_op: str | None               # an operator of that namespace: present means already loaded
    cpp_sources: tuple[str, ...]
    cuda_sources: tuple[str, ...]
    cflags: tuple[str, ...]
    cuda_build_cflags: tuple[str, ...]
    cuda_cflags: tuple[str, ...]
    openmp: bool = False               # the spec's openmp and cpu_vec_isa (flags resolved where the file runs)
    cpu_vec_isa: bool = False


def export_namespace(namespace: str, info: ProblemInfo, digest: str) -> str:
    level, number = info.key.split("/")
    return f"{namespace}_export_l{level}_{number}_{digest}"


def embed_extensions(specs: tuple[ExtensionSpec, ...], model_source: str, info: ProblemInfo):
    """(embedded extensions, renamed model source) for `specs`; the digest in the new namespaces covers
    the stripped sources and the model source, so any edit gives new operator names."""
    stripped = [(tuple(cxx_text.strip_comments(s) for s in spec.cpp_sources),
                 tuple(cxx_text.strip_comments(s) for s in spec.cuda_sources)) for spec in specs]
    hasher = hashlib.sha256(model_source.encode())
    for cpp, cuda in stripped:
        for text in cpp + ("\0",) + cuda + ("\0",):
            hasher.update(text.encode())
    digest = hasher.hexdigest()[:8]
    namespaces = [ns for cpp, cuda in stripped for s in cpp + cuda for ns in cxx_text.defined_namespaces(s)]
    if len(set(namespaces)) != len(namespaces):
        raise CliError(f"the extensions of {info.key} define a torch.library namespace twice: {namespaces}",
                       EXIT_FAILED)
    renames = {ns: export_namespace(ns, info, digest) for ns in namespaces}
    embedded = []
    for spec, (cpp, cuda) in zip(specs, stripped):
        cpp = tuple(cxx_text.retarget_cxx(s, renames) for s in cpp)
        cuda = tuple(cxx_text.retarget_cxx(s, renames) for s in cuda)
        own = [ns for s in cpp + cuda for ns in cxx_text.defined_namespaces(s)]
        probe = cxx_text.first_operator("\n".join(cpp + cuda)) if own else None
        embedded.append(EmbeddedExtension(
            origin=f"{spec.name}" + (f" ({spec.description})" if spec.description else ""),
            namespace=own[0] if own else None, probe_op=probe, cpp_sources=cpp, cuda_sources=cuda,
            cflags=tuple(spec.extra_cflags), cuda_build_cflags=(CUDA_BUILD_DEFINE,),
            cuda_cflags=tuple(spec.extra_cuda_cflags), openmp=spec.openmp, cpu_vec_isa=spec.cpu_vec_isa))
    return tuple(embedded), cxx_text.retarget_python(model_source, renames)


def check_operator_namespaces(model_source: str, embedded: tuple[EmbeddedExtension, ...], info: ProblemInfo) -> None:
    """Every package operator namespace the (renamed) Python uses must be one the file's extensions define."""
    defined = {e.namespace for e in embedded if e.namespace}
    used = set(re.findall(r"\btorch\.ops\.(\w+)", model_source))
    missing = sorted(ns for ns in used if ns.startswith("groupnorm_inline") and ns not in defined)
    if missing:
        raise CliError(f"the export of {info.key} calls operators of {', '.join(missing)}, which none of its "
                       f"extensions ({', '.join(sorted(defined)) or 'none'}) defines; add that ExtensionSpec to "
                       f"its recipe", EXIT_FAILED)


def _top_level_names(source: str) -> set[str]:
    """Names the statements of a module bind at its top level (imports aside)."""
    names = set()
    for node in ast.parse(source).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
    return names


# The reference's names the export may rebind: the harness took them before it ran the candidate.
_REBOUND_REFERENCE_NAMES = frozenset({"get_inputs", "get_init_inputs"})


def reference_name_clashes(text: str, reference: str) -> set[str]:
    """The reference's top-level names that the candidate `text` would rebind. The harness execs the
    candidate into the reference's namespace: rebinding `Model`, a constant or a helper there changes
    what the reference computes (its get_inputs() reads its constants from there when called)."""
    return _top_level_names(text) & _top_level_names(reference) - _REBOUND_REFERENCE_NAMES


def check_reference_names(text: str, info: ProblemInfo) -> None:
    clashes = reference_name_clashes(text, problem_source.reference_source(info))
    if clashes:
        raise CliError(f"the export of {info.key} would overwrite the reference's {', '.join(sorted(clashes))} "
                       "in the namespace the harness shares; rename them in the package", EXIT_FAILED)


def python_literal(text: str) -> str:
    """`text` as a raw triple-quoted literal when that reads back exactly, else as repr()."""
    literal = 'r"""\n' + text + '"""'
    if '"""' not in text and not text.endswith("\\") and ast.literal_eval(literal) == "\n" + text:
        return literal
    return repr("\n" + text)


def _render_extension(index: int, ext: EmbeddedExtension) -> tuple[str, str]:
    """(source constants, _EXTENSIONS entry) for one extension."""
    constants = []
    for kind, sources in (("CPP", ext.cpp_sources), ("CUDA", ext.cuda_sources)):
        items = "".join(f"{python_literal(s)},\n" for s in sources)
        constants.append(f"# {kind} sources of the extension {ext.origin}, comments stripped.\n"
                         f"EXTENSION_{index}_{kind}_SOURCES = (\n{items})\n")
    entry = (f"    {{\n"
             f"        \"namespace\": {ext.namespace!r},\n"
             f"        \"probe_op\": {ext.probe_op!r},\n"
             f"        \"cpp_sources\": EXTENSION_{index}_CPP_SOURCES,\n"
             f"        \"cuda_sources\": EXTENSION_{index}_CUDA_SOURCES,\n"
             f"        \"cflags\": {ext.cflags!r},\n"
             f"        \"cuda_build_cflags\": {ext.cuda_build_cflags!r},\n"
             f"        \"cuda_cflags\": {ext.cuda_cflags!r},\n"
             f"        \"openmp\": {ext.openmp!r},\n"
             f"        \"cpu_vec_isa\": {ext.cpu_vec_isa!r},\n"
             f"    }},\n")
    return "\n".join(constants), entry


def scoped_inputs(inputs_text: str) -> str:
    """The problem's constants and input functions, with the constants kept inside a function scope."""
    body = textwrap.indent(inputs_text.strip("\n").replace("\n\n\n", "\n\n"), "    ")
    return ("# The problem's input functions, for local runs. Their constants stay inside _problem_inputs: the\n"
            "# harness execs this file into the reference's namespace, and the reference's get_inputs reads its\n"
            "# module constants from there when called (a reference of other shapes must keep its own).\n"
            "def _problem_inputs():\n" + body + "\n\n    return get_inputs, get_init_inputs\n\n\n"
            "get_inputs, get_init_inputs = _problem_inputs()\n")


def export_source(info: ProblemInfo) -> str:
    """The text of the single-file submission for `info`; raises CliError if it breaks KernelBench's rules."""
    from .. import __version__

    recipe = recipes.recipe_for(info)
    model_imports, model_python = recipe.model_python()
    embedded, model_source = embed_extensions(recipe.extensions(), model_python, info)
    check_operator_namespaces(model_source, embedded, info)
    problem_imports, inputs = problem_source.inputs_source(info)
    imports = list(_BASE_IMPORTS)
    imports += [i for i in dict.fromkeys(model_imports + problem_imports) if i not in _BASE_IMPORTS]
    rendered = [_render_extension(i, ext) for i, ext in enumerate(embedded)]
    namespaces = ", ".join(e.namespace for e in embedded if e.namespace)
    header = (
        f"# KernelBench level {info.key.replace('/', ' #')} ({info.file_name}): ModelNew on groupnorm_inline's kernels.\n"
        f"# Generated by `python -m groupnorm_inline export {info.key}` (groupnorm_inline {__version__}); edit the\n"
        f"# package and export again rather than this file. One file for KernelBench's scripted flow: the\n"
        f"# package's C++/CUDA sources (comments stripped), operators renamed to {namespaces}\n"
        f"# so this file also runs beside the installed package. Environment: CUDA_HOME (toolkit),\n"
        f"# TORCH_CUDA_ARCH_LIST (default: the visible GPUs, else sm_{DEFAULT_CAPABILITY[0]}{DEFAULT_CAPABILITY[1]}), GROUPNORM_INLINE_NO_CUDA=1 (C++\n"
        f"# kernels only), GROUPNORM_INLINE_VERBOSE=1 (compiler output), TORCH_EXTENSIONS_DIR (build folder).\n")
    loader_names = _top_level_names(_LOADER) | {"_EXTENSIONS", "_DEFAULT_CAPABILITY", "_VEC_ISA_FLAGS",
                                                 "_problem_inputs"}
    loader_names |= {f"EXTENSION_{i}_{kind}_SOURCES" for i in range(len(embedded)) for kind in ("CPP", "CUDA")}
    overwritten = _top_level_names(model_source) & loader_names
    if overwritten:
        raise CliError(f"the Python of the export of {info.key} defines {', '.join(sorted(overwritten))}, which the "
                       "file's loader defines too; rename them in the package", EXIT_FAILED)
    text = (header + "\n".join(imports) + "\n\n"
            + "\n".join(c for c, _ in rendered) + "\n"
            + "# Where each extension's operators live; probe_op present in torch.ops means already loaded.\n"
            + "_EXTENSIONS = (\n" + "".join(e for _, e in rendered) + ")\n\n"
            + "# The CUDA arch built for when no GPU is visible and TORCH_CUDA_ARCH_LIST is unset.\n"
            + f"_DEFAULT_CAPABILITY = {DEFAULT_CAPABILITY!r}\n\n"
            + "# at::vec's compiler flags per ATen CPU capability (groupnorm_inline.jit.env).\n"
            + f"_VEC_ISA_FLAGS = {env._VEC_ISA_FLAGS!r}\n\n"
            + _LOADER + "\n\n" + model_source.strip("\n") + "\n\n\n" + scoped_inputs(inputs))
    text = re.sub(r"\n{4,}", "\n\n\n", text)
    check_reference_names(text, info)
    report = checker.check_source(text)
    if not report.ok:
        raise CliError(f"the export of {info.key} breaks KernelBench's static rules:\n{report.summary()}", EXIT_FAILED)
    return text

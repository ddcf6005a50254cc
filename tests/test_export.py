"""The single-file KernelBench export: text operations, the static checker, and the exported files.

Every exported file must pass KernelBench's static rules, build (CUDA and C++, as CI has nvcc) under a
harness-set TORCH_EXTENSIONS_DIR, and, exec'd after the reference as the harness does, give GroupNorm's
answer on the CPU at a small shape. On a GPU the harness flow runs at the real shape.
"""

from __future__ import annotations

import ast
import copy
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from groupnorm_inline import extension
from groupnorm_inline.cli import checker, cxx_text, export, problem_source, python_glue, recipes
from groupnorm_inline.cli.errors import CliError
from groupnorm_inline.csrc.group_norm_cpu import GROUP_NORM_CPU_TEMPLATE, OP_NAMESPACE, with_namespace
from groupnorm_inline.csrc.group_norm_cuda import GROUP_NORM_FORWARD_CUDA_TEMPLATE
from groupnorm_inline.jit import env, plan
from groupnorm_inline.problems import PROBLEMS

from export_builds import export_build_environment, export_builds_cuda, export_builds_dir

REPO_ROOT = Path(__file__).resolve().parents[1]
EXPORTABLE = sorted(recipes.RECIPES)


def run_cli(*args, env_overrides=None, timeout=900):
    environ = dict(os.environ, PYTHONPATH=str(REPO_ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    environ.update(env_overrides or {})
    return subprocess.run([sys.executable, "-m", "groupnorm_inline", *args], cwd=REPO_ROOT, env=environ,
                          capture_output=True, text=True, timeout=timeout)


# ---------------------------------------------------------------- C++ text


def test_strip_comments_keeps_literals_and_code():
    source = textwrap.dedent(r'''
        #include <cstdio>  // a header
        /* a block
           comment */
        const char* url = "http://example.com/*not a comment*/";  // trailing
        char slash = '/'; char quote = '"';
        auto raw = R"x(// kept /* kept */)x";
        int big = 1'000'000;  // digit separators
        // a comment that continues \
           on the next line
        int after = 1; /* inline */ int more = 2;
    ''')
    out = cxx_text.strip_comments(source)
    assert out == textwrap.dedent(r'''
        #include <cstdio>
        const char* url = "http://example.com/*not a comment*/";
        char slash = '/'; char quote = '"';
        auto raw = R"x(// kept /* kept */)x";
        int big = 1'000'000;
        int after = 1;   int more = 2;
    ''').lstrip("\n")


def test_strip_comments_rejects_unterminated_block():
    with pytest.raises(ValueError, match="unterminated"):
        cxx_text.strip_comments("int x; /* never closed")


def _package_templates():
    """Every *_TEMPLATE string of the package's csrc modules: what with_namespace is applied to."""
    import importlib
    import pkgutil

    import groupnorm_inline.csrc as csrc

    templates = []
    for module in pkgutil.iter_modules(csrc.__path__):
        mod = importlib.import_module(f"groupnorm_inline.csrc.{module.name}")
        templates += [v for k, v in vars(mod).items() if k.endswith("_TEMPLATE") and isinstance(v, str)
                      and "GN_NAMESPACE" in v]
    return templates


def test_retarget_equals_with_namespace_of_the_templates():
    """Renaming a namespace in a namespaced source gives what with_namespace(template, new) gives."""
    templates = _package_templates()
    assert GROUP_NORM_CPU_TEMPLATE in templates and GROUP_NORM_FORWARD_CUDA_TEMPLATE in templates
    for template in templates:
        for old in (OP_NAMESPACE, "groupnorm_inline_other"):
            new = old + "_export_test"
            assert cxx_text.retarget_cxx(with_namespace(template, old), {old: new}) == with_namespace(template, new)


def test_retarget_touches_namespace_positions_only():
    renames = {"groupnorm_inline": "gn_x"}
    source = ('TORCH_LIBRARY(groupnorm_inline, m) {}\nTORCH_LIBRARY_FRAGMENT( groupnorm_inline , m) {}\n'
              'TORCH_LIBRARY_IMPL(groupnorm_inline, CUDA, m) {}\nauto op = "groupnorm_inline::op";\n'
              'TORCH_CHECK(ok, "groupnorm_inline: bad"); int groupnorm_inline_C; TORCH_LIBRARY(groupnorm_inline_p94, m)')
    assert cxx_text.retarget_cxx(source, renames) == (
        'TORCH_LIBRARY(gn_x, m) {}\nTORCH_LIBRARY_FRAGMENT( gn_x , m) {}\n'
        'TORCH_LIBRARY_IMPL(gn_x, CUDA, m) {}\nauto op = "gn_x::op";\n'
        'TORCH_CHECK(ok, "groupnorm_inline: bad"); int groupnorm_inline_C; TORCH_LIBRARY(groupnorm_inline_p94, m)')
    python = 'torch.ops.groupnorm_inline.op  # groupnorm_inline docs\nNS = "groupnorm_inline"\nQ = \'groupnorm_inline::op\''
    assert cxx_text.retarget_python(python, renames) == (
        'torch.ops.gn_x.op  # groupnorm_inline docs\nNS = "gn_x"\nQ = \'gn_x::op\'')


def test_namespaces_and_first_operator():
    source = 'TORCH_LIBRARY(ns_a, m) {\n  m.def("op_one(Tensor x) -> Tensor");\n}\nTORCH_LIBRARY_IMPL(ns_a, CPU, m) {}'
    assert cxx_text.defined_namespaces(source) == ["ns_a"]
    assert cxx_text.first_operator(source) == "op_one"


# ---------------------------------------------------------------- static checker

_CLEAN = textwrap.dedent('''
    # try: except: pass   (comments are fine)
    from torch.utils.cpp_extension import load_inline
    SOURCE = "__global__ void k() {}"
''')


def _errors(source):
    return [f.rule for f in checker.check_source(source).errors]


def test_checker_accepts_clean_source():
    report = checker.check_source(_CLEAN)
    assert report.ok, report.summary()


@pytest.mark.parametrize("addition, rule", [
    ('"""A docstring saying we try hard."""\n', "bypass-word"),
    ('x = 1\nif x:\n    pass\n', "bypass-word"),
    ('CPP = "int f() { try { return 1; } catch (...) { return 0; } }"\n', "bypass-word"),
    ('MSG = "except when empty"\n', "bypass-word"),
    ('import torch\ntorch.cuda.synchronize = lambda: None\n', "timing-patch"),
    ('import time\ntime.perf_counter = lambda: 0.0\n', "timing-patch"),
    ('import threading\n', "threads"),
    ('from concurrent.futures import ThreadPoolExecutor\n', "processes"),
    ('import multiprocessing\n', "processes"),
    ('import torch\nclass Lazy(torch.Tensor):\n    x = 1\n', "tensor-subclass"),
    ('import torch\ny = torch.Tensor._make_subclass(torch.Tensor, torch.ones(1))\n', "tensor-subclass"),
    ('def f(:\n', "syntax"),
    ('import torch\nlayer = torch.nn.Linear(2, 2)\n', "nn-layer"),
    ('import torch.nn.functional as F\n', "functional-op"),
    ('import torch.nn as nn\ny = nn.functional.relu(x)\n', "functional-op"),
    ('y = F.conv2d(x, w)\n', "functional-op"),
])
def test_checker_rejects(addition, rule):
    assert rule in _errors(_CLEAN + addition)


def test_checker_requires_cuda_kernel_and_build_in_kernelbench_view():
    assert "cuda-kernel" in _errors("from torch.utils.cpp_extension import load_inline\n")
    assert "cuda-build" in _errors('S = "__global__ void k() {}"\n')
    # KernelBench cuts each line at its first '#', string or not: this __global__ does not count there.
    assert "cuda-kernel" in _errors('from torch.utils.cpp_extension import load_inline\nS = "#x __global__"\n')


def test_checker_words_in_identifiers_are_fine():
    source = _CLEAN + "passes = 1\nbypass = 2\nretry_count = 3\nexception_text = 'x'\n"
    assert checker.check_source(source).ok


def test_checker_warnings_do_not_reject():
    """KernelBench only warns about torch compute ops; nn modules named without `torch.` pass its strict check."""
    report = checker.check_source(_CLEAN + "import torch\nimport torch.nn as nn\nlayer = nn.Linear(2, 2)\n"
                                  "w = torch.nn.Parameter(torch.ones(2))\nm = torch.nn.ModuleList()\n"
                                  "y = torch.group_norm(x, 2)\nz = torch.mm(a, b)\n")
    assert report.ok, report.summary()
    assert [f.rule for f in report.warnings] == ["torch-op", "torch-op"]


# ---------------------------------------------------------------- the generated Python (level 2)

GENERATED = sorted(key for key, recipe in recipes.RECIPES.items() if recipe.model_module)


def _without_docstrings(node: ast.AST) -> ast.AST:
    node = copy.deepcopy(node)
    for sub in ast.walk(node):
        if isinstance(sub, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) and ast.get_docstring(sub, clean=False):
            sub.body = sub.body[1:] or [ast.Expr(ast.Constant(Ellipsis))]
    return node


class _DropModuleAliases(ast.NodeTransformer):
    """`alias.NAME` -> `NAME` for the given module aliases: what the export does to the package's code."""

    def __init__(self, aliases):
        self.aliases = aliases

    def visit_Attribute(self, node):
        if isinstance(node.value, ast.Name) and node.value.id in self.aliases:
            return ast.copy_location(ast.Name(node.attr, node.ctx), node)
        return self.generic_visit(node)


def _package_definitions(module_names):
    """name -> (module, normalised statement) over the given package modules."""
    found = {}
    for name in module_names:
        module = python_glue._read_module(name)
        for bound, node in module.definitions.items():
            normalised = _DropModuleAliases(set(module.module_aliases)).visit(_without_docstrings(node))
            found.setdefault(bound, (name, ast.dump(normalised)))
    return found


@pytest.mark.parametrize("key", GENERATED)
def test_generated_python_is_the_package_code(key):
    """Every definition the export's Python holds is the package's own statement (docstrings aside, module
    aliases dropped), ModelNew included: nothing in it is written by hand."""
    recipe = recipes.RECIPES[key]
    kernels_module = recipe.extension_specs[0].split(":")[0]
    imports, text = recipe.model_python()
    # torch and the standard library only (family.py reads an environment override and uses math).
    allowed = {"import torch", "import torch.nn as nn", "import math", "import os"}
    assert set(imports) <= allowed, imports
    package = _package_definitions([recipe.model_module, kernels_module, "groupnorm_inline.problems.family",
                                    "groupnorm_inline.problems.split_gemm", "groupnorm_inline.csrc.conv3d_direct"])
    # The operator namespaces the Python binds: its kernels module's as `_ops`, the family's as `_family_ops`.
    operator_bindings = {f"_ops = torch.ops.{_ops_namespace(kernels_module)}",
                         f"_family_ops = torch.ops.{_ops_namespace('groupnorm_inline.problems.family_kernels')}"}
    tree = ast.parse(text)
    carried = []
    for node in tree.body:
        if isinstance(node, ast.Assign) and ast.unparse(node.value).startswith("torch.ops."):
            assert ast.unparse(node) in operator_bindings, ast.unparse(node)
            continue
        if hasattr(node, "name"):
            name = node.name
        else:  # an assignment; of a tuple (A, B = 1, 2): its first name
            target = node.targets[0]
            name = ast.unparse(target.elts[0] if isinstance(target, ast.Tuple) else target)
        assert name in package, f"{name} is in the export's Python but defined nowhere in the package"
        assert ast.dump(node) == package[name][1], f"{name} differs from its definition in {package[name][0]}"
        carried.append(name)
    assert "ModelNew" in carried and "Model" not in carried
    for sub in ast.walk(tree):  # docstrings became comments
        if isinstance(sub, ast.FunctionDef | ast.ClassDef):
            assert ast.get_docstring(sub) is None, f"{sub.name} keeps a docstring"


def _ops_namespace(kernels_module):
    import importlib

    return importlib.import_module(kernels_module).OP_NAMESPACE


def test_generated_python_of_94_carries_the_gemm_glue():
    """#94's ModelNew needs the operand-split GEMM helpers, the cuBLAS precision context manager and the
    constants its defaults are computed from, in an order that runs; nothing else from the kernels module."""
    _, text = recipes.RECIPES["2/94"].model_python()
    names = [getattr(n, "name", None) or ast.unparse(n.targets[0]) for n in ast.parse(text).body]
    for needed in ("CublasFloat32Mode", "product", "chunked_products", "bias_vector", "SPLIT_FORMAT",
                   "FP16_CORRECTION_SCALE", "DEFAULT_GEMM", "HAS_MM_OUT_DTYPE", "_HAS_FP32_PRECISION", "_ops"):
        assert needed in names, f"{needed} missing from the generated Python: {names}"
    for absent in ("EXTENSION", "SOURCE_TEMPLATES", "load", "__getattr__", "OP_NAMESPACE", "Model"):
        assert absent not in names
    assert names.index("HAS_MM_OUT_DTYPE") < names.index("DEFAULT_GEMM") < names.index("ModelNew")
    assert "kernels." not in text
    assert "# Context manager: float32 cuBLAS GEMMs" in text  # CublasFloat32Mode's docstring, as a comment


def _fake_package(root: Path, kernels: str, problem: str) -> None:
    """A package tree of the real layout under `root`: problems/fake_kernels.py, problems/fake_problem.py,
    csrc/fake_ns.py."""
    for folder, files in (("problems", {"fake_kernels.py": kernels, "fake_problem.py": problem}),
                          ("csrc", {"fake_ns.py": 'FAKE_NAMESPACE = "groupnorm_inline_fake"\n'})):
        (root / folder).mkdir(parents=True, exist_ok=True)
        for name, text in files.items():
            (root / folder / name).write_text(textwrap.dedent(text).lstrip("\n"))


_FAKE_HELPER = '''    def helper(x):
        """Scales x: pass it anything; try it."""
        return x * SCALE * math.pi
'''
_FAKE_KERNELS = """
    \"\"\"Kernels of a fake problem.\"\"\"

    from __future__ import annotations

    import math

    import torch

    from ..csrc.fake_ns import FAKE_NAMESPACE

    OP_NAMESPACE = FAKE_NAMESPACE
    # Why the scale is two.
    SCALE = 2.0
    UNUSED = 3


    def helper(x):
        \"\"\"Scales x: pass it anything; try it.\"\"\"
        return x * SCALE * math.pi


    def _unused():
        return UNUSED


    def __getattr__(name):
        raise AttributeError(name)
"""

_FAKE_PROBLEM = """
    \"\"\"A fake problem.\"\"\"

    import torch
    import torch.nn as nn

    from . import fake_kernels as kernels
    from .fake_kernels import helper as scaled
    from .fake_kernels import ops as _ops


    class Model(nn.Module):
        def forward(self, x):
            return x


    class ModelNew(nn.Module):
        \"\"\"Doc.\"\"\"  # and a remark

        def forward(self, x):
            BODY


    batch_size = 2


    def get_inputs():
        return [torch.rand(batch_size)]


    def get_init_inputs():
        return []
"""


def _fake_glue(monkeypatch, tmp_path, body, kernels=_FAKE_KERNELS):
    root = tmp_path / "groupnorm_inline"
    _fake_package(root, kernels, _FAKE_PROBLEM.replace("BODY", body))
    monkeypatch.setattr(python_glue, "_PACKAGE_ROOT", root)
    return python_glue.model_new_source("groupnorm_inline.problems.fake_problem")


def test_generated_python_follows_the_package(monkeypatch, tmp_path):
    """A helper added to a kernels module and used by ModelNew arrives in the export with what it needs."""
    imports, text = _fake_glue(monkeypatch, tmp_path, "return _ops.op(kernels.helper(x)) + scaled(x)")
    assert sorted(imports) == ["import math", "import torch", "import torch.nn as nn"]
    assert "_ops = torch.ops.groupnorm_inline_fake\n" in text and "scaled = helper\n" in text
    assert "return _ops.op(helper(x)) + scaled(x)" in text
    assert "# Why the scale is two.\nSCALE = 2.0" in text
    assert "    # Scales x: pass it anything; try it.\n    return x * SCALE" in text
    assert "    # Doc.\n    # and a remark\n" in text and '"""' not in text
    for absent in ("UNUSED", "_unused", "class Model(", "batch_size", "__getattr__"):
        assert absent not in text
    assert text.index("def helper") < text.index("scaled = helper") < text.index("class ModelNew")
    compile(text, "<generated>", "exec")


@pytest.mark.parametrize("body, kernels, message", [
    ("return undefined_helper(x)", _FAKE_KERNELS, "needs undefined_helper"),
    ("helper = 1\n            return kernels.helper(x) + helper", _FAKE_KERNELS, "a local variable of the same name"),
    ("return kernels", _FAKE_KERNELS, "as a value"),
    ("return kernels.helper(x)", _FAKE_KERNELS.replace(_FAKE_HELPER, '    def helper(x): """Scales x."""; return x\n'),
     "shares a line"),
    ("return scaled(x) + _ops.op(x)", _FAKE_KERNELS.replace("OP_NAMESPACE = FAKE_NAMESPACE\n", ""), "defines no OP_NAMESPACE"),
])
def test_generated_python_refuses_what_it_cannot_carry(monkeypatch, tmp_path, body, kernels, message):
    with pytest.raises(CliError, match=message):
        _fake_glue(monkeypatch, tmp_path, body, kernels)


def test_generated_python_refuses_a_name_defined_twice(monkeypatch, tmp_path):
    """ModelNew's module and the kernels module both define SCALE, and both are needed: one file cannot hold both."""
    problem = _FAKE_PROBLEM.replace("    batch_size = 2", "    SCALE = 1.0\n\n\n    batch_size = 2")
    root = tmp_path / "groupnorm_inline"
    _fake_package(root, _FAKE_KERNELS, problem.replace("BODY", "return kernels.helper(x) * SCALE"))
    monkeypatch.setattr(python_glue, "_PACKAGE_ROOT", root)
    with pytest.raises(CliError, match="SCALE would be defined twice"):
        python_glue.model_new_source("groupnorm_inline.problems.fake_problem")


def test_export_refuses_python_that_rebinds_the_loader(monkeypatch):
    glue = ("def _load_extensions():\n    return None\n\n\nclass ModelNew(nn.Module):\n"
            "    def forward(self, x):\n        return torch.ops.groupnorm_inline_p94.epilogue(x)\n")
    recipe = recipes.ProblemRecipe(extension_specs=recipes.RECIPES["2/94"].extension_specs, model_source=glue)
    monkeypatch.setitem(recipes.RECIPES, "2/94", recipe)
    with pytest.raises(CliError, match="defines _load_extensions, which the file's loader defines too"):
        export.export_source(PROBLEMS["2/94"])


def test_export_checks_reference_names_and_namespaces():
    reference = problem_source.reference_source(PROBLEMS["2/94"])
    candidate = "batch_size = 3\nclass Model:\n    x = 1\ndef get_inputs():\n    return []\nhelper = 1\n"
    assert export.reference_name_clashes(candidate, reference) == {"batch_size", "Model"}
    with pytest.raises(CliError, match="groupnorm_inline_p94, which none of its extensions"):
        export.check_operator_namespaces("y = torch.ops.groupnorm_inline_p94.epilogue(x)", (), PROBLEMS["2/94"])


# ---------------------------------------------------------------- the exports


def test_problem_sources_exec_standalone():
    """The reference text cut from each problem module runs on its own, as KernelBench's file does."""
    for info in PROBLEMS.values():
        namespace: dict = {}
        with torch.device("meta"):
            exec(problem_source.reference_source(info), namespace)
            inputs = namespace["get_inputs"]()
            model = namespace["Model"](*namespace["get_init_inputs"]())
        assert "ModelNew" not in namespace and all(isinstance(t, torch.Tensor) for t in inputs)
        assert isinstance(model, torch.nn.Module)


def test_cuda_build_define_matches_the_jit_layer():
    p = plan(extension.SPEC)
    if not p.with_cuda:
        pytest.skip("no CUDA toolkit here: the JIT layer plans a C++-only build")
    assert export.CUDA_BUILD_DEFINE in p.cflags


@pytest.fixture(scope="module", params=EXPORTABLE)
def exported(request, tmp_path_factory):
    """(problem key, path of its exported file), written by the CLI."""
    key = request.param
    path = tmp_path_factory.mktemp("export") / f"export_{key.replace('/', '_')}.py"
    proc = run_cli("export", key, "-o", str(path))
    assert proc.returncode == 0, proc.stderr
    return key, path


# KernelBench's warnings each export may draw (they do not reject): the #94 GEMM runs on cuBLAS through
# torch.mm/bmm, and #92 keeps the reference's ops for configurations its fused kernels do not take.
EXPECTED_WARNINGS = {"1/35": set(), "2/94": {"torch.mm", "torch.bmm"}, "2/92": {"torch.logsumexp"}}
# The GroupNorm family exports run their convolutions through the reference's own modules (no warning); the
# Linear problems take #94's split GEMM (torch.mm on cuBLAS).
EXPECTED_WARNINGS.update({key: {"torch.mm"} for key in ("2/30", "2/37", "2/62", "2/75", "2/88")})


def test_export_passes_static_rules(exported):
    key, path = exported
    text = path.read_text()
    report = checker.check_source(text)
    assert report.ok, report.summary()
    unexpected = [f for f in report.warnings if f.rule != "torch-op"
                  or not any(op + "(" in f.excerpt for op in EXPECTED_WARNINGS.get(key, set()))]
    assert not unexpected, "warnings beyond those expected:\n" + "\n".join(map(str, unexpected))
    assert text.count("load_inline(") == 1
    assert "GN_NAMESPACE" not in text and "torch.ops.groupnorm_inline." not in text
    assert f"_export_l{key.replace('/', '_')}_" in text
    assert not export.reference_name_clashes(text, problem_source.reference_source(PROBLEMS[key]))
    cli = run_cli("check", str(path))
    assert cli.returncode == 0 and "ok (0 errors" in cli.stdout, cli.stdout + cli.stderr


def test_export_carries_every_source_of_its_specs(exported):
    """Sources come from the specs: each stripped, renamed source appears in the file, verbatim."""
    key, path = exported
    text = path.read_text()
    info = PROBLEMS[key]
    recipe = recipes.RECIPES[key]
    embedded, _ = export.embed_extensions(recipe.extensions(), recipe.model_python()[1], info)
    for ext in embedded:
        for source in ext.cpp_sources + ext.cuda_sources:
            assert export.python_literal(source) in text
            assert "//" not in source.replace("http://", "")


_DRIVER = r"""
import copy, importlib, json, sys
import torch

reference, candidate, small, build_dir, package_module = sys.argv[1:6]
small = json.loads(small)
prefix = "import os\nos.environ['TORCH_EXTENSIONS_DIR'] = '%s'\n" % build_dir
context = {}
exec(compile(open(reference).read(), "<reference>", "exec"), context)
Model, get_init_inputs, get_inputs = context["Model"], context["get_init_inputs"], context["get_inputs"]
with torch.device("meta"):
    real_shapes = [tuple(t.shape) for t in get_inputs()]
context.update(small)  # the reference's constants, shrunk: init inputs and inputs follow them
constants_before = {k: v for k, v in context.items() if isinstance(v, (int, float, tuple))}
torch.manual_seed(42); init = get_init_inputs(); torch.manual_seed(42); model = Model(*init)
exec(compile(prefix + open(candidate).read(), "<candidate>", "exec"), context)
exec(compile(prefix + open(candidate).read(), "<candidate>", "exec"), context)  # a second exec: no clash
constants_after = {k: context[k] for k in constants_before}
with torch.device("meta"):
    export_shapes = [tuple(t.shape) for t in context["get_inputs"]()]
torch.manual_seed(42); model_new = context["ModelNew"](*init)
package = importlib.import_module(package_module)  # the package's own ModelNew, its own build
torch.manual_seed(42); package_new = package.ModelNew(*init)


def same_parameters(a, b):
    sa, sb = a.state_dict(), b.state_dict()
    return sorted(sa) == sorted(sb) and all(torch.equal(sa[k], sb[k]) for k in sa)


# Compared at construction: a forward moves running statistics (BatchNorm, #11) by each side's own arithmetic.
constructed_same = same_parameters(model, model_new)
package_constructed_same = same_parameters(model, package_new)
torch.manual_seed(1)
inputs = get_inputs()
originals = [t.clone() for t in inputs]
with torch.no_grad():
    got = model_new(*inputs)
    package_out = package_new(*inputs)
    reference_fp32 = model(*inputs)
    expected = copy.deepcopy(model).double()(*[t.double() for t in inputs])
ext = context["_EXTENSIONS"][0]
op = "%s::%s" % (ext["namespace"], ext["probe_op"])
error = (got.double() - expected).abs()
print(json.dumps({
    "state_dict_keys": [sorted(model.state_dict()), sorted(model_new.state_dict())],
    "same_parameters_as_model": constructed_same,
    "package_same_parameters": package_constructed_same,
    "constants_unchanged": constants_before == constants_after,
    "shapes": [real_shapes, export_shapes],
    "shape": [list(got.shape), list(expected.shape)],
    "input_shape": list(inputs[0].shape),
    "max_abs_vs_float64": error.max().item(),
    "max_ratio_vs_float64": (error / (1 + expected.abs())).max().item(),
    "worst_index_vs_float64": [int(i) for i in torch.unravel_index(error.argmax(), error.shape)],
    "equal_to_package": torch.equal(got, package_out),
    "max_abs_vs_package": (got - package_out).abs().max().item(),
    "harness_allclose": bool(torch.allclose(reference_fp32, got, atol=1e-4, rtol=1e-4)),
    "inputs_unchanged": all(torch.equal(a, b) for a, b in zip(inputs, originals)),
    "cuda_kernel": torch._C._dispatch_has_kernel_for_dispatch_key(op, "CUDA"),
    "cpu_kernel": torch._C._dispatch_has_kernel_for_dispatch_key(op, "CPU"),
    "export_libraries": sorted(p for p in torch.ops.loaded_libraries if "_export_" in p),
}))
"""

# |export - float64 reference| <= tol * (1 + |reference|) at the small shape, on the CPU kernels. #94 (a
# float32 GEMM of depth 96 split into float16 parts, then the fused GroupNorm epilogue) and #92 (a float32
# 3 x 3 convolution, GroupNorm and a logsumexp over 64 channels) measured 3.4e-7 and 1.1e-7: a few float32
# roundings; the bound leaves a factor of about 6.
FLOAT64_TOLERANCE = {"1/35": 1e-5, "2/94": 2e-6, "2/92": 2e-6}
# The GroupNorm family at the recipes' small shapes: a float32 convolution or GEMM, then the family operator
# (float64 statistics on the CPU); tests/test_kernelbench_family.py holds every problem to 2e-5 against float64.
FAMILY_FLOAT64_TOLERANCE = 2e-5
# Exports built and run on the CPU: the three original problems and three family problems that cover the family
# operator's paths (slice path with a pooled prologue and BatchNorm, the max_pool output, the rows path with the
# min output). The other family exports carry the same sources and generated helpers (checked statically above)
# and a ModelNew that test_kernelbench_family.py runs from the package; each export build compiles the family
# extension once more, under its own namespace.
EXPORT_RUNS = [k for k in EXPORTABLE if not k.startswith("2/") or k in ("2/92", "2/94", "2/11", "2/85", "2/75")]


@pytest.fixture(scope="module", params=EXPORT_RUNS)
def exported_run(request, tmp_path_factory):
    """Build the export under a harness-set TORCH_EXTENSIONS_DIR and run it on the CPU at the recipe's small
    shape beside the package's own ModelNew, in a subprocess."""
    key = request.param
    path = tmp_path_factory.mktemp("export") / f"export_{key.replace('/', '_')}.py"
    proc = run_cli("export", key, "-o", str(path))
    assert proc.returncode == 0, proc.stderr
    work = tmp_path_factory.mktemp("driver")
    reference = work / "reference.py"
    reference.write_text(problem_source.reference_source(PROBLEMS[key]))
    driver = work / "driver.py"
    driver.write_text(_DRIVER)
    small = json.dumps(recipes.RECIPES[key].small_constants)
    package_module = f"groupnorm_inline.problems.{PROBLEMS[key].module}"
    environ = dict(os.environ, PYTHONPATH=str(REPO_ROOT), **export_build_environment(key))
    proc = subprocess.run([sys.executable, str(driver), str(reference), str(path), small,
                           str(export_builds_dir(tmp_path_factory)), package_module],
                          env=environ, capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, f"exported file failed to build or run:\n{proc.stderr[-6000:]}"
    return key, json.loads(proc.stdout.strip().splitlines()[-1])


def test_export_builds_and_matches_reference_on_cpu(exported_run):
    key, r = exported_run
    assert r["cpu_kernel"], "the C++ kernels are not registered under the export's namespace"
    assert r["state_dict_keys"][0] == r["state_dict_keys"][1]
    assert r["same_parameters_as_model"], "ModelNew(*init) under seed 42 holds other parameters than Model"
    assert r["shape"][0] == r["shape"][1]
    tol = FLOAT64_TOLERANCE.get(key, FAMILY_FLOAT64_TOLERANCE)
    assert r["max_ratio_vs_float64"] <= tol, (
        f"{key}: |export - float64| / (1 + |float64|) = {r['max_ratio_vs_float64']:.3g} > {tol:g} at "
        f"{r['worst_index_vs_float64']} (max abs error {r['max_abs_vs_float64']:.3g})")
    assert r["harness_allclose"] and r["inputs_unchanged"]
    extensions = len(recipes.RECIPES[key].extension_specs)  # one library per embedded extension
    assert len(r["export_libraries"]) == extensions, f"the second exec loaded another library: {r['export_libraries']}"


def test_export_runs_at_the_small_shape(exported_run):
    key, r = exported_run
    small = recipes.RECIPES[key].small_constants
    assert "batch_size" in small and r["input_shape"][0] == small["batch_size"]


def test_export_equals_the_package_model_new(exported_run):
    """The export is the package's ModelNew: the same parameters under seed 42, the same output bits."""
    key, r = exported_run
    assert r["package_same_parameters"]
    assert r["equal_to_package"], f"{key}: export and package ModelNew differ by up to {r['max_abs_vs_package']:.3g}"


def test_export_leaves_reference_constants_alone(exported_run):
    """The harness execs the candidate into the reference's namespace: our constants must not leak there."""
    _, r = exported_run
    assert r["constants_unchanged"]
    assert r["shapes"][0] == r["shapes"][1]  # our get_inputs has the real shapes


def test_export_built_cuda_kernels(exported_run):
    """CUDA kernels in the export's build exactly where they were asked for: always with a GPU, in
    CUDA_EXPORT_KEY's without one; the others were built with GROUPNORM_INLINE_NO_CUDA=1, which they honour."""
    if not env.cuda_build_enabled():
        pytest.skip("no CUDA toolkit here, so the export built only its C++ kernels")
    key, r = exported_run
    if export_builds_cuda(key):
        assert r["cuda_kernel"], f"{key}: the export's build did not include its CUDA kernels"
    else:
        assert not r["cuda_kernel"], f"{key}: the export built CUDA kernels under GROUPNORM_INLINE_NO_CUDA=1"


@pytest.mark.cuda
@pytest.mark.slow
@pytest.mark.parametrize("key", EXPORTABLE)
def test_export_passes_harness_flow_at_real_shape(key, tmp_path, tmp_path_factory):
    """The KernelBench flow on the export at the real shape: one namespace, seeded construction, 5 trials."""
    result = tmp_path / "eval.json"
    proc = run_cli("eval", key, "--no-timing", "--quiet", "--build-dir", str(export_builds_dir(tmp_path_factory)),
                   "--json", str(result))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = json.loads(result.read_text())
    trials = data["correctness"]["trials"]
    assert data["passed"] and len(trials) == 5 and data["correctness"]["tolerance"] == 1e-4
    assert all(t["passed"] and t["inputs_unchanged"] for t in trials), trials

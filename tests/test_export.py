"""The single-file KernelBench export: text operations, the static checker, and the exported files.

Every exported file must pass KernelBench's static rules, build (CUDA and C++, as CI has nvcc) under a
harness-set TORCH_EXTENSIONS_DIR, and, exec'd after the reference as the harness does, give GroupNorm's
answer on the CPU at a small shape. On a GPU the harness flow runs at the real shape.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from groupnorm_inline import extension
from groupnorm_inline.cli import checker, cxx_text, export, problem_source, recipes
from groupnorm_inline.csrc.group_norm_cpu import GROUP_NORM_CPU_TEMPLATE, OP_NAMESPACE, with_namespace
from groupnorm_inline.csrc.group_norm_cuda import GROUP_NORM_FORWARD_CUDA_TEMPLATE
from groupnorm_inline.jit import env, plan
from groupnorm_inline.problems import PROBLEMS

REPO_ROOT = Path(__file__).resolve().parents[1]
EXPORTABLE = sorted(recipes.RECIPES)


def run_cli(*args, env_overrides=None, timeout=900):
    environ = dict(os.environ, PYTHONPATH=str(REPO_ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    environ.update(env_overrides or {})
    return subprocess.run([sys.executable, "-m", "groupnorm_inline", *args], cwd=REPO_ROOT, env=environ,
                          capture_output=True, text=True, timeout=timeout)


def export_builds_dir(tmp_path_factory) -> Path:
    """One TORCH_EXTENSIONS_DIR per test session, shared with test_cli: each export compiles once."""
    path = tmp_path_factory.getbasetemp() / "kernelbench-builds"
    path.mkdir(exist_ok=True)
    return path


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


def test_export_passes_static_rules(exported):
    key, path = exported
    text = path.read_text()
    report = checker.check_source(text)
    assert report.ok and not report.warnings, report.summary()
    assert text.count("load_inline(") == 1
    assert "GN_NAMESPACE" not in text and "torch.ops.groupnorm_inline." not in text
    assert f"_export_l{key.replace('/', '_')}_" in text
    cli = run_cli("check", str(path))
    assert cli.returncode == 0 and "ok (0 errors" in cli.stdout, cli.stdout + cli.stderr


def test_export_carries_every_source_of_its_specs(exported):
    """Sources come from the specs: each stripped, renamed source appears in the file, verbatim."""
    key, path = exported
    text = path.read_text()
    info = PROBLEMS[key]
    embedded, _ = export.embed_extensions(recipes.RECIPES[key].extensions(), recipes.RECIPES[key].model_source, info)
    for ext in embedded:
        for source in ext.cpp_sources + ext.cuda_sources:
            assert export.python_literal(source) in text
            assert "//" not in source.replace("http://", "")


_DRIVER = r'''
import json, os, sys
import torch

reference, candidate, small, build_dir = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), sys.argv[4]
prefix = "import os\nos.environ['TORCH_EXTENSIONS_DIR'] = '%s'\n" % build_dir
context = {}
exec(compile(open(reference).read(), "<reference>", "exec"), context)
Model, get_init_inputs, get_inputs = context["Model"], context["get_init_inputs"], context["get_inputs"]
constants_before = {k: v for k, v in context.items() if isinstance(v, (int, float, tuple))}
with torch.device("meta"):
    real_shapes = [tuple(t.shape) for t in get_inputs()]
torch.manual_seed(42); init = get_init_inputs(); torch.manual_seed(42); model = Model(*init)
exec(compile(prefix + open(candidate).read(), "<candidate>", "exec"), context)
exec(compile(prefix + open(candidate).read(), "<candidate>", "exec"), context)  # a second exec: no clash
constants_after = {k: context[k] for k in constants_before}
with torch.device("meta"):
    export_shapes = [tuple(t.shape) for t in context["get_inputs"]()]
torch.manual_seed(42); model_new = context["ModelNew"](*init)
context.update(small)
torch.manual_seed(1)
inputs = get_inputs()
originals = [t.clone() for t in inputs]
with torch.no_grad():
    expected = model.double()(*[t.double() for t in inputs])
    reference_fp32 = model.float()(*inputs)
    got = model_new(*inputs)
ext = context["_EXTENSIONS"][0]
op = "%s::%s" % (ext["namespace"], ext["probe_op"])
print(json.dumps({
    "state_dict_keys": [sorted(model.state_dict()), sorted(model_new.state_dict())],
    "constants_unchanged": constants_before == constants_after,
    "shapes": [real_shapes, export_shapes],
    "shape": [list(got.shape), list(expected.shape)],
    "max_abs_vs_float64": (got.double() - expected).abs().max().item(),
    "first_bad": None if torch.allclose(got.double(), expected, atol=1e-5, rtol=1e-5) else
        str(((got.double() - expected).abs() > 1e-5 + 1e-5 * expected.abs()).nonzero()[:5].tolist()),
    "harness_allclose": bool(torch.allclose(reference_fp32, got, atol=1e-4, rtol=1e-4)),
    "inputs_unchanged": all(torch.equal(a, b) for a, b in zip(inputs, originals)),
    "cuda_kernel": torch._C._dispatch_has_kernel_for_dispatch_key(op, "CUDA"),
    "cpu_kernel": torch._C._dispatch_has_kernel_for_dispatch_key(op, "CPU"),
    "libraries": sorted(torch.ops.loaded_libraries),
}))
'''


@pytest.fixture(scope="module")
def exported_run(exported, tmp_path_factory):
    """Build the export under a harness-set TORCH_EXTENSIONS_DIR and run it on the CPU, in a subprocess."""
    key, path = exported
    work = tmp_path_factory.mktemp("driver")
    reference = work / "reference.py"
    reference.write_text(problem_source.reference_source(PROBLEMS[key]))
    driver = work / "driver.py"
    driver.write_text(_DRIVER)
    small = json.dumps(recipes.RECIPES[key].small_constants)
    environ = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    proc = subprocess.run([sys.executable, str(driver), str(reference), str(path), small,
                           str(export_builds_dir(tmp_path_factory))],
                          env=environ, capture_output=True, text=True, timeout=1200)
    assert proc.returncode == 0, f"exported file failed to build or run:\n{proc.stderr[-6000:]}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_export_builds_and_matches_reference_on_cpu(exported_run):
    r = exported_run
    assert r["cpu_kernel"], "the C++ kernels are not registered under the export's namespace"
    assert r["state_dict_keys"][0] == r["state_dict_keys"][1]
    assert r["shape"][0] == r["shape"][1]
    assert r["first_bad"] is None, f"max abs error {r['max_abs_vs_float64']:.3g} vs float64; first mismatches {r['first_bad']}"
    assert r["harness_allclose"] and r["inputs_unchanged"]
    assert len(r["libraries"]) == 1, f"the second exec loaded another library: {r['libraries']}"


def test_export_leaves_reference_constants_alone(exported_run):
    """The harness execs the candidate into the reference's namespace: our constants must not leak there."""
    assert exported_run["constants_unchanged"]
    assert exported_run["shapes"][0] == exported_run["shapes"][1]  # our get_inputs has the real shapes


def test_export_built_cuda_kernels(exported_run):
    if not env.cuda_build_enabled():
        pytest.skip("no CUDA toolkit here, so the export built only its C++ kernels")
    assert exported_run["cuda_kernel"], "the export's build did not include its CUDA kernels"


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

"""The KernelBench level 2 problems with a GroupNorm, served by the family operator (problems/family.py).

Every problem at small shapes on the CPU (the C++ kernel of the family operator; the GPU script
benchmarks/check_kernelbench_family.py runs the real shapes): the module against the KernelBench file's
constants, seeded construction (same state_dict keys and values, same RNG draws), the harness flow, float64
references with perturbed parameters (the initial GroupNorm affine parameters make some outputs degenerate),
odd shapes, the bf16/fp16 precision option, and the operator's own pieces and errors.
"""

from __future__ import annotations

import copy
import math
import importlib

import pytest
import torch

from groupnorm_inline.cli import problem_source
from groupnorm_inline.problems import PROBLEMS, family
from groupnorm_inline.problems import family_kernels, level2_94_kernels
from level2_harness import HARNESS_TRIALS, allclose_margin, replay_harness, set_seed
from utils import assert_close_report

ops = family_kernels.load()

# key -> (real constants the module must hold, the init inputs they give, the real input shape, small patch, odd patch)
CASES = {
    "2/11": ({"batch_size": 512, "in_channels": 64, "out_channels": 128, "height": 32, "width": 32, "kernel_size": 5,
              "stride": 1, "padding": 1, "groups": 8, "num_groups": 8},
             [64, 128, 5, 1, 1, 8, 8], (512, 64, 32, 32),
             {"batch_size": 3, "in_channels": 3, "out_channels": 16, "height": 6, "width": 6, "num_groups": 4},
             {"batch_size": 2, "in_channels": 5, "out_channels": 12, "height": 7, "width": 8, "num_groups": 3}),
    "2/19": ({"batch_size": 128, "in_channels": 64, "out_channels": 64, "height": 256, "width": 256, "kernel_size": 3,
              "stride": 1, "groups": 8, "num_groups": 8},
             [64, 64, 3, 1, 8, 8], (128, 64, 256, 256),
             {"batch_size": 2, "in_channels": 4, "out_channels": 16, "height": 9, "width": 9, "num_groups": 4},
             {"batch_size": 3, "in_channels": 3, "out_channels": 6, "height": 5, "width": 7, "stride": 2,
              "num_groups": 3}),
    "2/21": ({"batch_size": 128, "in_channels": 8, "out_channels": 32, "height": 256, "width": 256, "kernel_size": 3,
              "num_groups": 8, "bias_shape": (32, 1, 1), "scale_shape": (32, 1, 1)},
             [8, 32, 3, 8, (32, 1, 1), (32, 1, 1)], (128, 8, 256, 256),
             {"batch_size": 2, "in_channels": 8, "out_channels": 32, "height": 11, "width": 11, "num_groups": 8,
              "bias_shape": (32, 1, 1), "scale_shape": (32, 1, 1)},
             {"batch_size": 3, "in_channels": 2, "out_channels": 10, "height": 6, "width": 9, "num_groups": 5,
              "bias_shape": (10, 1, 1), "scale_shape": (10, 1, 1)}),
    "2/23": ({"batch_size": 128, "in_channels": 3, "out_channels": 24, "D": 24, "H": 32, "W": 32, "kernel_size": 3,
              "num_groups": 8},
             [3, 24, 3, 8], (128, 3, 24, 32, 32),
             {"batch_size": 3, "in_channels": 3, "out_channels": 12, "D": 5, "H": 7, "W": 6, "num_groups": 4},
             {"batch_size": 2, "in_channels": 2, "out_channels": 9, "D": 4, "H": 5, "W": 7, "num_groups": 3}),
    "2/27": ({"batch_size": 1024, "in_channels": 3, "out_channels": 16, "depth": 16, "height": 32, "width": 32,
              "kernel_size": 4},
             [3, 16, 4], (1024, 3, 16, 32, 32),
             {"batch_size": 3, "in_channels": 3, "out_channels": 8, "depth": 6, "height": 7, "width": 8},
             {"batch_size": 2, "in_channels": 2, "out_channels": 12, "depth": 5, "height": 5, "width": 7}),
    "2/30": ({"batch_size": 1024, "in_features": 8192, "out_features": 8192, "num_groups": 16, "hardtanh_min": -2.0,
              "hardtanh_max": 2.0},
             [8192, 8192, 16, -2.0, 2.0], (1024, 8192),
             {"batch_size": 5, "in_features": 40, "out_features": 96, "num_groups": 3, "hardtanh_min": -0.5,
              "hardtanh_max": 0.7},
             {"batch_size": 3, "in_features": 17, "out_features": 1200, "num_groups": 2, "hardtanh_min": -1.0,
              "hardtanh_max": 1.5}),
    "2/37": ({"batch_size": 32768, "in_features": 1024, "out_features": 4096, "num_groups": 64,
              "bias_shape": (4096,)},
             [1024, 4096, 64, (4096,)], (32768, 1024),
             {"batch_size": 5, "in_features": 24, "out_features": 128, "num_groups": 2, "bias_shape": (128,)},
             {"batch_size": 3, "in_features": 13, "out_features": 384, "num_groups": 3, "bias_shape": (384,)}),
    "2/60": ({"batch_size": 128, "in_channels": 3, "out_channels": 16, "depth": 16, "height": 32, "width": 32,
              "kernel_size": 3, "stride": 2, "padding": 1, "groups": 4, "eps": 1e-5},
             [3, 16, 3, 2, 1, 4, 1e-5], (128, 3, 16, 32, 32),
             {"batch_size": 2, "in_channels": 3, "out_channels": 8, "depth": 3, "height": 5, "width": 4},
             {"batch_size": 3, "in_channels": 2, "out_channels": 6, "depth": 2, "height": 3, "width": 5, "groups": 3}),
    "2/61": ({"batch_size": 16, "in_channels": 64, "out_channels": 128, "D": 32, "H": 32, "W": 32, "kernel_size": 3,
              "groups": 8, "bias": False},
             [64, 128, 3, 8, False], (16, 64, 32, 32, 32),
             {"batch_size": 2, "in_channels": 4, "out_channels": 16, "D": 3, "H": 4, "W": 5, "groups": 4},
             {"batch_size": 3, "in_channels": 3, "out_channels": 10, "D": 2, "H": 3, "W": 3, "groups": 5,
              "bias": True}),
    "2/62": ({"batch_size": 1024, "input_size": 8192, "hidden_size": 8192, "num_groups": 512},
             [8192, 8192, 512], (1024, 8192),
             {"batch_size": 4, "input_size": 48, "hidden_size": 64, "num_groups": 4},
             {"batch_size": 3, "input_size": 19, "hidden_size": 210, "num_groups": 7}),
    "2/75": ({"batch_size": 1024, "in_features": 8192, "out_features": 8192, "num_groups": 512,
              "bias_shape": (1, 8192, 1, 1)},
             [8192, 8192, 512, (1, 8192, 1, 1)], (1024, 8192),
             {"batch_size": 4, "in_features": 40, "out_features": 64, "num_groups": 4, "bias_shape": (1, 64, 1, 1)},
             {"batch_size": 3, "in_features": 11, "out_features": 1100, "num_groups": 1,
              "bias_shape": (1, 1100, 1, 1)}),
    "2/83": ({"batch_size": 128, "in_channels": 3, "out_channels": 16, "depth": 16, "height": 64, "width": 64,
              "kernel_size": 3, "groups": 8, "min_value": 0.0, "max_value": 1.0, "dropout_p": 0.2},
             [3, 16, 3, 8, 0.0, 1.0, 0.2], (128, 3, 16, 64, 64),
             {"batch_size": 2, "in_channels": 3, "out_channels": 16, "depth": 4, "height": 6, "width": 7, "groups": 8},
             {"batch_size": 3, "in_channels": 2, "out_channels": 6, "depth": 3, "height": 5, "width": 4, "groups": 3,
              "min_value": -0.5, "max_value": 0.25}),
    "2/85": ({"batch_size": 128, "in_channels": 8, "out_channels": 64, "height": 128, "width": 128, "kernel_size": 3,
              "num_groups": 16, "scale_shape": (64, 1, 1), "maxpool_kernel_size": 4, "clamp_min": 0.0,
              "clamp_max": 1.0},
             [8, 64, 3, 16, (64, 1, 1), 4, 0.0, 1.0], (128, 8, 128, 128),
             {"batch_size": 2, "in_channels": 8, "out_channels": 64, "height": 13, "width": 15, "num_groups": 16,
              "scale_shape": (64, 1, 1)},
             {"batch_size": 3, "in_channels": 2, "out_channels": 6, "height": 9, "width": 12, "num_groups": 3,
              "scale_shape": (6, 1, 1), "maxpool_kernel_size": 3, "clamp_min": -0.3, "clamp_max": 0.6}),
    "2/88": ({"batch_size": 1024, "in_features": 8192, "out_features": 8192, "num_groups": 256,
              "multiply_weight_shape": (8192,)},
             [8192, 8192, 256, (8192,)], (1024, 8192),
             {"batch_size": 4, "in_features": 40, "out_features": 64, "num_groups": 4, "multiply_weight_shape": (64,)},
             {"batch_size": 3, "in_features": 9, "out_features": 90, "num_groups": 9, "multiply_weight_shape": (90,)}),
}
KEYS = sorted(CASES, key=lambda k: int(k.split("/")[1]))
# Outputs that are degenerate under the initial parameters (the harness flow proves little there): #23's mean of
# normalised values is 0 up to rounding, #83's min + clamp is the constant min_value.
DEGENERATE = {"2/23", "2/83"}


def module_of(key):
    return importlib.import_module(f"groupnorm_inline.problems.{PROBLEMS[key].module}")


def reference_namespace(key, patch):
    namespace = {}
    exec(problem_source.reference_source(PROBLEMS[key]), namespace)
    namespace.update(patch)
    return namespace


def build(key, patch, seed=42, **kwargs):
    """(Model, ModelNew, namespace) built as the harness does: the same init inputs, set_seed before each."""
    namespace = reference_namespace(key, patch)
    set_seed(seed)
    init = namespace["get_init_inputs"]()
    set_seed(seed)
    model = namespace["Model"](*init)
    set_seed(seed)
    model_new = module_of(key).ModelNew(*init, **kwargs)
    return model, model_new, namespace


def seeded_outputs(models, inputs, seed=11):
    """Each model on its input without autograd, the global RNG seeded alike before each (Dropout draws)."""
    outputs = []
    for model, x in zip(models, inputs):
        set_seed(seed)
        with torch.no_grad():
            outputs.append(model(x))
    return outputs


def perturb(model, model_new, seed=7):
    """Give every parameter of Model a random value (GroupNorm affine included) and copy it into ModelNew."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * 0.7 + 0.2)
    model_new.load_state_dict(model.state_dict())


# ---------------------------------------------------------------------------------------------- contract

@pytest.mark.parametrize("key", KEYS)
def test_module_holds_the_kernelbench_constants(key):
    constants, init, shape = CASES[key][:3]
    module = module_of(key)
    for name, value in constants.items():
        assert getattr(module, name) == value, name
    assert module.get_init_inputs() == init
    reference = reference_namespace(key, {})
    assert reference["get_init_inputs"]() == init
    with torch.device("meta"):
        (x,) = module.get_inputs()
    assert tuple(x.shape) == shape and x.dtype == torch.float32
    assert PROBLEMS[key].file_name.startswith(key.split("/")[1] + "_")


@pytest.mark.parametrize("key", KEYS)
def test_get_inputs_draws_with_torch_rand(key, monkeypatch):
    calls = []

    def recording_rand(*size, **kwargs):
        calls.append((size, kwargs))
        return torch.empty(*size, device="meta")

    monkeypatch.setattr(torch, "rand", recording_rand)
    module_of(key).get_inputs()
    assert calls == [(CASES[key][2], {})]


@pytest.mark.parametrize("key", KEYS)
def test_same_state_dict_and_draws(key):
    patch = CASES[key][3]
    namespace = reference_namespace(key, patch)
    init = namespace["get_init_inputs"]()
    set_seed(42)
    model = namespace["Model"](*init)
    after_model = torch.rand(4)
    set_seed(42)
    model_new = module_of(key).ModelNew(*init)
    after_new = torch.rand(4)
    sd, sd_new = model.state_dict(), model_new.state_dict()
    assert list(sd) == list(sd_new)
    for name in sd:
        assert torch.equal(sd[name], sd_new[name]), name
    assert torch.equal(after_model, after_new), "ModelNew drew another amount from the global RNG"
    assert [type(m).__name__ for m in model.children()] == [type(m).__name__ for m in model_new.children()]
    repr(model_new)


@pytest.mark.parametrize("key", KEYS)
def test_harness_flow_cpu(key):
    candidate = f"from groupnorm_inline.problems.{PROBLEMS[key].module} import ModelNew\n"
    margins = replay_harness(problem_source.reference_source(PROBLEMS[key]), candidate, torch.device("cpu"),
                             shape_patch=CASES[key][3], degenerate_ok=key in DEGENERATE)
    assert len(margins) == HARNESS_TRIALS and max(margins) <= 0.5, margins


# ---------------------------------------------------------------------------------------------- accuracy

@pytest.mark.parametrize("shape", ["small", "odd"])
@pytest.mark.parametrize("key", KEYS)
def test_against_float64_with_perturbed_parameters(key, shape):
    patch = CASES[key][3] if shape == "small" else CASES[key][4]
    model, model_new, namespace = build(key, patch)
    perturb(model, model_new)
    if key == "2/83":  # Dropout masks of float32 and float64 tensors differ; test_83_* covers training mode
        model.eval()
        model_new.eval()
    model64 = copy.deepcopy(model).double()
    set_seed(3)
    (x,) = namespace["get_inputs"]()
    x_before = x.clone()
    out, ref32, ref64 = seeded_outputs((model_new, model, model64), (x, x, x.double()))
    assert torch.equal(x, x_before), "ModelNew modified its input"
    assert out.dtype == torch.float32 and out.shape == ref32.shape
    if key != "2/83":
        assert ref64.std() > 1e-3, "degenerate reference"
    assert_close_report(out, ref64, atol=2e-5, rtol=2e-5, what=f"{key} {shape} vs float64")
    assert allclose_margin(out, ref32) <= 0.5
    for name, buffer in model.named_buffers():  # BatchNorm's running statistics moved as the reference's did
        assert_close_report(dict(model_new.named_buffers())[name].double(), buffer.double(), atol=1e-6, rtol=1e-6,
                            what=name)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("key", KEYS)
def test_precision_option(key, dtype):
    """KernelBench's precision option: Model, ModelNew and the inputs cast to dtype, allclose at 1e-2."""
    model, model_new, namespace = build(key, CASES[key][3])
    perturb(model, model_new)
    model, model_new = model.to(dtype), model_new.to(dtype)
    set_seed(5)
    (x,) = namespace["get_inputs"]()
    x = x.to(dtype)
    set_seed(11)
    with torch.no_grad():
        out = model_new(x)
    set_seed(11)
    with torch.no_grad():
        ref = model(x)
    assert out.dtype == dtype and out.shape == ref.shape
    assert_close_report(out, ref, atol=1e-2, rtol=1e-2, what=f"{key} {dtype}")


GEMM_KEYS = ["2/30", "2/37", "2/62", "2/75", "2/88"]
GEMMS = [g for g in level2_94_kernels.GEMM_VARIANTS if g != "3xfp16" or level2_94_kernels.HAS_MM_OUT_DTYPE]


@pytest.mark.parametrize("gemm", GEMMS)
@pytest.mark.parametrize("key", GEMM_KEYS)
def test_gemm_variants_against_float64(key, gemm):
    """Every GEMM variant of the Linear problems (problems/split_gemm.py) against float64, and the cached weight
    split remade after an in-place update of the weight."""
    model, model_new, namespace = build(key, CASES[key][4], gemm=gemm)
    perturb(model, model_new)
    assert model_new.gemm_variant == gemm and f"gemm={gemm!r}" in repr(model_new)
    set_seed(3)
    (x,) = namespace["get_inputs"]()
    linear_name = next(name for name, m in model.named_children() if isinstance(m, torch.nn.Linear))
    for step in range(2):
        with torch.no_grad():
            out = model_new(x)
            ref64 = copy.deepcopy(model).double()(x.double())
        assert_close_report(out, ref64, atol=2e-5, rtol=2e-5, what=f"{key} gemm={gemm} step {step}")
        with torch.no_grad():  # in place, as an optimizer step would: the split must follow
            getattr(model, linear_name).weight.mul_(-0.5)
            getattr(model_new, linear_name).weight.mul_(-0.5)


def test_gemm_keyword_checked():
    module = module_of("2/30")
    with pytest.raises(ValueError, match="gemm must be one of"):
        module.ModelNew(16, 32, 2, -1.0, 1.0, gemm="tf32")


# ---------------------------------------------------------------------------------------------- problem details

def test_83_dropout_draws_as_the_reference_and_shortcut():
    key = "2/83"
    model, model_new, namespace = build(key, CASES[key][3])
    perturb(model, model_new)
    set_seed(3)
    (x,) = namespace["get_inputs"]()
    outs, draws = [], []
    for m in (model, model_new):
        set_seed(11)
        with torch.no_grad():
            outs.append(m(x))
        draws.append(torch.rand(8))
    assert torch.equal(outs[0], outs[1]) and torch.equal(draws[0], draws[1])
    _, shortcut, _ = build(key, CASES[key][3], constant_shortcut=True)
    shortcut.load_state_dict(model.state_dict())
    set_seed(11)
    with torch.no_grad():
        fast = shortcut(x)
    assert torch.equal(fast, outs[0]) and torch.equal(torch.rand(8), draws[0])
    # The default computes what the reference computes: NaN in the input reaches the output.
    x_nan = x.clone()
    x_nan[0, 0, 1, 2, 3] = float("nan")
    model_new.eval()
    model.eval()
    with torch.no_grad():
        got, expected = model_new(x_nan), model(x_nan)
    assert torch.isnan(got).any() and torch.equal(torch.isnan(got), torch.isnan(expected))


def test_11_eval_mode_uses_running_statistics():
    key = "2/11"
    model, model_new, namespace = build(key, CASES[key][3])
    perturb(model, model_new)
    set_seed(3)
    (x,) = namespace["get_inputs"]()
    with torch.no_grad():
        model(x)
        model_new(x)
    model.eval()
    model_new.eval()
    with torch.no_grad():
        assert_close_report(model_new(x).double(), copy.deepcopy(model).double()(x.double()), atol=2e-5, rtol=2e-5)
    assert model_new.batch_norm.num_batches_tracked.item() == model.batch_norm.num_batches_tracked.item() == 1


def test_75_output_shape_is_the_broadcast():
    key = "2/75"
    model, model_new, namespace = build(key, CASES[key][3])
    (x,) = namespace["get_inputs"]()
    with torch.no_grad():
        assert model_new(x).shape == model(x).shape == (1, 64, 4, 1)


# ---------------------------------------------------------------------------------------------- the operator

def test_plain_group_norm_and_nan_propagation():
    x = torch.randn(3, 8, 5, 6)
    gn = torch.nn.GroupNorm(4, 8)
    with torch.no_grad():
        gn.weight.normal_()
        gn.bias.normal_()
    expected = torch.nn.functional.group_norm(x.double(), 4, gn.weight.double(), gn.bias.double())
    assert_close_report(family.group_norm_chain(x, gn), expected, atol=1e-5, rtol=1e-5)
    rows = torch.randn(5, 8)
    expected = torch.nn.functional.group_norm(rows.double(), 4, gn.weight.double(), gn.bias.double())
    assert_close_report(family.group_norm_chain(rows, gn), expected, atol=1e-5, rtol=1e-5)
    rows[1, 3] = float("nan")
    mins = family.group_norm_chain(rows, gn, output="min_channels")
    assert torch.isnan(mins[1, 0]) and not torch.isnan(mins[0, 0])


def test_operator_errors():
    gn = torch.nn.GroupNorm(4, 8)
    w, b = gn.weight.detach(), gn.bias.detach()
    with pytest.raises(RuntimeError, match="divisible by num_groups"):
        ops.fused_group_norm(torch.randn(2, 6, 4), 4, w[:6], b[:6], 1e-5, 0, 0, [], [], 1, 0, 1)
    with pytest.raises(RuntimeError, match="is not built"):
        ops.fused_group_norm(torch.randn(2, 8, 4), 4, w, b, 1e-5, 3, 5, [], [], 1, 0, 1)
    with pytest.raises(RuntimeError, match="takes 0 vectors and 2 scalars"):
        ops.fused_group_norm(torch.randn(2, 8), 4, w, b, 1e-5, 0, 2, [], [1.0], 1, 0, 1)
    with pytest.raises(RuntimeError, match="built for 2-D inputs"):
        ops.fused_group_norm(torch.randn(2, 8, 3), 4, w, b, 1e-5, 0, 2, [], [1.0, 2.0], 1, 0, 1)
    with pytest.raises(RuntimeError, match="not implemented for 'Double'"):
        ops.fused_group_norm(torch.randn(2, 8, 3, dtype=torch.float64), 4, w, b, 1e-5, 0, 0, [], [], 1, 0, 1)
    with pytest.raises(RuntimeError, match="Expected more than 1 value per channel"):
        ops.fused_group_norm(torch.randn(1, 8), 8, w, b, 1e-5, 0, 0, [], [], 1, 0, 1)
    with pytest.raises(RuntimeError, match="expected a per-channel parameter"):
        family.channel_vector(torch.randn(2, 4), 8)


# ---------------------------------------------------------------------------------------------- CUDA

# The problems whose ModelNew runs its convolution otherwise than the reference on CUDA in float32: the transposed
# convolutions in channels_last, the Conv3d ones with the family's direct kernel (where built for the shape).
OWN_CONV_KEYS = {"2/19", "2/60", "2/61", "2/21", "2/23", "2/27", "2/83", "2/85"}


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("shape", ["small", "odd"])
@pytest.mark.parametrize("key", KEYS)
def test_cuda_against_eager(key, shape, dtype, poisoned_outputs):
    """The CUDA kernels (slice and rows paths) against eager PyTorch on the GPU, parameters perturbed, outputs
    poisoned: the harness's tolerance for the dtype (the same cuDNN/cuBLAS calls on both sides, TF32 included). The
    problems whose float32 convolution runs otherwise (OWN_CONV_KEYS) compare with cuDNN's TF32 off: at these small
    shapes cuDNN may pick TF32 kernels for the reference (at the real shapes the reference's kernels give the same
    values, which the GPU check script confirms against the harness's tolerance with TF32 on)."""
    patch = CASES[key][3] if shape == "small" else CASES[key][4]
    model, model_new, namespace = build(key, patch)
    perturb(model, model_new)
    model, model_new = model.to("cuda", dtype), model_new.to("cuda", dtype)
    set_seed(3)
    (x,) = namespace["get_inputs"]()
    x = x.to("cuda", dtype)
    x_before = x.clone()
    tol = 1e-4 if dtype == torch.float32 else 1e-2
    exact = dtype == torch.float32 and key in OWN_CONV_KEYS
    with torch.backends.cudnn.flags(enabled=True, benchmark=torch.backends.cudnn.benchmark,
                                    deterministic=torch.backends.cudnn.deterministic,
                                    allow_tf32=torch.backends.cudnn.allow_tf32 and not exact):
        out, ref = seeded_outputs((model_new, model), (x, x))
    assert torch.equal(x, x_before)
    assert out.dtype == dtype and out.shape == ref.shape
    assert_close_report(out, ref, atol=tol, rtol=tol, what=f"{key} {shape} {dtype} on CUDA")


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("shape", [(3, 8, 5, 7), (6, 8)])
def test_stats_mode_reproduces_the_reference_group_norm(shape, dtype, device):
    """Every stats_mode (the GroupNorm's statistics as PyTorch's CUDA kernel uses them for half data) against a
    float64 emulation of its formula; a narrow spread around 0.7 (sigmoid outputs) makes the rounding of the mean
    worth many units of the output, so the modes are told apart."""
    gen = torch.Generator().manual_seed(5)
    x = (0.7 + 0.01 * torch.randn(shape, generator=gen)).to(dtype)
    channels, groups, eps = shape[1], 4, 1e-5
    w = (torch.randn(channels, generator=gen) * 0.5 + 1).to(dtype)
    b = (torch.randn(channels, generator=gen) * 0.3).to(dtype)

    def emulated(mode):
        v = x.double().reshape(shape[0], groups, -1)
        eps_used = float(torch.tensor(eps, dtype=dtype)) if mode & family.EPS_ROUND else float(torch.tensor(eps))
        mean = v.mean(-1).float()
        rstd = torch.rsqrt(v.var(-1, unbiased=False).float() + eps_used)
        if mode & family.STATS_ROUND:
            mean, rstd = mean.to(dtype).float(), rstd.to(dtype).float()
        per = channels // groups
        mean_c = mean.repeat_interleave(per, 1).double().reshape(shape[0], channels, *[1] * (len(shape) - 2))
        rstd_c = rstd.repeat_interleave(per, 1).double().reshape(mean_c.shape)
        wc, bc = w.double().reshape(1, channels, *[1] * (len(shape) - 2)), b.double().reshape(mean_c.shape[1:])
        if mode & family.FUSED_AFFINE:
            a = (rstd_c * wc).float().double()
            z = a * x.double() + (bc - a * mean_c).float().double()
        else:
            z = ((x.double() - mean_c) * rstd_c).float().double() * wc + bc
        return z

    outs = {}
    for mode in range(8):
        out = ops.fused_group_norm(x.to(device), groups, w.to(device), b.to(device), eps, 0, 0, [], [], 1, 0, 1,
                                   mode).cpu()
        ref = emulated(mode)
        assert_close_report(out.double(), ref.to(dtype).double(), atol=1e-3, rtol=2 * torch.finfo(dtype).eps,
                            what=f"stats_mode {mode} {dtype}")
        outs[mode] = out
    # The rounded statistics move the output by many units of the dtype: the test would see a missing rounding.
    assert (outs[1].double() - outs[0].double()).abs().max() > 8 * torch.finfo(dtype).eps
    with pytest.raises(RuntimeError, match="unknown stats_mode"):
        ops.fused_group_norm(x, groups, w, b, eps, 0, 0, [], [], 1, 0, 1, 8)


def test_stats_mode_policy(monkeypatch):
    """float32 takes the accurate form everywhere, half data on the CPU the CPU kernel's float32 statistics; on CUDA
    the fused affine for H*W > 1, eps in the dtype, and the statistics rounded by the version rule or its override."""
    assert family.stats_mode(torch.zeros(2, 4, 3)) == 0
    assert family.stats_mode(torch.zeros(2, 4, 3, dtype=torch.bfloat16)) == 0
    meta = torch.empty(2, 4, 3, dtype=torch.float16, device="meta")
    assert family.stats_mode(meta) == 0  # not CUDA
    monkeypatch.setenv("GROUPNORM_INLINE_GN_STATS_ROUND", "1")
    assert family.cuda_rounds_statistics()
    monkeypatch.setenv("GROUPNORM_INLINE_GN_STATS_ROUND", "0")
    assert not family.cuda_rounds_statistics()
    monkeypatch.delenv("GROUPNORM_INLINE_GN_STATS_ROUND")
    monkeypatch.setattr(torch, "__version__", "2.11.0+cu130")
    assert family.cuda_rounds_statistics()
    monkeypatch.setattr(torch, "__version__", "2.14.1+cu130")
    assert not family.cuda_rounds_statistics()


@pytest.mark.cuda
@pytest.mark.parametrize("offset", [0, 1])
@pytest.mark.parametrize("output", ["store", "mean_spatial", "mean_all"])
def test_cuda_slice_path_long_rows(output, offset, poisoned_outputs):
    """The slice path's row parts (S > 8192: several items per row), an odd S (scalar head and tail around the
    16-byte body) and an input that starts 4 bytes past an allocation (offset 1: unaligned rows, and for `store`
    an output aligned differently from the input: the all-scalar walk), against float64. silu + hardswish with a
    mean output takes the two-pass mean (part_sum_kernel), identity the one-pass linear_mean_kernel."""
    gen = torch.Generator().manual_seed(9)
    shape = (3, 6, 20011)
    base = torch.randn(offset + math.prod(shape), generator=gen) * 2 + 0.5
    x = base[offset:].view(shape).cuda() if offset == 0 else base.cuda()[offset:].view(shape)
    gn = torch.nn.GroupNorm(3, 6)
    with torch.no_grad():
        gn.weight.copy_(torch.randn(6, generator=gen))
        gn.bias.copy_(torch.randn(6, generator=gen))
    gn = gn.cuda()
    for prologue, epilogue in (("identity", "identity"), ("silu", "hardswish")):
        if output == "store" and prologue == "silu":
            continue
        got = family.group_norm_chain(x, gn, prologue=prologue, epilogue=epilogue, output=output)
        v = x.double()
        if prologue == "silu":
            v = v * torch.sigmoid(v)
        z = torch.nn.functional.group_norm(v, 3, gn.weight.double(), gn.bias.double(), gn.eps)
        if epilogue == "hardswish":
            z = z * (z + 3).clamp(0, 6) / 6
        ref = {"store": z, "mean_spatial": z.mean(-1), "mean_all": z.mean((1, 2))}[output]
        assert_close_report(got.double(), ref, atol=2e-5, rtol=2e-5, what=f"{prologue}/{epilogue} {output} +{offset}")


# ---------------------------------------------------------------------------------------------- input_bias

# (prologue, vectors, epilogue, scalars, output, input_pool, output_pool) of the slice path's chains.
BIAS_CHAINS = [
    ("identity", 0, "identity", (), "store", 1, 1),
    ("gelu", 0, "identity", (), "store", 1, 1),
    ("silu", 0, "hardswish", (), "store", 1, 1),
    ("hardswish", 0, "identity", (), "mean_spatial", 1, 1),
    ("identity", 0, "identity", (), "mean_all", 1, 1),
    ("identity", 0, "scale_clamp", (-0.5, 0.7), "max_pool", 1, 2),
    ("batch_norm_tanh", 4, "identity", (), "store", 2, 1),
    ("identity", 0, "identity", (), "store", 3, 1),
]


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("chain", BIAS_CHAINS, ids=lambda c: f"{c[0]}-{c[2]}-{c[4]}-pool{c[5]}")
def test_input_bias_is_the_separate_bias_add(chain, dtype, device, poisoned_outputs):
    """The operator with input_bias b on x gives exactly what it gives on x + b computed by PyTorch (the add
    rounded to the dtype once, as PyTorch's bias add after a cuDNN convolution): bitwise equal, every output and
    the pooled input, in float32 and both half types. Groups of 3 rows of 69 x 70 values: several items per
    group on CUDA (pooled parts of 2048 values, row parts of 8192)."""
    prologue, n_vectors, epilogue, scalars, output, input_pool, output_pool = chain
    gen = torch.Generator().manual_seed(21)
    x = (torch.randn(2, 6, 69, 70, generator=gen) * 1.5 + 0.4).to(device, dtype)
    b = (torch.randn(6, generator=gen) * 2.0).to(device, dtype)
    gn = torch.nn.GroupNorm(2, 6).to(device, dtype)
    with torch.no_grad():
        gn.weight.copy_(torch.randn(6, generator=gen))
        gn.bias.copy_(torch.randn(6, generator=gen))
    vectors = [torch.randn(6, generator=gen).abs().to(device) + 0.5 for _ in range(n_vectors)]
    pro_vectors = vectors if prologue != "identity" else ()
    epi_vectors = [torch.randn(6, generator=gen).to(device)] if epilogue == "scale_clamp" else ()
    kwargs = dict(prologue=prologue, prologue_vectors=pro_vectors, epilogue=epilogue, epilogue_vectors=epi_vectors,
                  epilogue_scalars=scalars, output=output, input_pool=input_pool, output_pool=output_pool)
    before = x.clone()
    got = family.group_norm_chain(x, gn, input_bias=b, **kwargs)
    expected = family.group_norm_chain(x + b.reshape(6, 1, 1), gn, **kwargs)
    assert torch.equal(x, before)
    assert got.dtype == dtype and got.shape == expected.shape
    if not torch.equal(got, expected):
        assert_close_report(got, expected, atol=0, rtol=0, what=f"{chain} {dtype} {device}")


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)])
def test_pooled_input_against_float64(device, poisoned_outputs):
    """input_pool = 2 with odd H and W (floor), groups of 4 rows of 35 x 33 pooled values (three parts each on CUDA),
    a large |mean| against the spread, and an input bias: GroupNorm(max_pool2d(x + b)) in float64."""
    gen = torch.Generator().manual_seed(4)
    x = torch.randn(3, 8, 71, 67, generator=gen) * 0.5 + 300.0
    b = torch.randn(8, generator=gen)
    gn = torch.nn.GroupNorm(2, 8)
    with torch.no_grad():
        gn.weight.copy_(torch.randn(8, generator=gen))
        gn.bias.copy_(torch.randn(8, generator=gen))
    gn = gn.to(device)
    got = family.group_norm_chain(x.to(device), gn, input_pool=2, input_bias=b.to(device))
    pooled = torch.nn.functional.max_pool2d((x + b.reshape(8, 1, 1)).double(), 2)
    ref = torch.nn.functional.group_norm(pooled, 2, gn.weight.double().cpu(), gn.bias.double().cpu(), gn.eps)
    assert_close_report(got.cpu().double(), ref, atol=2e-4, rtol=2e-4, what=f"pooled input on {device}")


@pytest.mark.parametrize("kind", ["conv2d", "conv3d", "conv_transpose2d", "conv_transpose3d", "conv1d"])
def test_convolution_deferring_bias(kind):
    """defer=True: the convolution without its bias and the bias returned, y + b equal to the module's output (the
    stride, padding, output_padding, groups and dilation of the module kept); defer=False or no bias: the module."""
    torch.manual_seed(0)
    nn = torch.nn
    conv, shape = {
        "conv2d": (nn.Conv2d(4, 6, 3, stride=2, padding=1, dilation=2, groups=2), (2, 4, 11, 9)),
        "conv3d": (nn.Conv3d(3, 4, 2, padding=1), (2, 3, 5, 6, 4)),
        "conv_transpose2d": (nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1, output_padding=1, groups=2), (2, 4, 5, 6)),
        "conv_transpose3d": (nn.ConvTranspose3d(3, 4, 3, stride=2, padding=1, dilation=1), (1, 3, 4, 5, 3)),
        "conv1d": (nn.Conv1d(3, 5, 3, padding=2), (2, 3, 9)),
    }[kind]
    x = torch.randn(shape)
    with torch.no_grad():
        full = conv(x)
        y, bias = family.convolution_deferring_bias(conv, x, defer=True)
        assert bias is conv.bias
        assert_close_report(y + bias.reshape(-1, *[1] * (x.dim() - 2)), full, atol=1e-6, rtol=1e-6, what=kind)
        same, none = family.convolution_deferring_bias(conv, x, defer=False)
        assert none is None and torch.equal(same, full)
        assert family.convolution_deferring_bias(conv, x)[1] is None  # CPU input: not deferred by default


# ---------------------------------------------------------------------------------------------- channels_last

def _cl(x):
    return x.contiguous(memory_format=torch.channels_last if x.dim() == 4 else torch.channels_last_3d)


def _is_cl(x):
    return x.is_contiguous(memory_format=torch.channels_last if x.dim() == 4 else torch.channels_last_3d)


# (shape, groups): whole 16-byte vectors of channels (taken in place) with several items per sample, a thread's
# channels across two groups (cpg 4 < 8 half values per vector), one channel per group, 24 channels (a CTA of
# 255 active threads in half precision); 12 channels (whole float32 vectors only: half precision reads a contiguous
# copy) and 2048 channels (more than one item's column sums hold: a contiguous copy).
CL_SHAPES = [((3, 64, 37, 41), 8), ((2, 16, 9, 31, 33), 4), ((2, 48, 5, 7), 48), ((2, 24, 6, 50), 3),
             ((2, 12, 9, 11), 4), ((1, 2048, 3, 5), 32)]
# The chains built for the channels-last kernels (the transposed-convolution problems and the plain GroupNorm).
CL_CHAINS = [("identity", "identity"), ("gelu", "identity"), ("relu", "identity"), ("silu", "hardswish")]


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("chain", CL_CHAINS, ids=lambda c: f"{c[0]}-{c[1]}")
@pytest.mark.parametrize("case", CL_SHAPES, ids=lambda c: "x".join(map(str, c[0])) + f"-G{c[1]}")
def test_channels_last_input(case, chain, dtype, device, poisoned_outputs):
    """A channels_last input gives a channels_last output with the values of the contiguous input's (the slice path,
    itself checked against float64 above) and the float64 reference's: |mean| = 50 x the spread, an input bias,
    outputs poisoned, x unchanged. CPU: a contiguous copy inside, bitwise the contiguous input's result."""
    shape, groups = case
    prologue, epilogue = chain
    channels = shape[1]
    gen = torch.Generator().manual_seed(31)
    x = _cl((torch.randn(shape, generator=gen) * 0.2 + 10.0).to(device, dtype))
    b = (torch.randn(channels, generator=gen) * 0.1).to(device, dtype)
    gn = torch.nn.GroupNorm(groups, channels)
    with torch.no_grad():
        gn.weight.copy_(torch.randn(channels, generator=gen))
        gn.bias.copy_(torch.randn(channels, generator=gen))
    gn = gn.to(device, dtype)
    before = x.clone()
    got = family.group_norm_chain(x, gn, prologue=prologue, epilogue=epilogue, input_bias=b)
    plain = family.group_norm_chain(x.contiguous(), gn, prologue=prologue, epilogue=epilogue, input_bias=b)
    assert torch.equal(x, before)
    assert got.dtype == dtype and got.shape == x.shape and _is_cl(got)
    what = f"{shape} G{groups} {chain} {dtype} {device}"
    if device == "cpu" or dtype == torch.float32:
        tol = 0 if device == "cpu" else 2e-5
        assert_close_report(got.float(), plain.float(), atol=tol, rtol=tol, what=f"against the contiguous input: {what}")
    else:  # the statistics summed in another order: a half-unit rounding of the output may go the other way
        unit = 2.0 ** -7 if dtype == torch.bfloat16 else 2.0 ** -10
        assert_close_report(got.float(), plain.float(), atol=unit, rtol=unit, what=f"against the contiguous input: {what}")
    if dtype == torch.float32:
        v = (x.double() + b.double().reshape(channels, *[1] * (x.dim() - 2)))
        v = {"identity": v, "gelu": torch.nn.functional.gelu(v), "relu": v.relu(), "silu": v * torch.sigmoid(v)}[prologue]
        z = torch.nn.functional.group_norm(v, groups, gn.weight.double(), gn.bias.double(), gn.eps)
        if epilogue == "hardswish":
            z = z * (z + 3).clamp(0, 6) / 6
        assert_close_report(got.double(), z, atol=2e-4, rtol=2e-4, what=f"against float64: {what}")


# (shape, groups, pool): 64 channels with odd H and W (floor); one channel per group with a 3 x 3 window (the
# kernel's runtime window); 24 channels (whole half vectors, 3 groups); 12 channels (half precision reads a
# contiguous copy); 2048 channels (48 KB of pooled values); 512 x 32 x 32 pooled values, more than shared memory
# holds (a contiguous copy); one pooled position (the cluster's first CTA holds none of it).
CL_POOL_SHAPES = [((3, 64, 37, 41), 8, 2), ((2, 48, 9, 7), 48, 3), ((2, 24, 6, 50), 3, 2), ((2, 12, 9, 11), 4, 2),
                  ((1, 2048, 4, 6), 32, 2), ((1, 512, 64, 64), 16, 2), ((2, 16, 2, 3), 4, 2)]


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("case", CL_POOL_SHAPES, ids=lambda c: "x".join(map(str, c[0])) + f"-G{c[1]}-k{c[2]}")
def test_pooled_channels_last_input(case, dtype, device, poisoned_outputs):
    """#11's chain (BatchNorm + tanh prologue, k x k max-pool on the read, input bias) on a channels_last input: a
    channels_last output with the contiguous input's values (the slice path's pooled kernels) and the float64
    reference's (float32); x unchanged, outputs poisoned."""
    shape, groups, pool = case
    channels = shape[1]
    gen = torch.Generator().manual_seed(37)
    x = _cl((torch.randn(shape, generator=gen) * 0.5 + 3.0).to(device, dtype))
    b = (torch.randn(channels, generator=gen) * 0.1).to(device, dtype)
    bn = [torch.randn(channels, generator=gen) * 0.2 + 3.0, torch.rand(channels, generator=gen) + 0.5,
          torch.randn(channels, generator=gen), torch.randn(channels, generator=gen) * 0.1]
    gn = torch.nn.GroupNorm(groups, channels)
    with torch.no_grad():
        gn.weight.copy_(torch.randn(channels, generator=gen))
        gn.bias.copy_(torch.randn(channels, generator=gen))
    gn = gn.to(device, dtype)
    vectors = [v.to(device) for v in bn]
    before = x.clone()
    got = family.group_norm_chain(x, gn, prologue="batch_norm_tanh", prologue_vectors=vectors, input_pool=pool,
                                  input_bias=b)
    plain = family.group_norm_chain(x.contiguous(), gn, prologue="batch_norm_tanh", prologue_vectors=vectors,
                                    input_pool=pool, input_bias=b)
    assert torch.equal(x, before)
    pooled_shape = (shape[0], channels, shape[2] // pool, shape[3] // pool)
    assert got.dtype == dtype and got.shape == pooled_shape and _is_cl(got)
    what = f"{shape} G{groups} k{pool} {dtype} {device}"
    unit = {torch.float32: 2e-5, torch.bfloat16: 2.0 ** -7, torch.float16: 2.0 ** -10}[dtype]
    tol = 0 if device == "cpu" else unit  # CUDA: two-pass statistics in shared memory against shifted sums
    assert_close_report(got.float(), plain.float(), atol=tol, rtol=tol, what=f"against the contiguous input: {what}")
    if dtype == torch.float32:
        r = lambda v: v.double().cpu().reshape(channels, 1, 1)  # noqa: E731
        v = x.double().cpu() + r(b)
        v = torch.tanh((v - r(bn[0])) * r(bn[1]) * r(bn[2]) + r(bn[3]))
        z = torch.nn.functional.group_norm(torch.nn.functional.max_pool2d(v, pool), groups,
                                           gn.weight.double().cpu(), gn.bias.double().cpu(), gn.eps)
        assert_close_report(got.double().cpu(), z, atol=2e-4, rtol=2e-4, what=f"against float64: {what}")


@pytest.mark.cuda
def test_cuda_tanh_decreases_by_at_most_one_unit():
    """The pooled channels-last kernel sends a window's raw max (min for a negative BatchNorm weight) through #11's
    BatchNorm + tanh once (ProBatchNormTanh::direction). That is the max of the window's tanh values where CUDA's
    tanhf never decreases; it does, by one unit at a few points (|x| = 0.6, where its two formulas meet, with CUDA
    13), so a pooled value may sit one float32 unit below the reference's there. This walks every float32 from -inf
    to +inf in order (torch.tanh runs the same tanhf, no fast-math in either build) and bounds every decrease by one
    unit (and their count), printing where they are."""
    device = torch.device("cuda")
    chunk = 1 << 27
    previous, drops = None, []
    for first, last, step in ((0xFF800000, 0x80000000, -1), (0, 0x7F800000, 1)):
        # negative floats increase as their bit patterns decrease: -inf .. -0 walks the patterns downwards
        start = first
        while (start - last) * step <= 0:
            count = min(chunk, abs(last - start) + 1)
            bits = start + step * torch.arange(count, device=device, dtype=torch.int64)
            values = (bits - (1 << 32) * (bits >= (1 << 31))).to(torch.int32).view(torch.float32)
            t = torch.tanh(values)
            if previous is not None:
                t = torch.cat([previous.reshape(1), t])
                values = torch.cat([previous_x.reshape(1), values])
            for i in (t[1:] < t[:-1]).nonzero().flatten().tolist():
                below = torch.nextafter(t[i], torch.tensor(-float("inf"), device=device))
                drops.append((values[i].item(), values[i + 1].item(), (t[i] - t[i + 1]).item(),
                               bool(t[i + 1] >= below)))
            previous, previous_x = t[-1], values[-1]
            start += step * count
    print("tanhf decreases (x, next x, drop, within one unit):", drops)
    assert all(one_unit for *_, one_unit in drops), f"tanhf decreases by more than one unit: {drops}"
    assert len(drops) <= 16, f"tanhf decreases at {len(drops)} points: {drops[:16]}"


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("layout", ["channels_last", "contiguous"])
@pytest.mark.parametrize("shape", [(5, 64, 13, 11), (2, 16, 3, 9, 7), (3, 24, 1, 1), (2, 12, 5, 3), (1, 2048, 2, 3)])
def test_channel_moments(shape, layout, dtype, device, poisoned_outputs):
    """channel_moments (the BatchNorm statistics of #11): each channel's mean and biased variance over the other
    dimensions, |mean| = 300 x the spread, against float64; CUDA channels_last inputs of whole 16-byte channel
    vectors take the kernel, the others PyTorch's var_mean; x unchanged."""
    gen = torch.Generator().manual_seed(41)
    x = (torch.randn(shape, generator=gen) * 0.5 + 150.0).to(device, dtype)
    if layout == "channels_last":
        x = _cl(x)
    before = x.clone()
    got = family._family_ops.channel_moments(x)
    assert torch.equal(x, before)
    dims = [0] + list(range(2, x.dim()))
    var, mean = torch.var_mean(x.double(), dim=dims, unbiased=False)
    assert got.dtype == torch.float32 and got.shape == (2, shape[1])
    what = f"{shape} {layout} {dtype} {device}"
    assert_close_report(got[0].double(), mean, atol=0, rtol=2e-6, what=f"mean: {what}")
    # float32 accumulation of values near 150 (PyTorch's var_mean) keeps the variance to ~1e-4 of itself.
    assert_close_report(got[1].double(), var, atol=0, rtol=1e-3, what=f"variance: {what}")


def test_channel_moments_rejects_vectors():
    with pytest.raises(RuntimeError, match="at least 2 dimensions"):
        family._family_ops.channel_moments(torch.ones(5))


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int64])
@pytest.mark.parametrize("shape", [(2, 64, 33, 35), (1, 40, 3, 5, 7), (3, 31, 4, 4), (0, 32, 2, 2), (2, 33, 1, 65)])
def test_to_channels_last(shape, dtype, device):
    """The family's transpose (tiles of 32 channels x 32 positions, partial tiles at both edges; PyTorch's copy below
    32 channels) gives exactly x.contiguous(memory_format=channels_last)."""
    x = (torch.randn(shape) * 100).to(device, dtype)
    got = ops.to_channels_last(x)
    assert _is_cl(got) and got.shape == x.shape and got.dtype == dtype
    assert torch.equal(got, x)
    with pytest.raises(RuntimeError, match="4-D or 5-D"):
        ops.to_channels_last(torch.zeros(2, 3, 4, device=device))


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)])
@pytest.mark.parametrize("kind", ["conv_transpose2d", "conv_transpose3d", "conv_transpose2d_s1", "conv_transpose3d_s1",
                                  "conv2d"])
def test_convolution_channels_last(kind, device):
    """channels_last=True: on CUDA a transposed convolution runs on the channels_last input and weight and returns
    y in that layout, the bias deferred as before (a stride-1 one as its forward form); the converted weight follows
    in-place updates. A forward convolution, and any convolution on the CPU, runs as without the flag."""
    torch.manual_seed(0)
    nn = torch.nn
    conv, shape = {
        "conv_transpose2d": (nn.ConvTranspose2d(40, 16, 3, stride=2, padding=1, output_padding=1), (2, 40, 5, 6)),
        "conv_transpose3d": (nn.ConvTranspose3d(3, 8, 3, stride=2, padding=1), (1, 3, 4, 5, 3)),
        "conv_transpose2d_s1": (nn.ConvTranspose2d(16, 24, (5, 3), padding=(1, 2)), (2, 16, 9, 7)),
        "conv_transpose3d_s1": (nn.ConvTranspose3d(8, 16, 3), (2, 8, 4, 5, 6)),
        "conv2d": (nn.Conv2d(4, 8, 3), (2, 4, 7, 9)),
    }[kind]
    conv = conv.to(device)
    x = torch.randn(shape, device=device)
    saved = torch.backends.cudnn.allow_tf32
    torch.backends.cudnn.allow_tf32 = False  # exact float32 on both sides: the layouts' algorithms then agree closely
    try:
        with torch.no_grad():
            plain, plain_bias = family.convolution_deferring_bias(conv, x)
            y, bias = family.convolution_deferring_bias(conv, x, channels_last=True)
            assert (bias is None) == (plain_bias is None)
            assert_close_report(y, plain, atol=1e-5, rtol=1e-5, what=f"{kind} {device}")
            assert _is_cl(y) == (device == "cuda" and kind != "conv2d")
            conv.weight.mul_(-2.0)
            y2, bias2 = family.convolution_deferring_bias(conv, x, channels_last=True)
            if bias2 is not None:
                y2 = y2 + bias2.reshape(-1, *[1] * (x.dim() - 2))
            assert_close_report(y2, conv(x), atol=2e-5, rtol=2e-5, what=f"{kind} {device} after an update")
    finally:
        torch.backends.cudnn.allow_tf32 = saved


@pytest.mark.parametrize("case", [((2, 6, 7, 9), 5, 1), ((2, 6, 7, 9), (3, 5), (0, 2)), ((1, 4, 3, 5, 6), 3, 0),
                                  ((1, 4, 3, 5, 6), (2, 3, 3), (1, 0, 2))], ids=str)
def test_forward_form_of_stride_1_transposed_convolution(case):
    """forward_form_padding/forward_form_weight: conv(x, w', padding=k - 1 - p) equals conv_transpose(x, w,
    padding=p) in float64 (1e-12), per-dimension kernels and paddings; any transposed convolution it does not
    describe (stride, output padding, dilation, groups, padding > k - 1, a forward convolution) gets None."""
    shape, k, p = case
    nn = torch.nn
    transposed = nn.ConvTranspose2d if len(shape) == 4 else nn.ConvTranspose3d
    conv = transposed(shape[1], 5, k, padding=p).double()
    x = torch.randn(shape, dtype=torch.float64)
    padding = family.forward_form_padding(conv)
    forward = torch.nn.functional.conv2d if len(shape) == 4 else torch.nn.functional.conv3d
    with torch.no_grad():
        got = forward(x, family.forward_form_weight(conv.weight), conv.bias, padding=padding)
        assert_close_report(got, conv(x), atol=1e-12, rtol=1e-12, what=f"forward form {case}")
    assert family.forward_form_padding(transposed(4, 5, 3, stride=2)) is None
    assert family.forward_form_padding(transposed(4, 5, 3, stride=2, output_padding=1)) is None
    assert family.forward_form_padding(transposed(4, 5, 3, dilation=2)) is None
    assert family.forward_form_padding(transposed(4, 6, 3, groups=2)) is None
    assert family.forward_form_padding(transposed(4, 5, 3, padding=3)) is None
    assert family.forward_form_padding(nn.Conv2d(4, 5, 3)) is None


# ---------------------------------------------------------------------------------------------- conv3d_direct

# (N, C_in, D, H, W, C_out, KD, K): each (C_in, C_out, KD, K) the CUDA kernel is built for (KD = 1: a Conv2d as
# its depth-1 case), with output widths that are not a multiple of its outputs per thread; and a shape it is not
# built for (cuDNN inside the op).
CONV3D_CASES = [(2, 3, 6, 7, 11, 16, 4, 4), (2, 3, 5, 9, 10, 16, 3, 3), (1, 3, 4, 6, 33, 24, 3, 3),
                (2, 3, 4, 4, 4, 24, 3, 3), (3, 8, 1, 7, 13, 32, 1, 3), (1, 8, 1, 3, 70, 32, 1, 3),
                (2, 5, 5, 6, 7, 7, 3, 3)]


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)])
@pytest.mark.parametrize("case", CONV3D_CASES, ids=lambda c: "x".join(map(str, c)))
def test_conv3d_direct(case, device, poisoned_outputs):
    """conv3d_direct against torch.nn.functional.conv3d in float64 (cuDNN's TF32 off for the shape the kernel is
    not built for, which runs PyTorch's convolution): float32 sums, so 1e-5 of the output's scale; a
    non-contiguous input, |mean| >> spread (products of C_in x KD x K^2 terms near 10); the input unchanged; half
    precision falls back to PyTorch's convolution."""
    n, ci, d, h, w, co, kd, k = case
    gen = torch.Generator().manual_seed(17)
    x = (torch.rand(n, ci, d, h, 2 * w, generator=gen) + 10.0)[..., ::2].to(device)  # a strided view
    weight = (torch.randn(co, ci, kd, k, k, generator=gen) * 0.2).to(device)
    before = x.clone()
    saved = torch.backends.cudnn.allow_tf32
    torch.backends.cudnn.allow_tf32 = False  # the shape the kernel is not built for runs cuDNN: float32 there too
    try:
        got = ops.conv3d_direct(x, weight)
    finally:
        torch.backends.cudnn.allow_tf32 = saved
    ref = torch.nn.functional.conv3d(x.double(), weight.double())
    assert torch.equal(x, before)
    assert got.dtype == torch.float32 and got.shape == ref.shape and got.is_contiguous()
    scale = ref.abs().max().item()
    assert_close_report(got.double(), ref, atol=1e-5 * scale, rtol=0, what=f"conv3d_direct {case} on {device}")
    if device == "cuda":
        half = ops.conv3d_direct(x.half(), weight.half())
        assert half.dtype == torch.float16 and half.shape == ref.shape
    with pytest.raises(RuntimeError, match="does not fit"):
        ops.conv3d_direct(x, weight[:, :1])
    with pytest.raises(RuntimeError, match="larger than the input"):
        ops.conv3d_direct(x[:, :, :, :1], weight)


def test_direct_convolution_rule():
    """Which convolutions the direct kernel takes (told by attributes, no GPU needed for the rule): forward Conv2d and
    Conv3d of a built (C_in, C_out, kernel), stride 1, no padding, float32 CUDA; a Conv2d it is not built for
    keeps cuDNN's 2-D call (the op's own fallback would be a 3-D convolution), Conv1d and transposed convolutions
    are never taken, and a CPU input never."""

    class FakeCuda:  # the attributes _direct_convolution reads of x, as a CUDA float32 tensor would have them
        def __init__(self, dim):
            self.is_cuda, self.dtype, self._dim = True, torch.float32, dim

        def dim(self):
            return self._dim

    x4, x5 = FakeCuda(4), FakeCuda(5)
    assert family._direct_convolution(torch.nn.Conv2d(8, 32, 3), x4)
    assert family._direct_convolution(torch.nn.Conv3d(3, 16, 4), x5)
    assert family._direct_convolution(torch.nn.Conv2d(8, 64, 3), x4)
    assert not family._direct_convolution(torch.nn.Conv2d(8, 48, 3), x4)  # not built: cuDNN's 2-D call
    assert not family._direct_convolution(torch.nn.Conv2d(8, 32, 3, padding=1), x4)
    assert not family._direct_convolution(torch.nn.Conv2d(8, 32, 3, stride=2), x4)
    assert not family._direct_convolution(torch.nn.Conv2d(8, 32, (3, 1)), x4)
    assert not family._direct_convolution(torch.nn.Conv2d(8, 32, 3), x5)
    assert not family._direct_convolution(torch.nn.Conv1d(8, 32, 3), FakeCuda(3))
    assert not family._direct_convolution(torch.nn.ConvTranspose2d(8, 32, 3), x4)
    assert not family._direct_convolution(torch.nn.Conv2d(8, 32, 3), torch.rand(1, 8, 5, 5))


@pytest.mark.cuda
def test_convolution_deferring_bias_takes_the_direct_kernel(poisoned_outputs):
    """A float32 CUDA Conv3d or built Conv2d of stride 1 without padding runs the direct kernel, its bias deferred:
    y + b matches the module (TF32 off, exact float32 on both sides); padding, stride or half precision keep
    PyTorch's convolution."""
    torch.manual_seed(3)
    x3d, x2d = torch.rand(2, 3, 6, 9, 10, device="cuda"), torch.rand(2, 8, 11, 9, device="cuda")
    saved = torch.backends.cudnn.allow_tf32
    torch.backends.cudnn.allow_tf32 = False
    try:
        with torch.no_grad():
            for conv in (torch.nn.Conv3d(3, 16, 3), torch.nn.Conv3d(3, 16, 3, padding=1),
                         torch.nn.Conv3d(3, 16, 3, stride=2), torch.nn.Conv2d(8, 32, 3), torch.nn.Conv2d(8, 32, 3, padding=1)):
                conv = conv.cuda()
                x = x2d if isinstance(conv, torch.nn.Conv2d) else x3d
                y, bias = family.convolution_deferring_bias(conv, x)
                assert bias is conv.bias
                assert_close_report(y + bias.reshape(-1, *[1] * (x.dim() - 2)), conv(x), atol=1e-5, rtol=1e-5,
                                    what=str(conv))
                unpadded = all(p == 0 for p in conv.padding) and all(s == 1 for s in conv.stride)
                assert family._direct_convolution(conv, x) == unpadded
                assert not family._direct_convolution(conv, x.half())
    finally:
        torch.backends.cudnn.allow_tf32 = saved

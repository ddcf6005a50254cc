"""The C++ argument checks raise Python exceptions whose messages carry the formatted numbers, shapes, dtypes
and devices, and no source formats a message through a stream (csrc/message.py says why that matters).

The operators are called below their Python layers (straight to the CPU or CUDA kernel, with
`OpOverload.redispatch`), so the arguments reach the C++ checks that the Python-side validation would
otherwise answer first; mixed devices reach them that way too ('meta' stands in for a second device).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

import groupnorm_inline
from groupnorm_inline import extension
from groupnorm_inline.csrc import group_norm_cpu
from groupnorm_inline.csrc.message import MESSAGE_HEADER
from groupnorm_inline.problems import level2_92_kernels, level2_94_kernels
from cxx_messages import scan_python_sources, stream_messages

CSRC = Path(groupnorm_inline.__file__).resolve().parent / "csrc"
SPECS = {"core": extension.SPEC, "p92": level2_92_kernels.EXTENSION, "p94": level2_94_kernels.EXTENSION}


def kernel(namespace: str, name: str, device: str = "cpu"):
    """The operator's `device` kernel itself, below autograd and any Python kernels."""
    op = getattr(getattr(torch.ops, namespace), name).default
    keys = torch._C.DispatchKeySet(torch._C.DispatchKey.CUDA if device == "cuda" else torch._C.DispatchKey.CPU)
    return lambda *args: op.redispatch(keys, *args)


def raises(error, message: str):
    """pytest.raises matching `message` literally (it holds brackets and parentheses)."""
    return pytest.raises(error, match=re.escape(message))


# ----------------------------------------------------------------------------------------- the core operators

@pytest.fixture(scope="module")
def core():
    extension.load()
    ns = group_norm_cpu.OP_NAMESPACE
    return {"forward": kernel(ns, "group_norm_forward"), "backward": kernel(ns, "group_norm_backward")}


def test_forward_messages(core):
    forward = core["forward"]
    with raises(RuntimeError, "Expected at least 2 dimensions for input tensor but received 1"):
        forward(torch.randn(6), 3, None, None, 1e-5)
    with raises(RuntimeError, "Expected number of channels in input to be divisible by num_groups, but got input "
                              "of shape [2, 6, 5] and num_groups=4"):
        forward(torch.randn(2, 6, 5), 4, None, None, 1e-5)
    # The forward refuses other dtypes with the Python entry's TypeError (the checks are the operator's own).
    with raises(TypeError, "group_norm: expected a floating-point input (float16, bfloat16, float32 or float64), "
                           "but got torch.int32"):
        forward(torch.ones(2, 6, 5, dtype=torch.int32), 3, None, None, 1e-5)
    with raises(TypeError, "but got torch.float8_e4m3fn"):
        forward(torch.zeros(2, 6, 5).to(torch.float8_e4m3fn), 3, None, None, 1e-5)
    with raises(ValueError, "Expected more than 1 value per channel when training, got input size [1, 3]"):
        forward(torch.randn(1, 3), 3, None, None, 1e-5)
    with raises(RuntimeError, "Expected all tensors to be on the same device, but found at least two devices, cpu "
                              "(input) and meta (bias)!"):
        forward(torch.randn(2, 6, 5), 3, None, torch.zeros(6, device="meta"), 1e-5)
    with raises(RuntimeError, "group_norm: expected weight to have dtype torch.float16 or torch.float32 for an input "
                              "of dtype torch.float16, but got torch.float64"):
        forward(torch.randn(2, 6, 5).half(), 3, torch.ones(6, dtype=torch.float64), None, 1e-5)


def _backward_args(**change):
    """Valid backward arguments for a (2, 6, 5) float32 input with 3 groups, with `change` applied."""
    args = dict(grad_out=torch.randn(2, 6, 5), input=torch.randn(2, 6, 5), mean=torch.zeros(2, 3),
                rstd=torch.ones(2, 3), weight=torch.ones(6), num_groups=3, output_mask=[True, True, True])
    args.update(change)
    return tuple(args.values())


BACKWARD_CASES = {
    "1-D input": (dict(input=torch.randn(6), grad_out=torch.randn(6)), RuntimeError,
                  "group_norm_backward: expected input with at least 2 dimensions, got 1"),
    "num_groups 0": (dict(num_groups=0), RuntimeError, "group_norm_backward: expected num_groups > 0, got 0"),
    "channels not divisible": (dict(num_groups=4), RuntimeError,
                               "group_norm_backward: the number of channels 6 is not divisible by num_groups=4"),
    "grad_out shape": (dict(grad_out=torch.randn(2, 6, 4)), RuntimeError,
                       "group_norm_backward: expected grad_out of shape [2, 6, 5] (the input's), but got [2, 6, 4]"),
    "grad_out dtype": (dict(grad_out=torch.randn(2, 6, 5, dtype=torch.float64)), RuntimeError,
                       "group_norm_backward: expected grad_out of dtype Float (the input's), but got Double"),
    "grad_out device": (dict(grad_out=torch.randn(2, 6, 5, device="meta")), RuntimeError,
                        "group_norm_backward: expected grad_out on cpu (the input's device), but got meta"),
    "mean shape": (dict(mean=torch.zeros(2, 2)), RuntimeError,
                   "group_norm_backward: expected mean of shape [2, 3], but got [2, 2]"),
    "rstd dtype": (dict(rstd=torch.ones(2, 3, dtype=torch.float64)), RuntimeError,
                   "group_norm_backward: expected rstd of dtype Float for an input of dtype Float, but got Double"),
    "rstd device": (dict(rstd=torch.ones(2, 3, device="meta")), RuntimeError,
                    "group_norm_backward: expected rstd on cpu, but got meta"),
    "weight shape": (dict(weight=torch.ones(5)), RuntimeError,
                     "group_norm_backward: expected weight of shape [6], but got [5]"),
    "weight device": (dict(weight=torch.ones(6, device="meta")), RuntimeError,
                      "group_norm_backward: expected weight on cpu, but got meta"),
    "weight dtype": (dict(weight=torch.ones(6, dtype=torch.int64)), RuntimeError,
                     "group_norm_backward: expected a floating-point weight, but got Long"),
    "input dtype": (dict(input=torch.ones(2, 6, 5, dtype=torch.int32), grad_out=torch.ones(2, 6, 5, dtype=torch.int32)),
                    NotImplementedError, "\"group_norm_backward_cpu\" not implemented for 'Int'"),
}


@pytest.mark.parametrize("case", list(BACKWARD_CASES))
def test_backward_messages(core, case):
    change, error, message = BACKWARD_CASES[case]
    with raises(error, message):
        core["backward"](*_backward_args(**change))


# ------------------------------------------------------------------------------------------- level 2 #92

@pytest.fixture(scope="module")
def p92():
    level2_92_kernels.load()
    return kernel(level2_92_kernels.OP_NAMESPACE, "fused_forward")


def _p92_args(**change):
    """Valid fused_forward arguments (x (1, 4, 6, 6), 8 output channels, 2 groups) with `change` applied."""
    args = dict(x=torch.rand(1, 4, 6, 6), weight=torch.rand(8, 4, 3, 3), bias=torch.rand(8),
                gn_weight=torch.rand(8), gn_bias=torch.rand(8), groups=2, eps=1e-5, store_conv=True, conv_kernel=0)
    args.update(change)
    return tuple(args.values())


P92_CASES = {
    "3-D input": (dict(x=torch.rand(1, 4, 6)),
                  "p92 fused_forward: expected a 4-D input (N, C, H, W), got shape [1, 4, 6]"),
    "float64 input": (dict(x=torch.rand(1, 4, 6, 6, dtype=torch.float64)),
                      "p92 fused_forward: expected a float32 input, got Double"),
    "5x5 kernel": (dict(weight=torch.rand(8, 4, 5, 5)),
                   "p92 fused_forward: expected a (Cout, Cin, 3, 3) weight, got [8, 4, 5, 5]"),
    "input channels": (dict(weight=torch.rand(8, 3, 3, 3)),
                       "Given groups=1, weight of size [8, 3, 3, 3], expected input[1, 4, 6, 6] to have 3 channels, "
                       "but got 4 channels instead"),
    "empty weight": (dict(weight=torch.rand(0, 4, 3, 3)), "p92 fused_forward: empty weight [0, 4, 3, 3]"),
    "input smaller than the kernel": (dict(x=torch.rand(1, 4, 2, 7)),
                                      "Calculated padded input size per channel: (2 x 7). Kernel size: (3 x 3). "
                                      "Kernel size can't be greater than actual input size"),
    "groups": (dict(groups=3), "Expected number of channels in input to be divisible by num_groups, but got 8 "
                               "channels and num_groups=3"),
    "gn_weight length": (dict(gn_weight=torch.rand(7)), "p92 fused_forward: expected gn_weight of shape [8], got [7]"),
    "bias dtype": (dict(bias=torch.rand(8, dtype=torch.float64)),
                   "p92 fused_forward: expected bias to be float32, got Double"),
    "gn_bias device": (dict(gn_bias=torch.rand(8, device="meta")),
                       "Expected all tensors to be on the same device, but found cpu and meta"),
    "weight dtype": (dict(weight=torch.rand(8, 4, 3, 3, dtype=torch.float64)),
                     "p92 fused_forward: expected a float32 weight, got Double"),
    "conv_kernel": (dict(conv_kernel=2),
                    "p92 fused_forward: conv_kernel must be 0 (direct float32) or 1 (tf32x3), got 2"),
}


@pytest.mark.parametrize("case", list(P92_CASES))
def test_p92_messages(p92, case):
    change, message = P92_CASES[case]
    with raises(RuntimeError, message):
        p92(*_p92_args(**change))


# ------------------------------------------------------------------------------------------- level 2 #94

@pytest.fixture(scope="module")
def p94():
    level2_94_kernels.load()
    ns = level2_94_kernels.OP_NAMESPACE
    return {"split_rows": kernel(ns, "split_rows"), "epilogue": kernel(ns, "epilogue")}


SPLIT_CASES = {
    "3-D": ((torch.rand(2, 3, 4), 0, False), "p94 split_rows: expected a 2-D tensor, got shape [2, 3, 4]"),
    "float64": ((torch.rand(2, 3, dtype=torch.float64), 0, False), "p94 split_rows: expected float32, got Double"),
    "format": ((torch.rand(2, 3), 2, False), "p94 split_rows: format must be 0 (tf32) or 1 (float16), got 2"),
}


@pytest.mark.parametrize("case", list(SPLIT_CASES))
def test_p94_split_rows_messages(p94, case):
    args, message = SPLIT_CASES[case]
    with raises(RuntimeError, message):
        p94["split_rows"](*args)


def _epilogue_args(**change):
    """Valid epilogue arguments (one (4, 8) GEMM part, 2 groups) with `change` applied."""
    args = dict(parts=[torch.randn(4, 8)], part_scales=[1.0], row_scale=None, col_scale=None,
                linear_bias=torch.randn(8), bias=torch.randn(8), gn_weight=torch.randn(8), gn_bias=torch.randn(8),
                num_groups=2, eps=1e-5)
    args.update(change)
    return tuple(args.values())


EPILOGUE_CASES = {
    "too many parts": (dict(parts=[torch.randn(4, 8)] * 9, part_scales=[1.0] * 9),
                       "p94 epilogue: expected 1 to 8 GEMM parts, got 9"),
    "scales": (dict(parts=[torch.randn(4, 8)] * 2), "p94 epilogue: got 2 parts but 1 part scales"),
    "3-D part": (dict(parts=[torch.randn(4, 8, 1)]), "p94 epilogue: expected 2-D GEMM parts, got shape [4, 8, 1]"),
    "parts differ": (dict(parts=[torch.randn(4, 8), torch.randn(4, 6)], part_scales=[1.0, 1.0]),
                     "p94 epilogue: GEMM parts differ in shape: [4, 8] and [4, 6]"),
    "float64 part": (dict(parts=[torch.randn(4, 8, dtype=torch.float64)]),
                     "p94 epilogue: expected float32 GEMM parts, got Double"),
    "part device": (dict(parts=[torch.randn(4, 8), torch.randn(4, 8, device="meta")], part_scales=[1.0, 1.0]),
                    "Expected all tensors to be on the same device, but found cpu and meta"),
    "num_groups 0": (dict(num_groups=0), "Expected num groups to be greater than 0, got 0"),
    "groups": (dict(num_groups=3), "Expected number of channels in input to be divisible by num_groups, but got "
                                   "input of shape [4, 8] and num_groups=3"),
    "row_scale length": (dict(row_scale=torch.ones(3)), "p94 epilogue: expected row_scale of shape [4], got [3]"),
    "linear_bias length": (dict(linear_bias=torch.randn(7)),
                           "p94 epilogue: expected linear_bias of shape [8], got [7]"),
    "gn_bias dtype": (dict(gn_bias=torch.randn(8, dtype=torch.float64)),
                      "p94 epilogue: expected gn_bias to be float32, got Double"),
    "bias device": (dict(bias=torch.randn(8, device="meta")),
                    "Expected all tensors to be on the same device, but found cpu and meta (bias)"),
    "col_scale strided": (dict(col_scale=torch.ones(16)[::2]), "p94 epilogue: expected col_scale to be contiguous"),
}


@pytest.mark.parametrize("case", list(EPILOGUE_CASES))
def test_p94_epilogue_messages(p94, case):
    change, message = EPILOGUE_CASES[case]
    with raises(RuntimeError, message):
        p94["epilogue"](*_epilogue_args(**change))


# ----------------------------------------------------------------------------- CUDA kernels and their checks

@pytest.mark.cuda
def test_cuda_kernel_messages(core, p92, p94):
    """The checks the CUDA kernels run (shared ones with CUDA devices in the words, and CUDA-only ones)."""
    ns = group_norm_cpu.OP_NAMESPACE
    backward = kernel(ns, "group_norm_backward", "cuda")
    cuda = dict(grad_out=torch.randn(2, 6, 5, device="cuda"), input=torch.randn(2, 6, 5, device="cuda"),
                mean=torch.zeros(2, 3, device="cuda"), rstd=torch.ones(2, 3, device="cuda"),
                weight=torch.ones(6, device="cuda"))
    with raises(RuntimeError, "group_norm_backward: expected grad_out on cuda:0 (the input's device), but got cpu"):
        backward(*_backward_args(**dict(cuda, grad_out=torch.randn(2, 6, 5))))
    with raises(RuntimeError, "group_norm_backward: expected mean of shape [2, 3], but got [3, 2]"):
        backward(*_backward_args(**dict(cuda, mean=torch.zeros(3, 2, device="cuda"))))
    with raises(NotImplementedError, "\"group_norm_backward_cuda\" not implemented for 'Int'"):
        backward(*_backward_args(**dict(cuda, input=torch.ones(2, 6, 5, dtype=torch.int32, device="cuda"),
                                        grad_out=torch.ones(2, 6, 5, dtype=torch.int32, device="cuda"))))

    fused = kernel(level2_92_kernels.OP_NAMESPACE, "fused_forward", "cuda")
    x = torch.rand(1, 4, 6, 6, device="cuda")
    with raises(RuntimeError, "p92 fused_forward_cuda: at most 128 output channels, got 136"):
        fused(*_p92_args(x=x, weight=torch.rand(136, 4, 3, 3, device="cuda"), bias=torch.rand(136, device="cuda"),
                         gn_weight=torch.rand(136, device="cuda"), gn_bias=torch.rand(136, device="cuda")))
    with raises(RuntimeError, "Expected all tensors to be on the same device, but found cuda:0 and cpu"):
        fused(*_p92_args(x=x, weight=torch.rand(8, 4, 3, 3, device="cuda"), bias=torch.rand(8, device="cuda"),
                         gn_weight=torch.rand(8, device="cuda"), gn_bias=torch.rand(8)))

    epilogue = kernel(level2_94_kernels.OP_NAMESPACE, "epilogue", "cuda")
    vectors = {name: torch.randn(8, device="cuda") for name in ("linear_bias", "bias", "gn_weight", "gn_bias")}
    with raises(RuntimeError, "Expected all tensors to be on the same device, but found cuda:0 and cpu (gn_bias)"):
        epilogue(*_epilogue_args(parts=[torch.randn(4, 8, device="cuda")], **dict(vectors, gn_bias=torch.randn(8))))
    split_rows = kernel(level2_94_kernels.OP_NAMESPACE, "split_rows", "cuda")
    with raises(RuntimeError, "p94 split_rows: format must be 0 (tf32) or 1 (float16), got 5"):
        split_rows(torch.rand(2, 3, device="cuda"), 5, False)


# ------------------------------------------------------------------------------------ the sources themselves

SCANNER_CASES = {
    # (C++ text, reported?)
    'TORCH_CHECK(ok);': False,
    'TORCH_CHECK(ok, "plain text");': False,
    'TORCH_CHECK(ok, "adjacent " "literals");': False,
    'TORCH_CHECK(ok, "two", "literal arguments");': False,
    'TORCH_CHECK(ok, "it\'s (a", "), b");': False,
    'TORCH_CHECK(std::is_same_v<A, B>, "template commas");': False,
    'TORCH_CHECK(f(a, b) < 3 && c > 2, "comparisons");': False,
    'TORCH_CHECK(n<3, "a comparison written without spaces");': False,
    'TORCH_CHECK(ok, gn_inline_msg::cat("n=", n, " shape ", gn_inline_msg::shape(x.sizes())));': False,
    'TORCH_CHECK_NOT_IMPLEMENTED(ok, gn_inline_msg::not_implemented_for("op", t));': False,
    'TORCH_CHECK(ok, std::string(name));': False,
    'TORCH_WARN("literal only");': False,
    '// TORCH_CHECK(ok, "commented out ", n);': False,
    'const char* s = "TORCH_CHECK(ok, n)";': False,
    '/* TORCH_CHECK(ok, "n=",\n n); */': False,
    'TORCH_CHECK(ok, "n=", n);': True,
    'TORCH_CHECK(ok, "shape ", x.sizes());': True,
    'TORCH_CHECK(ok, x.sizes());': True,
    'TORCH_CHECK(ok, n);': True,
    'TORCH_CHECK(ok, gn_inline_msg::cat("n=", n), " more");': True,
    'TORCH_CHECK(ok, "n=", gn_inline_msg::cat(n));': True,
    # Stream-free, but the scan takes one call as the whole message: written as one gn_inline_msg::cat instead.
    'TORCH_CHECK(ok, std::string("a") + name);': True,
    'TORCH_CHECK(std::is_same_v<A, B>, "n=", n);': True,
    'TORCH_CHECK_VALUE(ok, "n=", n);': True,
    'TORCH_INTERNAL_ASSERT(ok, "n=", n);': True,
    'TORCH_WARN("n=", n);': True,
    'AT_ERROR("n=", n);': True,
    'TORCH_CHECK_EQ(a, b);': True,
    'std::string s = c10::str("n=", n);': True,
    'std::ostringstream out;': True,
    '#include <sstream>': True,
    'AT_DISPATCH_FLOATING_TYPES(t, "op", [&] { run<scalar_t>(); });': True,
    'TORCH_CHECK_NOT_IMPLEMENTED(ok, gn_inline_msg::not_implemented_for("op", t));\n'
    'AT_DISPATCH_FLOATING_TYPES(t, "op", [&] { run<scalar_t>(); });': False,
}


@pytest.mark.parametrize("text", list(SCANNER_CASES))
def test_scanner_reports_stream_messages_only(text):
    found = stream_messages(text)
    assert bool(found) == SCANNER_CASES[text], [f.text for f in found]


def test_sources_format_no_message_through_a_stream():
    """Every C++/CUDA source string of the package, CUDA files included (one test, so that `-k "not cuda"`
    keeps it)."""
    paths = sorted(CSRC.glob("*.py"))
    assert {"group_norm_cuda.py", "group_norm_streamed_cuda.py", "level2_94_cpu.py"} <= {p.name for p in paths}
    findings = [finding for path in paths for finding in scan_python_sources(path)]
    assert not findings, "messages formatted through a stream:\n" + "\n".join(findings)


@pytest.mark.parametrize("spec", list(SPECS))
def test_every_source_that_builds_messages_carries_the_header(spec):
    """Each source string is complete on its own: the helpers are defined before their first use."""
    ext = SPECS[spec]
    guard = "#define GN_INLINE_MESSAGE_HEADER"
    for i, source in enumerate(ext.cpp_sources + ext.cuda_sources):
        first_use = source.find("gn_inline_msg::")
        if first_use >= 0:
            assert 0 <= source.find(guard) < first_use, f"{spec} source {i} uses gn_inline_msg:: before the header"
    assert guard in MESSAGE_HEADER

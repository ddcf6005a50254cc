"""Bad input raises a Python exception whose message names the problem, as torch.nn.functional.group_norm does.

Each row gives the exception we raise and a regex its message must match, and what F.group_norm raises for
the same call: where the types agree and the row says "same words", PyTorch's own message matches the regex
too (we reuse its wording); where they differ, the comment says why.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import groupnorm_inline
from groupnorm_inline import group_norm, group_norm_with_stats
from utils import assert_bitwise_equal


def _x(*shape, dtype=torch.float32, device="cpu"):
    return torch.randn(shape, dtype=torch.float64).to(dtype=dtype, device=device)


class Case:
    def __init__(self, make, error, match, torch_error, same_words=False):
        self.make = make                  # () -> (input, num_groups, weight, bias)
        self.error = error                # what we raise
        self.match = match                # regex our message must match
        self.torch_error = torch_error    # what F.group_norm raises (None: it does not raise)
        self.same_words = same_words      # PyTorch's message matches `match` too


CASES = {
    # --- groups
    "C not divisible by num_groups": Case(
        lambda: (_x(2, 6, 5), 4, None, None), RuntimeError,
        r"Expected number of channels in input to be divisible by num_groups, but got input of shape \[2, 6, 5\] "
        r"and num_groups=4", RuntimeError, same_words=True),
    "num_groups = 0": Case(  # F.group_norm divides by num_groups in Python first: ZeroDivisionError
        lambda: (_x(2, 6, 5), 0, None, None), RuntimeError, r"Expected num groups to be greater than 0, got 0",
        ZeroDivisionError),
    "num_groups < 0": Case(
        lambda: (_x(2, 6, 5), -3, None, None), RuntimeError, r"Expected num groups to be greater than 0, got -3",
        RuntimeError, same_words=True),
    "num_groups a float": Case(
        lambda: (_x(2, 6, 5), 3.0, None, None), TypeError, r"num_groups must be an int, got float", TypeError),
    # --- input rank and extents
    "1-D input": Case(
        lambda: (_x(6), 3, None, None), RuntimeError,
        r"Expected at least 2 dimensions for input tensor but received 1", RuntimeError, same_words=True),
    "0-D input": Case(
        lambda: (_x(), 1, None, None), RuntimeError,
        r"Expected at least 2 dimensions for input tensor but received 0", RuntimeError, same_words=True),
    "C == 0": Case(
        lambda: (_x(2, 0, 5), 1, None, None), RuntimeError, r"Expected number of channels to be greater than 0, got 0",
        RuntimeError, same_words=True),
    "HxW == 0": Case(
        lambda: (_x(2, 6, 0), 3, None, None), RuntimeError, r"Expected HxW to be greater than 0, got 0",
        RuntimeError, same_words=True),
    "HxW == 0 with N == 0": Case(
        lambda: (_x(0, 6, 4, 0), 3, None, None), RuntimeError, r"Expected HxW to be greater than 0, got 0",
        RuntimeError, same_words=True),
    "one value per group (N = 1, C = G, no trailing dims)": Case(
        lambda: (_x(1, 3), 3, None, None), ValueError,
        r"Expected more than 1 value per channel when training, got input size \[1, 3\]", ValueError,
        same_words=True),
    # --- dtypes. PyTorch fails inside its kernel dispatch (NotImplementedError "... not implemented for 'Int'");
    # we refuse before dispatch with a TypeError naming the dtypes the operator takes.
    "int32 input": Case(
        lambda: (torch.ones(2, 6, 5, dtype=torch.int32), 3, None, None), TypeError,
        r"expected a floating-point input \(float16, bfloat16, float32 or float64\), but got torch.int32",
        NotImplementedError),
    "int64 input": Case(
        lambda: (torch.ones(2, 6, 5, dtype=torch.int64), 3, None, None), TypeError, r"but got torch.int64",
        NotImplementedError),
    "bool input": Case(
        lambda: (torch.ones(2, 6, 5, dtype=torch.bool), 3, None, None), TypeError, r"but got torch.bool",
        NotImplementedError),
    "complex64 input": Case(
        lambda: (_x(2, 6, 5, dtype=torch.complex64), 3, None, None), TypeError, r"but got torch.complex64",
        NotImplementedError),
    "complex128 input": Case(
        lambda: (_x(2, 6, 5, dtype=torch.complex128), 3, None, None), TypeError, r"but got torch.complex128",
        NotImplementedError),
    # --- weight / bias shape
    "weight of the wrong length": Case(
        lambda: (_x(2, 6, 5), 3, torch.ones(5), None), RuntimeError,
        r"Expected weight to be a vector of size equal to the number of channels in input, but got weight of "
        r"shape \[5\] and input of shape \[2, 6, 5\]", RuntimeError, same_words=True),
    "weight 2-D": Case(
        lambda: (_x(2, 6, 5), 3, torch.ones(6, 1), None), RuntimeError,
        r"Expected weight to be a vector .* got weight of shape \[6, 1\]", RuntimeError, same_words=True),
    "weight 0-D": Case(
        lambda: (_x(2, 6, 5), 3, torch.tensor(1.0), None), RuntimeError,
        r"Expected weight to be a vector .* got weight of shape \[\]", RuntimeError, same_words=True),
    "bias of the wrong length": Case(
        lambda: (_x(2, 6, 5), 3, torch.ones(6), torch.zeros(7)), RuntimeError,
        r"Expected bias to be a vector of size equal to the number of channels in input, but got bias of "
        r"shape \[7\] and input of shape \[2, 6, 5\]", RuntimeError, same_words=True),
    # --- weight / bias dtype. PyTorch: "mixed dtype (CPU): expect parameter to have scalar type of Float".
    "float64 weight, float32 input": Case(
        lambda: (_x(2, 6, 5), 3, torch.ones(6, dtype=torch.float64), None), RuntimeError,
        r"expected weight to have dtype torch.float32 for an input of dtype torch.float32, but got torch.float64",
        RuntimeError),
    "float16 bias, float32 input": Case(
        lambda: (_x(2, 6, 5), 3, None, torch.zeros(6, dtype=torch.float16)), RuntimeError,
        r"expected bias to have dtype torch.float32 for an input of dtype torch.float32, but got torch.float16",
        RuntimeError),
    "bfloat16 weight, float16 input": Case(
        lambda: (_x(2, 6, 5, dtype=torch.float16), 3, torch.ones(6, dtype=torch.bfloat16), None), RuntimeError,
        r"expected weight to have dtype torch.float16 or torch.float32 for an input of dtype torch.float16, "
        r"but got torch.bfloat16", RuntimeError),
    "int64 weight": Case(
        lambda: (_x(2, 6, 5), 3, torch.ones(6, dtype=torch.int64), None), RuntimeError,
        r"expected weight to have dtype torch.float32 .* but got torch.int64", RuntimeError),
    "float32 weight, float64 input": Case(
        lambda: (_x(2, 6, 5, dtype=torch.float64), 3, torch.ones(6), None), RuntimeError,
        r"expected weight to have dtype torch.float64 for an input of dtype torch.float64, but got torch.float32",
        RuntimeError),
    # --- devices ('meta' stands in for a second device on a CPU-only machine).
    # PyTorch: "Tensor on device meta is not on the expected device cpu!"
    "weight on another device": Case(
        lambda: (_x(2, 6, 5), 3, torch.ones(6, device="meta"), None), RuntimeError,
        r"Expected all tensors to be on the same device, but found at least two devices, cpu \(input\) and "
        r"meta \(weight\)", RuntimeError),
    "bias on another device": Case(
        lambda: (_x(2, 6, 5), 3, torch.ones(6), torch.zeros(6, device="meta")), RuntimeError,
        r"Expected all tensors to be on the same device, .* cpu \(input\) and meta \(bias\)", RuntimeError),
    # The operator computes on CPU and CUDA only; PyTorch would return a meta tensor here.
    "input on the meta device": Case(
        lambda: (_x(2, 6, 5, device="meta"), 3, None, None), RuntimeError,
        r"inputs on meta are not supported \(CPU and CUDA only\)", None),
    # --- not tensors
    "input a list": Case(
        lambda: ([[1.0, 2.0], [3.0, 4.0]], 1, None, None), TypeError, r"expected input to be a Tensor, got list",
        AttributeError),  # F.group_norm calls input.dim()
    "weight a list": Case(
        lambda: (_x(2, 6, 5), 3, [1.0] * 6, None), TypeError, r"expected weight to be a Tensor or None, got list",
        TypeError),
}


@pytest.mark.parametrize("case", list(CASES))
def test_bad_input_raises(case):
    spec = CASES[case]
    x, num_groups, weight, bias = spec.make()
    x_before = x.clone() if isinstance(x, torch.Tensor) and x.device.type != "meta" else None
    with pytest.raises(spec.error, match=spec.match):
        group_norm(x, num_groups, weight, bias)
    with pytest.raises(spec.error, match=spec.match):
        group_norm_with_stats(x, num_groups, weight, bias)
    if x_before is not None:
        assert_bitwise_equal(x, x_before, "input")


# In inference mode the operator's autograd layer is skipped and the CPU kernel is called directly: it runs the
# same checks. (A meta tensor there reaches the fake kernel, which refuses it alike.)
@pytest.mark.parametrize("case", list(CASES))
def test_bad_input_raises_in_inference_mode(case):
    spec = CASES[case]
    x, num_groups, weight, bias = spec.make()
    with torch.inference_mode(), pytest.raises(spec.error, match=spec.match):
        group_norm(x, num_groups, weight, bias)


@pytest.mark.parametrize("case", ["C not divisible by num_groups", "weight of the wrong length",
                                  "float64 weight, float32 input", "one value per group (N = 1, C = G, no trailing dims)"])
def test_bad_input_raises_from_the_operator(case):
    """The operator itself (torch.ops, no Python wrapper) refuses with the same words and exception types."""
    spec = CASES[case]
    x, num_groups, weight, bias = spec.make()
    with pytest.raises(spec.error, match=spec.match):
        torch.ops.groupnorm_inline.group_norm_forward(x, num_groups, weight, bias, 1e-5)
    with pytest.raises(spec.error, match=spec.match):
        groupnorm_inline.functional.check_group_norm_args(x, num_groups, weight, bias)


@pytest.mark.parametrize("case", [c for c in CASES if CASES[c].torch_error is not None])
def test_pytorch_raises_alike(case):
    """Pins what F.group_norm does for each row, so the table above stays true across torch versions."""
    if tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2]) < (2, 14):
        # Measured on torch 2.11 (an H200 host): F.group_norm accepts C == 0 and HxW == 0 and names the
        # input's channel count as the bias's shape. The table pins the torch the package is tested with.
        pytest.skip("the table pins torch 2.14's F.group_norm; older versions differ on some rows")
    spec = CASES[case]
    x, num_groups, weight, bias = spec.make()
    with pytest.raises(spec.torch_error) as torch_raised:
        F.group_norm(x, num_groups, weight, bias)
    if spec.same_words:
        assert spec.error is spec.torch_error
        assert torch_raised.match(spec.match)


def test_module_rejects_what_nn_groupnorm_rejects():
    with pytest.raises(ValueError, match="num_channels.* must be divisible by num_groups") as ours:
        groupnorm_inline.GroupNorm(4, 6)
    with pytest.raises(ValueError) as theirs:
        torch.nn.GroupNorm(4, 6)
    assert str(ours.value) == str(theirs.value)
    module = groupnorm_inline.GroupNorm(3, 6)
    with pytest.raises(RuntimeError, match=r"divisible by num_groups, but got input of shape \[2, 10, 5\]"):
        module(_x(2, 10, 5))  # 10 channels, 3 groups
    with pytest.raises(RuntimeError, match=r"Expected weight to be a vector .* input of shape \[2, 12, 5\]"):
        module(_x(2, 12, 5))  # the groups fit, but the module holds 6 channels


@pytest.mark.cuda
def test_cuda_input_with_cpu_weight():
    x = _x(2, 6, 5, device="cuda")
    with pytest.raises(RuntimeError, match=r"same device, but found at least two devices, cuda:0 \(input\) and "
                                           r"cpu \(weight\)"):
        group_norm(x, 3, torch.ones(6), torch.zeros(6, device="cuda"))
    with pytest.raises(RuntimeError, match=r"cuda:0 \(input\) and cpu \(bias\)"):
        group_norm(x, 3, torch.ones(6, device="cuda"), torch.zeros(6))
    with pytest.raises(RuntimeError, match="device"):  # PyTorch refuses the same mix
        F.group_norm(x, 3, torch.ones(6), torch.zeros(6))


@pytest.mark.cuda
def test_cuda_input_without_cuda_kernels(monkeypatch):
    """A build without the CUDA kernels (no toolkit, or GROUPNORM_INLINE_NO_CUDA) says so for a CUDA tensor."""
    monkeypatch.setattr(groupnorm_inline.extension, "has_cuda_kernels", lambda: False)
    with pytest.raises(RuntimeError, match="got a CUDA tensor, but the CUDA kernels were not built"):
        group_norm(_x(2, 6, 5, device="cuda"), 3)

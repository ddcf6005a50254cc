"""What the tooling needs per problem beyond `groupnorm_inline.problems`.

A recipe names, for one problem:

* `extension_specs`: where the package's `ExtensionSpec`s live ("module:attribute"), whose sources the
  single-file export embeds. They are looked up when needed, so sources added to a spec flow into every
  export without touching this file; the module must build nothing at import (`list`, `show-config`
  and `export` import it);
* the export's Python, one of:
  - `model_module`: the problem module whose `ModelNew` the export carries, generated from the package's
    own source by `python_glue` together with every helper it needs (constants, GEMM helpers, context
    managers from the kernels module), so an edit there flows into the export with nothing to update here;
  - `model_source`: hand-written Python (`ModelNew` on the operators as `torch.ops.<package namespace>`)
    for a problem whose package `ModelNew` builds on layers the export does not carry (#35 uses the
    package's autograd-aware `GroupNorm` module, the export needs only its forward).
  Either way `ModelNew` has the same constructor arguments and `state_dict` keys as `Model` and draws its
  parameters from the global RNG in the same order; the exporter renames the operator namespaces together
  with the C++ ones. Only Python glue lives here, never a kernel;
* `small_constants`: module constants that shrink the problem for `eval --small` (a CPU smoke run, or a
  quick GPU check) and for the CPU tests of the exports; every constant derived from a changed one must
  be listed too.

To make a new problem exportable, add its recipe to `RECIPES` under its key in `groupnorm_inline.problems`.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field

from ..problems import PROBLEMS, ProblemInfo
from .errors import EXIT_USAGE, CliError


@dataclass(frozen=True)
class ProblemRecipe:
    extension_specs: tuple[str, ...]     # "module:attribute" of each ExtensionSpec, e.g. "groupnorm_inline.extension:SPEC"
    model_source: str = ""               # hand-written export Python, or
    model_module: str = ""               # the module whose ModelNew the export carries, generated
    small_constants: dict = field(default_factory=dict)

    def __post_init__(self):
        if bool(self.model_source) == bool(self.model_module):
            raise ValueError("a recipe names exactly one of model_source and model_module")

    def model_python(self) -> tuple[tuple[str, ...], str]:
        """(import lines, text) of the export's Python: ModelNew and what it needs."""
        if self.model_source:
            return (), self.model_source
        from . import python_glue

        return python_glue.model_new_source(self.model_module)

    def extensions(self):
        """The ExtensionSpec objects, imported now (importing them builds nothing)."""
        specs = []
        for ref in self.extension_specs:
            module, _, attribute = ref.partition(":")
            specs.append(getattr(importlib.import_module(module), attribute))
        return tuple(specs)


# Level 1 #35: one GroupNorm. nn.GroupNorm's parameters are ones and zeros (no RNG draw), so only the
# state_dict keys must match: `gn.weight`, `gn.bias`.
_GROUP_NORM_MODEL = r'''
class GroupNormKernel(nn.Module):
    """nn.GroupNorm's parameters and defaults (weight 1, bias 0, eps 1e-5), computed by the kernels above.

    x: (N, C, *) float16/bfloat16/float32/float64 on the GPU (or the CPU, by the C++ kernels);
    returns a new contiguous tensor of x's shape and dtype; x is never written.
    """

    def __init__(self, num_groups: int, num_channels: int, eps: float = 1e-5):
        super().__init__()
        if num_groups <= 0 or num_channels % num_groups != 0:
            raise ValueError(f"num_channels ({num_channels}) must be divisible by num_groups ({num_groups})")
        self.num_groups = num_groups
        self.num_channels = num_channels
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(num_channels))
        self.bias = nn.Parameter(torch.zeros(num_channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # The kernels read a contiguous (N, C, H*W) buffer; .contiguous() costs nothing when it already is.
        y, _mean, _rstd = torch.ops.groupnorm_inline.group_norm_forward(
            x.contiguous(), self.num_groups, self.weight, self.bias, self.eps)
        return y


class ModelNew(nn.Module):
    """KernelBench's Model (one nn.GroupNorm under the name `gn`) on the inline kernels."""

    def __init__(self, num_features: int, num_groups: int):
        super().__init__()
        self.gn = GroupNormKernel(num_groups=num_groups, num_channels=num_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.gn(x)
'''

RECIPES: dict[str, ProblemRecipe] = {
    "1/35": ProblemRecipe(
        extension_specs=("groupnorm_inline.extension:SPEC",),
        model_source=_GROUP_NORM_MODEL,
        # (2, 64, 30, 30), 8 groups: 1.8e5 elements, slices of 7200 with an odd H*W.
        small_constants={"batch_size": 2, "dim1": 30, "dim2": 30},
    ),
    # Level 2 #94: ModelNew with its default GEMM (the operand split with the cached weight split, cuBLAS
    # precision handled by CublasFloat32Mode), all from the package's modules.
    "2/94": ProblemRecipe(
        # The family operator serves KernelBench's float16/bfloat16 precision option.
        extension_specs=("groupnorm_inline.problems.level2_94_kernels:EXTENSION",
                         "groupnorm_inline.problems.family_kernels:EXTENSION"),
        model_module="groupnorm_inline.problems.level2_94_gemm_mish_group_norm",
        # x (6, 96), Linear 96 -> 256, 8 groups of 32 channels (the problem's group width).
        small_constants={"batch_size": 6, "in_features": 96, "out_features": 256, "bias_shape": (256,),
                         "num_groups": 8},
    ),
    # Level 2 #92: ModelNew on the fused operator, from the package's modules (the CUDA kernel is tuned
    # there; every export carries its current state).
    "2/92": ProblemRecipe(
        extension_specs=("groupnorm_inline.problems.level2_92_kernels:EXTENSION",),
        model_module="groupnorm_inline.problems.level2_92_conv_group_norm_logsumexp",
        # x (2, 8, 21, 19): the problem's channels and groups, an odd 19 x 17 output image.
        small_constants={"batch_size": 2, "height": 21, "width": 19},
    ),
}

# The GroupNorm family (problems/family.py): each ModelNew is generated from its problem module, with the
# family's Python helpers and the family operator's extension. Small shapes keep each problem's group layout
# where they can and give odd sizes (tests/test_kernelbench_family.py checks them against float64 too).
_FAMILY_SPEC = ("groupnorm_inline.problems.family_kernels:EXTENSION",)
_FAMILY_SMALL = {
    "2/11": {"batch_size": 3, "in_channels": 3, "out_channels": 16, "height": 6, "width": 6, "num_groups": 4},
    "2/19": {"batch_size": 2, "in_channels": 4, "out_channels": 16, "height": 9, "width": 9, "num_groups": 4},
    "2/21": {"batch_size": 2, "in_channels": 3, "out_channels": 16, "height": 11, "width": 11, "num_groups": 4,
             "bias_shape": (16, 1, 1), "scale_shape": (16, 1, 1)},
    "2/23": {"batch_size": 3, "in_channels": 3, "out_channels": 12, "D": 5, "H": 7, "W": 6, "num_groups": 4},
    "2/27": {"batch_size": 3, "in_channels": 3, "out_channels": 8, "depth": 6, "height": 7, "width": 8},
    "2/30": {"batch_size": 5, "in_features": 40, "out_features": 96, "num_groups": 3},
    "2/37": {"batch_size": 5, "in_features": 24, "out_features": 128, "num_groups": 2, "bias_shape": (128,)},
    "2/60": {"batch_size": 2, "in_channels": 3, "out_channels": 8, "depth": 3, "height": 5, "width": 4},
    "2/61": {"batch_size": 2, "in_channels": 4, "out_channels": 16, "D": 3, "H": 4, "W": 5, "groups": 4},
    "2/62": {"batch_size": 4, "input_size": 48, "hidden_size": 64, "num_groups": 4},
    "2/75": {"batch_size": 4, "in_features": 40, "out_features": 64, "num_groups": 4, "bias_shape": (1, 64, 1, 1)},
    "2/83": {"batch_size": 2, "in_channels": 3, "out_channels": 8, "depth": 4, "height": 6, "width": 7, "groups": 4},
    "2/85": {"batch_size": 2, "in_channels": 3, "out_channels": 16, "height": 13, "width": 15, "num_groups": 4,
             "scale_shape": (16, 1, 1)},
    "2/88": {"batch_size": 4, "in_features": 40, "out_features": 64, "num_groups": 4, "multiply_weight_shape": (64,)},
}
# The problems served by the family operator (their ModelNew is built on problems/family.py).
FAMILY_KEYS = tuple(_FAMILY_SMALL)
# The Linear problems run #94's GEMM variants (problems/split_gemm.py): the #94 extension comes first.
_SPLIT_GEMM_SPECS = ("groupnorm_inline.problems.level2_94_kernels:EXTENSION",) + _FAMILY_SPEC
_LINEAR_PROBLEMS = ("2/30", "2/37", "2/62", "2/75", "2/88")
for _key, _small in _FAMILY_SMALL.items():
    RECIPES[_key] = ProblemRecipe(extension_specs=_SPLIT_GEMM_SPECS if _key in _LINEAR_PROBLEMS else _FAMILY_SPEC,
                                  model_module=f"groupnorm_inline.problems.{PROBLEMS[_key].module}",
                                  small_constants=_small)



def recipe_for(info: ProblemInfo) -> ProblemRecipe:
    recipe = RECIPES.get(info.key)
    if recipe is None:
        have = ", ".join(sorted(RECIPES)) or "none"
        raise CliError(f"problem {info.key} ({info.file_name}) has no export recipe yet (problems with one: {have})",
                       EXIT_USAGE)
    return recipe

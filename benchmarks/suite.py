"""The benchmark rows: which shapes, group counts and dtypes are timed, and how a command line selects them.

Forward rows cover the shapes GroupNorm meets in practice: KernelBench level 1 #35 (new and old shapes),
diffusion U-Net blocks, a 5-D video block, the 2-D activations of level 2 #94, the conv output of level 2
#92, a spatial size that is not a multiple of 4, and one group over a large single sample.
"""

from __future__ import annotations

import ast
import math
from dataclasses import dataclass

import torch

DTYPE_NAMES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16, "fp64": torch.float64}


def dtype_name(dtype: torch.dtype) -> str:
    return next(name for name, d in DTYPE_NAMES.items() if d == dtype)


@dataclass(frozen=True)
class Case:
    """One GroupNorm problem to time: input (N, C, *) of `shape`, `groups` groups, `dtype`."""
    shape: tuple[int, ...]
    groups: int
    dtype: torch.dtype
    about: str = ""   # what the row stands for

    @property
    def label(self) -> str:
        return f"({','.join(map(str, self.shape))}) G{self.groups} {dtype_name(self.dtype)}"

    @property
    def shape_text(self) -> str:
        return "x".join(map(str, self.shape))

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def tensor_bytes(self) -> int:
        return self.numel * torch.empty((), dtype=self.dtype).element_size()


def _rows(spec: list[tuple[tuple[int, ...], int, tuple[str, ...], str]]) -> list[Case]:
    return [Case(shape, groups, DTYPE_NAMES[d], about) for shape, groups, dtypes, about in spec for d in dtypes]


# (shape, groups, dtypes, what the row stands for)
FORWARD_ROWS: list[Case] = _rows([
    ((112, 64, 512, 512), 8, ("fp32", "bf16", "fp16"), "KernelBench L1 #35, 7.5 GB in fp32"),
    ((16, 64, 256, 256), 8, ("fp32", "bf16"), "L1 #35 before July 2025"),
    ((32, 256, 64, 64), 32, ("fp32", "bf16"), "U-Net block"),
    ((8, 320, 64, 64), 32, ("fp32",), "Stable Diffusion block, 64x64 latents"),
    ((8, 1280, 16, 16), 32, ("fp32",), "Stable Diffusion, deepest block"),
    ((4, 128, 16, 64, 64), 32, ("fp32",), "5-D video block"),
    ((1024, 8192), 256, ("fp32",), "L2 #94 activations, no spatial dims"),
    ((128, 64, 126, 126), 16, ("fp32",), "L2 #92 conv output"),
    ((2, 64, 1000, 1000), 8, ("fp32",), "spatial size not a multiple of 4"),
    ((1, 32, 2048, 2048), 1, ("fp32",), "one group, one large sample"),
])

# Forward + backward rows (issue: training). The first is half of #35's batch, as a training step holds
# x, dy, y and dx at once.
BACKWARD_ROWS: list[Case] = _rows([
    ((56, 64, 512, 512), 8, ("fp32",), "half of L1 #35's batch"),
    ((16, 64, 256, 256), 8, ("fp32",), "L1 #35 before July 2025"),
    ((32, 256, 64, 64), 32, ("fp32",), "U-Net block"),
    ((8, 320, 64, 64), 32, ("fp32",), "Stable Diffusion block"),
    ((128, 64, 126, 126), 16, ("fp32",), "L2 #92 conv output"),
])

# Tiny shapes for --cpu-smoke: every kind of row (4-D, 5-D, 2-D, odd sizes, G = 1, G = C) in well under a
# second, so CI and GPU-less machines can run the whole pipeline.
CPU_SMOKE_FORWARD_ROWS: list[Case] = _rows([
    ((2, 8, 6, 6), 2, ("fp32", "bf16"), "4-D"),
    ((3, 6, 5, 7), 3, ("fp32",), "odd spatial sizes"),
    ((2, 4, 3, 4, 5), 1, ("fp32",), "5-D, one group"),
    ((16, 64), 64, ("fp32",), "2-D, G = C"),
])
CPU_SMOKE_BACKWARD_ROWS: list[Case] = _rows([
    ((2, 8, 6, 6), 2, ("fp32",), "4-D"),
])

# Level 2 KernelBench problems timed with their own Model/ModelNew (keys of groupnorm_inline.problems.PROBLEMS).
PROBLEM_KEYS = ("2/94", "2/92")


def parse_dtypes(text: str | None) -> set[torch.dtype] | None:
    """"fp32,bf16" -> {float32, bfloat16}; None keeps every dtype."""
    if not text:
        return None
    names = [t.strip().lower() for t in text.split(",") if t.strip()]
    unknown = [n for n in names if n not in DTYPE_NAMES]
    if unknown:
        raise ValueError(f"unknown dtype(s) {unknown}; choose from {sorted(DTYPE_NAMES)}")
    return {DTYPE_NAMES[n] for n in names}


def _normalised(text: str) -> str:
    return text.replace(" ", "").lower()


def select(rows: list[Case], row_filter: str | None, dtypes: set[torch.dtype] | None) -> list[Case]:
    """Rows of the chosen dtypes whose label (spaces removed, lower case) contains any of the ';'-separated
    substrings of `row_filter`, e.g. "112,64,512;g32" (None keeps every row)."""
    chosen = [r for r in rows if dtypes is None or r.dtype in dtypes]
    if row_filter:
        needles = [_normalised(n) for n in row_filter.split(";") if n.strip()]
        chosen = [r for r in chosen if any(n in _normalised(r.label) for n in needles)]
    return chosen


def problem_label(key: str) -> str:
    """"2/94" -> "L2 #94"."""
    level, number = key.split("/")
    return f"L{level} #{number}"


def select_problems(row_filter: str | None) -> list[str]:
    """Problem keys whose label ("L2 #94") matches `row_filter` as in `select` (None keeps all)."""
    if not row_filter:
        return list(PROBLEM_KEYS)
    needles = [_normalised(n) for n in row_filter.split(";") if n.strip()]
    return [k for k in PROBLEM_KEYS if any(n in _normalised(problem_label(k)) for n in needles)]


def parse_model_kwargs(specs: list[str] | None) -> list[tuple[str, dict]]:
    """["2/94:gemm=fp32,k_splits=1"] -> [("2/94", {"gemm": "fp32", "k_splits": 1})]. Values are Python
    literals where they parse as one (numbers, True, None, quoted strings), plain strings otherwise."""
    parsed = []
    for spec in specs or []:
        key, sep, assignments = spec.partition(":")
        if not sep or key.strip() not in PROBLEM_KEYS:
            raise ValueError(f"--model-kwargs {spec!r}: expected KEY:name=value[,name=value] with KEY one of "
                             f"{', '.join(PROBLEM_KEYS)}")
        kwargs = {}
        for item in filter(None, (part.strip() for part in assignments.split(","))):
            name, eq, text = item.partition("=")
            if not eq or not name.strip().isidentifier():
                raise ValueError(f"--model-kwargs {spec!r}: {item!r} is not name=value")
            try:
                value = ast.literal_eval(text.strip())
            except (ValueError, SyntaxError):
                value = text.strip()
            kwargs[name.strip()] = value
        if not kwargs:
            raise ValueError(f"--model-kwargs {spec!r}: no name=value given")
        parsed.append((key.strip(), kwargs))
    return parsed


__all__ = ["Case", "FORWARD_ROWS", "BACKWARD_ROWS", "CPU_SMOKE_FORWARD_ROWS", "CPU_SMOKE_BACKWARD_ROWS",
           "PROBLEM_KEYS", "DTYPE_NAMES", "dtype_name", "parse_dtypes", "select", "problem_label", "select_problems", "parse_model_kwargs"]

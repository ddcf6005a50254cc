"""The benchmark rows: which shapes, group counts, dtypes, memory formats and activations are timed, grouped
into families, and how a command line selects them.

The families answer one question (issue: "never slower than PyTorch on any input"): for each kind of input
GroupNorm meets in practice, is ours at least as fast as eager PyTorch, torch.compile and Liger-Kernel, and
how close to a plain copy of the same tensor?

    forward        the original forward rows: KernelBench level 1 #35 (new and old shapes), U-Net blocks, a 5-D
                   video block, level 2 #94's 2-D activations, level 2 #92's conv output, odd sizes, G = 1
    training       forward + backward and backward alone, float32 (the original training rows)
    unet           Stable Diffusion U-Net GroupNorms (batch 1 and 2), float16 in NCHW and channels_last,
                   one shape also in float32 and bfloat16
    vae            VAE decoder GroupNorms at 512..1024 px: few (32) very large slices, float16 channels_last
    video          a 5-D video VAE block (N, C, T, H, W), bfloat16 in channels_last_3d and NCDHW
    small-slices   many small slices (128..256 elements): launch and reduction overhead
    kb35           KernelBench level 1 #35's shape (7.5 GB in float32) in NCHW, channels_last and bfloat16
    gn-silu        GroupNorm + SiLU: ours fused (activation="silu") against eager GroupNorm then SiLU and
                   torch.compile of the same two calls
    training-half  forward + backward in float16/bfloat16, NCHW and channels_last (diffusion training)
"""

from __future__ import annotations

import ast
import math
from dataclasses import dataclass, replace

import torch

DTYPE_NAMES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16, "fp64": torch.float64}
# Memory formats of a row: "contiguous" (NCHW, NCDHW, ...) or "channels_last" (channels_last for 4-D inputs,
# channels_last_3d for 5-D ones; both store C innermost).
MEMORY_FORMATS = ("contiguous", "channels_last")
# Directions: the forward alone, forward + backward (a training step of the layer), the backward alone.
DIRECTIONS = ("forward", "fwd+bwd", "bwd")


def dtype_name(dtype: torch.dtype) -> str:
    return next(name for name, d in DTYPE_NAMES.items() if d == dtype)


@dataclass(frozen=True)
class Case:
    """One GroupNorm problem to time: input (N, C, *) of `shape`, `groups` groups, `dtype`, stored in
    `memory_format`, optionally followed by `activation` (a groupnorm_inline activation name)."""
    shape: tuple[int, ...]
    groups: int
    dtype: torch.dtype
    about: str = ""   # what the row stands for
    memory_format: str = "contiguous"
    activation: str | None = None
    family: str = "forward"

    def __post_init__(self):
        if self.memory_format not in MEMORY_FORMATS:
            raise ValueError(f"memory_format {self.memory_format!r}: expected one of {MEMORY_FORMATS}")
        if self.memory_format == "channels_last" and len(self.shape) not in (4, 5):
            raise ValueError(f"channels_last needs a 4-D or 5-D shape, got {self.shape}")

    @property
    def label(self) -> str:
        text = f"({','.join(map(str, self.shape))}) G{self.groups} {dtype_name(self.dtype)}"
        if self.memory_format == "channels_last":
            text += " CL"
        if self.activation:
            text += f" +{self.activation}"
        return text

    @property
    def layout_name(self) -> str:
        """What the CSV's memory_format column says: NCHW / NCDHW / contiguous, channels_last(_3d)."""
        if self.memory_format == "channels_last":
            return "channels_last_3d" if len(self.shape) == 5 else "channels_last"
        return {4: "NCHW", 5: "NCDHW"}.get(len(self.shape), "contiguous")

    @property
    def torch_memory_format(self) -> torch.memory_format:
        if self.memory_format == "channels_last":
            return torch.channels_last_3d if len(self.shape) == 5 else torch.channels_last
        return torch.contiguous_format

    @property
    def shape_text(self) -> str:
        return "x".join(map(str, self.shape))

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def tensor_bytes(self) -> int:
        return self.numel * torch.empty((), dtype=self.dtype).element_size()


Spec = tuple  # (shape, groups, dtypes, what the row stands for[, memory formats[, activation]])


def _rows(spec: list[Spec], family: str = "forward") -> list[Case]:
    """Cases from (shape, groups, dtypes, about[, memory formats[, activation]]) entries: one per dtype and
    memory format ("nchw" or "cl"), in that order."""
    cases = []
    for entry in spec:
        shape, groups, dtypes, about = entry[:4]
        formats = entry[4] if len(entry) > 4 else ("nchw",)
        activation = entry[5] if len(entry) > 5 else None
        for d in dtypes:
            for f in formats:
                cases.append(Case(shape, groups, DTYPE_NAMES[d], about,
                                  "channels_last" if f == "cl" else "contiguous", activation, family))
    return cases


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
], family="training")

# Stable Diffusion U-Net GroupNorms (32 groups everywhere): SD 1.x at 512 px (64x64 latents, batch 1),
# SDXL-sized feature maps at batch 2 (classifier-free guidance doubles the batch). Inference runs in
# float16; channels_last is what a channels-last U-Net (faster convolutions on tensor cores) hands GroupNorm.
UNET_ROWS: list[Case] = _rows([
    ((1, 320, 64, 64), 32, ("fp16",), "SD U-Net, first block, batch 1", ("nchw", "cl")),
    ((2, 320, 128, 128), 32, ("fp16",), "SDXL-size U-Net, first block, CFG batch 2", ("nchw", "cl")),
    ((2, 320, 128, 128), 32, ("fp32",), "SDXL-size U-Net, first block, float32"),
    ((2, 320, 128, 128), 32, ("bf16",), "SDXL-size U-Net, first block, bfloat16", ("cl",)),
    ((1, 512, 128, 128), 32, ("fp16",), "U-Net / VAE mid block, batch 1", ("nchw", "cl")),
    ((2, 640, 64, 64), 32, ("fp16",), "U-Net second block, CFG batch 2", ("nchw", "cl")),
    ((2, 1280, 32, 32), 32, ("fp16",), "U-Net deepest blocks, CFG batch 2", ("nchw", "cl")),
], family="unet")

# VAE decoder GroupNorms: batch 1, 32 groups of 4-32 million elements each (few, very large slices).
VAE_ROWS: list[Case] = _rows([
    ((1, 128, 512, 512), 32, ("fp16",), "VAE decoder, 512 px output", ("cl", "nchw")),
    ((1, 256, 256, 256), 32, ("fp16",), "VAE decoder, 256 px stage", ("cl",)),
    ((1, 256, 256, 256), 32, ("bf16",), "VAE decoder, 256 px stage, bfloat16"),
    ((1, 128, 1024, 1024), 32, ("fp16",), "VAE decoder, 1024 px output (SDXL)", ("cl",)),
], family="vae")

# A video VAE block (N, C, T, H, W): 5-D, bfloat16; channels_last_3d as a channels-last Conv3d produces it.
VIDEO_ROWS: list[Case] = _rows([
    ((1, 128, 8, 128, 128), 32, ("bf16",), "video VAE block, 8 frames", ("cl", "nchw")),
], family="video")

# Many small slices: 2048 slices of 256 elements, 4096 of 128; per-slice overhead dominates.
SMALL_SLICE_ROWS: list[Case] = _rows([
    ((64, 32, 16, 16), 32, ("fp32",), "2048 slices of 256 elements"),
    ((64, 32, 16, 16), 32, ("fp16",), "2048 slices of 256 elements, channels_last", ("cl",)),
    ((128, 64, 8, 8), 32, ("fp32", "bf16"), "4096 slices of 128 elements", ("nchw", "cl")),
    ((16, 256, 16, 16), 32, ("fp16",), "many samples of a 256-channel layer, channels_last", ("cl",)),
], family="small-slices")

# KernelBench level 1 #35 (input U[0, 1), 8 groups of 2 million elements x 112 samples).
KB35_ROWS: list[Case] = _rows([
    ((112, 64, 512, 512), 8, ("fp32",), "KernelBench L1 #35", ("nchw", "cl")),
    ((112, 64, 512, 512), 8, ("bf16",), "KernelBench L1 #35 in bfloat16"),
], family="kb35")

# GroupNorm followed by SiLU, as every diffusion ResNet block does: ours in one pass (activation="silu").
GN_SILU_ROWS: list[Case] = _rows([
    ((2, 320, 128, 128), 32, ("fp16",), "U-Net ResNet block norm + SiLU", ("nchw", "cl"), "silu"),
    ((2, 1280, 32, 32), 32, ("fp16",), "U-Net deepest ResNet block norm + SiLU", ("cl",), "silu"),
    ((1, 128, 512, 512), 32, ("fp16",), "VAE decoder norm + SiLU", ("cl",), "silu"),
    ((1, 128, 8, 128, 128), 32, ("bf16",), "video VAE norm + SiLU", ("cl",), "silu"),
    ((64, 32, 16, 16), 32, ("fp32",), "many small slices + SiLU", ("nchw",), "silu"),
], family="gn-silu")

# Mixed-precision training of a diffusion model: forward + backward of the layer in float16/bfloat16.
TRAINING_HALF_ROWS: list[Case] = _rows([
    ((2, 320, 128, 128), 32, ("fp16",), "U-Net first block, fp16 training", ("nchw", "cl")),
    ((2, 320, 128, 128), 32, ("bf16",), "U-Net first block, bf16 training", ("cl",)),
    ((2, 640, 64, 64), 32, ("bf16",), "U-Net second block, bf16 training", ("nchw", "cl")),
    ((64, 32, 16, 16), 32, ("fp16",), "many small slices, fp16 training", ("cl",)),
], family="training-half")


@dataclass(frozen=True)
class Family:
    """A named group of rows timed in the same directions."""
    name: str
    rows: tuple[Case, ...]
    directions: tuple[str, ...]
    about: str


def _family(name: str, rows: list[Case], directions: tuple[str, ...], about: str) -> Family:
    return Family(name, tuple(replace(r, family=name) for r in rows), directions, about)


FAMILIES: dict[str, Family] = {f.name: f for f in (
    _family("forward", FORWARD_ROWS, ("forward",), "original forward rows"),
    _family("training", BACKWARD_ROWS, ("fwd+bwd", "bwd"), "float32 forward + backward, backward alone"),
    _family("unet", UNET_ROWS, ("forward",), "diffusion U-Net shapes, fp16 NCHW and channels_last"),
    _family("vae", VAE_ROWS, ("forward",), "VAE decoder shapes: few very large slices"),
    _family("video", VIDEO_ROWS, ("forward",), "5-D video VAE block, bf16"),
    _family("small-slices", SMALL_SLICE_ROWS, ("forward",), "many small slices"),
    _family("kb35", KB35_ROWS, ("forward",), "KernelBench L1 #35 shape, NCHW / channels_last / bf16"),
    _family("gn-silu", GN_SILU_ROWS, ("forward",), "GroupNorm + SiLU, fused vs eager vs compile"),
    _family("training-half", TRAINING_HALF_ROWS, ("fwd+bwd",), "half-precision training, NCHW and channels_last"),
)}
# What `--families all` and the device script run; `forward` and `training` are the original suites.
NEW_FAMILIES = ("unet", "vae", "video", "small-slices", "kb35", "gn-silu", "training-half")

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
], family="training")
# One tiny stand-in per new family: the same columns and code paths as the GPU rows.
CPU_SMOKE_FAMILIES: dict[str, Family] = {f.name: f for f in (
    _family("forward", CPU_SMOKE_FORWARD_ROWS, ("forward",), FAMILIES["forward"].about),
    _family("training", CPU_SMOKE_BACKWARD_ROWS, ("fwd+bwd", "bwd"), FAMILIES["training"].about),
    _family("unet", _rows([((2, 16, 6, 6), 4, ("fp32",), "4-D", ("nchw", "cl"))]), ("forward",),
            FAMILIES["unet"].about),
    _family("vae", _rows([((1, 8, 12, 12), 2, ("bf16",), "few large slices", ("cl",))]), ("forward",),
            FAMILIES["vae"].about),
    _family("video", _rows([((1, 8, 3, 4, 5), 4, ("bf16",), "5-D", ("cl", "nchw"))]), ("forward",),
            FAMILIES["video"].about),
    _family("small-slices", _rows([((16, 8, 2, 2), 8, ("fp32",), "many small slices")]), ("forward",),
            FAMILIES["small-slices"].about),
    _family("kb35", _rows([((3, 8, 8, 8), 2, ("fp32",), "kb35 stand-in", ("cl",))]), ("forward",),
            FAMILIES["kb35"].about),
    _family("gn-silu", _rows([((2, 8, 6, 6), 2, ("fp32",), "GN + SiLU", ("nchw", "cl"), "silu")]), ("forward",),
            FAMILIES["gn-silu"].about),
    _family("training-half", _rows([((2, 8, 6, 6), 2, ("bf16",), "bf16 training", ("nchw", "cl"))]),
            ("fwd+bwd",), FAMILIES["training-half"].about),
)}


def parse_families(text: str | None, table: dict[str, Family]) -> list[Family]:
    """"unet,vae" -> those families in `table`; "all" -> every new family; "everything" -> all of `table`."""
    names = [t.strip().lower() for t in (text or "").split(",") if t.strip()]
    chosen: list[str] = []
    for name in names:
        expanded = list(NEW_FAMILIES) if name == "all" else list(table) if name == "everything" else [name]
        for n in expanded:
            if n not in table:
                raise ValueError(f"unknown family {n!r}; choose from {', '.join(table)}, all, everything")
            if n not in chosen:
                chosen.append(n)
    return [table[n] for n in chosen]


def plan_rows(families: list[Family], row_filter: str | None, dtypes: set[torch.dtype] | None,
              memory_formats: set[str] | None = None) -> list[tuple[Case, tuple[str, ...]]]:
    """(case, directions) for every selected row of `families`, in family order; a row that two selected
    families share (same label and directions) runs once, under the first."""
    planned, seen = [], set()
    for family in families:
        for case in select(list(family.rows), row_filter, dtypes):
            if memory_formats is not None and case.memory_format not in memory_formats:
                continue
            key = (case.label, family.directions)
            if key in seen:
                continue
            seen.add(key)
            planned.append((case, family.directions))
    return planned


def parse_memory_formats(text: str | None) -> set[str] | None:
    """"cl" / "channels_last" / "nchw" / "contiguous", comma-separated -> MEMORY_FORMATS names (None: all)."""
    if not text:
        return None
    aliases = {"cl": "channels_last", "channels_last": "channels_last", "nhwc": "channels_last",
               "nchw": "contiguous", "contiguous": "contiguous"}
    chosen = set()
    for part in (t.strip().lower() for t in text.split(",") if t.strip()):
        if part not in aliases:
            raise ValueError(f"unknown memory format {part!r}; choose from nchw, channels_last (or cl)")
        chosen.add(aliases[part])
    return chosen


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


__all__ = ["Case", "Family", "FAMILIES", "NEW_FAMILIES", "CPU_SMOKE_FAMILIES", "MEMORY_FORMATS", "DIRECTIONS",
           "FORWARD_ROWS", "BACKWARD_ROWS", "CPU_SMOKE_FORWARD_ROWS", "CPU_SMOKE_BACKWARD_ROWS", "parse_families",
           "plan_rows", "parse_memory_formats", "PROBLEM_KEYS", "DTYPE_NAMES", "dtype_name", "parse_dtypes", "select", "problem_label", "select_problems", "parse_model_kwargs"]

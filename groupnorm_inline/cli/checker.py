"""Static rules KernelBench applies to a submission's source text before running it.

KernelBench scans the candidate file with regular expressions after cutting every line at its first `#`
or `//` (string contents included). Errors reject the submission; warnings are reported only.

Errors (checked here more strictly than KernelBench, so a pass here is a pass there):
  * the words `try`, `except` and `pass` anywhere outside real Python comments: code, docstrings and the
    embedded C++/CUDA strings alike (KernelBench matches `try:`, `except ...` and the bare word `pass`);
  * reassigning timing functions (`torch.cuda.Event.record = ...`, `time.perf_counter = ...`, ...);
  * threads or processes (`threading`, `multiprocessing`, `concurrent.futures`, pool executors);
  * tensor subclasses (`class X(torch.Tensor)`, `_make_subclass`, `torch.Tensor.__new__`);
  * wrapping PyTorch (KernelBench's strict "pytorch_wrap" check): `torch.nn.functional` or
    `nn.functional.` anywhere (an import of it included), `F.conv*`/`F.linear`/... calls, and `torch.nn.X`
    for any X but the containers, `Parameter` and `init` (`nn.Linear` written without `torch.` is fine);
  * for the CUDA backend, no `__global__` or no `load_inline`/`cpp_extension` in the text KernelBench
    keeps after its comment cut (checked on that same cut text, so a pass here is a pass there);
  * text that is not valid Python (the harness counts a SyntaxError as a compile failure).
Warnings (KernelBench's optional checks): high-level torch compute ops (`torch.mm`, `torch.logsumexp`,
...), CUDA streams, half casts.
"""

from __future__ import annotations

import io
import re
import tokenize
from dataclasses import dataclass, field

_BYPASS_WORDS = re.compile(r"\b(try|except|pass)\b")

# What torch.nn may be followed by (KernelBench's allowed list): containers, Parameter, init.
_NN_CONTAINERS = r"(?:Module|parameter|Parameter|ParameterList|ParameterDict|ModuleList|ModuleDict|init)\b"

_ERROR_RULES: tuple[tuple[str, str, str], ...] = (
    ("timing-patch", r"\b(?:torch\.cuda\.(?:Event(?:\.\w+)?|synchronize)|time\.(?:time|perf_counter\w*|"
                     r"monotonic\w*|process_time\w*))\s*=(?!=)", "reassigns a timing function"),
    ("threads", r"\bimport\s+threading\b|\bfrom\s+threading\s+import\b|\bthreading\.Thread\b",
     "uses threads"),
    ("processes", r"\bmultiprocessing\b|\bconcurrent\.futures\b|\b(?:Thread|Process)PoolExecutor\b",
     "uses processes or pool executors"),
    ("tensor-subclass", r"\b_make_subclass\b|\bclass\s+\w+\s*\([^)]*\bTensor\s*\)|\btorch\.Tensor\.__new__\b",
     "defines or builds a Tensor subclass"),
    ("nn-layer", rf"torch\.nn\.(?!{_NN_CONTAINERS})", "uses torch.nn beyond its containers, Parameter and init"),
    ("functional-op", r"torch\.nn\.functional|\bnn\.functional\.|\bF\.(?:conv|linear|relu|gelu|softmax|"
                      r"batch_norm|layer_norm|group_norm|dropout|max_pool|avg_pool)", "wraps torch.nn.functional"),
)

_COMPUTE_OPS = ("mm", "bmm", "matmul", "einsum", "conv1d", "conv2d", "conv3d", "conv_transpose1d",
                "conv_transpose2d", "conv_transpose3d", "relu", "hardtanh", "gelu", "softmax", "log_softmax",
                "tanh", "sigmoid", "silu", "mish", "batch_norm", "group_norm", "layer_norm", "instance_norm",
                "rms_norm", "linear", "logsumexp", "clamp", "dropout")
_WARNING_RULES: tuple[tuple[str, str, str], ...] = (
    ("torch-op", r"\btorch\.(?:" + "|".join(_COMPUTE_OPS) + r")\s*\(", "calls a high-level torch compute op"),
    ("streams", r"\bcuda\.Stream\s*\(|\bwith\s+torch\.cuda\.stream\b|\.wait_stream\s*\(|\.record_stream\s*\(",
     "uses CUDA streams"),
    ("half-cast", r"\.half\s*\(\s*\)|\.bfloat16\s*\(\s*\)", "casts to half precision"),
)


@dataclass(frozen=True)
class Finding:
    rule: str
    line: int          # 1-based line in the checked source; 0 for a rule about the whole file
    message: str
    excerpt: str

    def __str__(self) -> str:
        where = f"line {self.line}: " if self.line else ""
        return f"{where}{self.message} [{self.rule}]" + (f": {self.excerpt}" if self.excerpt else "")


@dataclass
class CheckReport:
    errors: list[Finding] = field(default_factory=list)
    warnings: list[Finding] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.errors

    def summary(self) -> str:
        lines = [f"error {f}" for f in self.errors] + [f"warning {f}" for f in self.warnings]
        return "\n".join(lines) if lines else "no findings"


def _without_python_comments(source: str) -> str:
    """`source` with each real `#` comment blanked out (strings, docstrings and line numbers kept)."""
    lines = [line + "\n" for line in source.split("\n")]  # the same line breaks tokenize counts
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            row, col = tok.start
            line = lines[row - 1]
            lines[row - 1] = line[:col] + " " * (tok.end[1] - col) + line[tok.end[1]:]
    return "".join(lines)[:-1]


def kernelbench_comment_cut(source: str) -> str:
    """KernelBench's own view of the text: every line cut at its first `#` and at its first `//`."""
    cut = []
    for line in source.split("\n"):
        if "#" in line:
            line = line[:line.index("#")]
        if "//" in line:
            line = line[:line.index("//")]
        cut.append(line)
    return "\n".join(cut)


def _line_of(text: str, pos: int) -> tuple[int, str]:
    start = text.rfind("\n", 0, pos) + 1
    end = text.find("\n", pos)
    return text.count("\n", 0, pos) + 1, text[start:end if end >= 0 else len(text)].strip()[:120]


def _scan(text: str, rule: str, pattern: str, message: str, into: list[Finding]) -> None:
    for match in re.finditer(pattern, text):
        line, excerpt = _line_of(text, match.start())
        into.append(Finding(rule, line, message, excerpt))


def check_source(source: str, backend: str = "cuda") -> CheckReport:
    """Apply the rules to a candidate file's text; `backend="cuda"` adds the CUDA presence rule."""
    report = CheckReport()
    try:
        compile(source, "<candidate>", "exec")
        text = _without_python_comments(source)
    except (SyntaxError, tokenize.TokenError, ValueError) as exc:
        report.errors.append(Finding("syntax", getattr(exc, "lineno", 0) or 0, "not valid Python", str(exc)))
        return report
    for match in _BYPASS_WORDS.finditer(text):
        line, excerpt = _line_of(text, match.start())
        report.errors.append(Finding("bypass-word", line, f"contains the word {match.group(1)!r} outside a comment",
                                     excerpt))
    for rule, pattern, message in _ERROR_RULES:
        _scan(text, rule, pattern, message, report.errors)
    if backend == "cuda":
        seen = kernelbench_comment_cut(source)
        if "__global__" not in seen:
            report.errors.append(Finding("cuda-kernel", 0, "no __global__ kernel definition", ""))
        if "load_inline" not in seen and "cpp_extension" not in seen:
            report.errors.append(Finding("cuda-build", 0, "no load_inline or cpp_extension call", ""))
    for rule, pattern, message in _WARNING_RULES:
        _scan(text, rule, pattern, message, report.warnings)
    report.errors.sort(key=lambda f: f.line)
    return report

"""Finds C++ error messages that would be formatted through a std::ostringstream in the extension's own code.

`TORCH_CHECK(cond, "text", n)` hands its message arguments to c10::str, which streams them through an
ostringstream compiled into the extension; with libstdc++ linked statically into the extension that crashes
on numbers instead of raising. Allowed message forms (c10 passes them on without a stream):

    TORCH_CHECK(cond)                                   no message
    TORCH_CHECK(cond, "text" "more text", "text")       string literals only
    TORCH_CHECK(cond, gn_inline_msg::cat(...))          one std::string built by the message helpers
    TORCH_CHECK(cond, std::string(...))                 one std::string

Everything else after the condition is reported, as are the glog-style comparison macros (TORCH_CHECK_EQ
and friends stream with `<<`), c10::str and the iostream types, and an AT_DISPATCH whose operator name is
not refused first with gn_inline_msg::not_implemented_for, in place or through
gn_inline_forward::prepare_forward (AT_DISPATCH's own error for other dtypes is streamed).

The scan works on C++ text with comments blanked and literal contents masked (same length, so offsets
and line numbers stay those of the original), then splits each macro call at its top-level commas.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

_LITERAL_BODY = "\x01"  # stands for every character inside a string or character literal
_IDENT = re.compile(r"[A-Za-z0-9_]")
_RAW_START = re.compile(r'(?:u8|u|U|L)?R"([^()\\\s]{0,16})\(')

# Where the message starts among each macro's arguments.
_MESSAGE_MACROS = re.compile(r"\b(TORCH_CHECK\w*|TORCH_INTERNAL_ASSERT\w*|TORCH_WARN\w*|AT_ERROR|AT_ASSERTM?)\s*\(")
_STREAM_MACROS = re.compile(r"^TORCH_D?CHECK_(?:EQ|NE|LT|LE|GT|GE)$")
_STREAM_NAMES = re.compile(r"\bc10::str\s*\(|\bstd::(?:o|i|)stringstream\b|\bstd::ostream\b|\bstd::(?:cout|cerr|clog)\b"
                           r"|#\s*include\s*<(?:sstream|iostream|ostream)>")
_DISPATCH = re.compile(r"\bAT_DISPATCH_(?!CASE)\w+\s*\(")  # the ones that take an operator name
_LITERALS_ONLY = re.compile(r'\s*(?:(?:u8|u|U|L)?R?"\x01*"\s*)+')
_ONE_STRING_CALL = re.compile(r"\s*(?:gn_inline_msg::\w+|std::string)\s*\(")


def message_start(macro: str) -> int:
    """Index of the first message argument of a message macro."""
    if macro.startswith("TORCH_WARN") or macro == "AT_ERROR":
        return 0
    if macro == "TORCH_CHECK_WITH":  # (error type, condition, message...)
        return 2
    return 1


def mask(source: str) -> str:
    """`source` with comments turned into spaces and literal contents into _LITERAL_BODY (quotes kept)."""
    out: list[str] = []
    i, n = 0, len(source)
    while i < n:
        c = source[i]
        nxt = source[i + 1] if i + 1 < n else ""
        if c == "/" and nxt == "/":
            end = source.find("\n", i)
            end = n if end < 0 else end
            out.append(" " * (end - i))
            i = end
            continue
        if c == "/" and nxt == "*":
            end = source.find("*/", i + 2)
            end = n if end < 0 else end + 2
            out.append(re.sub(r"[^\n]", " ", source[i:end]))
            i = end
            continue
        raw = _RAW_START.match(source, i) if c in "uULR" else None
        if raw and (i == 0 or not _IDENT.match(source[i - 1])):
            closing = ")" + raw.group(1) + '"'
            end = source.find(closing, raw.end())
            end = n if end < 0 else end + len(closing)
            prefix = source[i:raw.end()].split('"')[0]  # u8 / L / R...: keep the letters, mask the rest
            body = end - i - len(prefix) - 2
            out.append(prefix + '"' + _LITERAL_BODY * body + '"')
            i = end
            continue
        if c == '"' or (c == "'" and (i == 0 or not _IDENT.match(source[i - 1]))):
            j = i + 1
            while j < n and source[j] != c and source[j] != "\n":
                j += 2 if source[j] == "\\" else 1
            j = min(j, n - 1)
            out.append(c + _LITERAL_BODY * (j - i - 1) + source[j])
            i = j + 1
            continue
        out.append(c)
        i += 1
    return "".join(out)


def _closing_paren(masked: str, open_at: int) -> int:
    depth = 0
    for k in range(open_at, len(masked)):
        if masked[k] in "([{":
            depth += 1
        elif masked[k] in ")]}":
            depth -= 1
            if depth == 0:
                return k
    raise ValueError(f"unbalanced parentheses after offset {open_at}")


def _split_arguments(masked: str, templates: bool) -> list[tuple[int, int]]:
    """(start, end) of each top-level argument of `masked` (the text between a call's parentheses).
    With `templates`, `name<...>` counts as a bracket: `<` right after a name (no space, not `<<`/`<=`)
    opens, `>` closes (not `->`). Comparisons in this code base are written with spaces around `<`."""
    spans, depth, angle, start = [], 0, 0, 0
    for k, c in enumerate(masked):
        before = masked[k - 1] if k else ""
        after = masked[k + 1] if k + 1 < len(masked) else ""
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif templates and c == "<" and _IDENT.match(before or " ") and after not in "<=" and before != "<":
            angle += 1
        elif templates and c == ">" and angle > 0 and before != "-":
            angle -= 1
        elif c == "," and depth == 0 and angle == 0:
            spans.append((start, k))
            start = k + 1
    if templates and angle:
        raise ValueError("unclosed template bracket")
    spans.append((start, len(masked)))
    return spans


def arguments(masked: str) -> list[tuple[int, int]]:
    """Top-level arguments, reading `name<a, b>` as one bracket where that parses, else plain commas."""
    try:
        return _split_arguments(masked, templates=True)
    except ValueError:
        return _split_arguments(masked, templates=False)


def message_is_stream_free(masked_args: list[str]) -> bool:
    """Whether c10 passes this message on without streaming it (see the module docstring)."""
    if not masked_args or all(_LITERALS_ONLY.fullmatch(a) for a in masked_args):
        return True
    if len(masked_args) != 1:
        return False
    call = _ONE_STRING_CALL.match(masked_args[0])
    if not call:
        return False
    open_at = call.end() - 1
    return masked_args[0][_closing_paren(masked_args[0], open_at) + 1:].strip() == ""


@dataclass(frozen=True)
class Finding:
    offset: int   # in the scanned text
    text: str     # the offending call or name, as written

    def line(self, source: str, first_line: int = 1) -> int:
        return first_line + source.count("\n", 0, self.offset)


def stream_messages(source: str) -> list[Finding]:
    """Every message in the C++ `source` that would be formatted through a stream."""
    masked = mask(source)
    findings: list[Finding] = []
    for match in _MESSAGE_MACROS.finditer(masked):
        macro = match.group(1)
        open_at = match.end() - 1
        close_at = _closing_paren(masked, open_at)
        call = source[match.start():close_at + 1]
        if _STREAM_MACROS.match(macro):
            findings.append(Finding(match.start(), call))
            continue
        inner = masked[open_at + 1:close_at]
        args = [inner[a:b] for a, b in arguments(inner)]
        if not message_is_stream_free(args[message_start(macro):]):
            findings.append(Finding(match.start(), call))
    for match in _STREAM_NAMES.finditer(masked):
        findings.append(Finding(match.start(), match.group(0)))
    for match in _DISPATCH.finditer(masked):
        open_at = match.end() - 1
        close_at = _closing_paren(masked, open_at)
        inner = masked[open_at + 1:close_at]
        names = [source[open_at + 1 + a:open_at + 1 + b].strip() for a, b in arguments(inner)
                 if _LITERALS_ONLY.fullmatch(inner[a:b])]
        # Refused first either in place, or by gn_inline_forward::prepare_forward called with that operator
        # name (its dtype check is gn_inline_msg::not_implemented_for of the name it is given).
        guarded = names and (
            re.search(r"gn_inline_msg::not_implemented_for\(\s*" + re.escape(names[0]), source)
            or re.search(r"gn_inline_forward::prepare_forward\([^;]*" + re.escape(names[0]) + r"\s*(?:,[^;]*)?\)\s*;", source))
        if not guarded:
            findings.append(Finding(match.start(), source[match.start():match.end()] + " ... (no "
                                    "gn_inline_msg::not_implemented_for check of its dtype before it)"))
    return sorted(findings, key=lambda f: f.offset)


def scan_python_sources(path: Path) -> list[str]:
    """Findings in every string constant of a Python module holding C++ sources (docstrings excepted),
    as 'file:line: call' with the line in the Python file."""
    text = path.read_text()
    tree = ast.parse(text)
    docstrings = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                docstrings.add(id(first.value))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            for finding in stream_messages(node.value):
                out.append(f"{path.name}:{finding.line(node.value, node.lineno)}: {' '.join(finding.text.split())}")
    return out

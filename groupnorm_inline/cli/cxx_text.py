"""Text operations on the package's C++/CUDA source strings for the single-file export.

* `strip_comments` removes `//` and `/* */` comments (string, character and raw-string literals are kept
  intact), so prose in comments cannot trip KernelBench's word checks and the export stays compact;
* `defined_namespaces` / `first_operator` read which torch.library namespaces a source defines and the
  first operator it declares;
* `retarget_cxx` / `retarget_python` move operators to another namespace. The package's sources are
  templates with a `GN_NAMESPACE` token that `with_namespace` replaces by the namespace, and the token
  stands only where C++ names a torch.library namespace; renaming the namespace in those places gives the
  same text as `with_namespace` with the new name (a test pins this for the package's templates), and it
  works on any spec's sources without a list of templates.
"""

from __future__ import annotations

import re

_IDENT_CHAR = re.compile(r"[A-Za-z0-9_]")
_RAW_STRING_START = re.compile(r'(?:u8|u|U|L)?R"([^()\\\s]{0,16})\(')


def strip_comments(source: str) -> str:
    """`source` without C/C++ comments; lines that held only a comment are dropped, trailing blanks
    removed, runs of blank lines collapsed to one."""
    out: list[str] = []
    i, n = 0, len(source)
    while i < n:
        c = source[i]
        nxt = source[i + 1] if i + 1 < n else ""
        if c == "/" and nxt == "/":  # line comment; a backslash-newline continues it (line splicing)
            i += 2
            while i < n and source[i] != "\n":
                i += 2 if source[i] == "\\" and source[i + 1:i + 2] == "\n" else 1
            continue
        if c == "/" and nxt == "*":
            end = source.find("*/", i + 2)
            if end < 0:
                raise ValueError("unterminated /* comment in C++ source")
            out.append(" " + "\n" * source.count("\n", i, end))  # keep tokens apart and lines in place
            i = end + 2
            continue
        raw = _RAW_STRING_START.match(source, i) if c in 'uULR' else None
        if raw and (i == 0 or not _IDENT_CHAR.match(source[i - 1])):
            closing = ")" + raw.group(1) + '"'
            end = source.find(closing, raw.end())
            if end < 0:
                raise ValueError("unterminated raw string literal in C++ source")
            out.append(source[i:end + len(closing)])
            i = end + len(closing)
            continue
        # A quote opens a literal; an apostrophe right after a letter or digit is a digit separator (1'000).
        if c == '"' or (c == "'" and (i == 0 or not _IDENT_CHAR.match(source[i - 1]))):
            j = i + 1
            while j < n and source[j] != c:
                if source[j] == "\n":
                    raise ValueError(f"unterminated literal in C++ source near {source[i:i + 40]!r}")
                j += 2 if source[j] == "\\" else 1
            out.append(source[i:j + 1])
            i = j + 1
            continue
        out.append(c)
        i += 1
    stripped = "".join(out)
    lines: list[str] = []
    for original, line in zip(source.split("\n"), stripped.split("\n")):
        line = line.rstrip()
        if not line and original.strip():
            continue  # the line held only a comment
        if not line and lines and not lines[-1]:
            continue  # one blank line is enough
        lines.append(line)
    return "\n".join(lines).strip("\n") + "\n"


def defined_namespaces(source: str) -> list[str]:
    """Namespaces the source defines with `TORCH_LIBRARY(ns, m)` (not _IMPL or _FRAGMENT), in order."""
    return re.findall(r"\bTORCH_LIBRARY\s*\(\s*(\w+)\s*,", source)


def first_operator(source: str) -> str | None:
    """Name of the first operator the source declares with `m.def("name(...)...")`, or None."""
    match = re.search(r'\.def\(\s*"(?:\w+::)?(\w+)\s*[.(]', source)
    return match.group(1) if match else None


def _alternation(names) -> str:
    return "|".join(re.escape(n) for n in sorted(names, key=len, reverse=True))


def retarget_cxx(source: str, renames: dict[str, str]) -> str:
    """Move operators to new namespaces where C++ names a torch.library namespace: the first argument of
    TORCH_LIBRARY / TORCH_LIBRARY_IMPL / TORCH_LIBRARY_FRAGMENT, and qualified names in strings
    ("ns::op"). Prose such as an error message's "groupnorm_inline: ..." keeps the package's name."""
    if not renames:
        return source
    names = _alternation(renames)
    source = re.sub(rf"\b(TORCH_LIBRARY(?:_IMPL|_FRAGMENT)?\s*\(\s*)({names})\b",
                    lambda m: m.group(1) + renames[m.group(2)], source)
    return re.sub(rf'"({names})::', lambda m: '"' + renames[m.group(1)] + "::", source)


def retarget_python(source: str, renames: dict[str, str]) -> str:
    """Move operators to new namespaces where Python names one: `torch.ops.<ns>`, a string literal that is
    exactly the namespace ("ns", as in getattr(torch.ops, "ns")) or a qualified name ("ns::op")."""
    if not renames:
        return source
    names = _alternation(renames)
    source = re.sub(rf"\btorch\.ops\.({names})\b", lambda m: "torch.ops." + renames[m.group(1)], source)
    return re.sub(rf"""(["'])({names})(\1|::)""", lambda m: m.group(1) + renames[m.group(2)] + m.group(3), source)

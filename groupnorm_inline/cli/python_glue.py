"""The Python side of a single-file export, generated from the package's own modules.

A problem module defines `ModelNew` on the operators of its kernels module and on Python helpers kept
there (GEMM helpers, a cuBLAS precision context manager, constants). `model_new_source(module)` reads
those modules as text (`ast` for the statements, `symtable` for which names a function really takes
from its module; importing a problem module would build its kernels) and returns `ModelNew` plus every
module-level definition it reaches, directly or through other definitions, in an order that executes:
modules a definition depends on first, each module's statements in their source order.

On the way, the text changes only where the single file needs it:

* `alias.NAME`, where `alias` is a package module imported as such (`from . import x_kernels as
  kernels`), becomes `NAME`: the definition is now in the same file;
* `ops` taken from a kernels module (the operator namespace it loads on first access) becomes
  `torch.ops.<its OP_NAMESPACE>` (the constant read from the source), which the exporter then renames
  to the export's namespace;
* docstrings become `#` comments (KernelBench rejects the words try/except/pass even in docstrings),
  and the comment lines right above a definition come along with it;
* imports from outside the package are returned for the file's import block.

Anything the export cannot carry raises CliError naming the definition and what it needs: a name
bound in a package module only inside an `if` or a function, a package import of a whole package
namespace (`import groupnorm_inline.x`), two different definitions of one name from two modules, or a
rewritten name that a local variable would shadow.
"""

from __future__ import annotations

import ast
import builtins
import inspect
import symtable
from dataclasses import dataclass, field
from pathlib import Path

from .errors import EXIT_FAILED, CliError

PACKAGE = "groupnorm_inline"
_PACKAGE_ROOT = Path(__file__).resolve().parents[1]
_LAZY_OPS_NAME = "ops"              # kernels modules load their operators on first access of this name
_OPS_NAMESPACE_CONSTANT = "OP_NAMESPACE"


def _glue_error(message: str) -> CliError:
    return CliError(f"cannot generate the export's Python: {message}", EXIT_FAILED)


def module_file(dotted: str) -> Path | None:
    """The source file of a package module (a .py file or a package's __init__.py), or None."""
    parts = dotted.split(".")
    if parts[0] != PACKAGE:
        return None
    base = _PACKAGE_ROOT.joinpath(*parts[1:])
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


@dataclass
class _Module:
    """One package module as text: its top-level definitions and what its imports bind."""

    name: str
    path: Path
    text: str
    tree: ast.Module
    table: symtable.SymbolTable
    definitions: dict = field(default_factory=dict)      # name -> top-level statement binding it
    module_aliases: dict = field(default_factory=dict)   # local name -> package module it names
    imported_names: dict = field(default_factory=dict)   # local name -> (package module, name there)
    external_imports: dict = field(default_factory=dict)  # local name -> import statement (outside the package)

    @property
    def lines(self) -> list[str]:
        return self.text.split("\n")

    @property
    def docstring(self) -> str | None:
        return ast.get_docstring(self.tree, clean=True)


def _bound_names(target: ast.expr) -> list[str]:
    if isinstance(target, ast.Name):
        return [target.id]
    if isinstance(target, ast.Tuple | ast.List):
        return [n for element in target.elts for n in _bound_names(element)]
    return []


def _import_base(module: _Module, node: ast.ImportFrom) -> str:
    """The absolute module a `from ... import` reads from."""
    if not node.level:
        return node.module or ""
    package = module.name.split(".")
    if module.path.name != "__init__.py":
        package = package[:-1]
    package = package[:len(package) - (node.level - 1)]
    return ".".join(package + ([node.module] if node.module else []))


def _read_module(dotted: str) -> _Module:
    path = module_file(dotted)
    if path is None:
        raise _glue_error(f"no source file for the module {dotted}")
    text = path.read_text()
    module = _Module(dotted, path, text, ast.parse(text), symtable.symtable(text, str(path), "exec"))
    for node in module.tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            module.definitions[node.name] = node
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                for name in _bound_names(target):
                    module.definitions[name] = node
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            module.definitions[node.target.id] = node
        elif isinstance(node, ast.ImportFrom):
            base = _import_base(module, node)
            if base == "__future__":
                continue
            for alias in node.names:
                local = alias.asname or alias.name
                if base.split(".")[0] != PACKAGE:
                    as_text = f" as {alias.asname}" if alias.asname else ""
                    module.external_imports[local] = f"from {base} import {alias.name}{as_text}"
                elif module_file(f"{base}.{alias.name}") is not None:
                    module.module_aliases[local] = f"{base}.{alias.name}"
                else:
                    module.imported_names[local] = (base, alias.name)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == PACKAGE:
                    if alias.asname:
                        module.module_aliases[alias.asname] = alias.name
                    continue  # `import groupnorm_inline.x` binds the package itself: not carried
                local = alias.asname or alias.name.split(".")[0]
                as_text = f" as {alias.asname}" if alias.asname else ""
                module.external_imports[local] = f"import {alias.name}{as_text}"
    return module


# ------------------------------------------------------------------ which names a statement needs


def _names_loaded(nodes) -> set[str]:
    """Names read anywhere in `nodes` (expressions evaluated in the module's scope)."""
    names = set()
    for node in nodes:
        if node is None:
            continue
        for sub in ast.walk(node):
            if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Load):
                names.add(sub.id)
    return names


def _names_stored(node: ast.AST) -> set[str]:
    """Names bound inside an expression statement: comprehension targets, lambda parameters."""
    names = set()
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Store):
            names.add(sub.id)
        elif isinstance(sub, ast.arg):
            names.add(sub.arg)
    return names


def _scope_table(module: _Module, node: ast.stmt) -> symtable.SymbolTable:
    for table in module.table.get_children():
        if table.get_name() == node.name and table.get_lineno() == node.lineno:
            return table
    raise _glue_error(f"{module.name}: no symbol table for {node.name} (line {node.lineno})")


def _walk_tables(table: symtable.SymbolTable):
    yield table
    for child in table.get_children():
        yield from _walk_tables(child)


def _header_nodes(node: ast.stmt) -> list:
    """The parts of a def/class evaluated in the module's scope when the statement runs."""
    parts = list(node.decorator_list)
    if isinstance(node, ast.ClassDef):
        return parts + list(node.bases) + [k.value for k in node.keywords]
    args = node.args
    parts += list(args.defaults) + [d for d in args.kw_defaults if d is not None] + [node.returns]
    every_arg = args.posonlyargs + args.args + args.kwonlyargs + [a for a in (args.vararg, args.kwarg) if a]
    return parts + [a.annotation for a in every_arg]


def global_names(module: _Module, node: ast.stmt) -> set[str]:
    """The module-level (or builtin) names a top-level statement reads."""
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        names = _names_loaded(_header_nodes(node))
        for table in _walk_tables(_scope_table(module, node)):
            names |= {s.get_name() for s in table.get_symbols() if s.is_global()}
        return names
    value = node.value if isinstance(node, ast.Assign | ast.AnnAssign) else node
    return _names_loaded([node]) - (_names_stored(value) if value is not None else set())


def _local_names(module: _Module, node: ast.stmt) -> set[str]:
    """Names some scope inside a def/class binds for itself (they would shadow a module-level name)."""
    if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return set()
    names = set()
    for table in _walk_tables(_scope_table(module, node)):
        names |= {s.get_name() for s in table.get_symbols() if not s.is_global() and not s.is_free()
                  and (s.is_assigned() or s.is_parameter() or s.is_imported())}
    return names


def _alias_attributes(module: _Module, node: ast.stmt) -> list[ast.Attribute]:
    """`alias.NAME` expressions of `node` whose `alias` names a package module."""
    return [sub for sub in ast.walk(node) if isinstance(sub, ast.Attribute) and isinstance(sub.value, ast.Name)
            and sub.value.id in module.module_aliases]


# ------------------------------------------------------------------ text of a statement


def _char_col(line: str, byte_col: int) -> int:
    """ast counts columns in UTF-8 bytes; strings index characters."""
    return len(line.encode()[:byte_col].decode())


def _docstring_edits(lines: list[str], node: ast.stmt):
    """(first line, col, last line, end col, replacement) turning each docstring inside `node` into comments."""
    edits = []
    for sub in ast.walk(node):
        if not isinstance(sub, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            continue
        first = sub.body[0]
        if not (isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
                and isinstance(first.value.value, str)):
            continue
        start, end = first.lineno - 1, first.end_lineno - 1
        col = _char_col(lines[start], first.col_offset)
        end_col = _char_col(lines[end], first.end_col_offset)
        after = lines[end][end_col:].strip()
        if lines[start][:col].strip() or (after and not after.startswith("#")):
            raise _glue_error(f"the docstring of {sub.name} shares a line with code; put it on lines of its own")
        indent = lines[start][:col]
        comment = [indent + ("# " + line if line.strip() else "#").rstrip()
                   for line in inspect.cleandoc(first.value.value).split("\n")]
        if len(sub.body) == 1:
            comment.append(indent + "...")  # the docstring was the whole body
        if after:
            comment.append(indent + after)  # a comment that followed the docstring
        edits.append((start, 0, end, len(lines[end]), "\n".join(comment)))
    return edits


def _apply_edits(lines: list[str], edits) -> list[str]:
    text_lines = list(lines)
    for start, col, end, end_col, replacement in sorted(edits, reverse=True):
        merged = text_lines[start][:col] + replacement + text_lines[end][end_col:]
        text_lines[start:end + 1] = merged.split("\n")
    return text_lines


def statement_text(module: _Module, node: ast.stmt) -> str:
    """The statement as the export carries it: comment lines above it kept, module aliases dropped,
    docstrings as comments."""
    lines = module.lines
    first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])]) - 1
    while first > 0 and lines[first - 1].startswith("#"):
        first -= 1
    last = node.end_lineno - 1
    edits = _docstring_edits(lines, node)
    for attribute in _alias_attributes(module, node):
        line = attribute.lineno - 1
        edits.append((line, _char_col(lines[line], attribute.col_offset), attribute.end_lineno - 1,
                      _char_col(lines[attribute.end_lineno - 1], attribute.end_col_offset), attribute.attr))
    edited = _apply_edits(lines, edits)
    # The edits may change the number of lines: cut by what the statement spans after them.
    shift = len(edited) - len(lines)
    return "\n".join(edited[first:last + 1 + shift]).rstrip()


# ------------------------------------------------------------------ collecting what ModelNew needs


@dataclass
class _Needed:
    """What the export carries from one module: statements and lines that stand for imports."""

    module: _Module
    statements: dict = field(default_factory=dict)   # id(node) -> node
    bindings: list = field(default_factory=list)     # "name = expression" lines (operator namespaces, aliases)


class _Collector:
    def __init__(self):
        self.modules: dict[str, _Module] = {}
        self.needed: dict[str, _Needed] = {}
        self.depends_on: dict[str, set] = {}        # module -> modules whose definitions its statements need
        self.external_imports: list[str] = []
        self.emitted: dict[str, str] = {}           # top-level name -> where it comes from, to catch clashes
        self._visiting: set = set()

    def module(self, dotted: str) -> _Module:
        if dotted not in self.modules:
            self.modules[dotted] = _read_module(dotted)
        return self.modules[dotted]

    def _slot(self, module: _Module) -> _Needed:
        return self.needed.setdefault(module.name, _Needed(module))

    def _claim(self, name: str, origin: str) -> None:
        seen = self.emitted.setdefault(name, origin)
        if seen != origin:
            raise _glue_error(f"the name {name} would be defined twice: by {seen} and by {origin}")

    def _depend(self, module: str, on: str) -> None:
        if module != on:
            self.depends_on.setdefault(module, set()).add(on)

    def _import(self, statement: str) -> None:
        if statement not in self.external_imports:
            self.external_imports.append(statement)

    def require(self, dotted: str, name: str, wanted_by: str) -> None:
        """Carry the definition that `name` has in module `dotted` (and what that needs)."""
        module = self.module(dotted)
        if name in module.definitions:
            self._require_statement(module, module.definitions[name])
        elif name in module.imported_names:
            source, original = module.imported_names[name]
            self._require_imported(module, name, source, original, wanted_by)
        elif name in module.external_imports:
            self._import(module.external_imports[name])
        elif name in module.module_aliases:
            raise _glue_error(f"{wanted_by} uses the package module {module.module_aliases[name]} as a value "
                              f"({name}); only {name}.<name> can be carried")
        else:
            raise _glue_error(f"{wanted_by} needs {name}, which {dotted} does not bind at its top level")

    def _require_imported(self, module: _Module, local: str, source: str, original: str, wanted_by: str) -> None:
        source_module = self.module(source)
        self._depend(module.name, source)
        if original == _LAZY_OPS_NAME and original not in source_module.definitions:
            # The kernels module's lazily loaded operators: the namespace itself, renamed by the exporter.
            namespace = self.constant(source, _OPS_NAMESPACE_CONSTANT)
            if not isinstance(namespace, str):
                raise _glue_error(f"{wanted_by} uses {source}.{original}, and {source} defines no "
                                  f"{_OPS_NAMESPACE_CONSTANT} naming its operator namespace")
            self._import("import torch")
            self._add_binding(module, local, f"torch.ops.{namespace}")
            return
        self.require(source, original, wanted_by)
        if local != original:
            self._add_binding(module, local, original)

    def constant(self, dotted: str, name: str, hops: int = 8):
        """The literal value `name` has in module `dotted`, following plain `A = B` assignments and
        imports (read from the source: nothing is imported); None when it is not such a literal."""
        module = self.module(dotted)
        node = module.definitions.get(name)
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            if isinstance(node.value, ast.Constant):
                return node.value.value
            if isinstance(node.value, ast.Name) and hops:
                return self.constant(dotted, node.value.id, hops - 1)
        elif name in module.imported_names and hops:
            return self.constant(*module.imported_names[name], hops - 1)
        return None

    def _add_binding(self, module: _Module, name: str, expression: str) -> None:
        line = f"{name} = {expression}"
        self._claim(name, f"{module.name} ({line})")
        slot = self._slot(module)
        if line not in slot.bindings:
            slot.bindings.append(line)

    def _require_statement(self, module: _Module, node: ast.stmt) -> None:
        key = (module.name, id(node))
        slot = self.needed.get(module.name)
        if key in self._visiting or (slot is not None and id(node) in slot.statements):
            return
        self._visiting.add(key)
        bound = [n for n, s in module.definitions.items() if s is node]
        wanted_by = f"{module.name}.{bound[0] if bound else node.lineno}"
        attributes = _alias_attributes(module, node)
        for name in sorted(global_names(module, node) - set(bound)):
            if name in module.module_aliases:
                uses = sum(isinstance(s, ast.Name) and s.id == name for s in ast.walk(node))
                if uses == sum(a.value.id == name for a in attributes):
                    continue  # only as alias.NAME: carried below, attribute by attribute
            elif not (name in module.definitions or name in module.imported_names
                      or name in module.external_imports):
                if name.startswith("__") or hasattr(builtins, name):
                    continue
            self.require(module.name, name, wanted_by)
        shadowed = _local_names(module, node)
        for attribute in attributes:
            alias, name = attribute.value.id, attribute.attr
            target = module.module_aliases[alias]
            if name in shadowed:
                raise _glue_error(f"{wanted_by}: {alias}.{name} would become {name}, which a local variable "
                                  f"of the same name shadows")
            if name in module.definitions or (name in module.imported_names
                                              and module.imported_names[name] != (target, name)):
                raise _glue_error(f"{wanted_by}: {alias}.{name} would become {name}, which {module.name} "
                                  f"binds to something else")
            self._depend(module.name, target)
            self.require(target, name, wanted_by)
        self._visiting.discard(key)
        for name in bound:
            self._claim(name, f"{module.name} (line {node.lineno})")
        self._slot(module).statements[id(node)] = node

    def module_order(self, root: str) -> list[str]:
        """Modules with something to carry, each after every module its statements need."""
        order, state = [], {}

        def visit(name: str, path: list[str]) -> None:
            if state.get(name) == "done":
                return
            if state.get(name) == "open":
                raise _glue_error("the modules import each other: " + " -> ".join(path + [name]))
            state[name] = "open"
            for dependency in sorted(self.depends_on.get(name, ())):
                visit(dependency, path + [name])
            state[name] = "done"
            if name in self.needed:
                order.append(name)

        visit(root, [])
        return order


def _comment_block(text: str) -> list[str]:
    return [("# " + line if line.strip() else "#").rstrip() for line in text.split("\n")]


def _join_statements(texts_and_kinds) -> str:
    """Assignments one after another, two blank lines around each def and class (as the sources are laid out)."""
    out, previous_def = [], False
    for text, is_def in texts_and_kinds:
        if out:
            out.append("\n\n\n" if is_def or previous_def else "\n")
        out.append(text)
        previous_def = is_def
    return "".join(out)


def model_new_source(problem_module: str, class_name: str = "ModelNew") -> tuple[tuple[str, ...], str]:
    """(imports, text): `class_name` of `problem_module` and every package definition it needs, as the
    Python of a single file. Import lines are those of modules outside the package."""
    collector = _Collector()
    collector.require(problem_module, class_name, f"the export of {problem_module}")
    sections = []
    for name in collector.module_order(problem_module):
        slot = collector.needed[name]
        module = slot.module
        heading = [f"# Python from {module.name}, generated from its source."]
        if name == problem_module and module.docstring:
            heading += ["#"] + _comment_block(module.docstring)  # what ModelNew and its options compute
        statements = sorted(slot.statements.values(), key=lambda n: n.lineno)
        body = [(line, False) for line in slot.bindings]
        body += [(statement_text(module, n), isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef))
                 for n in statements]
        sections.append("\n".join(heading) + "\n\n" + _join_statements(body))
    return tuple(collector.external_imports), "\n\n\n".join(sections) + "\n"

"""AST safety check of proposed programs: rejects what makes a program nondeterministic or unsafe.

The check works on the syntax tree, never on substrings: the AZR reference searched the source text for
banned import lines, so ``import os`` with two spaces, ``import os as q`` or ``from os import *`` slipped
through. Every finding is a machine-readable reason ``banned:<name>``.

Rules (the lists are configuration, ``SafetyConfig``):

- **Imports: an allowlist.** ``import x`` / ``from x import ...`` is accepted only when the top-level
  module ``x`` is in ``allowed_modules`` (pure, deterministic standard modules). An allowlist, not a
  denylist, because the standard library has hundreds of modules and new ones appear with each Python
  release; a denylist that forgets one (``_posixsubprocess``, ``pty``, ``tracemalloc``...) is a hole,
  an allowlist that forgets one only rejects a harmless program. A rejected import is reported as
  ``banned:<module>``. Relative imports are rejected.
- **Names:** any use of a name in ``banned_names`` (``eval``, ``exec``, ``open``, ``id``, ``hash``,
  ``get_type_hints`` and the other library functions that evaluate annotation strings as code...),
  in any context, even as a variable, parameter or function name: allowing ``def g(eval)`` but not
  ``eval(...)`` would need scope analysis for no gain. Dunder names (``__builtins__``, ``__import__``...)
  are rejected except the harmless ``__name__``.
- **Attributes:** any attribute access whose name is a dunder outside ``allowed_dunders`` (so
  ``x.__class__.__subclasses__()``, ``f.__globals__``, ``__code__`` are rejected; ``super().__init__()``
  is fine), or in ``banned_attributes`` (module and frame attributes that reach the interpreter from
  an allowed module: ``dataclasses.sys``, ``typing.sys``, ``gen.gi_frame.f_back``),
  or, on an imported module (``x`` in ``x.a.b`` was bound by an import), a private name (leading
  underscore) or a name in ``banned_module_attributes`` (``statistics.random``, ``json.codecs``).
  Attributes that lead to code or object-graph access (``enum.bltns``, ``types``, ``gc``, ``io``,
  ``codecs``...) are banned on every object, the others only on modules.
- **Modules only as attribute bases:** a name bound to a module by an import may be used only as
  ``module.attr``; ``m = json``, ``f(json)`` or ``[json]`` give ``banned:module_as_value``, so the
  attribute rules cannot be dodged by aliasing a module to a variable.
- **Strings:** a string or bytes constant containing a banned dunder name is rejected, which closes
  ``operator.attrgetter('__class__')`` and ``'{0.__class__}'.format(x)``.
- **getattr/setattr/delattr/hasattr:** allowed only as a direct call whose attribute name is a constant,
  non-banned string (``getattr(obj, 'x', 0)``). A computed name (``getattr(__builtins__, 'ev' + 'al')``)
  or passing ``getattr`` around as a value is rejected: string building could otherwise reach anything.

This check is a filter that keeps the task distribution deterministic and cheap to run and rejects
obvious abuse early with a clear reason; it is not the security boundary. Containment of untrusted
code is the sandbox's job (separate processes with operating-system limits).
"""

from __future__ import annotations

import ast
import importlib.util
import re
from dataclasses import dataclass

from populora.tasks.records import banned

DEFAULT_ALLOWED_MODULES = (
    "math",
    "cmath",
    "itertools",
    "collections",
    "functools",
    "heapq",
    "bisect",
    "string",
    "re",
    "typing",
    "dataclasses",
    "operator",
    "copy",
    "fractions",
    "decimal",
    "statistics",
    "enum",
    "abc",
    "numbers",
    "array",
    "textwrap",
    "unicodedata",
    "json",
    "keyword",
)

DEFAULT_BANNED_NAMES = (
    # code execution and introspection of the interpreter
    "eval",
    "exec",
    "compile",
    "__import__",
    "globals",
    "locals",
    "vars",
    "breakpoint",
    "help",
    "exit",
    "quit",
    "copyright",
    "credits",
    "license",
    # files and terminal I/O (print is allowed; its output is ignored)
    "open",
    "input",
    # values that differ between processes
    "id",
    "hash",
    # attribute access by computed name (constant names are checked in _check_call)
    "getattr",
    "setattr",
    "delattr",
    "hasattr",
    # operator's attribute/method access by name
    "attrgetter",
    "methodcaller",
    # evaluate annotation strings as code (typing.get_type_hints, singledispatch's register)
    "get_type_hints",
    "ForwardRef",
    "singledispatch",
    "singledispatchmethod",
    # string.Formatter.get_field follows attribute paths given as (built) strings
    "Formatter",
)

DEFAULT_BANNED_ATTRIBUTES = (
    # interpreter and process modules, reachable as attributes of allowed modules (dataclasses.sys)
    "sys",
    "os",
    "builtins",
    "inspect",
    "importlib",
    "subprocess",
    "socket",
    "shutil",
    "ctypes",
    "_thread",
    "threading",
    "multiprocessing",
    "asyncio",
    "pickle",
    "marshal",
    "posix",
    "system",
    "popen",
    "bltns",  # enum's alias of builtins
    "types",  # FunctionType/CodeType build code objects
    "gc",  # get_objects / get_referrers reach every object
    "codecs",
    "io",
    "signal",
    "attrgetter",
    "methodcaller",
    "get_type_hints",
    "ForwardRef",
    "singledispatch",
    "singledispatchmethod",
    "Formatter",
    "get_field",
    # frames and code objects (generator/coroutine/traceback -> frame -> globals)
    "gi_frame",
    "gi_code",
    "cr_frame",
    "ag_frame",
    "tb_frame",
    "tb_next",
    "f_back",
    "f_globals",
    "f_locals",
    "f_builtins",
    "f_code",
    "co_code",
)

# Banned only as attributes of an imported module (``statistics.random``), because as attributes of
# the program's own objects they are ordinary names (``self.time``, ``clock.random``).
DEFAULT_BANNED_MODULE_ATTRIBUTES = (
    "random",
    "time",
    "datetime",
    "modules",
    "weakref",
    "copyreg",
    "contextlib",
    "warnings",
)

DEFAULT_ALLOWED_DUNDERS = (
    "__init__",
    "__name__",
    "__main__",
    "__post_init__",
    "__repr__",
    "__str__",
    "__eq__",
    "__ne__",
    "__lt__",
    "__le__",
    "__gt__",
    "__ge__",
    "__len__",
    "__iter__",
    "__next__",
    "__contains__",
    "__getitem__",
    "__setitem__",
    "__add__",
    "__sub__",
    "__mul__",
    "__bool__",
)

_ATTR_BY_NAME = ("getattr", "setattr", "delattr", "hasattr")
_DUNDER = re.compile(r"__\w+__")


@dataclass(frozen=True)
class SafetyConfig:
    """What the AST check accepts; see the module docstring for the rules."""

    allowed_modules: tuple[str, ...] = DEFAULT_ALLOWED_MODULES
    banned_names: tuple[str, ...] = DEFAULT_BANNED_NAMES
    banned_attributes: tuple[str, ...] = DEFAULT_BANNED_ATTRIBUTES
    banned_module_attributes: tuple[str, ...] = DEFAULT_BANNED_MODULE_ATTRIBUTES
    allowed_dunders: tuple[str, ...] = DEFAULT_ALLOWED_DUNDERS
    allow_getattr_constant: bool = True  # getattr(obj, 'name') with a constant, non-banned name


class _Checker(ast.NodeVisitor):
    def __init__(self, cfg: SafetyConfig) -> None:
        self.cfg = cfg
        self.allowed_modules = frozenset(cfg.allowed_modules)
        self.banned_names = frozenset(cfg.banned_names)
        self.banned_attributes = frozenset(cfg.banned_attributes)
        self.banned_module_attributes = frozenset(cfg.banned_module_attributes)
        self.allowed_dunders = frozenset(cfg.allowed_dunders)
        self.module_aliases: set[str] = set()
        self.approved_calls: set[int] = set()  # ids of Name nodes approved as getattr(obj, 'const')
        self.module_names: set[str] = set()  # names bound to module objects by an import
        self.module_bases: set[int] = set()  # ids of Name nodes used as ``module.attr``
        self.finding: str | None = None

    def flag(self, name: str) -> None:
        if self.finding is None:
            self.finding = banned(name)

    # --- names ---------------------------------------------------------------------------------
    def check_name(self, name: str) -> None:
        if name in self.banned_names:
            self.flag(name)
        elif _DUNDER.fullmatch(name) and name != "__name__":
            self.flag(name)

    def visit_Name(self, node: ast.Name) -> None:
        if id(node) in self.approved_calls:
            return
        self.check_name(node.id)
        if node.id in self.module_names and id(node) not in self.module_bases:
            self.flag("module_as_value")  # m = json; m.codecs would escape the attribute rules

    def visit_arg(self, node: ast.arg) -> None:
        self.check_name(node.arg)
        self.generic_visit(node)

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        if node.name in self.banned_names:
            self.flag(node.name)
        self.generic_visit(node)

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self.check_name(node.name)
        self.generic_visit(node)

    def visit_Global(self, node: ast.Global | ast.Nonlocal) -> None:
        for name in node.names:
            self.check_name(name)

    visit_Nonlocal = visit_Global

    def visit_ExceptHandler(self, node: ast.ExceptHandler) -> None:
        if node.name:
            self.check_name(node.name)
        self.generic_visit(node)

    def visit_MatchAs(self, node: ast.MatchAs) -> None:
        if node.name:
            self.check_name(node.name)
        self.generic_visit(node)

    def visit_MatchStar(self, node: ast.MatchStar) -> None:
        if node.name:
            self.check_name(node.name)

    def visit_MatchMapping(self, node: ast.MatchMapping) -> None:
        if node.rest:
            self.check_name(node.rest)
        self.generic_visit(node)

    # --- imports -------------------------------------------------------------------------------
    def check_module(self, module: str) -> None:
        root = module.split(".")[0]
        if root not in self.allowed_modules:
            self.flag(root)
        for part in module.split(".")[1:]:
            if part.startswith("_"):
                self.flag(part)

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self.check_module(alias.name)
            bound = alias.asname or alias.name.split(".")[0]
            self.check_name(bound)
            self.module_aliases.add(bound)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level:
            self.flag("relative_import")
            return
        self.check_module(node.module or "")
        for alias in node.names:
            if alias.name == "*":
                continue  # the module itself is allowlisted; its public names are what it offers
            if (
                alias.name.startswith("_")
                or alias.name in self.banned_attributes
                or alias.name in self.banned_module_attributes
            ):
                self.flag(alias.name)
            self.check_name(alias.name)
            if alias.asname:
                self.check_name(alias.asname)
            self.module_aliases.add(alias.asname or alias.name)  # may be a submodule

    # --- attributes and strings ------------------------------------------------------------------
    def check_attribute_name(self, attr: str) -> bool:
        if _DUNDER.fullmatch(attr):
            if attr not in self.allowed_dunders:
                self.flag(attr)
                return False
        elif attr in self.banned_attributes:
            self.flag(attr)
            return False
        return True

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if isinstance(node.value, ast.Name):
            self.module_bases.add(id(node.value))
        self.generic_visit(node)  # inner accesses first: x.__class__.__bases__ reports __class__
        self.check_attribute_name(node.attr)
        root = node.value
        while isinstance(root, ast.Attribute):
            root = root.value
        if isinstance(root, ast.Name) and root.id in self.module_aliases:
            if node.attr.startswith("_") or node.attr in self.banned_module_attributes:
                self.flag(node.attr)

    def visit_Constant(self, node: ast.Constant) -> None:
        value = node.value
        if isinstance(value, bytes):
            value = value.decode("latin-1")
        if isinstance(value, str):
            for m in _DUNDER.finditer(value):
                if m.group(0) not in self.allowed_dunders and m.group(0) != "__name__":
                    self.flag(m.group(0))

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        if (
            self.cfg.allow_getattr_constant
            and isinstance(func, ast.Name)
            and func.id in _ATTR_BY_NAME
            and len(node.args) >= 2
            and not any(isinstance(a, ast.Starred) for a in node.args)
            and not node.keywords
            and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, str)
        ):
            if self.check_attribute_name(node.args[1].value):
                self.approved_calls.add(id(func))
        self.generic_visit(node)


def _is_allowed_submodule(package: str, name: str, cfg: SafetyConfig) -> bool:
    """Whether ``from package import name`` binds a module (only asked for allowlisted packages)."""
    if package.split(".")[0] not in cfg.allowed_modules:
        return False
    try:
        return importlib.util.find_spec(f"{package}.{name}") is not None
    except (ImportError, ValueError, AttributeError):
        return False


def check_program(program: str | ast.AST, cfg: SafetyConfig | None = None) -> str | None:
    """``None`` when ``program`` passes the AST check, else the first reason ``banned:<name>``.

    ``program`` is source text or an already parsed tree; a program that does not parse gives
    ``syntax_error`` (the caller usually parses first).
    """
    cfg = cfg or SafetyConfig()
    if isinstance(program, str):
        try:
            program = ast.parse(program)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            return "syntax_error"
    checker = _Checker(cfg)
    try:
        for node in ast.walk(program):  # module aliases first: a function may use one imported later
            if isinstance(node, ast.Import):
                names = [a.asname or a.name.split(".")[0] for a in node.names]
                checker.module_aliases.update(names)
                checker.module_names.update(names)
            elif isinstance(node, ast.ImportFrom):
                checker.module_aliases.update(a.asname or a.name for a in node.names if a.name != "*")
                checker.module_names.update(
                    a.asname or a.name
                    for a in node.names
                    if a.name != "*"
                    and not node.level
                    and _is_allowed_submodule(node.module or "", a.name, cfg)
                )
        checker.visit(program)
    except RecursionError:
        return banned("nesting_depth")  # too deep to check is too deep to accept
    return checker.finding

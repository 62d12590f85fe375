"""AST safety check of proposed programs: a task-quality rule that rejects unsafe or nondeterministic
programs early, with a reason ``banned:<name>``. It is not the security boundary (the sandbox is,
and holds on its own), but it must hold against any spelling of a banned capability, so every rule
is an allowlist or closes a whole family by construction, never a list of known spellings.

The check works on the syntax tree, never on substrings (the AZR reference searched the source text,
so ``import os`` with two spaces slipped through). Rules (the lists are configuration, ``SafetyConfig``):

- **Modules: allowlists all the way down.** ``import m`` / ``from m import n`` only for ``m`` in
  ``allowed_modules``; a module is then reached only through the allowlist of its public names
  (``module_names``, the packaged ``allowed_module_names.json``): ``m.a`` and ``from m import a``
  need ``a`` in it (``typing.collections`` and ``dataclasses.sys`` are not, nor is anything private).
  The list is each module's public API less its submodules and the functions that turn strings into
  attribute access or code (``typing.get_type_hints``, ``typing.ForwardRef``, ``functools.wraps`` /
  ``update_wrapper``, ``functools.singledispatch``, ``operator.attrgetter`` / ``methodcaller``,
  ``string.Formatter``, ``dataclasses.make_dataclass``). ``from m import *`` only where every name it
  binds is on the list. A module bound by an import is usable only as ``m.attr``
  (``banned:module_as_value``), so no alias escapes these rules.
- **Attribute names: no ``_`` prefix, anywhere.** An attribute name starting with ``_`` is rejected
  wherever a program can name one: attribute access, keyword attributes of ``match`` class patterns,
  the field paths of format strings (``'{0.gi_frame}'``), and the constant name of
  ``getattr``/``setattr``/``delattr``/``hasattr``; the only exceptions are ``allowed_dunders``
  (``__init__`` for ``super().__init__()``, ``__name__``, and the dunder methods a class may define,
  which lead nowhere new). The public attributes of frames, code, tracebacks, generators,
  coroutines and cells (``gi_frame``, ``f_back``, ``f_globals``, ``co_code``, ``cell_contents``...)
  are rejected too; that set is read from the interpreter's own types, so it is complete for the
  running Python.
- **Strings become attribute names only through constants.** ``getattr`` and friends only as a direct
  call with a constant name; ``.format``/``.format_map`` only on a string literal (whose field paths
  are checked above), never on a string built at run time; a string constant naming a dunder outside
  ``allowed_dunders`` is rejected (``type('X', (), {'__getattr__': ...})``).
- **User-defined dunder methods** only from ``allowed_dunders`` (``__init__``, ``__repr__``,
  ``__eq__``, ``__lt__``, ``__hash__``, ``__len__``, ``__iter__``, ``__getitem__``, the other
  comparison, arithmetic and container methods...): never ``__getattr__``, ``__setattr__``,
  ``__set_name__``, ``__init_subclass__``, ``__reduce__``, ``__exit__``, ``__del__``... through which
  the interpreter would hand a program's code an object or an attribute name it did not choose.
- **Positional ``match`` class patterns** look attributes up by the names in the class's
  ``__match_args__``, which a program could build at run time; they are accepted only for the
  built-in self-matching types (``int(x)``, ``str(s)``... when the program never rebinds the name) and
  for the program's own ``@dataclass`` classes without bases or class keywords
  (``banned:match_positional`` otherwise).
- **Names:** a name in ``banned_names`` (``eval``, ``exec``, ``open``, ``id``, ``hash``...) in any
  context, even as a parameter; dunder names other than ``__name__`` and ``__slots__``.
- **No class is built from a namespace at run time** (``safety_classes.py``): CPython looks some
  special names up on a class as data, in C (the copy protocol's slot names, ``__format__``...), so
  a metaclass (``type``, ``ABCMeta``, ``EnumType``, ``typing.Type``) is never a value a class can be
  built from (``type(x)`` with one argument only, its result never passed on), the enum functional
  API is refused, and ``__slots__`` is a literal of public names.

The check also keeps the task distribution deterministic and cheap to run (no ``random``, ``time``,
``id``, ``hash``).
"""

from __future__ import annotations

import ast
import json
import re
import string
import types
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources

from populora.tasks.records import banned
from populora.tasks.safety_classes import ClassRules

MODULE_NAMES_FILE = "allowed_module_names.json"


@lru_cache(maxsize=1)
def _packaged_module_names() -> dict[str, dict]:
    text = resources.files("populora.tasks").joinpath("data", MODULE_NAMES_FILE).read_text(encoding="utf-8")
    return json.loads(text)["modules"]


def default_module_names() -> tuple[tuple[str, tuple[str, ...]], ...]:
    """``((module, its allowed public names), ...)`` from the packaged list (a tuple: the config
    stays hashable)."""
    return tuple((m, tuple(v["names"])) for m, v in _packaged_module_names().items())


def default_star_modules() -> tuple[str, ...]:
    """Modules whose ``import *`` binds only allowed names."""
    return tuple(m for m, v in _packaged_module_names().items() if v["star_import"])


DEFAULT_ALLOWED_MODULES = tuple(m for m in _packaged_module_names() if "." not in m)

DEFAULT_BANNED_NAMES = (
    # code execution and introspection of the interpreter
    "eval", "exec", "compile", "__import__", "globals", "locals", "vars", "breakpoint", "help",
    "exit", "quit", "copyright", "credits", "license",
    # files and terminal I/O (print is allowed; its output is ignored)
    "open", "input",
    # values that differ between processes
    "id", "hash",
    # attribute access by computed name (constant names are checked in visit_Call)
    "getattr", "setattr", "delattr", "hasattr",
    # the string-to-attribute and string-to-code functions left out of the module allowlist, in
    # case a program gets hold of one by another name (``from typing import *`` is refused anyway)
    "attrgetter", "methodcaller", "get_type_hints", "ForwardRef", "singledispatch",
    "singledispatchmethod", "Formatter", "update_wrapper", "wraps", "make_dataclass",
)  # fmt: skip

# Module names as attributes of any object (a module reached some other way): defence in depth
DEFAULT_BANNED_ATTRIBUTES = (
    "sys", "os", "builtins", "inspect", "importlib", "subprocess", "socket", "shutil", "ctypes",
    "threading", "multiprocessing", "asyncio", "pickle", "marshal", "posix", "system", "popen",
    "bltns", "types", "gc", "codecs", "io", "signal", "modules", "get_field", "format_field", "mro",
    *DEFAULT_BANNED_NAMES[-11:],
)  # fmt: skip

# Dunder attributes a program may name and dunder methods a class may define: they give nothing an
# ordinary call does not (comparisons, arithmetic, containers, conversion to text and numbers).
DEFAULT_ALLOWED_DUNDERS = (
    "__init__", "__name__", "__post_init__", "__repr__", "__str__", "__hash__", "__bool__",
    "__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__",
    "__len__", "__iter__", "__next__", "__reversed__", "__contains__", "__getitem__",
    "__setitem__", "__delitem__", "__missing__", "__call__",
    "__add__", "__sub__", "__mul__", "__matmul__", "__truediv__", "__floordiv__", "__mod__",
    "__divmod__", "__pow__", "__lshift__", "__rshift__", "__and__", "__or__", "__xor__",
    "__radd__", "__rsub__", "__rmul__", "__rmatmul__", "__rtruediv__", "__rfloordiv__",
    "__rmod__", "__rpow__", "__rand__", "__ror__", "__rxor__",
    "__iadd__", "__isub__", "__imul__", "__itruediv__", "__ifloordiv__", "__imod__",
    "__iand__", "__ior__", "__ixor__",
    "__neg__", "__pos__", "__abs__", "__invert__", "__int__", "__float__", "__index__",
    "__round__", "__floor__", "__ceil__", "__trunc__",
)  # fmt: skip

_HARMLESS_INTERPRETER_ATTRIBUTES = {"send", "throw", "close", "aclose", "asend", "athrow", "clear", "replace"}


@lru_cache(maxsize=1)
def interpreter_attributes() -> frozenset[str]:
    """Public attributes of frames, code, tracebacks, generators, coroutines, cells and functions of
    the running interpreter (``gi_frame``, ``f_globals``, ``co_code``...), read from the types."""
    kinds = (
        types.FrameType, types.CodeType, types.TracebackType, types.GeneratorType, types.CoroutineType,
        types.AsyncGeneratorType, types.CellType, types.FunctionType, types.MethodType,
        types.BuiltinFunctionType,
    )  # fmt: skip
    names = {n for kind in kinds for n in dir(kind) if not n.startswith("_")}
    return frozenset(names - _HARMLESS_INTERPRETER_ATTRIBUTES)


SELF_MATCHING = frozenset(
    {"bool", "bytearray", "bytes", "dict", "float", "frozenset", "int", "list", "set", "str", "tuple"}
)
_ATTR_BY_NAME = ("getattr", "setattr", "delattr", "hasattr")
_DUNDER = re.compile(r"__\w+__")
_ALLOWED_DUNDER_NAMES = frozenset({"__name__", "__slots__"})  # as plain names (not attributes)
_ALLOWED_DUNDER_STRINGS = _ALLOWED_DUNDER_NAMES | {"__main__"}  # in string constants


@dataclass(frozen=True)
class SafetyConfig:
    """What the AST check accepts; see the module docstring for the rules."""

    allowed_modules: tuple[str, ...] = DEFAULT_ALLOWED_MODULES
    banned_names: tuple[str, ...] = DEFAULT_BANNED_NAMES
    banned_attributes: tuple[str, ...] = DEFAULT_BANNED_ATTRIBUTES
    allowed_dunders: tuple[str, ...] = DEFAULT_ALLOWED_DUNDERS
    allow_getattr_constant: bool = True  # getattr(obj, 'name') with a constant, allowed name
    module_names: tuple[tuple[str, tuple[str, ...]], ...] = field(default_factory=default_module_names)
    star_modules: tuple[str, ...] = field(default_factory=default_star_modules)


class _Checker(ClassRules, ast.NodeVisitor):
    def __init__(self, cfg: SafetyConfig, tree: ast.AST) -> None:
        self.cfg = cfg
        self.allowed_modules = frozenset(cfg.allowed_modules)
        self.banned_names = frozenset(cfg.banned_names)
        self.banned_attributes = frozenset(cfg.banned_attributes) | interpreter_attributes()
        self.allowed_dunders = frozenset(cfg.allowed_dunders)
        self.module_names = {m: frozenset(names) for m, names in cfg.module_names}
        self.finding: str | None = None
        self.approved_calls: set[int] = set()  # Name nodes approved as getattr(obj, 'const')
        self.module_bases: set[int] = set()  # Name nodes used as ``module.attr``
        self.format_receivers: set[int] = set()  # Constant nodes used as ``'...'.format``
        self.modules: dict[str, str] = {}  # name bound by an import -> the module it is
        self.bound: dict[str, list[ast.AST]] = {}  # every binding of a name (for match patterns)
        self.dataclass_uses: set[int] = set()  # nodes naming the real dataclass as a decorator
        for node in ast.walk(tree):  # imports first: a function may use a module imported later
            self._collect(node)
        self.index_tree(tree)  # parents and annotations (safety_classes.py)

    def flag(self, name: str) -> None:
        if self.finding is None:
            self.finding = banned(reason_name(name))

    def _collect(self, node: ast.AST) -> None:
        if isinstance(node, ast.Import):
            for a in node.names:
                bound = a.asname or a.name.split(".")[0]
                self.modules[bound] = a.name if a.asname else a.name.split(".")[0]
                self.bound.setdefault(bound, []).append(node)
        elif isinstance(node, ast.ImportFrom):
            for a in node.names:
                if a.name != "*":
                    full = f"{node.module}.{a.name}"
                    if not node.level and full in self.module_names:  # a submodule
                        self.modules[a.asname or a.name] = full
                    self.bound.setdefault(a.asname or a.name, []).append(node)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            self.bound.setdefault(node.name, []).append(node)
        elif isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
            self.bound.setdefault(node.id, []).append(node)
        elif isinstance(node, ast.arg):
            self.bound.setdefault(node.arg, []).append(node)
        elif isinstance(node, (ast.MatchAs, ast.MatchStar)) and node.name:
            self.bound.setdefault(node.name, []).append(node)
        elif isinstance(node, ast.MatchMapping) and node.rest:
            self.bound.setdefault(node.rest, []).append(node)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            self.bound.setdefault(node.name, []).append(node)
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            for name in node.names:
                self.bound.setdefault(name, []).append(node)

    # --- names ---------------------------------------------------------------------------------
    def check_name(self, name: str) -> None:
        if name in self.banned_names:
            self.flag(name)
        elif _DUNDER.fullmatch(name) and name not in _ALLOWED_DUNDER_NAMES:
            self.flag(name)

    def visit_Name(self, node: ast.Name) -> None:
        if id(node) in self.approved_calls:
            return
        self.check_name(node.id)
        if isinstance(node.ctx, ast.Load):
            self.check_metaclass_use(node)  # type, ABCMeta...: never a value a class is built from
        if id(node) not in self.dataclass_uses and self._names_real_dataclass(node):
            self.flag("dataclass")  # dataclass(C) on a class built at run time, or as a value
        if node.id in self.modules and id(node) not in self.module_bases:
            self.flag("module_as_value")  # m = json; m.codecs would escape the attribute rules

    def visit_arg(self, node: ast.arg) -> None:
        self.check_name(node.arg)
        self.generic_visit(node)

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        if _DUNDER.fullmatch(node.name):
            if node.name not in self.allowed_dunders:
                self.flag(node.name)  # user-defined dunder methods: the allowlist only
        else:
            self.check_name(node.name)
        self.generic_visit(node)

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self.check_name(node.name)
        self.check_slots(node)
        found = [self._dataclass_decorator(d) for d in node.decorator_list]
        if any(found):
            # dataclass builds code from the field names (exec) and writes them with setattr: only
            # on a class statement whose names the program wrote (no metaclass, plain bases)
            if self._plain_class(node.name) is None:
                self.flag("dataclass")
            self.dataclass_uses.update(id(n) for n in found if n is not None)
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

    def visit_MatchClass(self, node: ast.MatchClass) -> None:
        for attr in node.kwd_attrs:  # case C(name=...): an attribute lookup by that name
            self.check_attribute_name(attr)
        if node.patterns and not self._positional_patterns_safe(node.cls):
            self.flag("match_positional")
        self.generic_visit(node)

    # --- dataclasses ----------------------------------------------------------------------------
    def _names_real_dataclass(self, node: ast.expr) -> bool:
        """Whether ``node`` is ``dataclass`` bound once by ``from dataclasses import dataclass [as n]``
        or ``dataclasses.dataclass`` with ``dataclasses`` bound once by ``import dataclasses``:
        resolved through the program's imports, never matched by the name alone."""
        if isinstance(node, ast.Name):
            bindings = self.bound.get(node.id, [])
            return (
                len(bindings) == 1
                and isinstance(bindings[0], ast.ImportFrom)
                and bindings[0].module == "dataclasses"
                and not bindings[0].level
                and any(a.name == "dataclass" and (a.asname or a.name) == node.id for a in bindings[0].names)
            )
        if isinstance(node, ast.Attribute) and node.attr == "dataclass" and isinstance(node.value, ast.Name):
            bindings = self.bound.get(node.value.id, [])
            return (
                len(bindings) == 1
                and isinstance(bindings[0], ast.Import)
                and self.modules.get(node.value.id) == "dataclasses"
            )
        return False

    def _dataclass_decorator(self, node: ast.expr) -> ast.expr | None:
        """The node naming the real dataclass in a decorator ``@dataclass`` or ``@dataclass(k=const)``."""
        if self._names_real_dataclass(node):
            return node
        if (
            isinstance(node, ast.Call)
            and not node.args
            and all(k.arg is not None and isinstance(k.value, ast.Constant) for k in node.keywords)
            and self._names_real_dataclass(node.func)
        ):
            return node.func
        return None

    def _plain_class(self, name: str, seen: frozenset[str] = frozenset()) -> ast.ClassDef | None:
        """The program's own class ``name`` when it is bound once, by a class statement without
        keywords (no metaclass), whose decorators are the real dataclass only and whose bases are
        plain classes too (or ``object``): its namespace and fields are what the program wrote."""
        bindings = self.bound.get(name, [])
        if name in seen or len(bindings) != 1 or not isinstance(bindings[0], ast.ClassDef):
            return None
        node = bindings[0]
        if node.keywords or any(self._dataclass_decorator(d) is None for d in node.decorator_list):
            return None
        for base in node.bases:
            if not isinstance(base, ast.Name):
                return None
            if not (base.id == "object" and not self.bound.get("object")) and not self._plain_class(
                base.id, seen | {name}
            ):
                return None
        return node

    def _positional_patterns_safe(self, cls: ast.expr) -> bool:
        if not isinstance(cls, ast.Name):
            return False
        bindings = self.bound.get(cls.id, [])
        if not bindings:
            return cls.id in SELF_MATCHING  # a built-in type the program never rebinds
        node = self._plain_class(cls.id)
        if node is None or node.bases or len(node.decorator_list) != 1:
            return False
        own_dataclass = self._dataclass_decorator(node.decorator_list[0]) is not None
        fields_public = all(
            not (
                isinstance(s, ast.AnnAssign)
                and isinstance(s.target, ast.Name)
                and s.target.id.startswith("_")
            )
            for s in node.body
        )
        return own_dataclass and fields_public

    # --- imports -------------------------------------------------------------------------------
    def check_module(self, module: str) -> None:
        root = module.split(".")[0]
        if root not in self.allowed_modules:
            self.flag(root)
        elif module not in self.module_names:
            self.flag(module.split(".")[-1])  # a submodule outside the allowlist (or private)

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self.check_module(alias.name)
            self.check_name(alias.asname or alias.name.split(".")[0])

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level:
            self.flag("relative_import")
            return
        module = node.module or ""
        self.check_module(module)
        if self.finding is not None:
            return
        for alias in node.names:
            if alias.name == "*":
                if module not in self.cfg.star_modules:
                    self.flag("import_star")  # it would bind names outside the allowlist
                continue
            if alias.name not in self.module_names.get(module, ()):
                self.flag(alias.name)
            self.check_name(alias.name)
            if alias.asname:
                self.check_name(alias.asname)

    # --- attributes and strings ------------------------------------------------------------------
    def check_attribute_name(self, attr: str) -> bool:
        if attr.startswith("_"):
            if attr not in self.allowed_dunders:
                self.flag(attr)
                return False
        elif attr in self.banned_attributes:
            self.flag(attr)
            return False
        return True

    def _module_path(self, node: ast.expr) -> str | None:
        """``typing.collections`` -> the module that expression names, if it names one."""
        if isinstance(node, ast.Name):
            return self.modules.get(node.id)
        if isinstance(node, ast.Attribute):
            base = self._module_path(node.value)
            if base is not None and f"{base}.{node.attr}" in self.module_names:
                return f"{base}.{node.attr}"
        return None

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if id(node) not in self.dataclass_uses and self._names_real_dataclass(node):
            self.flag("dataclass")
        if isinstance(node.ctx, ast.Load):
            self.check_metaclass_use(node)  # abc.ABCMeta, enum.EnumType...
        if isinstance(node.value, ast.Name):
            self.module_bases.add(id(node.value))
        if node.attr in ("format", "format_map"):
            if isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
                self.format_receivers.add(id(node.value))
            else:
                self.flag(node.attr)  # a format string built at run time could name any attribute
        self.generic_visit(node)  # inner accesses first: x.__class__.__bases__ reports __class__
        if not self.check_attribute_name(node.attr):
            return
        module = self._module_path(node.value)
        if module is not None and node.attr not in self.module_names.get(module, ()):
            self.flag(node.attr)  # only the allowlisted public names of an allowed module

    def visit_Constant(self, node: ast.Constant) -> None:
        value = node.value
        if isinstance(value, bytes):
            value = value.decode("latin-1")
        if not isinstance(value, str):
            return
        for m in _DUNDER.finditer(value):
            if m.group(0) not in self.allowed_dunders and m.group(0) not in _ALLOWED_DUNDER_STRINGS:
                self.flag(m.group(0))
        if "{" in value:
            for attr in format_field_attributes(value):
                self.check_attribute_name(attr)

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
        if self.metaclass_name(func) == "type":
            self.check_type_result(node)
        self.check_enum_call(node)
        self.generic_visit(node)


MAX_REASON_NAME = 80  # ours: a rejection reason names what was banned, never a whole program


def reason_name(name: str) -> str:
    """What a ``banned:<name>`` reason says of ``name`` (program text): at most
    ``MAX_REASON_NAME`` characters, every non-printable or non-ASCII character escaped, as the
    sandbox escapes its details; a cut name ends with ``...``."""
    text = name.encode("unicode_escape").decode("ascii")  # \n, \x1b, \u00e9: ASCII, printable
    return text if len(text) <= MAX_REASON_NAME else text[: MAX_REASON_NAME - 3] + "..."


_FIELD_PART = re.compile(r"\.([^.\[]*)|\[([^\]]*)\]")


def format_field_attributes(text: str, depth: int = 0) -> list[str]:
    """Attribute names in the replacement fields of ``text`` read as a ``str.format`` string
    (``'{0.a.b[1]}'`` -> ``['a', 'b']``), nested fields of format specs included. A string that is
    not a valid format string gives none (``.format`` on it raises)."""
    try:
        parsed = list(string.Formatter().parse(text))
    except (ValueError, TypeError):
        return []
    attrs: list[str] = []
    for _, field_name, spec, _ in parsed:
        if field_name:
            head = re.match(r"[^.\[]*", field_name).end()
            attrs += [m.group(1) for m in _FIELD_PART.finditer(field_name, head) if m.group(1) is not None]
        if spec and "{" in spec and depth < 2:
            attrs += format_field_attributes(spec, depth + 1)
    return attrs


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
    try:
        checker = _Checker(cfg, program)
        checker.visit(program)
    except RecursionError:
        return banned("nesting_depth")  # too deep to check is too deep to accept
    return checker.finding

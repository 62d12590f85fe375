"""The AST check's rules for classes built at run time (part of ``safety.py``'s checker).

CPython looks some special names up on a class as *data*, in C: the copy protocol's slot names
(``__slotnames__``, ``__slots__``), ``__reduce__``/``__reduce_ex__``/``__getstate__``,
``__format__``, ``__class_getitem__``, ``__match_args__``... A class statement's names are written
in the program and vetted (``check_name``, the dunder-method allowlist); a class namespace built at
run time (``type('C', (), {'__slot' + 'names__': [...]})``, ``ABCMeta(...)``, ``Enum('E', names)``)
is not, and through those C lookups a program reached a general attribute getter (issue 32). So a
class is never built from a namespace at run time:

* **metaclasses are not values.** ``type`` is called with one argument only (``type(x)``), and what
  it returns is only compared, subscripted with, formatted, called with at most one argument
  (``type(x)(items)``: a one-argument call never builds a class), or has an attribute read (not
  ``mro``, ``__call__``, ``__new__``, ``__init__``); ``abc.ABCMeta``, ``enum.EnumMeta``,
  ``enum.EnumType`` and ``typing.Type`` appear only in annotations, as ``metaclass=`` of a class
  statement (whose namespace the program wrote) or as the second argument of ``isinstance``/
  ``issubclass`` (so no class statement derives from a metaclass either: ``banned:<name>``);
* **no enum functional API**: an enum class (``enum.Enum`` and its kin, or a program class
  deriving from one) is called with one argument (a value lookup), never with a name and members
  (``banned:enum_functional``);
* **``__slots__``** is a literal string or tuple/list of string constants, each a public name
  (``banned:__slots__``).
"""

from __future__ import annotations

import ast

METACLASSES = {("abc", "ABCMeta"), ("enum", "EnumMeta"), ("enum", "EnumType"), ("typing", "Type")}
ENUM_BASES = {("enum", n) for n in ("Enum", "IntEnum", "Flag", "IntFlag", "StrEnum", "ReprEnum")}
_TYPE_RESULT_ATTRIBUTES_BANNED = {"mro", "__call__", "__new__", "__init__"}
_HARMLESS_RECEIVERS = {"isinstance", "issubclass", "str", "repr", "print", "type", "format"}


class ClassRules:
    """Mixin of ``safety._Checker``: needs its ``flag``, ``bound``, ``modules`` and the parent and
    annotation maps that ``index_tree`` builds."""

    def index_tree(self, tree: ast.AST) -> None:
        self.parents: dict[int, ast.AST] = {}
        self.in_annotation: set[int] = set()
        for node in ast.walk(tree):
            for child in ast.iter_child_nodes(node):
                self.parents[id(child)] = node
            annotations = []
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                annotations.append(node.returns)
                args = node.args
                annotations += [a.annotation for a in (*args.posonlyargs, *args.args, *args.kwonlyargs,
                                                        args.vararg, args.kwarg) if a is not None]
            elif isinstance(node, ast.AnnAssign):
                annotations.append(node.annotation)
            for ann in annotations:
                if ann is not None:
                    self.in_annotation.update(id(n) for n in ast.walk(ann))

    # --- what a name or attribute stands for --------------------------------------------------
    def _imported(self, node: ast.expr) -> tuple[str, str] | None:
        """(module, name) when ``node`` is ``name`` bound once by ``from module import name`` or
        ``module.name`` with ``module`` bound by an import; the builtin ``type`` as ("", "type")."""
        if isinstance(node, ast.Name):
            bindings = self.bound.get(node.id, [])
            if not bindings:
                return ("", node.id) if node.id == "type" else None
            if len(bindings) == 1 and isinstance(bindings[0], ast.ImportFrom) and not bindings[0].level:
                for alias in bindings[0].names:
                    if (alias.asname or alias.name) == node.id:
                        return bindings[0].module or "", alias.name
            return None
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            module = self.modules.get(node.value.id)
            return (module, node.attr) if module else None
        return None

    def metaclass_name(self, node: ast.expr) -> str | None:
        found = self._imported(node)
        if found == ("", "type") or found in METACLASSES:
            return found[1]
        return None

    def is_enum_class(self, node: ast.expr, seen: frozenset[str] = frozenset()) -> bool:
        if self._imported(node) in ENUM_BASES:
            return True
        if isinstance(node, ast.Name) and node.id not in seen:
            bindings = self.bound.get(node.id, [])
            if len(bindings) == 1 and isinstance(bindings[0], ast.ClassDef):
                return any(self.is_enum_class(b, seen | {node.id}) for b in bindings[0].bases)
        return False

    # --- the rules ------------------------------------------------------------------------------
    def check_metaclass_use(self, node: ast.expr) -> None:
        """``node`` names a metaclass (``metaclass_name``): allowed where no class can be built."""
        name = self.metaclass_name(node)
        if name is None or id(node) in self.in_annotation:
            return
        parent = self.parents.get(id(node))
        if isinstance(parent, ast.Call) and parent.func is node:
            if name == "type" and len(parent.args) == 1 and not parent.keywords and \
                    not isinstance(parent.args[0], ast.Starred):
                return  # type(x): one argument, the class of x
        elif isinstance(parent, ast.keyword) and parent.arg == "metaclass" and \
                isinstance(self.parents.get(id(parent)), ast.ClassDef):
            return
        elif self._second_argument_of_a_check(node):
            return
        self.flag(name)

    def _second_argument_of_a_check(self, node: ast.expr) -> bool:
        parent = self.parents.get(id(node))
        if isinstance(parent, ast.Tuple):
            node, parent = parent, self.parents.get(id(parent))
        return (isinstance(parent, ast.Call) and isinstance(parent.func, ast.Name)
                and parent.func.id in ("isinstance", "issubclass") and not self.bound.get(parent.func.id)
                and len(parent.args) == 2 and parent.args[1] is node)

    def check_type_result(self, call: ast.Call) -> None:
        """``call`` is ``type(x)``: what it gives (a class, maybe a metaclass) goes nowhere a class
        could be built from it."""
        if id(call) in self.in_annotation:
            return
        parent = self.parents.get(id(call))
        if isinstance(parent, ast.Attribute):
            if parent.attr in _TYPE_RESULT_ATTRIBUTES_BANNED:
                self.flag(parent.attr)
            return
        if isinstance(parent, (ast.Compare, ast.FormattedValue)):
            return
        if isinstance(parent, ast.Subscript) and parent.slice is call:
            return
        if isinstance(parent, ast.Call):
            if parent.func is call:
                if len(parent.args) <= 1 and not parent.keywords and \
                        not any(isinstance(a, ast.Starred) for a in parent.args):
                    return  # type(x)(items): one argument never builds a class
            elif isinstance(parent.func, ast.Name) and parent.func.id in _HARMLESS_RECEIVERS and \
                    not self.bound.get(parent.func.id) and call in parent.args:
                return
        if self._second_argument_of_a_check(call):
            return
        self.flag("type")

    def check_enum_call(self, node: ast.Call) -> None:
        if (len(node.args) > 1 or node.keywords or any(isinstance(a, ast.Starred) for a in node.args)) \
                and self.is_enum_class(node.func):
            self.flag("enum_functional")  # Enum('E', names): a class namespace built at run time

    def check_slots(self, node: ast.ClassDef) -> None:
        for stmt in node.body:
            targets = stmt.targets if isinstance(stmt, ast.Assign) else \
                [stmt.target] if isinstance(stmt, (ast.AnnAssign, ast.AugAssign)) else []
            if not any(isinstance(t, ast.Name) and t.id == "__slots__" for t in targets):
                continue
            value = getattr(stmt, "value", None)
            items = value.elts if isinstance(value, (ast.Tuple, ast.List)) else [value]
            if isinstance(stmt, ast.AugAssign) or not all(
                isinstance(i, ast.Constant) and isinstance(i.value, str) and i.value.isidentifier()
                and not i.value.startswith("_") for i in items
            ):
                self.flag("__slots__")

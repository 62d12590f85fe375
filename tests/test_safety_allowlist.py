"""The module allowlist of the AST check, vetted: no allowed callable turns data into attribute access.

Every public name in ``allowed_module_names.json`` that is callable is inspected. For a function or
class written in Python, its source and that of every function of the same module it reaches (its
helpers, a class's methods and metaclass) are parsed; the test fails on any code that

* calls ``getattr``/``setattr``/``delattr``/``hasattr`` with a name that is not a string constant,
* calls ``vars``, ``eval``, ``exec``, ``globals``, ``__import__``, ``attrgetter`` or ``methodcaller``,
* uses one of those builtins as a value (``return getattr, (cls, name)`` hands it to the program),
* touches ``__dict__``, ``__setattr__``, ``__getattribute__``, ``__delattr__`` or ``sys.modules``,

unless the name is in ``REVIEWED`` with the reason it is harmless. C functions cannot be read
this way: they are listed in ``C_FUNCTIONS`` by hand, each with what it does with names. The names
removed for these reasons are in the JSON file's ``removed`` table; none may come back.

The C paths this covers: the C callables of the allowlist (``C_MODULES``), and the special names
the interpreter reads on a class in C (``C_LOOKUPS``: the copy protocol's slot names and reduce
hooks, ``__format__``, ``__class_getitem__``, ``__match_args__``...), each checked in every spelling
that could set it; ``test_the_c_lookups_table_covers_every_special_name_of_the_interpreters_types``
keeps the table complete for the running Python. What it does not read: C code that looks a name up
on an object the program did not build. The filter is AZR's task rule, not a security boundary: a
program that gets past it is still held by the sandbox, whose children have no clock and no
entropy (``docs/sandbox.md``, "Which layer guarantees what").
"""

from __future__ import annotations

import ast
import importlib
import inspect
import json
import textwrap
import types
from functools import cache
from importlib import resources

import pytest

from populora.tasks.safety import DEFAULT_ALLOWED_DUNDERS, default_module_names

ATTRIBUTE_FUNCTIONS = {"getattr", "setattr", "delattr", "hasattr"}
CODE_FUNCTIONS = {"vars", "eval", "exec", "globals", "__import__", "attrgetter", "methodcaller"}
ATTRIBUTE_TABLES = {"__dict__", "__setattr__", "__getattribute__", "__delattr__", "modules"}

# Python-level callables whose code does something above, kept after review. Each reason says why a
# program cannot choose the names (they come from its own class body, whose names the AST check
# vets, or from a fixed table of the module).
_TYPING = (
    "the generic-alias proxies forward the attribute name the program wrote (vetted by the AST check); "
    "Protocol/TypedDict/Generic read class namespaces and test names (a bool, never the value); "
    "ForwardRef._evaluate is reached only through get_type_hints and ForwardRef, both off the list"
)
_ENUM = (
    "member names come from the class body (vetted by the AST check) or the functional API; a run-time "
    "name there defines an attribute of the new enum class, the family of a class namespace built at "
    "run time (docs/sandbox.md); global_enum, the one writer into a module, is off the list"
)
REVIEWED = {
    "collections.UserDict": "__copy__ copies the instance's own __dict__ into a new instance of its class",
    "collections.UserList": "__copy__ copies the instance's own __dict__ into a new instance of its class",
    "collections.namedtuple": (
        "eval of a lambda whose parameters are the field names, which namedtuple checks first: "
        "identifiers, not keywords, no leading underscore"
    ),
    "copy.copy": (
        "setattr with the names of the state an object's own __reduce_ex__/__getstate__ gives: an "
        "instance's own attributes, or names a class namespace built at run time chooses (the open family "
        "of docs/sandbox.md); the writes land on the copy, which the program could build itself"
    ),
    "copy.deepcopy": "as copy.copy (used by honest tasks: the benchmark corpus)",
    "dataclasses.dataclass": (
        "exec and setattr with the names of the class's fields; the AST check accepts dataclass only as "
        "the decorator of a class statement without keywords whose bases are plain classes of the "
        "program, so the fields are names the program wrote in a class body (vetted)"
    ),
    "functools.cache": "update_wrapper with functools' fixed WRAPPER_ASSIGNMENTS/WRAPPER_UPDATES",
    "functools.lru_cache": "update_wrapper with functools' fixed WRAPPER_ASSIGNMENTS/WRAPPER_UPDATES",
    "functools.total_ordering": "getattr/setattr with the names of its fixed table of comparison methods",
    "string.Template": "__init_subclass__ reads the constant names 'pattern', 'delimiter'... of a subclass",
    **{f"enum.{n}": _ENUM for n in (
        "Enum", "EnumCheck", "EnumMeta", "EnumType", "Flag", "FlagBoundary", "IntEnum", "IntFlag",
        "ReprEnum", "StrEnum", "verify")},
    **{f"typing.{n}": _TYPING for n in (
        "Annotated", "Generic", "NamedTuple", "ParamSpec", "Protocol", "SupportsAbs", "SupportsBytes",
        "SupportsComplex", "SupportsFloat", "SupportsIndex", "SupportsInt", "SupportsRound", "TypeVar",
        "TypedDict", "get_args", "get_origin", "is_typeddict", "runtime_checkable")},
}  # fmt: skip

# Callables implemented in C (no source to read), reviewed by hand, per module: what they do with
# names. A new C callable on the list fails the test until it is reviewed here.
C_MODULES = {
    "abc": "ABC and the cache token: no names",
    "array": "typed arrays of numbers",
    "bisect": "comparisons of items (a key function the program passes is called, nothing more)",
    "cmath": "numbers in, numbers out",
    "collections": "containers; defaultdict calls the factory it was given",
    "collections.abc": "abstract classes (no code of their own)",
    "copy": "the Error class",
    "dataclasses": "the FrozenInstanceError class",
    "decimal": "numbers and their contexts (flags and traps are fixed names)",
    "functools": "partial/reduce/cmp_to_key call the callables they are given",
    "heapq": "comparisons of items",
    "itertools": "iterators; starmap and friends call the callables they are given",
    "keyword": "membership in fixed sets",
    "math": "numbers in, numbers out",
    "numbers": "the Number class",
    "operator": (
        "operators as functions: items (getitem/setitem/delitem), arithmetic, call; attrgetter and "
        "methodcaller, which take attribute names, are off the list"
    ),
    "re": "the Match and Pattern types",
    "statistics": "the StatisticsError class",
    "typing": "special forms and aliases (subscription builds aliases; no attribute names)",
    "unicodedata": "character properties",
}

# Turn data into attribute access or return builtins as data: must never be on the list.
NEVER = {
    "operator.attrgetter", "operator.methodcaller", "typing.get_type_hints", "typing.ForwardRef",
    "functools.wraps", "functools.update_wrapper", "functools.singledispatch",
    "functools.singledispatchmethod", "string.Formatter", "dataclasses.make_dataclass",
    "enum.pickle_by_enum_name", "enum.pickle_by_global_name", "enum.global_enum", "dataclasses.replace",
}  # fmt: skip


def data() -> dict:
    text = resources.files("populora.tasks").joinpath("data", "allowed_module_names.json").read_text()
    return json.loads(text)


def allowed_callables() -> list[tuple[str, object]]:
    out = []
    for module, names in default_module_names():
        mod = importlib.import_module(module)
        for name in names:
            obj = getattr(mod, name)
            if callable(obj) and not isinstance(obj, type(mod)):
                out.append((f"{module}.{name}", obj))
    return out


def _functions_of(obj) -> list[types.FunctionType]:
    """The Python functions that make up ``obj``: itself, or a class's methods (and properties)."""
    if isinstance(obj, types.FunctionType):
        return [obj]
    if isinstance(obj, type):
        found = []
        for value in vars(obj).values():
            for f in (value, getattr(value, "__func__", None), getattr(value, "fget", None),
                      getattr(value, "fset", None)):
                if isinstance(f, types.FunctionType):
                    found.append(f)
        return found
    wrapped = getattr(obj, "__wrapped__", None) or getattr(obj, "func", None)
    return _functions_of(wrapped) if wrapped is not None else []


@cache
def _tree(func: types.FunctionType) -> ast.AST | None:
    try:
        return ast.parse(textwrap.dedent(inspect.getsource(func)))
    except (OSError, TypeError, SyntaxError):
        return None


def findings_in(tree: ast.AST, constants: dict | None = None) -> list[str]:
    """What in one function's syntax tree turns data into attribute access (see the docstring);
    ``constants`` are the function's globals (a module-level string constant is a constant name)."""
    constants = constants or {}
    out, called = [], set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f = node.func
            name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None
            if name in ATTRIBUTE_FUNCTIONS:
                called.add(id(f))
                arg = node.args[1] if len(node.args) > 1 else None
                if not _constant_string(arg, constants):
                    out.append(f"{name} with a run-time name (line {node.lineno})")
            elif name in CODE_FUNCTIONS:
                called.add(id(f))
                out.append(f"{name}() (line {node.lineno})")
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id in ATTRIBUTE_FUNCTIONS | CODE_FUNCTIONS and id(node) not in called:
            out.append(f"{node.id} as a value (line {node.lineno})")
        elif isinstance(node, ast.Attribute) and node.attr in ATTRIBUTE_TABLES:
            out.append(f".{node.attr} (line {node.lineno})")
    return out


def _constant_string(node: ast.expr | None, constants: dict) -> bool:
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str)
    return isinstance(node, ast.Name) and node.id.isupper() and isinstance(constants.get(node.id), str)


def reached(obj, module: str) -> list[types.FunctionType]:
    """``obj``'s functions and every function or class of ``module`` they name, transitively."""
    todo = list(_functions_of(obj))
    if isinstance(obj, type) and type(obj).__module__ == module:
        todo += _functions_of(type(obj))
    seen: dict[int, types.FunctionType] = {}
    while todo:
        f = todo.pop()
        if id(f) in seen:
            continue
        seen[id(f)] = f
        tree = _tree(f)
        if tree is None:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Name):
                target = f.__globals__.get(node.id)
                if getattr(target, "__module__", None) == module and (
                    isinstance(target, (types.FunctionType, type))
                ):
                    todo += _functions_of(target)
    return list(seen.values())


def vet(qualname: str, obj) -> list[str]:
    module = getattr(obj, "__module__", None) or qualname.rsplit(".", 1)[0]
    found = []
    for f in reached(obj, module):
        tree = _tree(f)
        if tree is not None:
            found += [f"{f.__qualname__}: {x}" for x in findings_in(tree, f.__globals__)]
    return sorted(set(found))


def test_every_python_callable_of_the_allowlist_is_vetted():
    unreviewed = {}
    for qualname, obj in allowed_callables():
        if qualname in REVIEWED:
            continue
        found = vet(qualname, obj)
        if found:
            unreviewed[qualname] = found
    assert not unreviewed, json.dumps(unreviewed, indent=1)


def test_reviewed_entries_are_still_on_the_list_and_still_need_review():
    allowed = dict(allowed_callables())
    stale = [q for q in REVIEWED if q not in allowed or not vet(q, allowed[q])]
    assert not stale, f"reviewed but off the list or clean now: drop them from REVIEWED: {stale}"


def _is_python_level(obj) -> bool:
    return bool(_functions_of(obj))


def test_every_c_callable_of_the_allowlist_is_reviewed():
    unreviewed = [q for q, obj in allowed_callables() if not _is_python_level(obj)
                  and q.rsplit(".", 1)[0] not in C_MODULES]
    assert not unreviewed, unreviewed


def test_removed_names_stay_off_the_list_and_say_why():
    allowed = {q for q, _ in allowed_callables()}
    removed = data()["removed"]
    assert NEVER & allowed == set()
    assert set(removed) & allowed == set()
    assert all(isinstance(why, str) and len(why) > 20 for why in removed.values())
    for q in removed:  # a removed name is not bound by an allowed import *
        module = q.rsplit(".", 1)[0]
        assert not data()["modules"][module]["star_import"] or q.rsplit(".", 1)[1] not in vars(
            importlib.import_module(module)).get("__all__", ()), q


@pytest.mark.parametrize("name", sorted(NEVER))
def test_the_ast_check_rejects_the_removed_names(name):
    from populora.tasks.safety import check_program

    module, attr = name.rsplit(".", 1)
    assert check_program(f"import {module}\ndef f(x):\n    return {module}.{attr}").startswith("banned:")
    assert check_program(f"from {module} import {attr}\ndef f(x):\n    return x").startswith("banned:")


def test_the_scanner_sees_each_kind_of_finding():
    tree = ast.parse(
        "def g(o, n, v):\n    setattr(o, n, v)\n    getattr(o, 'fine')\n    o.__dict__\n    return getattr, vars(o)"
    )
    found = findings_in(tree)
    assert any("setattr with a run-time name" in x for x in found)
    assert not any("getattr with a run-time name" in x for x in found)
    assert any(".__dict__" in x for x in found) and any("getattr as a value" in x for x in found)
    assert any("vars()" in x for x in found)


# --- issue 32: special names the interpreter reads on a class in C ------------------------------
# Each special name CPython (or an allowlisted module) looks up on a class or an instance, with the
# C path that reads it. A program can set a name in five spellings: a def in a class body, an
# assignment in a class body, an attribute write, setattr with a constant, and a class namespace
# built at run time (type(), ABCMeta(), the enum functional API). The allowed dunder methods
# (safety.DEFAULT_ALLOWED_DUNDERS) may be set by the first, third and fourth: the interpreter calls
# them with the program's own objects. Every other name must be rejected in every spelling, and a
# run-time namespace is rejected whatever it holds (safety_classes.py).
C_LOOKUPS = {
    "__slots__": "type_new: member descriptors named by the strings; copyreg._slotnames",
    "__slotnames__": "object.__getstate__ (copy, pickle): getattr(obj, name) for each name",
    "__getstate__": "object.__reduce_ex__ (copy): the state copied onto the new object",
    "__setstate__": "copy._reconstruct: called with the state",
    "__reduce__": "object.__reduce_ex__: (callable, args, state) that copy calls and writes",
    "__reduce_ex__": "copy.copy/deepcopy: (callable, args, state) that copy calls and writes",
    "__getnewargs__": "object.__reduce_ex__ (protocol 2+): arguments to __new__",
    "__getnewargs_ex__": "object.__reduce_ex__ (protocol 2+): arguments to __new__",
    "__copy__": "copy.copy", "__deepcopy__": "copy.deepcopy",
    "__format__": "format(), f-strings, str.format: called with the format spec",
    "__class_getitem__": "subscription of a class (C[x])",
    "__match_args__": "match: positional class patterns getattr each name",
    "__init_subclass__": "type_new: called with the class keywords",
    "__set_name__": "type_new: called with the owner and the attribute name",
    "__mro_entries__": "class statement: replaces a base",
    "__prepare__": "class statement: the namespace mapping",
    "__instancecheck__": "isinstance", "__subclasscheck__": "issubclass",
    "__subclasshook__": "abc's subclass check", "__subclasses__": "type.__subclasses__ (abc)",
    "__getattr__": "attribute lookup fallback, with the name", "__getattribute__": "every attribute lookup",
    "__setattr__": "every attribute write, with the name", "__delattr__": "attribute deletion",
    "__get__": "descriptor read", "__set__": "descriptor write", "__delete__": "descriptor delete",
    "__del__": "finalizer", "__enter__": "with", "__exit__": "with: gets the traceback",
    "__length_hint__": "operator.length_hint, list()", "__fspath__": "os.fspath",
    "__bytes__": "bytes()", "__complex__": "complex()", "__dir__": "dir()", "__sizeof__": "sys.getsizeof",
    "__class__": "isinstance, super, assignment changes the type", "__dict__": "vars, attribute storage",
    "__weakref__": "weakref", "__module__": "repr, pickle by name", "__qualname__": "pickle by name",
    "__doc__": "help", "__annotations__": "dataclasses, typing", "__abstractmethods__": "abc",
    "__orig_bases__": "typing.Generic", "__parameters__": "typing subscription", "__wrapped__": "inspect.unwrap",
    "__signature__": "inspect.signature", "__text_signature__": "inspect.signature",
    "__isabstractmethod__": "abc", "__new__": "instance creation", "__aiter__": "async for",
    "__anext__": "async for", "__await__": "await", "__buffer__": "memoryview (3.12)",
    "__release_buffer__": "memoryview (3.12)", "__getformat__": "float's format description",
    "__rdivmod__": "divmod, reflected", "__rlshift__": "<<, reflected", "__rrshift__": ">>, reflected",
    # the allowed dunder methods: called with the program's own objects
    **{name: "an operator, a conversion or a container method: called with the program's own objects"
       for name in DEFAULT_ALLOWED_DUNDERS if name != "__name__"},
}


def _spellings(name: str) -> dict[str, str]:
    body = "def f(x):\n    return x\n"
    return {
        "def in a class body": f"class C:\n    def {name}(self, *a):\n        return 0\n" + body,
        "assignment in a class body": f"class C:\n    {name} = len\n" + body,
        "attribute write": f"class C:\n    pass\nC.{name} = len\n" + body,
        "setattr with a constant": f"class C:\n    pass\nsetattr(C, '{name}', len)\n" + body,
        "run-time namespace (type)": "def f(x):\n    return type('C', (), {x: len})\n",
        "run-time namespace (ABCMeta)": "import abc\ndef f(x):\n    return abc.ABCMeta('C', (), {x: len})\n",
        "run-time namespace (enum)": "import enum\ndef f(x):\n    return enum.Enum('E', [(x, 1)])\n",
    }


@pytest.mark.parametrize("name", sorted(C_LOOKUPS))
def test_a_special_name_read_in_c_is_set_only_by_vetted_spellings(name):
    from populora.tasks.safety import check_program

    allowed = name in DEFAULT_ALLOWED_DUNDERS
    for spelling, program in _spellings(name).items():
        reason = check_program(program)
        if spelling.startswith("run-time namespace") or not allowed:
            assert reason is not None and reason.startswith("banned:"), (name, spelling, reason)
        elif spelling != "assignment in a class body":  # a class body assigns no dunder as data
            assert reason is None, (name, spelling, reason)


def test_the_c_lookups_table_covers_every_special_name_of_the_interpreters_types():
    """Every dunder the built-in types of the running interpreter define is in the table: a new
    Python that adds one fails here until it is reviewed."""
    kinds = (object, type, int, float, complex, str, bytes, list, tuple, dict, set, frozenset, bool,
             types.FunctionType, types.MethodType, types.BuiltinFunctionType, types.ModuleType,
             BaseException, property, staticmethod, classmethod, super, memoryview, range, slice)
    names = {n for k in kinds for n in dir(k) if n.startswith("__") and n.endswith("__")}
    missing = sorted(names - set(C_LOOKUPS) - {"__name__", "__builtins__", "__closure__", "__code__",
                                               "__defaults__", "__globals__", "__kwdefaults__", "__func__",
                                               "__self__", "__bases__", "__base__", "__mro__", "__basicsize__",
                                               "__itemsize__", "__flags__", "__weakrefoffset__",
                                               "__dictoffset__", "__traceback__", "__context__", "__cause__",
                                               "__suppress_context__", "__notes__", "__type_params__",
                                               "__objclass__", "__set_name__", "__firstlineno__",
                                               "__static_attributes__", "__annotate__",
                                               "__self_class__", "__thisclass__"})
    # the rest are attributes the interpreter sets itself (read-only, or data a program cannot write
    # onto a class without a banned attribute name: the AST check rejects every one of them by name)
    assert not missing, missing

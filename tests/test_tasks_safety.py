"""AST safety check: banned imports/names/attributes, bypass attempts, and what must stay allowed."""

from __future__ import annotations

import pytest

from populora.tasks.safety import SafetyConfig, check_program

REJECTED = [
    # AZR defect: its substring ban list let these through
    ("import os\ndef f(x):\n    return x", "banned:os"),
    ("import  os\ndef f(x):\n    return x", "banned:os"),
    ("import os as q\ndef f(x):\n    return q.getcwd()", "banned:os"),
    ("import math, os\ndef f(x):\n    return x", "banned:os"),
    ("from os import *\ndef f(x):\n    return x", "banned:os"),
    ("from os.path import join\ndef f(x):\n    return x", "banned:os"),
    ("def f(x):\n    import subprocess\n    return x", "banned:subprocess"),
    ("import random\ndef f(x):\n    return random.random()", "banned:random"),
    ("import time\ndef f(x):\n    return time.time()", "banned:time"),
    ("from datetime import datetime\ndef f(x):\n    return str(datetime.now())", "banned:datetime"),
    ("import importlib\ndef f(x):\n    return x", "banned:importlib"),
    ("import ctypes\ndef f(x):\n    return x", "banned:ctypes"),
    ("from . import sibling\ndef f(x):\n    return x", "banned:relative_import"),
    # dynamic code and builtins
    ("def f(x):\n    return eval(x)", "banned:eval"),
    ("def f(x):\n    exec('y = 1')\n    return x", "banned:exec"),
    ("def f(x):\n    return compile('1', 's', 'eval')", "banned:compile"),
    ("def f(x):\n    return __import__('os').getcwd()", "banned:__import__"),
    ("def f(x):\n    return globals()", "banned:globals"),
    ("def f(x):\n    return vars()", "banned:vars"),
    ("def f(x):\n    return open('/etc/passwd').read()", "banned:open"),
    ("def f(x):\n    return input()", "banned:input"),
    ("def f(x):\n    return id(x)", "banned:id"),
    ("def f(x):\n    return hash(x)", "banned:hash"),
    ("def f(x):\n    breakpoint()\n    return x", "banned:breakpoint"),
    ("def f(x):\n    exit(0)", "banned:exit"),
    ("def f(x):\n    e = eval\n    return e(x)", "banned:eval"),
    ("def f(eval):\n    return eval", "banned:eval"),
    # string building and getattr
    ("def f(x):\n    return getattr(__builtins__, 'ev' + 'al')('1')", "banned:getattr"),
    ("def f(x):\n    name = 'real'\n    return getattr(x, name)", "banned:getattr"),
    ("def f(x):\n    g = getattr\n    return g(x, 'real')", "banned:getattr"),
    ("def f(x):\n    return getattr(x, '__class__')", "banned:__class__"),
    ("def f(x):\n    setattr(x, '__dict__', {})\n    return x", "banned:__dict__"),
    ("def f(x):\n    return getattr(x, *['real'])", "banned:getattr"),
    ("from operator import attrgetter\ndef f(x):\n    return attrgetter('real')(x)", "banned:attrgetter"),
    ("import operator\ndef f(x):\n    return operator.methodcaller('upper')(x)", "banned:methodcaller"),
    ("def f(x):\n    return '{0.__class__}'.format(x)", "banned:__class__"),
    # annotation strings evaluated as code
    (
        "import typing\ndef g(a: \"open('/etc/passwd')\"):\n    pass\ndef f(x):\n    return typing.get_type_hints(g)",
        "banned:get_type_hints",
    ),
    ("from typing import get_type_hints as h\ndef f(x):\n    return h(f)", "banned:get_type_hints"),
    ("from functools import singledispatch\ndef f(x):\n    return x", "banned:singledispatch"),
    # attribute access by built strings through string.Formatter
    (
        "import string\ndef f(x):\n    return string.Formatter().get_field('0._' + '_class__', [x], {})",
        "banned:Formatter",
    ),
    (
        "from string import Formatter as F\ndef f(x):\n    return F().get_field('0.real', [x], {})",
        "banned:Formatter",
    ),
    ("def f(x):\n    return b'__globals__'", "banned:__globals__"),
    # dunder attribute escapes
    ("def f(x):\n    return ().__class__.__bases__[0].__subclasses__()", "banned:__class__"),
    ("def f(x):\n    return f.__globals__", "banned:__globals__"),
    ("def f(x):\n    return f.__code__", "banned:__code__"),
    ("def f(x):\n    return __builtins__", "banned:__builtins__"),
    ("def f(x):\n    return [c for c in x.__mro__]", "banned:__mro__"),
    # module attributes that reach the interpreter from an allowed module
    ("import dataclasses\ndef f(x):\n    return dataclasses.sys.modules", "banned:sys"),
    ("import typing\ndef f(x):\n    return typing.sys", "banned:sys"),
    ("import statistics\ndef f(x):\n    return statistics.random.random()", "banned:random"),
    ("import json\ndef f(x):\n    return json.codecs", "banned:codecs"),
    ("import collections\ndef f(x):\n    return collections._sys", "banned:_sys"),
    ("from collections import _sys\ndef f(x):\n    return x", "banned:_sys"),
    ("from statistics import random as r\ndef f(x):\n    return r.choice(x)", "banned:random"),
    ("from dataclasses import sys\ndef f(x):\n    return x", "banned:sys"),
    ("def f(x):\n    def g():\n        yield 1\n    return g().gi_frame.f_back", "banned:gi_frame"),
    (
        "def f(x):\n    try:\n        1 / 0\n    except Exception as e:\n        return e.__traceback__",
        "banned:__traceback__",
    ),
]

G = "    def g():\n        yield 1\n"
# Issue 13, item 7: each of these came back valid with an unsafe capability
ITEM_7 = [
    # match class patterns: keyword attribute names
    (
        "def f(x):\n    match f:\n        case object(__globals__=g):\n            return g",
        "banned:__globals__",
    ),
    (
        "def f(x):\n" + G + "    match g():\n        case object(gi_frame=fr):\n            return fr",
        "banned:gi_frame",
    ),
    ("def f(x):\n    match x:\n        case object(_private=p):\n            return p", "banned:_private"),
    # positional class patterns look names up in a __match_args__ a program can build at run time
    (
        "def f(x):\n    C = x\n    match f:\n        case C(g):\n            return g",
        "banned:match_positional",
    ),
    (
        "def f(x):\n    int = x\n    match x:\n        case int(n):\n            return n",
        "banned:match_positional",
    ),
    # str.format field paths, in literals and f-strings, and format strings built at run time
    ("def f(x):\n" + G + "    return '{0.gi_frame.f_back.f_globals}'.format(g())", "banned:gi_frame"),
    ("def f(x):\n" + G + "    return f'{{0.gi_frame}}'.format(g())", "banned:format"),
    ("def f(x):\n    return '{0:{1.gi_code}}'.format(1, x)", "banned:gi_code"),
    ("def f(x):\n    return '{a._x}'.format_map({'a': x})", "banned:_x"),
    ("def f(x):\n    s = '{0.' + 'gi_frame}'\n    return s.format(x)", "banned:format"),
    ("def f(x):\n    return str.format('{0.real}', x)", "banned:format"),
    # typing ForwardRef evaluation of a string-built name
    (
        "import typing\ndef f(x):\n    return typing.ForwardRef('o' + 's')._evaluate({}, {}, frozenset())",
        "banned:ForwardRef",
    ),
    (
        "import typing\ndef f(x):\n    return typing.get_args(typing.Optional['x'])[0]._evaluate({}, {}, set())",
        "banned:_evaluate",
    ),
    # functools.update_wrapper with string-built '__globals__' captured by a user-defined dunder method
    (
        "import functools\nclass C:\n    def __setattr__(self, k, v):\n        self.v = v\n"
        "def f(x):\n    return functools.update_wrapper(C(), f, assigned=('__glo' + 'bals__',)).v",
        "banned:__setattr__",
    ),
    (
        "import functools\ndef f(x):\n    return functools.update_wrapper(x, f, assigned=(x,))",
        "banned:update_wrapper",
    ),
    ("from functools import wraps\ndef f(x):\n    return wraps(f, assigned=(x,))", "banned:wraps"),
    (
        "class C:\n    def __set_name__(self, owner, name):\n        pass\ndef f(x):\n    return 1",
        "banned:__set_name__",
    ),
    (
        "class C:\n    def __exit__(self, *a):\n        return a[2]\ndef f(x):\n    return 1",
        "banned:__exit__",
    ),
    ("def f(x):\n    return {'__getattr__': len}", "banned:__getattr__"),
    # issue 32: no class is built from a namespace at run time (C reads some of its names as data)
    ("def f(x):\n    return type('C', (), {'__getattr__': len})", "banned:type"),
    ("def f(x):\n    return type('C', (), {'__slot' + 'names__': ['x']})", "banned:type"),
    ("def f(x):\n    T = type(x)\n    return T('C', (), {})", "banned:type"),
    ("def f(x):\n    return type(type(x))('C', (), {})", "banned:type"),
    ("def f(x):\n    return g(type(x))\ndef g(t):\n    return t", "banned:type"),
    ("def f(x):\n    return type(x).mro()[0]", "banned:mro"),
    ("def f(x):\n    return type(x).__call__(type(x), 'C', (), {})", "banned:__call__"),
    ("class M(type):\n    pass\ndef f(x):\n    return M", "banned:type"),
    ("import abc\ndef f(x):\n    return abc.ABCMeta('C', (), {'__form' + 'at__': len})", "banned:ABCMeta"),
    ("from enum import EnumType\ndef f(x):\n    return EnumType", "banned:EnumType"),
    ("import typing\ndef f(x):\n    return typing.Type('C', (), {})", "banned:Type"),
    ("import enum\ndef f(x):\n    return enum.Enum('E', [('__reduce_' + 'ex__', 1)])", "banned:enum_functional"),
    ("from enum import Flag\nclass B(Flag):\n    pass\ndef f(x):\n    return B('E', 'A')", "banned:enum_functional"),
    ("class P:\n    __slots__ = ['__dict' + '__']\ndef f(x):\n    return P()", "banned:__slots__"),
    ("class P:\n    __slots__ = names\ndef f(x):\n    return P()", "banned:__slots__"),
    # module hops through allowed modules' private attributes and non-allowlisted public ones
    ("import typing\ndef f(x):\n    return typing.collections._sys.modules['os']", "banned:collections"),
    ("import typing\ndef f(x):\n    return typing.re", "banned:re"),
    ("import re\ndef f(x):\n    return re.enum.bltns", "banned:enum"),
    ("import json\ndef f(x):\n    return json.decoder.scanstring", "banned:decoder"),
    ("from typing import collections\ndef f(x):\n    return collections", "banned:collections"),
    ("from typing import *\ndef f(x):\n    return cast(int, x)", "banned:import_star"),
    ("import collections.abc as a\ndef f(x):\n    return a._collections_abc", "banned:_collections_abc"),
    ("def f(x):\n    return getattr(x, '_evaluate')", "banned:_evaluate"),
    ("def f(x):\n    return (lambda: x).__closure__[0].cell_contents", "banned:__closure__"),
]
REJECTED += ITEM_7


@pytest.mark.parametrize("program,reason", REJECTED)
def test_rejected_with_reason(program, reason):
    assert check_program(program) == reason


ALLOWED = [
    "def f(a):\n    return a",
    # AZR defect: a second def (helper), nested functions and classes are allowed
    "def helper(y):\n    return y * 2\n\ndef f(x):\n    return helper(x) + 1",
    "def f(x):\n    def inner(z):\n        return z - 1\n    return inner(x)",
    "class Node:\n    def __init__(self, v):\n        self.v = v\n    def __repr__(self):\n        return f'N({self.v})'\n\n"
    "def f(x):\n    return repr(Node(x))",
    "class A:\n    def __init__(self):\n        self.items = []\nclass B(A):\n    def __init__(self):\n"
    "        super().__init__()\ndef f(x):\n    return B().items",
    "import math\nimport itertools as it\nfrom collections import Counter, defaultdict\nfrom functools import lru_cache\n"
    "def f(x):\n    return math.gcd(x, 6) + len(list(it.permutations([1, 2])))",
    "from typing import List\nfrom dataclasses import dataclass\n@dataclass\nclass P:\n    x: int\ndef f(v: List[int]):\n"
    "    return [P(i).x for i in v]",
    "import re\ndef f(s):\n    return re.compile(r'[a-z]+').findall(s)",
    "from math import *\ndef f(x):\n    return floor(x)",
    "def f(x):\n    print('debug', x)\n    return x",
    "def f(x):\n    return getattr(x, 'real', 0)",
    "def f(x):\n    return hasattr(x, 'append')",
    "def f(x):\n    return type(x).__name__",
    # what a program may still do with classes and type(): nothing of it builds a class at run time
    "def f(x):\n    return type(x)(v * 2 for v in x)",
    "def f(x):\n    return isinstance(x, (int, type)) or type(x) is int or type(x) in (list, tuple)",
    "def f(x):\n    return {int: 'i', str: 's'}[type(x)], str(type(x)), f'{type(x)}'",
    "from abc import ABC, ABCMeta, abstractmethod\nclass A(metaclass=ABCMeta):\n    pass\nclass B(ABC):\n"
    "    @abstractmethod\n    def g(self):\n        pass\ndef f(x: type) -> int:\n    return 1",
    "import enum\nclass C(enum.Enum):\n    A = 1\n    B = 2\ndef f(x):\n    return C(x).name",
    "from typing import Type\ndef f(x: Type[int]) -> int:\n    return 1",
    "class P:\n    __slots__ = ('a', 'b')\n    def __init__(self):\n        self.a = 1\ndef f(x):\n    return P().a",
    "if __name__ == '__main__':\n    pass\ndef f(x):\n    return x",
    "def f(xs):\n    return sorted(set(xs))",
    "class Clock:\n    def __init__(self):\n        self.time = 0\n    def tick(self):\n        self.time += 1\n"
    "def f(n):\n    c = Clock()\n    for _ in range(n):\n        c.tick()\n    return c.time",
    # what AZR-style class, closure and module programs need stays valid under the item-7 rules
    "class V:\n    def __init__(self, x):\n        self.x = x\n    def __add__(self, o):\n        return V(self.x + o.x)\n"
    "    def __matmul__(self, o):\n        return self.x * o.x\n    def __eq__(self, o):\n        return self.x == o.x\n"
    "    def __hash__(self):\n        return self.x\n    def __lt__(self, o):\n        return self.x < o.x\n"
    "def f(a):\n    return (V(a) + V(1)) @ V(2)",
    "def f(x):\n    match x:\n        case int(n) if n > 0:\n            return n\n        case [a, *rest]:\n            return a\n"
    "        case {'k': v}:\n            return v\n    return None",
    "from dataclasses import dataclass\n@dataclass\nclass P:\n    x: int\n    y: int\ndef f(v):\n"
    "    match P(v, 2):\n        case P(a, b):\n            return a + b",
    "def f(x):\n    match x:\n        case complex(real=r, imag=i):\n            return r\n    return 0",
    "def f(x):\n    return '{0.real} {1[0]} {n:>{w}}'.format(x, [1], n=2, w=3) + '{a}'.format_map({'a': 1})",
    "def f(x):\n    return f'{x!r:>10}' + '%s' % x",
    "from math import *\nfrom itertools import *\ndef f(x):\n    return list(islice(count(), floor(x)))",
    "import collections.abc\ndef f(x):\n    return isinstance(x, collections.abc.Iterable)",
    "from functools import lru_cache, reduce, partial, cmp_to_key\n@lru_cache(None)\ndef fib(n):\n"
    "    return n if n < 2 else fib(n - 1) + fib(n - 2)\ndef f(n):\n    return fib(n)",
    "import typing\nfrom typing import Optional, List\ndef f(x: Optional[List[int]]) -> typing.Dict[str, int]:\n"
    "    return {'n': len(x or [])}",
    "def f(n):\n    def counter():\n        c = 0\n        def inc():\n            nonlocal c\n            c += 1\n"
    "            return c\n        return inc\n    g = counter()\n    return [g() for _ in range(n)]",
    "class Stack:\n    __slots__ = ('items',)\n    def __init__(self):\n        self.items = []\n"
    "    def __len__(self):\n        return len(self.items)\ndef f(x):\n    return len(Stack())",
]


@pytest.mark.parametrize("program", ALLOWED)
def test_allowed(program):
    assert check_program(program) is None


def test_module_allowlist_is_public_api_only():
    """Every allowlisted name exists, is public, is not a module (except a listed submodule), and
    is none of the string-to-attribute or string-to-code functions."""
    import importlib
    import types

    from populora.tasks.safety import default_module_names

    excluded = {"get_type_hints", "ForwardRef", "update_wrapper", "wraps", "singledispatch", "attrgetter",
                "methodcaller", "Formatter", "make_dataclass"}  # fmt: skip
    table = dict(default_module_names())
    assert hash(SafetyConfig()) == hash(SafetyConfig())  # a frozen, hashable config
    assert set(SafetyConfig().allowed_modules) <= set(table)
    for module, names in table.items():
        mod = importlib.import_module(module)
        for name in names:
            assert not name.startswith("_") and name not in excluded, (module, name)
            value = getattr(mod, name, None)
            if isinstance(value, types.ModuleType):
                assert f"{module}.{name}" in table, (module, name)


def test_interpreter_attributes_come_from_the_interpreter():
    from populora.tasks.safety import interpreter_attributes

    names = interpreter_attributes()
    assert {
        "gi_frame",
        "f_back",
        "f_globals",
        "tb_frame",
        "co_code",
        "cr_frame",
        "ag_frame",
        "cell_contents",
    } <= names
    assert not {"send", "close", "throw"} & names


def test_syntax_error_reported():
    assert check_program("def f(:\n") == "syntax_error"


def test_configurable_lists():
    assert check_program("import heapq\ndef f(x):\n    return x") is None
    cfg = SafetyConfig(allowed_modules=("math",))
    assert check_program("import heapq\ndef f(x):\n    return x", cfg) == "banned:heapq"
    cfg = SafetyConfig(banned_names=SafetyConfig().banned_names + ("sorted",))
    assert check_program("def f(x):\n    return sorted(x)", cfg) == "banned:sorted"
    cfg = SafetyConfig(allow_getattr_constant=False)
    assert check_program("def f(x):\n    return getattr(x, 'real')", cfg) == "banned:getattr"


def test_deep_nesting_does_not_crash():
    program = "def f(x):\n    return " + "(" * 200 + "x" + ")" * 200
    assert check_program(program) in (None, "syntax_error", "banned:nesting_depth")


def test_no_allowed_module_leads_to_a_module_outside_the_allowlist():
    """Every module reachable as `m.a` or `m.a.b` from an allowed module is allowed or rejected."""
    import importlib
    import types

    allowed = SafetyConfig().allowed_modules
    leaks = []
    for root in allowed:
        frontier = [(root, importlib.import_module(root))]
        for _depth in range(2):
            nxt = []
            for path, mod in frontier:
                for name in dir(mod):
                    value = getattr(mod, name, None)
                    if isinstance(value, types.ModuleType):
                        expr = f"{path}.{name}"
                        if value.__name__.split(".")[0] not in allowed:
                            if check_program(f"import {root}\ndef f(x):\n    return {expr}") is None:
                                leaks.append((expr, value.__name__))
                        else:
                            nxt.append((expr, value))
            frontier = nxt
    assert leaks == []


@pytest.mark.parametrize(
    "program",
    [
        "import enum\ndef f(x):\n    m = enum\n    return m.bltns.eval(x)",
        "import json\ndef f(x):\n    return [json][0]",
        "import json as j\ndef g(m):\n    return m\ndef f(x):\n    return g(j)",
        "from collections import abc\ndef f(x):\n    a = abc\n    return a",
    ],
)
def test_modules_cannot_be_aliased_to_values(program):
    assert check_program(program) in ("banned:module_as_value", "banned:bltns")


def test_imported_classes_and_functions_stay_usable_as_values():
    program = (
        "from collections import Counter, deque\nfrom functools import reduce\nimport operator\n"
        "def f(xs):\n    counts = list(map(Counter, xs))\n    q = deque\n"
        "    return reduce(operator.add, [len(c) for c in counts]), q([1]).pop()"
    )
    assert check_program(program) is None


# --- issue 22: dataclass resolved through the imports; bounded, escaped reasons ------------------
DATACLASS_RULES = [
    # (program, reason or None)
    ("from dataclasses import dataclass\n@dataclass\nclass P:\n    x: int\n"
     "def f(v):\n    match P(v):\n        case P(a):\n            return a\n", None),
    ("import dataclasses\n@dataclasses.dataclass(order=True)\nclass P:\n    x: int\ndef f(v):\n    return P(v)\n", None),
    ("from dataclasses import dataclass\nclass A:\n    pass\n@dataclass\nclass P(A):\n    x: int\n"
     "def f(v):\n    return P(v)\n", None),
    # a program-defined dataclass: positional patterns are not trusted
    ("def dataclass(c):\n    return c\n@dataclass\nclass P:\n    x: int\n"
     "def f(v):\n    match v:\n        case P(a):\n            return a\n", "banned:match_positional"),
    # an extra decorator could return any class
    ("from dataclasses import dataclass\ndef d(c):\n    return c\n@d\n@dataclass\nclass P:\n    x: int\n"
     "def f(v):\n    return v\n", "banned:dataclass"),
    ("from dataclasses import dataclass\nfrom abc import ABCMeta\n@dataclass\nclass P(metaclass=ABCMeta):\n"
     "    x: int\ndef f(v):\n    return v\n", "banned:dataclass"),
    ("from dataclasses import dataclass\ndef f(v):\n    return dataclass(v)\n", "banned:dataclass"),
    ("import dataclasses\ndef f(v):\n    d = dataclasses.dataclass\n    return d\n", "banned:dataclass"),
    ("from dataclasses import dataclass\nB = int\n@dataclass\nclass P(B):\n    x: int\n"
     "def f(v):\n    return P(v)\n", "banned:dataclass"),
    ("from dataclasses import dataclass\n@dataclass(init=len)\nclass P:\n    x: int\ndef f(v):\n    return v\n",
     "banned:dataclass"),
    ("import dataclasses\ndef f(v):\n    return dataclasses.replace(v)\n", "banned:replace"),
    ("import enum\ndef f(v):\n    return enum.pickle_by_enum_name\n", "banned:pickle_by_enum_name"),
    ("from enum import *\ndef f(v):\n    return v\n", "banned:import_star"),
]  # fmt: skip


@pytest.mark.parametrize("program, reason", DATACLASS_RULES)
def test_dataclass_is_resolved_through_the_imports(program, reason):
    assert check_program(program) == reason


def test_rejection_reasons_are_bounded_and_escaped():
    from populora.tasks.safety import MAX_REASON_NAME

    long = check_program("import " + "a" * 300_000 + "\ndef f(x):\n    return x")
    assert long.startswith("banned:aaa") and long.endswith("...")
    assert len(long) == len("banned:") + MAX_REASON_NAME
    odd = check_program("import os\u00e9\ndef f(x):\n    return x")
    assert odd == "banned:os\\xe9" and odd.isascii() and odd.isprintable()
    # a format field path carries any character: ESC, BEL and a newline come back escaped
    control = check_program("def f(x):\n    return '{0._\\x1b\\x07\\n}'.format(x)")
    assert control == "banned:_\\x1b\\x07\\n", control

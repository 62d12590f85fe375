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
    "if __name__ == '__main__':\n    pass\ndef f(x):\n    return x",
    "def f(xs):\n    return sorted(set(xs))",
    "class Clock:\n    def __init__(self):\n        self.time = 0\n    def tick(self):\n        self.time += 1\n"
    "def f(n):\n    c = Clock()\n    for _ in range(n):\n        c.tick()\n    return c.time",
]


@pytest.mark.parametrize("program", ALLOWED)
def test_allowed(program):
    assert check_program(program) is None


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

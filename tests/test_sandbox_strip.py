"""The runtime strip layer (populora/sandbox/strip.py), on its own: no AST filter, a stripped child.

A program that got past the filter holds a general attribute getter; the strip layer must leave it
nothing to use. The walk below is such a program: from its own namespace it follows every
attribute ``dir()`` names (and container items, ``mro()``, an ABC's ``__subclasses__()`` and registry) and reports
every object of a capability module it reaches. Without the strip layer it reaches ``os.system``,
``open``, the importers and the fork server's frames (the test checks that too, so the walk cannot
pass by walking nothing); with it, nothing.
"""

from __future__ import annotations

import pytest
from test_sandbox_hostile import isolation_mode

from populora.sandbox import Program, Sandbox, SandboxLimits

LIMITS = SandboxLimits(wall_seconds=120.0, cpu_seconds=100, memory_mb=2048, max_output_chars=100_000)

WALK = r'''
import abc, array, bisect, cmath, collections, collections.abc, copy, dataclasses, decimal, enum
import fractions, functools, heapq, itertools, json, keyword, math, numbers, operator, re, statistics
import string, textwrap, typing, unicodedata

CAPABILITY = set("""sys os posix posixpath genericpath io _io time random _random signal _signal _thread
threading select fcntl resource ctypes _ctypes gc marshal _imp zipimport _frozen_importlib
_frozen_importlib_external importlib importlib._bootstrap importlib._bootstrap_external
importlib.machinery linecache tokenize subprocess _posixsubprocess socket mmap""".split())
LIMIT = 1_500_000
BOUND = {'method-wrapper', 'builtin_function_or_method', 'method', 'wrapper_descriptor', 'method_descriptor',
         'classmethod_descriptor', 'getset_descriptor', 'member_descriptor'}
HARMLESS = {"_thread.get_ident", "_thread.RLock", "_thread.allocate_lock", "_thread.LockType",
            "_thread.lock", "_thread.error",
            # numbers the stand-in for sys keeps (struct sequences whose type lives in sys)
            "sys.flags", "sys.float_info", "sys.hash_info", "sys.int_info", "sys.version_info"}

def module_of(obj):
    if type(obj).__name__ == 'module':
        return obj.__name__
    name = getattr(obj, '__module__', None)
    if isinstance(obj, type) or callable(obj):
        return name if isinstance(name, str) else None
    return getattr(type(obj), '__module__', None)

def f(stats):
    found, reached = set(), set()
    seen, keep = set(), []
    todo = collections.deque([globals(), __builtins__, f, *(getattr(__builtins__, '__dict__', __builtins__)).values()])
    while todo and len(seen) < LIMIT:
        obj = todo.popleft()  # breadth first
        if id(obj) in seen or obj is None or isinstance(obj, (str, bytes, int, float, complex, bool)):
            continue
        seen.add(id(obj))
        keep.append(obj)
        kind = type(obj).__name__
        name = module_of(obj)
        label = f"{name}.{getattr(obj, '__qualname__', getattr(obj, '__name__', kind))}"
        if name in CAPABILITY and kind != 'module' and label not in HARMLESS and f"{name}.{kind}" not in HARMLESS:
            found.add(label)
        if kind == 'module' and name in ('sys', 'os', 'posix', 'io', '_io', 'builtins'):
            for danger in ('_current_frames', 'settrace', 'system', 'fork', 'open', 'FileIO', 'listdir'):
                if danger in obj.__dict__:
                    found.add(f"module {name} with {danger}")
        if kind == 'builtin_function_or_method' and getattr(obj, '__name__', '') == '__import__':
            found.add('the builtin __import__')
        if kind == 'frame' and hasattr(obj, 'f_back'):
            found.add('a frame with f_back')
        if kind == 'function' and hasattr(obj, '__globals__'):
            found.add('a function with __globals__')
        if label in ('collections.OrderedDict', 'math.sqrt', 'json.loads', 'enum.Enum', 'typing.NamedTuple'):
            reached.add(label)
        if isinstance(obj, dict):
            todo.extend(obj.keys())
            todo.extend(obj.values())
        elif isinstance(obj, (list, tuple, set, frozenset)):
            todo.extend(obj)
        if kind in BOUND:  # a new wrapper for every getattr: follow what it is bound to only
            for attr in ('__self__', '__func__', '__objclass__'):
                try:
                    todo.append(getattr(obj, attr))
                except Exception:
                    pass
            continue
        if isinstance(obj, type):
            for more in ('mro', '__subclasses__'):
                try:
                    todo.extend(getattr(obj, more)())
                except Exception:
                    pass
        if isinstance(obj, abc.ABCMeta):  # an ABC's registry and caches (classes registered with it)
            try:
                todo.extend(ref() for part in abc._get_dump(obj)[:3] for ref in part)
            except Exception:
                pass
        try:
            names = dir(obj)
        except Exception:
            continue
        for attr in names:
            try:
                todo.append(getattr(obj, attr))
            except Exception:
                pass
    if stats:
        return [len(seen), not todo, sorted(reached), sorted(found)[:40], len(found),
                [k in found for k in ('the builtin __import__', 'a function with __globals__', 'posix.system')]]
    return sorted(found)
'''

ESCAPES = {
    "function globals to builtins to os": "def f(x):\n    return f.__globals__['__builtins__'].__import__('os').getpid() > 0",
    "object subclasses to FileIO": (
        "def f(x):\n    todo, seen = [object], set()\n    while todo:\n        c = todo.pop()\n"
        "        if c not in seen:\n            seen.add(c)\n            if c.__name__ == 'FileIO':\n"
        "                return c('/dev/null').read() == b''\n            try:\n"
        "                todo.extend(type.__subclasses__(c))\n            except TypeError:\n                pass\n"
        "    return False"
    ),
    "builtin importer through __loader__": (
        "def f(x):\n    return __builtins__['__loader__'].load_module('posix').getpid() > 0"
        " if isinstance(__builtins__, dict) else __builtins__.__loader__.load_module('posix').getpid() > 0"
    ),
    "a builtin's module": "def f(x):\n    return print.__self__.open('/dev/null').read() == ''",
    "frames up to the fork server": (
        "def f(x):\n    def g():\n        yield gen.gi_frame.f_back.f_back.f_globals\n    gen = g()\n"
        "    return 'builtins' in next(gen)"
    ),
    "a traceback's frames": (
        "def f(x):\n    try:\n        1 / 0\n    except ZeroDivisionError as e:\n"
        "        return e.__traceback__.tb_frame.f_back.f_globals is not None"
    ),
    "sys through a stdlib module": "import dataclasses\ndef f(x):\n    return dataclasses.sys.settrace is not None",
    "import of a capability": "def f(x):\n    import os\n    return os.getpid() > 0",
    "a stdlib function's globals": "import json\ndef f(x):\n    return json.loads.__globals__['__builtins__'] is not None",
    "inspect's frame": "import dataclasses\ndef f(x):\n    return dataclasses.inspect.currentframe().f_back is not None",
    "builtins open": "def f(x):\n    return open('/dev/null').read() == ''",
    "typing's sys.modules": "import typing\ndef f(x):\n    return typing.sys.modules['os'].getpid() > 0",
    "random through statistics": "import statistics\ndef f(x):\n    return statistics.random.random() < 2",
    "clock through a stdlib module": "import dataclasses\ndef f(x):\n    return dataclasses.inspect.os.times() is not None",
}


def needs_full():
    if isolation_mode() != "full":
        pytest.skip(f"needs full isolation (root with namespaces), not {isolation_mode()!r}")


@pytest.fixture(scope="module")
def box():
    with Sandbox(limits=LIMITS, workers=2) as sb:
        yield sb


@pytest.mark.slow
def test_a_general_getattr_walk_finds_no_capability(box):
    needs_full()
    stripped, plain = box.run_many([Program(WALK, calls=("1",), strip=True), Program(WALK, calls=("1",))])
    assert stripped.ok, stripped
    visited, complete, reached, found, n_found, _ = eval(stripped.values[0])
    # the walk is wide, and it ends: everything reachable was visited
    assert visited > 100_000 and complete and len(reached) == 5, (visited, complete, reached)
    assert found == [] and n_found == 0, found
    assert plain.ok, plain
    visited, _, _, found, n_found, key = eval(plain.values[0])
    # without the strip layer the same walk reaches the capabilities (and the fork server's frames)
    assert n_found > 100 and key == [True, True, True], (n_found, key)


@pytest.mark.parametrize("name", sorted(ESCAPES))
def test_each_escape_works_without_the_strip_layer_and_fails_with_it(box, name):
    needs_full()
    program = ESCAPES[name]
    plain, stripped = box.run_many([Program(program, calls=("0",)), Program(program, calls=("0",), strip=True)])
    assert plain.values == ["True"], (name, plain)
    # contained: an error, or a stand-in that leads nowhere (inspect's frame is a fake one)
    assert stripped.values != ["True"] and stripped.reason in (None, ) + tuple(
        r for r in [stripped.reason] if r and r.startswith("runtime_error:")), (name, stripped)


def test_honest_programs_run_stripped(box):
    needs_full()
    honest = [
        ("import collections, dataclasses\n@dataclasses.dataclass(order=True)\nclass P:\n    a: int\n"
         "def f(x):\n    return [P(x), sorted([P(2), P(1)]), collections.Counter('aab').most_common(1)]",
         "[P(a=3), [P(a=1), P(a=2)], [('a', 2)]]"),
        ("from collections.abc import Iterable\nimport typing, enum, re, json, copy, decimal, fractions\n"
         "class E(enum.Enum):\n    A = 1\nclass N(typing.NamedTuple):\n    a: int\n"
         "def f(x):\n    return [isinstance(x, Iterable), isinstance([x], Iterable), E(1).name, re.findall('a+', 'aab'),"
         " json.dumps({'k': x}), N(x), copy.deepcopy([[x]]), str(decimal.Decimal(1) / 8), str(fractions.Fraction(x, 6))]",
         "[False, True, 'A', ['aa'], '{\"k\": 3}', N(a=3), [[3]], '0.125', '1/2']"),
        ("import functools, itertools, heapq, statistics, string, textwrap\n@functools.lru_cache\n"
         "def g(n):\n    return n if n < 2 else g(n - 1) + g(n - 2)\n"
         "def f(x):\n    return [g(20), list(itertools.permutations([1, 2])), heapq.nsmallest(2, [5, 1, 3]),"
         " statistics.median([1, 5, 3]), string.Template('$a').substitute(a=x), textwrap.dedent('  a\\n  b')]",
         "[6765, [(1, 2), (2, 1)], [1, 3], 3, '3', 'a\\nb']"),
    ]
    outs = box.run_many([Program(p, calls=("3",), strip=True) for p, _ in honest])
    assert [o.values for o in outs] == [[want] for _, want in honest], outs
    assert [o.values for o in box.run_many([Program(p, calls=("3",)) for p, _ in honest])] == [
        [want] for _, want in honest]

"""LiveCodeBench's test procedure, run inside one sandboxed process per (candidate, problem).

This file is sent as the source of a sandbox ``Program`` (entry ``run_lcb_tests``); it uses the
standard library only. It re-implements, in our own code, the observable semantics of
``lcb_runner/evaluation/testing_util.py`` and ``check_correctness`` in
``compute_code_generation_metrics.py`` of LiveCodeBench at commit
28fef95ea8c9f7a547c8329f2cd3d32b92c1fa24 (see docs/evaluation.md), because a verdict that differs
from the official scorer's makes our numbers incomparable with published ones:

- The candidate runs in the process that grades it, after LCB's "reliability guard" (``quit``,
  ``help``, destructive ``os``/``shutil``/``subprocess`` functions set to None, a few modules made
  unimportable) and with at most 50,000 digits per int <-> str conversion (LCB raises Python's
  4,300 limit). Standard input of the process is ``/dev/null`` (as in LCB's worker process).
- ``stdin`` problems: a final ``if __name__ == '__main__':`` block is inlined; every top-level
  statement except imports becomes the body of one function (LCB's wrapping: a top-level
  ``global`` or a name shared across helper functions behaves as in a function body); LCB's import
  prelude comes first. Each test calls the function with ``sys.stdin`` replaced by LCB's mock
  (``read``/``readline``/``readlines``/``buffer``; not iterable), ``open`` patched, and
  ``sys.stdout`` captured (``print`` and ``sys.stdout.write`` count; stderr and ``os.write(1,
  ...)`` do not). ``SystemExit`` ends the test normally (output so far is graded). Output lines
  are compared stripped, then token by token as exact ``Decimal`` values.
- ``functional`` problems: the code is executed once after the prelude; ``Solution()`` is built
  once when the text contains ``class Solution``, else the method is looked up in the module (a
  top-level function is accepted). The same object answers every test (state persists across
  tests). Arguments are the JSON lines of the input; a returned tuple becomes a list (only at the
  top level) and is compared with ``==`` to the JSON output.
- Every test has an alarm of ``timeout`` whole seconds (LCB's ``signal.alarm``); grading stops at
  the first failing test. Result codes per test: 1 pass, -2 wrong answer, -3 time limit, -4
  runtime error (LCB's codes; LCB's ``True`` is our 1).
"""

import ast
import builtins
import io
import json
import os
import signal
import sys
from contextlib import ExitStack
from decimal import Decimal
from types import ModuleType
from unittest import mock

# LiveCodeBench prepends these imports to every candidate (its ``import_string``).
PRELUDE = (
    "from string import *\nfrom re import *\nfrom datetime import *\nfrom collections import *\n"
    "from heapq import *\nfrom bisect import *\nfrom copy import *\nfrom math import *\nfrom random import *\n"
    "from statistics import *\nfrom itertools import *\nfrom functools import *\nfrom operator import *\n"
    "from io import *\nfrom sys import *\nfrom json import *\nfrom builtins import *\nfrom typing import *\n"
    "import string\nimport re\nimport datetime\nimport collections\nimport heapq\nimport bisect\nimport copy\n"
    "import math\nimport random\nimport statistics\nimport itertools\nimport functools\nimport operator\n"
    "import io\nimport sys\nimport json\nsys.setrecursionlimit(50000)\n"
)
INT_MAX_STR_DIGITS = 50000  # LCB: sys.set_int_max_str_digits(50000) in the grading process

PASS, WRONG, TIME_LIMIT, RUNTIME = 1, -2, -3, -4

# What LCB's reliability guard sets to None (names only; the guard is not a sandbox, ours is).
_OS_DISABLED = (
    "kill", "system", "putenv", "remove", "removedirs", "rmdir", "fchdir", "setuid", "fork", "forkpty", "killpg",
    "rename", "renames", "truncate", "replace", "unlink", "fchmod", "fchown", "chmod", "chown", "chroot",
    "lchflags", "lchmod", "lchown", "getcwd", "chdir",
)
_MODULES_DISABLED = ("ipdb", "joblib", "resource", "psutil", "tkinter")


class TimeoutException(Exception):  # the name matters: LCB recognises a timeout by it
    pass


def _alarm(signum, frame):
    print("timeout occured: alarm went off")  # LCB's handler prints this (into captured output)
    raise TimeoutException


def _guard() -> None:
    builtins.quit = None
    builtins.help = None
    os.environ["OMP_NUM_THREADS"] = "1"
    for name in _OS_DISABLED:
        setattr(os, name, None)
    import shutil
    import subprocess

    shutil.rmtree = shutil.move = shutil.chown = None
    subprocess.Popen = None
    for name in _MODULES_DISABLED:
        sys.modules[name] = None


def inline_main_guard(code: str) -> str:
    """A last top-level ``if __name__ == '__main__':`` replaced by its body (its else is dropped)."""
    try:
        tree = ast.parse(code)
        last = tree.body[-1]
        if isinstance(last, ast.If) and ast.unparse(last.test).strip() == "__name__ == '__main__'":
            return ast.unparse(tree.body[:-1]) + "\n" + ast.unparse(last.body)
    except Exception:
        pass
    return code


def wrap_in_function(code: str) -> str:
    """Prelude + the top-level imports + every other statement as the body of ``wrapped_function``."""
    try:
        tree = ast.parse(code)
        imports = [s for s in tree.body if isinstance(s, (ast.Import, ast.ImportFrom))]
        rest = [s for s in tree.body if not isinstance(s, (ast.Import, ast.ImportFrom))]
        fn = ast.FunctionDef(name="wrapped_function", args=ast.arguments(posonlyargs=[], args=[], kwonlyargs=[],
                             kw_defaults=[], defaults=[]), body=rest, decorator_list=[], lineno=-1)
        return PRELUDE + "\n" + ast.unparse(imports) + "\n" + ast.unparse(fn)
    except Exception:
        return code  # unparsable: executed as is (and fails like in LCB)


def _load(code: str, timeout: int):
    signal.alarm(timeout)
    try:
        module = ModuleType("tmp_sol", "")
        exec(code, module.__dict__)
        target = module.Solution() if "class Solution" in code else module
        assert target is not None
    finally:
        signal.alarm(0)
    return target


class _BytesStdin:
    def __init__(self, text: str) -> None:
        self.data = text.encode("utf-8")

    def read(self, *args):
        return self.data

    def readline(self, *args):
        return self.data.split(b"\n")[0] + b"\n"


class _Stdin:
    """LCB's stand-in for ``sys.stdin``: whole text, lines, bytes; other attributes of a StringIO.

    Not iterable (special methods are not delegated), exactly like LCB's mock.
    """

    def __init__(self, text: str) -> None:
        self.text = text
        self._io = io.StringIO(text)
        self.buffer = _BytesStdin(text)

    def read(self, *args):
        return self.text

    def readline(self, *args):
        return self._io.readline(*args)

    def readlines(self, *args):
        return self.text.split("\n")

    def __getattr__(self, name):
        return getattr(self._io, name)


def _call_with_input(fn, text: str) -> None:
    """Call ``fn()`` with LCB's input patches, entered in LCB's order; ``SystemExit`` ends it quietly."""
    lines = iter(text.split("\n"))
    with ExitStack() as patches:
        # LCB's decorators take effect bottom-up: these three patch the process's own stdin object
        # (the one ``from sys import *`` bound as ``stdin``), then sys.stdin and open are replaced.
        patches.enter_context(mock.patch.object(sys.stdin, "read", lambda *a: text))
        patches.enter_context(mock.patch.object(sys.stdin, "readlines", lambda *a: text.split("\n")))
        patches.enter_context(mock.patch.object(sys.stdin, "readline", lambda *a: next(lines)))
        patches.enter_context(mock.patch("sys.stdin", _Stdin(text)))
        patches.enter_context(mock.patch("builtins.open", mock.mock_open(read_data=text)))
        try:
            fn()
        except SystemExit:
            pass


def _captured_call(fn, text: str) -> str:
    saved = sys.stdout
    sink = io.StringIO()
    sink.close = lambda x: 1  # LCB makes close() a no-op taking one argument (close() raises TypeError)
    sys.stdout = sink
    try:
        _call_with_input(fn, text)
    finally:
        sys.stdout = saved
    return sink.getvalue()


def _stripped_lines(text: str) -> list:
    return [line.strip() for line in text.strip().split("\n")]


def _decimals(line: str):
    try:
        return [Decimal(tok) for tok in line.split()]
    except Exception:
        return None


def same_output(got: str, expected: str) -> bool:
    """LCB's stdout comparison: same number of stripped lines, each equal or equal as Decimals."""
    g, e = _stripped_lines(got), _stripped_lines(expected)
    if len(g) != len(e):
        return False
    for gl, el in zip(g, e):
        if gl == el:
            continue
        gd, ed = _decimals(gl), _decimals(el)
        if gd is None or ed is None or gd != ed:
            return False
    return True


def _failure(exc: BaseException) -> int:
    return TIME_LIMIT if "timeoutexception" in repr(exc).lower() else RUNTIME


def _grade_stdin(code: str, tests: list, timeout: int) -> list:
    fn = _load(wrap_in_function(inline_main_guard(code)), timeout).wrapped_function
    results = []
    for test in tests:
        signal.alarm(timeout)
        try:
            out = _captured_call(fn, test["input"])
            signal.alarm(0)
        except Exception as exc:
            signal.alarm(0)
            return results + [_failure(exc)]
        finally:
            signal.alarm(0)
        if not same_output(out, test["output"]):
            return results + [WRONG]
        results.append(PASS)
    return results


def _grade_functional(code: str, tests: list, fn_name: str, timeout: int) -> list:
    method = getattr(_load(PRELUDE + "\n\n" + code, timeout), fn_name)
    args = [[json.loads(line) for line in t["input"].split("\n")] for t in tests]
    expected = [json.loads(t["output"]) for t in tests]
    results = []
    for a, want in zip(args, expected):
        signal.alarm(timeout)
        try:
            got = method(*a)
            signal.alarm(0)
            if isinstance(got, tuple):
                got = list(got)
            if not (got == want):
                return results + [WRONG]
            results.append(PASS)
        except Exception as exc:
            signal.alarm(0)
            return results + [_failure(exc)]
        finally:
            signal.alarm(0)
    return results


def run_lcb_tests(code: str, tests_json: str, fn_name, timeout: int) -> list:
    """Per-test result codes (1, -2, -3, -4), stopping at the first failure (LCB's order and codes)."""
    sys.set_int_max_str_digits(INT_MAX_STR_DIGITS)
    try:
        sys.stdin.close()
    except Exception:
        pass
    sys.stdin = open(os.devnull)  # noqa: SIM115 - LCB's worker process reads /dev/null
    tests = json.loads(tests_json)
    signal.signal(signal.SIGALRM, _alarm)
    _guard()
    try:
        if fn_name is None:
            return _grade_stdin(code, tests, int(timeout))
        return _grade_functional(code, tests, fn_name, int(timeout))
    except Exception:
        return [RUNTIME]  # LCB: any error while loading or grading ("Error during testing")
    finally:
        signal.alarm(0)

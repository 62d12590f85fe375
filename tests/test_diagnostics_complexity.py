"""Program complexity features, checked against values computed by hand."""

from types import SimpleNamespace

import pytest

from populora.tasks.complexity import complexity_metrics, mean_features, program_complexity

IDENTITY = "def f(x):\n    return x\n"

LOOP = """\
def f(a, b):
    total = 0
    for i in range(a):
        if i % 2 == 0 and i > b:
            total += i
    return total
"""

HELPER = """\
def helper(s):
    return s[::-1]

def f(s):
    # comment
    out = ''
    while s:
        try:
            out += helper(s[:2])
        except IndexError as e:
            break
        s = s[2:]

    return [c for c in out if c.isalpha()]
"""


def test_identity_function():
    c = program_complexity(IDENTITY)
    # FunctionDef > arguments > arg and FunctionDef > Return > Name: depth 3; no decision point
    assert c.as_dict() == {"ast_depth": 3, "cyclomatic": 1, "loc": 2, "variables": 1, "cognitive": 0}


def test_loop_with_condition():
    c = program_complexity(LOOP)
    # depth: FunctionDef > For > If > BoolOp > Compare > BinOp > Name = 7
    # McCabe: 1 + for + if + and = 4; cognitive: for (+1) + nested if (+2) + one `and` run (+1) = 4
    # variables: a, b, total, i
    assert c.as_dict() == {"ast_depth": 7, "cyclomatic": 4, "loc": 6, "variables": 4, "cognitive": 4}


def test_helper_while_try_comprehension():
    c = program_complexity(HELPER)
    # depth: FunctionDef > While > Try > AugAssign > Call > Subscript > Slice > Constant = 8
    # McCabe over the program: 1 + while + except + comprehension for + comprehension if = 5
    # (helper adds no decision); loc: 11 lines that are neither blank nor comment
    # variables: s (both functions), out, e, c; cognitive: while (+1) + except nested once (+2)
    assert c.as_dict() == {"ast_depth": 8, "cyclomatic": 5, "loc": 11, "variables": 4, "cognitive": 3}


def test_closures_and_methods_count_once():
    src = """\
class A:
    def m(self, x):
        if x:
            return 1
        return 2

def f(x):
    def g(y):
        return y or 0
    if x > 1:
        return g(A().m(x))
    return 0
"""
    # decisions: A.m if, g `or`, f if -> 1 + 3
    assert program_complexity(src).cyclomatic == 4


def test_unparsable_program_is_none():
    assert program_complexity("def f(:\n  pass") is None
    assert mean_features(["def f(:", "x = ("]) == {}


def test_mean_features_and_metric_names():
    m = mean_features([IDENTITY, LOOP])
    assert m["cyclomatic"] == pytest.approx(2.5) and m["loc"] == pytest.approx(4.0)
    tasks = [SimpleNamespace(type="code_o", program=IDENTITY, teacher_id="t0"),
             SimpleNamespace(type="code_i", program=LOOP, teacher_id="t1"),
             SimpleNamespace(type="code_o", program=LOOP, teacher_id="a0")]
    roles = {"t0": "teacher", "t1": "teacher", "a0": "agent"}
    out = complexity_metrics(tasks, roles.__getitem__)
    assert out["complexity/teacher/code_o/cyclomatic"] == 1
    assert out["complexity/teacher/code_i/cyclomatic"] == 4
    assert out["complexity/teacher/all/cyclomatic"] == pytest.approx(2.5)
    assert out["complexity/agent/code_o/ast_depth"] == 7
    assert "complexity/agent/code_i/loc" not in out

"""Task kinds: the registry, and each kind end to end (teacher answer -> validated task -> student
answer -> verdict) with the real sandbox; plus the rule that only the kinds know their names."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from populora.sandbox import Sandbox, SandboxLimits
from populora.tasks.checking import check_many
from populora.tasks.config import TaskEnv
from populora.tasks.kinds import all_kinds, default_kind_names, get_kind, kind_names
from populora.tasks.parsing import parse_proposal
from populora.tasks.validation import validate_many

ENV = TaskEnv(require_think=False)  # answers in <answer> tags, no reasoning required

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def sandbox():
    with Sandbox(SandboxLimits(wall_seconds=3, cpu_seconds=3), workers=2) as sb:
        yield sb


def test_registry_lists_azr_types_and_code_e_off_by_default():
    assert kind_names() == ("code_o", "code_i", "code_f", "code_e")
    assert default_kind_names() == ("code_o", "code_i", "code_f")
    assert [k.name for k in all_kinds().values() if k.given_program] == ["code_f"]
    assert [k.name for k in all_kinds().values() if k.program_source] == ["code_o", "code_i"]
    with pytest.raises(ValueError, match="unknown task type 'code_x'"):
        get_kind("code_x")


def _teacher(kind: str, program: str, inputs: list[str], message: str = "") -> str:
    blocks = "" if get_kind(kind).given_program else f"```python\n{program}\n```\n"
    blocks += "".join(f"```input\n{i}\n```\n" for i in inputs)
    if message:
        blocks += f"```message\n{message}\n```\n"
    return f"<think>plan</think>\n<answer>\n{blocks}</answer>"


CASES = {
    # kind: (program, inputs, message, right answer, wrong answer, gold output)
    "code_o": ("def f(x):\n    return [x, x * 2]", ["3"], "", "[3, 6]", "[3, 7]", "[3, 6]"),
    "code_i": ("def f(s):\n    return s.upper()", ["'ab'"], "", "'ab'", "'cd'", "'AB'"),
    "code_e": ("def f(d):\n    return d['k'] + 1", ["{}"], "", "KeyError", "NoError", "KeyError"),
    "code_f": ("def f(n):\n    return n * n + 1", [str(i) for i in range(10)], "squares, plus one",
               "def f(n):\n    return n ** 2 + 1", "def f(n):\n    return n * 2", None),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_each_kind_end_to_end(name, sandbox):
    kind = get_kind(name)
    program, inputs, message, right, wrong, gold = CASES[name]
    text = _teacher(name, program, inputs, message)
    proposal = parse_proposal(text, name, ENV, program=program if kind.given_program else None, teacher_id="t0")
    assert proposal.reason is None, proposal
    (verdict,) = validate_many([proposal], sandbox, ENV)
    assert verdict.valid, verdict.reason
    task = verdict.task
    if gold is not None:
        assert task.output == gold
    for env in (ENV.replace(templates="azr"), ENV.replace(templates="compact")):
        question = kind.student_question(task, env)
        assert task.program not in question if kind.given_program else task.program in question
    answers = [f"<answer>\n```{kind.student_block}\n{a}\n```\n</answer>" for a in (right, wrong)]
    good, bad = check_many([(task, a) for a in answers], sandbox, ENV)
    assert good.correct and good.reason is None, good
    assert not bad.correct and bad.format_ok, bad


def test_code_e_rejects_what_is_not_a_program_error(sandbox):
    timeout = parse_proposal(_teacher("code_e", "def f(n):\n    while True:\n        n += 1", ["1"]), "code_e", ENV)
    returns = parse_proposal(_teacher("code_e", "def f(n):\n    return n", ["1"]), "code_e", ENV)
    v_timeout, v_returns = validate_many([timeout, returns], sandbox, ENV)
    assert not v_timeout.valid and v_timeout.reason == "timeout"
    assert v_returns.valid and v_returns.task.output == "NoError"


def _docstrings(tree: ast.AST) -> set[int]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                out.add(id(first.value))
    return out


def test_only_the_kinds_know_their_names():
    """Task types are objects: outside the kinds package, the records' constants and AZR's templates,
    no code names a kind (a string equal to a kind's name, or a CODE_* constant); docstrings and
    comments may. Seeding asks the kinds too (``seed_order``, ``given_program``)."""
    allowed = {"populora/tasks/records.py", "populora/tasks/azr_templates.py", "populora/tasks/__init__.py"}
    names = set(kind_names())
    offenders = []
    for path in sorted((ROOT / "populora").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel.startswith("populora/tasks/kinds/") or rel in allowed:
            continue
        tree = ast.parse(path.read_text())
        docs = _docstrings(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs and (
                    node.value in names or re.search(r"/code_[oife]/", node.value)):
                offenders.append(f"{rel}:{node.lineno} {node.value!r}")
            if isinstance(node, ast.Name) and re.fullmatch(r"CODE_[OIFE]", node.id):
                offenders.append(f"{rel}:{node.lineno} {node.id}")
    assert offenders == [], offenders

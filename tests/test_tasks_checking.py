"""Checking student answers (code_o / code_i / code_f) with hand-computed verdicts and rewards."""

from __future__ import annotations

import os

import pytest

from populora.sandbox import Sandbox, SandboxLimits
from populora.tasks.checking import check_many, to_attempt
from populora.tasks.config import TaskEnv
from populora.tasks.records import CODE_F, CODE_I, CODE_O, Task

ENV = TaskEnv(require_think=False)  # answers in <answer> tags, no reasoning required
FRACTIONAL = ENV.replace(code_f={"fractional": True})


def ans(kind: str, payload: str) -> str:
    return f"<think>working</think>\n<answer>\n```{kind}\n{payload}\n```\n</answer>"


class RecordingSandbox:
    def __init__(self, sandbox):
        self.sandbox, self.calls = sandbox, 0

    def run_many(self, programs):
        self.calls += 1
        return self.sandbox.run_many(programs)


@pytest.fixture(scope="module")
def sandbox():
    with Sandbox(limits=SandboxLimits(wall_seconds=2.0, cpu_seconds=2)) as sb:
        yield sb


O_TASK = Task(id="o", type=CODE_O, program="def f(x):\n    return [x, x]", input="1", output="[1, 1]")
I_TASK = Task(id="i", type=CODE_I, program="def f(x):\n    return x * 2", input="5", output="10")
F_TASK = Task(
    id="cf",
    type=CODE_F,
    program="def f(n):\n    return n * n",
    inputs=tuple(str(i) for i in (1, 2, 3, 4, 5, 0, 6, 7, 10, -3)),
    outputs=tuple(str(i * i) for i in (1, 2, 3, 4, 5, 0, 6, 7, 10, -3)),
    message="squares",
)


def test_code_o_needs_no_sandbox():
    items = [
        (O_TASK, ans("output", "[1,1]")),
        (O_TASK, ans("output", "(1, 1)")),
        (O_TASK, ans("output", "[1.0, 1]")),
        (O_TASK, ans("output", "[True, 1]")),
        (O_TASK, "<answer>[1, 1]</answer>"),
        (O_TASK, ans("output", "[1, 1")),
        (O_TASK, "I think it is [1, 1]"),
    ]
    got = [(j.format_ok, j.correct, j.score, j.reason) for j in check_many(items, None, ENV)]
    assert got == [
        (True, True, 1.0, None),
        (True, False, 0.0, "wrong"),
        (True, False, 0.0, "wrong"),
        (True, False, 0.0, "wrong"),
        (True, True, 1.0, None),
        (False, False, 0.0, "format"),
        (False, False, 0.0, "format"),
    ]


def test_code_o_never_evaluates_model_text(tmp_path):
    # AZR defect: model text was passed to eval in the trainer process
    marker = tmp_path / "pwned"
    text = ans("output", f"__import__('os').system('touch {marker}')")
    (j,) = check_many([(O_TASK, text)], None, ENV)
    assert (j.format_ok, j.correct) == (False, False)
    assert not marker.exists()


def test_code_o_nan_equals_nan():
    task = Task(id="n", type=CODE_O, program="", input="1", output="[1, nan]")
    (j,) = check_many([(task, ans("output", "[1, nan]"))], None, ENV)
    assert j.correct


def test_code_i_runs_in_sandbox(sandbox):
    rec = RecordingSandbox(sandbox)
    err_task = Task(id="e", type=CODE_I, program="def f(x):\n    return 10 // x", input="5", output="2")
    items = [
        (I_TASK, ans("input", "5")),
        (I_TASK, ans("input", "5.0")),  # f(5.0) = 10.0, and 10.0 is not 10
        (I_TASK, ans("input", "6")),
        (I_TASK, ans("input", "x")),
        (err_task, ans("input", "4")),  # another input with the same output is right
        (err_task, ans("input", "0")),
        (I_TASK, ans("input", "5, 6")),  # wrong arity -> TypeError in the sandbox
    ]
    got = [(j.format_ok, j.correct, j.reason) for j in check_many(items, rec, ENV)]
    assert got == [
        (True, True, None),
        (True, False, "wrong"),
        (True, False, "wrong"),
        (False, False, "format"),
        (True, True, None),
        (True, False, "runtime_error:ZeroDivisionError"),
        (True, False, "runtime_error:TypeError"),
    ]
    assert rec.calls == 1  # one batch


def test_code_f_binary_and_fractional(sandbox):
    right = "def f(n):\n    return n ** 2"
    shown_only = (
        "def f(n):\n    return {1: 1, 2: 4, 3: 9, 4: 16, 5: 25}.get(n, 0)"  # hidden: 0->0 ok, others wrong
    )
    partly = "def f(n):\n    return n * n if n < 7 else -1"  # hidden 0, 6 right; 7, 10 wrong; -3 right
    helper = "def sq(v):\n    return v * v\n\ndef f(n):\n    return sq(n)"
    items = [(F_TASK, ans("python", p)) for p in (right, shown_only, partly, helper)]
    items.append((F_TASK, ans("python", "import os\ndef f(n):\n    return n * n")))
    items.append((F_TASK, ans("python", "def g(n):\n    return n * n")))
    binary = check_many(items, sandbox, ENV)
    assert [(j.correct, j.score) for j in binary] == [
        (True, 1.0),
        (False, 0.0),
        (False, 0.0),
        (True, 1.0),
        (False, 0.0),
        (False, 0.0),
    ]
    assert binary[4].reason == "banned:os" and binary[4].format_ok
    assert binary[5].reason == "no_entry_function"
    frac = check_many(items, sandbox, FRACTIONAL)
    assert [j.score for j in frac] == [1.0, 1 / 5, 3 / 5, 1.0, 0.0, 0.0]
    assert [j.correct for j in frac] == [True, False, False, True, False, False]


def test_code_f_hidden_runtime_error_fails(sandbox):
    crash = "def f(n):\n    return n * n if n else 1 // n"
    (j,) = check_many([(F_TASK, ans("python", crash))], sandbox, ENV)
    assert (j.correct, j.reason) == (False, "runtime_error:ZeroDivisionError")
    (jf,) = check_many([(F_TASK, ans("python", crash))], sandbox, FRACTIONAL)
    assert jf.score == 4 / 5 and jf.reason == "runtime_error:ZeroDivisionError"


def test_mixed_batch_is_one_sandbox_call_and_rewards(sandbox):
    rec = RecordingSandbox(sandbox)
    items = [
        (O_TASK, ans("output", "[1, 1]")),
        (I_TASK, ans("input", "3")),
        (F_TASK, ans("python", "def f(n):\n    return n * n")),
        (F_TASK, "no answer"),
    ]
    js = check_many(items, rec, ENV)
    assert rec.calls == 1
    attempts = [to_attempt(t, "s1", c, j, token_ids=[1, 2]) for (t, c), j in zip(items, js)]
    assert [a.reward for a in attempts] == [1.0, -0.5, 1.0, -1.0]
    assert attempts[0].task_id == "o" and attempts[0].token_ids == (1, 2) and attempts[0].student_id == "s1"


def test_needs_sandbox_for_code_i():
    with pytest.raises(ValueError, match="sandbox"):
        check_many([(I_TASK, ans("input", "5"))], None, ENV)


def test_hostile_student_program_is_contained(sandbox, tmp_path):
    marker = f"/tmp/populora_pwned_checking_{os.getpid()}"
    evil = f"def f(n):\n    o = open\n    o('{marker}', 'w').write('x')\n    return n * n"
    (j,) = check_many([(F_TASK, ans("python", evil))], sandbox, ENV)
    assert not j.correct and j.reason == "banned:open"
    assert not os.path.exists(marker)


# --- issue 32, item 2: the check's re-run trusts no outcome a program can choose --------------------
def rerun_task(tid: str, program: str, output: str = "1") -> Task:
    return Task(id=tid, type=CODE_O, program=program, input="1", output=output, step=7)


CHOSEN = {  # each program's re-run ends in an outcome it chose; validation had seen output 1
    "memory": "def f(x):\n    raise MemoryError",
    "cpu": "def f(x):\n    while True:\n        x += 1",
    "exit": "def f(x):\n    raise SystemExit(0)",
    "exit_code": "import os\ndef f(x):\n    os._exit(121)",  # the code of a failed setup, forged
    "stall": "import signal\ndef f(x):\n    signal.pause()",
    "lying_repr": ("class L(str):\n    def __len__(self):\n        return 1\nclass B:\n"
                   "    def __repr__(self):\n        return L('1' * 3_000_000)\ndef f(x):\n    return B()"),
    "signal": "import os, signal\ndef f(x):\n    os.kill(os.getpid(), signal.SIGSEGV)",
}


def test_a_rerun_outcome_the_program_chose_makes_the_task_nondeterministic():
    from populora.tasks.checking import check_and_rerun

    env = ENV  # os and signal for the programs (the AST check is not run here)
    tasks = [rerun_task(name, program) for name, program in CHOSEN.items()]
    honest = rerun_task("honest", "def f(x):\n    return x")
    with Sandbox(limits=SandboxLimits(wall_seconds=1.0, cpu_seconds=1), workers=2) as sb:
        _, changed = check_and_rerun([], [*tasks, honest], sb, env)
    assert changed == set(CHOSEN), changed ^ set(CHOSEN)


def test_the_rerun_runs_under_its_own_seed_and_each_input_alone(sandbox):
    from populora.tasks.checking import check_and_rerun
    from populora.tasks.determinism import replica_seed

    seen = []

    class Recording:
        hash_seed = sandbox.hash_seed

        def run_many(self, programs):
            seen.extend(programs)
            return sandbox.run_many(programs)

    f_task = Task(**{**F_TASK.to_json(), "step": 9})
    _, changed = check_and_rerun([], [f_task, rerun_task("o", "def f(x):\n    return x")], Recording(), ENV)
    assert changed == frozenset()
    assert {p.hash_seed for p in seen} == {replica_seed(sandbox.hash_seed, 9, max(ENV.replicas) + 1)}
    assert [p.calls for p in seen] == [(i,) for i in F_TASK.inputs] + [("1",)]  # each gold input alone
    seen.clear()
    _, changed = check_and_rerun([], [f_task], Recording(), ENV.replace(calls="first_alone"))  # issue 32's
    assert changed == frozenset() and len(seen) == 1
    assert sorted(seen[0].calls) == sorted(F_TASK.inputs) and seen[0].calls != F_TASK.inputs


def test_the_checker_runs_each_hidden_input_alone(sandbox):
    """issue 37: the checker runs a student's program as validation ran the task's: one fresh child
    per hidden input (issue 32's layout ran them all in one child)."""
    rec = RecordingSandbox(sandbox)
    seen = []
    rec.run_many = lambda programs: seen.extend(programs) or sandbox.run_many(programs)
    (j,) = check_many([(F_TASK, ans("python", "def f(n):\n    return n * n"))], rec, ENV)
    assert j.correct and [p.calls for p in seen] == [(i,) for i, _ in F_TASK.hidden_pairs]
    seen.clear()
    (j,) = check_many([(F_TASK, ans("python", "def f(n):\n    return n * n"))], rec, ENV.replace(calls="together"))
    assert j.correct and [p.calls for p in seen] == [tuple(i for i, _ in F_TASK.hidden_pairs)]


def test_only_a_starved_timeout_is_the_hosts():
    from populora.sandbox.results import starved

    assert starved({"nvcsw": 0, "cpu": 0.4}, 1.0)  # runnable all along, half the time on a CPU
    assert not starved({"nvcsw": 1, "cpu": 0.0}, 1.0)  # it slept, or waited on a pipe: its choice
    assert not starved({"nvcsw": 0, "cpu": 0.9}, 1.0)  # it computed past the limit
    assert not starved({"cpu": 0.1}, 1.0)  # nothing proven

"""Proposal validation through the real sandbox, including regressions for the AZR defects."""

from __future__ import annotations

import pytest

from populora.sandbox import Sandbox, SandboxLimits
from populora.tasks.config import TaskEnv
from populora.tasks.records import CODE_F, CODE_I, CODE_O, Proposal
from populora.tasks.seeds import SEED_PROGRAMS, seed_buffers
from populora.tasks.validation import validate_many


class RecordingSandbox:
    """The real sandbox, recording what ``run_many`` was asked to run (to test batching)."""

    def __init__(self, sandbox):
        self.sandbox = sandbox
        self.batches = []

    def run_many(self, programs):
        self.batches.append(list(programs))
        return self.sandbox.run_many(programs)


@pytest.fixture(scope="module")
def sandbox():
    with Sandbox(limits=SandboxLimits(wall_seconds=2.0, cpu_seconds=2)) as sb:
        yield sb


def io(program: str, inp: str, task_type: str = CODE_O) -> Proposal:
    return Proposal(type=task_type, program=program, inputs=(inp,), teacher_id="t", step=3)


def test_valid_code_o_and_code_i(sandbox):
    vs = validate_many(
        [
            io("def f(a, b):\n    return [a] * b", "'x', 3"),
            io("def f(s):\n    return s[::-1]", "'abc'", CODE_I),
        ],
        sandbox,
    )
    assert [v.valid for v in vs] == [True, True]
    assert vs[0].outputs == ("['x', 'x', 'x']",)
    t = vs[1].task
    assert (t.type, t.input, t.output, t.teacher_id, t.step) == (CODE_I, "'abc'", "'cba'", "t", 3)
    assert t.id.startswith("code_i-")
    from populora.tasks.records import GoldLimits

    assert t.limits == GoldLimits.of(sandbox.limits) and t.limits.memory_mb == sandbox.limits.memory_mb  # issue 37


def test_one_batch_per_replica_in_turns(sandbox):
    from populora.tasks.determinism import replica_seed

    rec = RecordingSandbox(sandbox)
    props = [io(f"def f(x):\n    return x + {i}", str(i)) for i in range(5)] + [
        io("import os\ndef f(x):\n    return x", "1")
    ]
    vs = validate_many(props, rec)
    # one run_many per replica, each after the previous one has returned (never at the same time)
    assert len(rec.batches) == len(TaskEnv().replicas) == 4
    for k, batch in enumerate(rec.batches):
        assert [p.replica for p in batch] == [k] * 5  # 5 runnable proposals; the banned one never runs
        # the seeds of step 3 of the sandbox's run seed
        assert {p.hash_seed for p in batch} == {replica_seed(sandbox.hash_seed, 3, k)}
    assert [v.valid for v in vs] == [True] * 5 + [False]
    assert validate_many([io("import os\ndef f(x):\n    return x", "1")], rec)[0].reason == "banned:os"
    assert len(rec.batches) == 4  # nothing to run -> no sandbox call
    together = RecordingSandbox(sandbox)
    validate_many(props, together, TaskEnv(replicas_in_turn=False))
    assert len(together.batches) == 1 and len(together.batches[0]) == 20  # the old layout, for benchmarks


def test_a_decided_proposal_leaves_the_turns_that_follow(sandbox):
    rec = RecordingSandbox(sandbox)
    fails = io("def f(x):\n    return 1 // x", "0")
    ok = io("def f(x):\n    return x", "1")
    a, b = validate_many([fails, ok], rec)
    assert a.reason == "runtime_error:ZeroDivisionError" and b.valid
    assert [len(batch) for batch in rec.batches] == [2, 1, 1, 1]
    full = RecordingSandbox(sandbox)
    validate_many([fails, ok], full, TaskEnv(early_stop=False))
    assert [len(batch) for batch in full.batches] == [2, 2, 2, 2]


def test_second_def_helpers_and_classes_allowed(sandbox):
    # AZR defect: every program with a second `def` was rejected although helpers are allowed
    program = (
        "class Acc:\n    def __init__(self):\n        self.t = 0\n\n"
        "def helper(x):\n    def inner(y):\n        return y * 2\n    return inner(x)\n\n"
        "def f(xs):\n    a = Acc()\n    for x in xs:\n        a.t += helper(x)\n    return a.t"
    )
    (v,) = validate_many([io(program, "[1, 2, 3]")], sandbox)
    assert v.valid and v.outputs == ("12",)


def test_banned_import_found_by_ast_not_substring(sandbox):
    # AZR defect: a substring check let `import os` variants through
    for program in [
        "import os as q\ndef f(x):\n    return x",
        "import  os\ndef f(x):\n    return x",
        "from os import *\ndef f(x):\n    return x",
        "def f(x):\n    import subprocess\n    return x",
    ]:
        (v,) = validate_many([io(program, "1")], sandbox)
        assert not v.valid and v.reason.startswith("banned:"), program


def test_failed_execution_is_never_a_valid_empty_output(sandbox):
    # AZR defect: a failed determinism check was mistaken for a valid empty output
    progs = [
        io("def f(x):\n    raise SystemExit(0)", "1"),
        io("def f(x):\n    pass", "1"),  # returns None: a real, valid output 'None'
        io("def f(x):\n    return ''", "1"),
    ]
    a, b, c = validate_many(progs, sandbox)
    assert not a.valid and a.reason.startswith("crashed:") and a.task is None
    assert b.valid and b.outputs == ("None",)
    assert c.valid and c.outputs == ("''",)


def test_nondeterminism_across_processes(sandbox):
    words = ", ".join(repr(f"w{i}x") for i in range(24))
    (v,) = validate_many([io("def f(ws):\n    return list(set(ws))", f"[{words}]")], sandbox)
    assert (v.valid, v.reason) == (False, "nondeterministic")
    (ok,) = validate_many([io("def f(ws):\n    return sorted(set(ws))", f"[{words}]")], sandbox)
    assert ok.valid


def test_long_outputs_are_never_truncated(sandbox):
    # AZR defect: outputs over 400 characters were silently truncated
    (v,) = validate_many([io("def f(n):\n    return 'a' * n", "600")], sandbox)
    assert v.valid and v.outputs[0] == repr("a" * 600) and len(v.task.output) == 602
    (big,) = validate_many([io("def f(n):\n    return 'a' * n", "1200")], sandbox)
    assert (big.valid, big.reason) == (False, "output_too_large")
    (small,) = validate_many(
        [io("def f(n):\n    return 'a' * n", "600")], sandbox, TaskEnv(max_output_chars=500)
    )
    assert small.reason == "output_too_large"


@pytest.mark.parametrize(
    "program,inp,reason",
    [
        ("def f(x)\n    return x", "1", "syntax_error"),
        ("def g(x):\n    return x", "1", "no_entry_function"),
        ("def f(a, b):\n    return a / b", "1, 0", "runtime_error:ZeroDivisionError"),
        ("def f(x):\n    return f(x + 1)", "0", "runtime_error:RecursionError"),
        ("def f(x):\n    while True:\n        x += 1", "0", "timeout"),
        ("def f(x):\n    return x", "y", "bad_input"),
        ("def f(x):\n    return x", "", "bad_input"),
        ("def f(x):\n    return x", "1, k=2", "bad_input"),
        ("from collections import Counter\ndef f(s):\n    return Counter(s)", "'aab'", "not_literal"),
        ("def f(x):\n    return eval(x)", "'1'", "banned:eval"),
    ],
)
def test_rejection_reasons(sandbox, program, inp, reason):
    (v,) = validate_many([io(program, inp)], sandbox)
    assert (v.valid, v.reason) == (False, reason)


def test_nan_output_is_valid_for_code_o(sandbox):
    (v,) = validate_many([io("def f(x):\n    return [x, float('nan')]", "1")], sandbox)
    assert v.valid and v.outputs == ("[1, nan]",)


def test_format_failure_passes_through(sandbox):
    (v,) = validate_many([Proposal(type=CODE_O, program="", reason="format")], sandbox)
    assert (v.valid, v.reason) == (False, "format")


def code_f(inputs, program="def f(n):\n    return n * n", message="squares"):
    return Proposal(type=CODE_F, program=program, inputs=tuple(inputs), message=message)


def test_code_f(sandbox):
    ok, dup, few, err, extra = validate_many(
        [
            code_f([str(i) for i in range(10)]),
            code_f([str(i) for i in range(9)] + ["3"]),
            code_f([str(i) for i in range(4)]),
            code_f([str(i) for i in range(10)], program="def f(n):\n    return 10 // (n - 7)"),
            code_f([str(i) for i in range(12)]),
        ],
        sandbox,
    )
    assert ok.valid and ok.outputs == tuple(str(i * i) for i in range(10))
    task = ok.task
    assert task.message == "squares" and task.n_shown == 5
    assert task.shown_pairs[0] == ("0", "0") and task.hidden_pairs[-1] == ("9", "81")
    assert dup.reason == "duplicate_inputs"
    assert few.reason == "too_few_inputs"
    assert err.reason == "runtime_error:ZeroDivisionError"
    assert extra.valid and len(extra.task.inputs) == 10  # extra inputs beyond 10 are dropped


def test_seed_set_is_valid(sandbox):
    assert len(SEED_PROGRAMS) >= 13
    assert SEED_PROGRAMS[0][0] == "def f(a):\n    return a"  # the identity function
    bufs = seed_buffers(sandbox)
    assert len(bufs[CODE_O]) == len(SEED_PROGRAMS) == len(bufs[CODE_I])
    identity = next(t for t in bufs[CODE_O] if t.program == SEED_PROGRAMS[0][0])
    assert identity.output == "'Hello world'"
    assert all(t.teacher_id == "seed" for t in bufs[CODE_O])
    assert len(bufs[CODE_F]) == 0 and bufs.sample_program(1) in {p for p, _ in SEED_PROGRAMS}


def test_code_f_runs_each_input_alone_in_every_execution(sandbox):
    """issue 37: validation computes every code_f output with f on that input alone, in all four
    executions, so state kept between calls has one meaning: the one the checker gives it."""
    stateful = "calls = []\n\ndef f(n):\n    calls.append(n)\n    return n + len(calls)"
    cached = "cache = {}\n\ndef f(n):\n    if n not in cache:\n        cache[n] = n * 3\n    return cache[n]"
    rec = RecordingSandbox(sandbox)
    counted, ok = validate_many(
        [
            code_f([str(i) for i in range(10)], program=stateful),
            code_f([str(i) for i in range(10)], program=cached),
        ],
        rec,
    )
    assert counted.valid and counted.outputs == tuple(str(i + 1) for i in range(10))  # each call is the first
    assert ok.valid and ok.outputs == tuple(str(3 * i) for i in range(10))
    assert [len(batch) for batch in rec.batches] == [20] * 4
    assert all(len(p.calls) == 1 for batch in rec.batches for p in batch)
    # issue 32's layout ran the later executions in one child, in a drawn order: the count showed
    (v,) = validate_many([code_f([str(i) for i in range(10)], program=stateful)], sandbox,
                         TaskEnv(calls="first_alone"))
    assert (v.valid, v.reason) == (False, "nondeterministic")


def test_call_history_tricks_have_one_meaning(sandbox):
    """issue 32's symmetric trick (+100 on the first and the tenth call) and issue 37's (another output
    from the fifth call on): each input alone, every call is the first, in validation as in the
    checker, so the task is what f gives alone and its own program is right. The layout before issue
    32 computed gold outputs that f alone does not give."""
    from populora.tasks.checking import check_many

    symmetric = "calls = []\n\ndef f(n):\n    calls.append(n)\n    return n + (100 if len(calls) in (1, 10) else 0)"
    fifth = "calls = []\n\ndef f(n):\n    calls.append(n)\n    return n if len(calls) < 5 else -n"
    env = TaskEnv(require_think=False)
    inputs = [str(i) for i in range(10)]
    verdicts = validate_many([code_f(inputs, program=symmetric), code_f(inputs, program=fifth)], sandbox, env)
    assert [v.outputs for v in verdicts] == [tuple(str(i + 100) for i in range(10)), tuple(inputs)]
    judgements = check_many([(v.task, f"<answer>\n```python\n{p}\n```\n</answer>")
                             for v, p in zip(verdicts, (symmetric, fifth))], sandbox, env)
    assert all(j.correct for j in judgements), judgements
    old = TaskEnv(replicas=(0, 1), replica_seeds="fixed", calls="together")
    (fooled,) = validate_many([code_f([str(i) for i in range(10)], program=symmetric)], sandbox, old)
    assert fooled.valid and fooled.outputs != tuple(str(i + 100) for i in range(10))  # not f alone


# --- reason kinds: a fixed set (metric names are built from them) ---------------------------------
def test_reason_kind_is_always_a_known_kind():
    from populora.tasks.records import OTHER_KIND, REASON_KINDS, reason_kind

    assert reason_kind(None) is None
    assert reason_kind("banned:os") == "banned"
    assert reason_kind("runtime_error:ZeroDivisionError") == "runtime_error"
    assert reason_kind("crashed:SIGKILL") == "crashed"
    assert reason_kind("nondeterministic") == "nondeterministic"
    for strange in ("A" * 6000 + "\n\x1b[2J", "teacher/reject/x", "", ":", "\x00:x", "valid"):
        assert reason_kind(strange) == OTHER_KIND
    assert all(k.isidentifier() for k in REASON_KINDS)


def test_item_7_programs_are_rejected_before_execution():
    """Through the validator (no sandbox needed: the static check comes first)."""
    from test_tasks_safety import ITEM_7

    from populora.tasks.validation import static_reason

    cfg = TaskEnv()
    for program, reason in ITEM_7:
        proposal = Proposal(type="code_o", program=program, inputs=("1",))
        assert static_reason(proposal, cfg)[0] == reason, program

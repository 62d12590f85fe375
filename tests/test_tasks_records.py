"""Records (JSON round trips, code_f split) and buffers (dedup, capacity, seeded sampling)."""

from __future__ import annotations

import json

import pytest

from populora.tasks.buffers import TaskBuffer, TaskBuffers, dedup_key
from populora.tasks.records import (
    CODE_F,
    CODE_I,
    CODE_O,
    Attempt,
    Proposal,
    Task,
    Verdict,
    banned,
    reason_kind,
    runtime_error,
    task_id,
)


def _task(i: int, program: str | None = None, inp: str | None = None, teacher: str = "t") -> Task:
    program = program or f"def f(x):\n    return x + {i}"
    inp = inp or str(i)
    return Task(
        id=task_id(CODE_O, program, (inp,)),
        type=CODE_O,
        program=program,
        input=inp,
        output=str(2 * i),
        teacher_id=teacher,
    )


F_TASK = Task(
    id="cf",
    type=CODE_F,
    program="def f(n):\n    return n * n",
    inputs=tuple(str(i) for i in range(10)),
    outputs=tuple(str(i * i) for i in range(10)),
    message="Squares.",
)


def test_json_round_trips():
    for rec in [
        _task(1),
        F_TASK,
        Proposal(type=CODE_F, program="def f(x):\n    return x", inputs=("1", "2"), message="m", reason=None),
        Attempt(
            task_id="a",
            student_id="s",
            completion="c",
            token_ids=(1, 2),
            answer="1",
            format_ok=True,
            correct=True,
            score=1.0,
            reward=1.0,
        ),
        Verdict(True, None, outputs=("1",), seconds=0.1, task=F_TASK),
        Verdict(False, "banned:os"),
    ]:
        data = json.loads(json.dumps(rec.to_json()))
        assert type(rec).from_json(data) == rec
    with pytest.raises(ValueError, match="unknown keys"):
        Task.from_json({"id": "x", "type": CODE_O, "program": "", "bogus": 1})


@pytest.mark.parametrize("key, value, says", [
    ("program", 5, "'program' must be a string, got int"),
    ("inputs", ["1", 2], "'inputs' must be a list of strings, got int at [1]"),
    ("inputs", "12", "'inputs' must be a list of strings, got str"),
    ("step", -1, "'step' must be a whole number"),
    ("step", 1 << 64, "'step' must be a whole number"),
    ("step", True, "'step' must be a whole number"),
    ("n_shown", 2.5, "'n_shown' must be a whole number"),
    ("n_shown", 0, "'n_shown' must leave shown and hidden pairs among 10 inputs, got 0"),
])
def test_a_record_read_from_json_has_its_fields_types_or_names_the_field(key, value, says):
    """issue 37: a task record whose inputs were numbers reached the sandbox (the child exited 123)."""
    from populora.tasks.records import RecordFieldError

    with pytest.raises(RecordFieldError) as err:
        Task.from_json({**F_TASK.to_json(), key: value})
    assert str(err.value).startswith(says) and err.value.field == key
    with pytest.raises(RecordFieldError, match="'score' must be a finite number"):
        Attempt.from_json({"task_id": "t", "student_id": "s", "completion": "", "score": float("nan")})


def test_code_f_split_and_checks():
    assert F_TASK.shown_pairs == [(str(i), str(i * i)) for i in range(5)]
    assert F_TASK.hidden_pairs == [(str(i), str(i * i)) for i in range(5, 10)]
    with pytest.raises(ValueError, match="outputs"):
        Task(id="x", type=CODE_F, program="", inputs=("1",), outputs=())
    with pytest.raises(ValueError, match="n_shown"):
        Task(id="x", type=CODE_F, program="", inputs=("1", "2"), outputs=("1", "2"), n_shown=2)
    # records are plain data; where tasks come in (a buffer, a checkpoint, the command line) the kinds'
    # registry refuses an unknown type
    from populora.tasks.buffers import TaskBuffer

    with pytest.raises(ValueError, match="unknown task type 'code_x'"):
        TaskBuffer.from_json({"type": "code_x", "tasks": [Task(id="x", type="code_x", program="").to_json()]})


def test_reasons_and_ids():
    assert banned("os") == "banned:os" and reason_kind("banned:os") == "banned"
    assert runtime_error("ZeroDivisionError") == "runtime_error:ZeroDivisionError"
    assert reason_kind(None) is None
    assert task_id(CODE_O, "p", ("1",)) == task_id(CODE_O, "p", ("1",))
    assert task_id(CODE_O, "p", ("1",)) != task_id(CODE_I, "p", ("1",))


def test_buffer_dedup_by_normalised_program_and_input_value():
    buf = TaskBuffer(CODE_O)
    a = _task(1, "def f(x):\n    return x + 1", "[1,2]")
    same = _task(1, "def f(x):  # adds one\n\n    return (x + 1)", "[1, 2]")
    other_input = _task(1, "def f(x):\n    return x + 1", "[1, 2.0]")
    assert buf.add(a) and not buf.add(same) and buf.add(other_input)
    assert len(buf) == 2 and same in buf
    assert dedup_key(a) == dedup_key(same)
    with pytest.raises(ValueError, match="cannot hold"):
        buf.add(F_TASK)


def test_buffer_capacity_keeps_seeds():
    buf = TaskBuffer(CODE_O, capacity=3)
    buf.add(_task(0, teacher="seed"))
    for i in range(1, 6):
        buf.add(_task(i))
    assert len(buf) == 3
    ids = [t.program for t in buf]
    assert _task(0).program in ids  # the seed stayed
    assert ids[1:] == [_task(4).program, _task(5).program]  # the newest others


def test_buffer_sampling_is_seeded_and_without_replacement():
    buf = TaskBuffer(CODE_O)
    buf.extend(_task(i) for i in range(20))
    s1, s2 = buf.sample(6, 123), buf.sample(6, 123)
    assert [t.id for t in s1] == [t.id for t in s2]
    assert len({t.id for t in s1}) == 6
    assert len(buf.sample(50, 1)) == 20
    assert buf.sample(0, 1) == []
    assert {tuple(t.id for t in buf.sample(6, s)) for s in range(10)}.__len__() > 1


def test_buffers_json_and_programs():
    bufs = TaskBuffers()
    with pytest.raises(ValueError, match="seed"):
        bufs.sample_program(0)
    bufs.add(_task(1))
    bufs.add(F_TASK)
    again = TaskBuffers.from_json(json.loads(json.dumps(bufs.to_json())))
    assert [t.id for t in again[CODE_O]] == [_task(1).id]
    assert list(again[CODE_F]) == [F_TASK]
    assert again.sample_program(0) == _task(1).program
    assert len(again.references(CODE_O, 6, 0)) == 1


def test_gold_limits_round_trip_and_old_records_read_without_them():
    """issue 37: a task records the sandbox limits of its gold; a record written before (no
    ``limits`` key: buffers, checkpoints, task logs) reads as a task without them."""
    from populora.sandbox import SandboxLimits
    from populora.tasks.records import GoldLimits, RecordFieldError, reason_kind

    limits = GoldLimits.of(SandboxLimits(memory_mb=256, wall_seconds=2.5))
    task = Task(id="x", type=CODE_O, program="def f(x):\n    return x", input="1", output="1", limits=limits)
    data = json.loads(json.dumps(task.to_json()))
    assert data["limits"]["memory_mb"] == 256 and Task.from_json(data) == task
    old = {k: v for k, v in data.items() if k != "limits"}
    assert Task.from_json(old).limits is None and Task.from_json({**data, "limits": None}).limits is None
    assert limits.first_difference(GoldLimits.of(SandboxLimits(memory_mb=512, wall_seconds=2.5))) == "memory_mb"
    assert limits.first_difference(GoldLimits.of(SandboxLimits(memory_mb=256, wall_seconds=2.5, workers=7))) is None
    assert GoldLimits.of(None) is None and GoldLimits.of(object()) is None
    for bad, says in (({**data["limits"], "memory_mb": -1}, "'limits.memory_mb' must be a whole number"),
                      ({**data["limits"], "network": "no"}, "'limits.network' must be true or false"),
                      ({"memory_mb": 1}, "'limits' lacks"), (5, "'limits' must be a JSON object")):
        with pytest.raises(RecordFieldError, match=says):
            Task.from_json({**data, "limits": bad})
    assert reason_kind("limits_changed:memory_mb") == "limits_changed"

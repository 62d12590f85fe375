"""`populora tasks`: bad limits, bad bytes, deep or huge lines and unwritable outputs lose nothing else."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from populora.commands import corpus_io
from populora.commands import tasks as tasks_cmd

GOOD = {"program": "def f(x):\n    return x * 2", "input": "3"}


def run_cli(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="populora")
    tasks_cmd.register(parser.add_subparsers())
    args = parser.parse_args(["tasks", *argv])
    return args.func(args)


def write_lines(path: Path, lines: list) -> Path:
    path.write_bytes(b"".join((x if isinstance(x, bytes) else json.dumps(x).encode()) + b"\n" for x in lines))
    return path


def rows_of(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()]


@pytest.mark.parametrize(
    "option, value",
    [
        ("--memory-mb", "-5"), ("--memory-mb", "0"), ("--memory-mb", "1.5"),
        ("--wall-seconds", "0"), ("--wall-seconds", "-1"), ("--wall-seconds", "nan"), ("--wall-seconds", "inf"),
        ("--cpu-seconds", "0"), ("--cpu-seconds", "-3"), ("--workers", "0"), ("--workers", "-2"),
        ("--max-output-chars", "0"),
    ],
)
@pytest.mark.parametrize("action", ["validate", "check"])
def test_limits_must_be_finite_and_positive(tmp_path, capsys, action, option, value):
    src = write_lines(tmp_path / "in.jsonl", [GOOD])
    with pytest.raises(SystemExit) as e:
        run_cli([action, str(src), f"{option}={value}"])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert f"argument {option}: must be" in err and repr(value) in err and "Traceback" not in err


def test_explicit_cpu_seconds_reaches_the_sandbox(tmp_path, monkeypatch):
    seen = {}
    real = tasks_cmd._open_sandbox

    def spy(args, seed=0):
        sandbox = real(args, seed)
        seen["limits"], seen["seed"] = sandbox.limits, sandbox.hash_seed
        return sandbox

    monkeypatch.setattr(tasks_cmd, "_open_sandbox", spy)
    src = write_lines(tmp_path / "in.jsonl", [GOOD])
    assert run_cli(["validate", str(src), "--out", str(tmp_path / "o"), "--wall-seconds", "3", "--cpu-seconds", "2"]) == 0
    assert (seen["limits"].wall_seconds, seen["limits"].cpu_seconds) == (3.0, 2)


def test_the_determinism_seed_is_fresh_unless_given(tmp_path, monkeypatch, capsys):
    """A fixed default seed would let a program be tuned to the hash seeds its replicas run under."""
    seen = []
    real = tasks_cmd._open_sandbox
    monkeypatch.setattr(tasks_cmd, "_open_sandbox", lambda args, seed=0: seen.append(seed) or real(args, seed))
    src = write_lines(tmp_path / "in.jsonl", [GOOD])
    for _ in range(2):
        assert run_cli(["validate", str(src), "--out", str(tmp_path / "o")]) == 0
    err = capsys.readouterr().err
    assert seen[0] != seen[1] and f"determinism seed {seen[0]} (--seed {seen[0]} repeats this run)" in err
    assert run_cli(["validate", str(src), "--out", str(tmp_path / "o"), "--seed", "7"]) == 0
    assert seen[-1] == 7 and "determinism seed" not in capsys.readouterr().err


def test_a_non_utf8_byte_is_a_bad_line_never_a_replaced_program(tmp_path, capsys):
    bad = b'{"program": "def f(x):\\n    return \'\xff\'", "input": "1"}'
    src = write_lines(tmp_path / "in.jsonl", [GOOD, bad, GOOD, b'{"program": "def f(x):\\n    return \'\\ud800\'", "input": "1"}'])
    out = tmp_path / "out.jsonl"
    assert run_cli(["validate", str(src), "--out", str(out)]) == 1  # a malformed line
    rows = rows_of(out)
    assert [r["line"] for r in rows] == [1, 2, 3, 4]
    assert rows[0]["valid"] and rows[2]["valid"]
    assert rows[1]["valid"] is False and rows[1]["reason"].startswith("bad_line: not UTF-8 (byte 0xff at byte ")
    assert rows[3]["reason"].startswith("bad_line: a string holds a lone surrogate")
    # check reads the same way
    assert run_cli(["check", str(write_lines(tmp_path / "c.jsonl", [b'{"answer": "\xfe"}'])), "--out", str(out)]) == 1  # a malformed line
    assert rows_of(out)[0]["reason"].startswith("bad_line: not UTF-8")


def test_deep_and_huge_lines_cost_only_their_own_result(tmp_path, monkeypatch):
    deep = b"[" * 200_000 + b"]" * 200_000  # 400 kB: under the line limit, far over any parser's depth
    src = write_lines(tmp_path / "in.jsonl", [GOOD, deep, GOOD])
    out = tmp_path / "out.jsonl"
    assert run_cli(["validate", str(src), "--out", str(out)]) == 1  # a malformed line
    rows = rows_of(out)
    assert [r["valid"] for r in rows] == [True, False, True]
    assert rows[1]["reason"] == "bad_line: JSON nested too deeply"

    monkeypatch.setattr(corpus_io, "MAX_LINE_BYTES", 4096)
    huge = json.dumps({"program": "def f(x):\n    return x  # " + "y" * 20_000, "input": "1"}).encode()
    at_limit = json.dumps({"program": "def f(x):\n    return x  # " + "z" * (4096 - 60), "input": "1"}).encode()
    assert 4000 < len(at_limit) <= 4096
    src = write_lines(tmp_path / "in.jsonl", [GOOD, huge, at_limit, GOOD])
    assert run_cli(["validate", str(src), "--out", str(out)]) == 1  # a malformed line
    rows = rows_of(out)
    assert [r["line"] for r in rows] == [1, 2, 3, 4]
    assert rows[1]["reason"] == "bad_line: longer than 4096 bytes"
    assert [r["valid"] for r in rows] == [True, False, True, True]


def test_a_verifier_crash_on_one_line_costs_only_that_line(tmp_path, monkeypatch):
    import populora.tasks.validation as validation

    real = validation.validate_many

    def fragile(proposals, sandbox, cfg=None):
        if any("BOOM" in p.program for p in proposals):
            raise RecursionError("maximum recursion depth exceeded")
        return real(proposals, sandbox, cfg)

    monkeypatch.setattr(validation, "validate_many", fragile)
    boom = {"program": "def f(x):\n    return 'BOOM'", "input": "1"}
    src = write_lines(tmp_path / "in.jsonl", [GOOD, boom, GOOD])
    out = tmp_path / "out.jsonl"
    assert run_cli(["validate", str(src), "--out", str(out)]) == 0
    rows = rows_of(out)
    assert [r["valid"] for r in rows] == [True, False, True]
    assert rows[1]["reason"].startswith("bad_line: the verifier failed on this line (RecursionError")


def test_a_sandbox_that_fails_to_clean_up_loses_no_result(tmp_path, monkeypatch, capsys):
    from populora.sandbox import Sandbox

    real_close = Sandbox.close

    def failing_close(self):
        real_close(self)
        raise RecursionError("maximum recursion depth exceeded while calling a Python object")

    monkeypatch.setattr(Sandbox, "close", failing_close)
    src = write_lines(tmp_path / "in.jsonl", [GOOD, GOOD])
    out = tmp_path / "out.jsonl"
    assert run_cli(["validate", str(src), "--out", str(out)]) == 0
    assert [r["valid"] for r in rows_of(out)] == [True, True]
    assert "warning: sandbox cleanup failed (RecursionError" in capsys.readouterr().err


@pytest.mark.parametrize("where", ["missing-dir", "directory", "read-only"])
def test_an_unwritable_out_is_refused_before_any_work(tmp_path, monkeypatch, capsys, where):
    def no_work(args):
        raise AssertionError("the sandbox was started before --out was checked")

    monkeypatch.setattr(tasks_cmd, "_open_sandbox", no_work)
    src = write_lines(tmp_path / "in.jsonl", [GOOD])
    out = {"missing-dir": tmp_path / "nope" / "out.jsonl", "directory": tmp_path, "read-only": tmp_path / "ro.jsonl"}[where]
    if where == "read-only":
        if os.geteuid() == 0:
            pytest.skip("root may write a read-only file")
        out.write_text("old\n")
        out.chmod(0o444)
    for action in ("validate", "check"):
        assert run_cli([action, str(src), "--out", str(out)]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"populora tasks {action}: cannot write --out {out}") and err.count("\n") == 1


def test_out_is_replaced_only_when_the_results_are_complete(tmp_path, monkeypatch):
    src = write_lines(tmp_path / "in.jsonl", [GOOD])
    out = tmp_path / "out.jsonl"
    out.write_text("earlier results\n")

    def crash(args, seed=0):
        raise RuntimeError("no sandbox today")

    monkeypatch.setattr(tasks_cmd, "_open_sandbox", crash)
    with pytest.raises(RuntimeError):
        run_cli(["validate", str(src), "--out", str(out)])
    assert out.read_text() == "earlier results\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.jsonl", "out.jsonl"]  # no temporary left
    monkeypatch.undo()
    assert run_cli(["validate", str(src), "--out", str(out)]) == 0
    assert rows_of(out)[0]["valid"] and sorted(p.name for p in tmp_path.iterdir()) == ["in.jsonl", "out.jsonl"]


# --- issue 37, item 5: numbers no record holds, values of the wrong type, impossible limits ---------
F_INPUTS = [str(i) for i in range(10)]
GOOD_VALIDATE = [
    {"program": "def f(x):\n    return x * 2", "input": "3"},
    {"type": "code_f", "program": "def f(n):\n    return n + 1", "inputs": F_INPUTS, "message": "plus one"},
]
TASK_F = {"id": "t", "type": "code_f", "program": "def f(n):\n    return n + 1", "inputs": F_INPUTS,
          "outputs": [str(i + 1) for i in range(10)], "message": "m", "n_shown": 5, "teacher_id": "", "step": 3}
GOOD_CHECK = [
    {"type": "code_o", "program": "def f(x):\n    return x * 2", "input": "3", "output": "6", "answer": "6"},
    {"task": TASK_F, "answer": "def f(n):\n    return n + 1"},
    {**{k: v for k, v in TASK_F.items() if k not in ("id", "teacher_id", "step")}, "answer": "def f(n):\n    return n + 1"},
]
# JSON number texts no record holds: written into a line as they are
BAD_NUMBERS = ["NaN", "Infinity", "-Infinity", "1e400", "-1e400", "1" + "0" * 400, "-" + "9" * 30,
               "9" * 5000, "18446744073709551616"]
WRONG_FOR = {  # values of the wrong type (or out of range) for each kind of field
    "text": [5, -3, 2.5, True, None, [1, 2], {"a": 1}],
    "texts": [5, "1", None, {"a": 1}, [1, 2]],
    "count": [-3, 2.5, True, None, "5", [1]],
    "n_shown": [-3, 0, 10, 2.5, True, None, "5", [1]],
}
FIELDS = {  # per good line: (path, kind of field) that a malformed line may break
    "validate": [[("program", "text"), ("input", "text")],
                 [("program", "text"), ("inputs", "texts"), ("inputs[4]", "text"), ("message", None)]],
    "check": [[("program", "text"), ("input", "text"), ("output", "text"), ("answer", "text")],
              [("task.program", "text"), ("task.inputs", "texts"), ("task.inputs[2]", "text"),
               ("task.outputs[9]", "text"), ("task.n_shown", "n_shown"), ("task.step", "count"),
               ("task.message", "text")],
              [("program", "text"), ("inputs", "texts"), ("outputs[0]", "text"), ("n_shown", "n_shown")]],
}


def malformed(line: dict, path: str, value) -> bytes:
    """``line`` with the field at ``path`` (``a.b`` or ``a[i]``) replaced by ``value``; a ``str``
    value from BAD_NUMBERS is written as a bare JSON number text."""
    import copy
    import re

    obj = copy.deepcopy(line)
    parts = [p for p in re.split(r"\.|\[(\d+)\]", path) if p]
    node = obj
    for p in parts[:-1]:
        node = node[int(p)] if p.isdigit() else node[p]
    last = int(parts[-1]) if parts[-1].isdigit() else parts[-1]
    raw = isinstance(value, str) and value in BAD_NUMBERS
    node[last] = "@@RAW@@" if raw else value
    text = json.dumps(obj)
    return (text.replace('"@@RAW@@"', value) if raw else text).encode()


def fuzz_lines(action: str, rng) -> list[tuple[bytes, str | None]]:
    """A shuffled corpus: every good line, then each one broken in one field (a bad number, or a
    value of the wrong type where the field's kind has one); (line, field it names or None)."""
    rows: list[tuple[bytes, str | None]] = []
    good = GOOD_VALIDATE if action == "validate" else GOOD_CHECK
    for line, fields in zip(good, FIELDS[action]):
        rows += [(json.dumps(line).encode(), None)] * 3
        for path, kind in fields:
            top = path.split("[")[0]
            rows.append((malformed(line, path, rng.choice(BAD_NUMBERS)), top))
            if kind is not None:
                rows.append((malformed(line, path, rng.choice(WRONG_FOR[kind])), top))
    rng.shuffle(rows)
    return rows


@pytest.mark.parametrize("action", ["validate", "check"])
def test_a_fuzzed_corpus_loses_no_good_line_and_names_each_bad_field(tmp_path, capsys, action):
    """Malformed records (non-finite and huge numbers, negative counts, values of the wrong type)
    through the real command: every good line gets its verdict, every bad one one bad_line naming
    its field, and no traceback (issue 37: `"n_shown": 1e400` lost the whole file)."""
    import random

    rows = fuzz_lines(action, random.Random(37))
    src = tmp_path / "in.jsonl"
    src.write_bytes(b"".join(line + b"\n" for line, _ in rows))
    out = tmp_path / "out.jsonl"
    assert run_cli([action, str(src), "--out", str(out), "--seed", "1"]) == 1  # malformed lines
    results = rows_of(out)
    assert [r["line"] for r in results] == list(range(1, len(rows) + 1))
    for (line, field), r in zip(rows, results):
        if field is None:
            assert r.get("valid", r.get("correct")) is True, (line, r)
        else:
            assert r["reason"].startswith("bad_line: ") and f"'{field}" in r["reason"], (field, line[:120], r)
            assert "\n" not in r["reason"] and len(r["reason"]) < 400
    err = capsys.readouterr().err
    assert "Traceback" not in err and "is malformed" in err


@settings(max_examples=120, deadline=None)
@given(st.sampled_from(["validate", "check"]), st.integers(0, 2), st.integers(0, 10), st.data())
def test_any_one_broken_field_is_a_bad_line_naming_it(action, which, pick, data):
    """The reading of a line alone (no sandbox), over many malformed records: one `bad_line` naming
    the field, or the item for a good line; never an exception."""
    good = GOOD_VALIDATE if action == "validate" else GOOD_CHECK
    line = good[which % len(good)]
    fields = FIELDS[action][which % len(good)]
    path, kind = fields[pick % len(fields)]
    choices = BAD_NUMBERS + (WRONG_FOR[kind] if kind else [])
    value = data.draw(st.sampled_from(choices))
    reason = read_one(action, malformed(line, path, value))
    assert isinstance(reason, str) and reason.startswith("bad_line: "), (path, value, reason)
    assert f"'{path.split('[')[0]}" in reason
    assert not isinstance(read_one(action, json.dumps(line).encode()), str)


def read_one(action: str, raw: bytes):
    """What `populora tasks <action>` makes of one line before anything runs: its item, or its
    bad_line reason."""
    obj = corpus_io.parse_input_line(raw)
    if isinstance(obj, str):
        return obj
    try:
        if action == "validate":
            return tasks_cmd.proposal_from_json(obj, None)
        task = tasks_cmd.task_from_json(obj)
        return task, tasks_cmd.completion_from_json(obj, task)
    except (ValueError, TypeError) as exc:
        return f"bad_line: {exc}"


@pytest.mark.parametrize("option, value, field", [
    ("--memory-mb", str(10**14), "memory_mb"), ("--memory-mb", "1" + "0" * 400, "memory_mb"),
    ("--wall-seconds", "1e300", "wall_seconds"), ("--cpu-seconds", str(10**9), "cpu_seconds"),
    ("--max-output-chars", str(10**12), "max_output_chars"), ("--workers", str(10**6), "workers"),
])
def test_impossible_limits_are_refused_at_start_in_one_line(tmp_path, monkeypatch, capsys, option, value, field):
    def no_work(*args, **kwargs):
        raise AssertionError("the sandbox was started with impossible limits")

    monkeypatch.setattr(tasks_cmd, "_open_sandbox", no_work)
    src = write_lines(tmp_path / "in.jsonl", [GOOD])
    for action in ("validate", "check"):
        assert run_cli([action, str(src), option, value]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith(f"populora tasks {action}: {option}: sandbox.{field}: must be <=")
        assert "Traceback" not in err

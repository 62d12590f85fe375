"""`populora tasks`: bad limits, bad bytes, deep or huge lines and unwritable outputs lose nothing else."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import pytest

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

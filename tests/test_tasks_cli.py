"""`populora tasks validate|check`, the hostile corpus through the validator, and the bench corpus."""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import pytest
from procutil import descendants

from populora.commands import tasks as tasks_cmd

HOSTILE = Path(__file__).parent / "hostile"


def run_cli(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    tasks_cmd.register(parser.add_subparsers())
    args = parser.parse_args(["tasks", *argv])
    return args.func(args)


def write_jsonl(path: Path, lines: list) -> Path:
    path.write_text("".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines))
    return path


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_validate_file_with_malformed_lines(tmp_path, capsys):
    src = write_jsonl(
        tmp_path / "in.jsonl",
        [
            {"program": "def f(x):\n    return x * 3", "input": "'ab'"},
            "{not json",
            {"program": "import os\ndef f(x):\n    return x", "input": "1", "type": "code_i"},
            "",
            {"program": 5, "input": "1"},
            {
                "program": "def f(n):\n    return n + 1",
                "inputs": [str(i) for i in range(10)],
                "message": "adds",
            },
            {"program": "def f(n):\n    return n", "input": "1", "type": "code_x"},
        ],
    )
    out = tmp_path / "out.jsonl"
    assert run_cli(["validate", str(src), "--out", str(out), "--wall-seconds", "2"]) == 1  # malformed lines
    rows = read_jsonl(out)
    assert [r["line"] for r in rows] == [1, 2, 3, 5, 6, 7]
    assert rows[0]["valid"] and rows[0]["output"] == "'ababab'" and rows[0]["task"]["type"] == "code_o"
    assert rows[1]["reason"].startswith("bad_line: invalid JSON")
    assert (rows[2]["valid"], rows[2]["reason"], rows[2]["type"]) == (False, "banned:os", "code_i")
    assert rows[3]["reason"] == "bad_line: 'program' must be a string"
    assert (
        rows[4]["valid"]
        and rows[4]["outputs"] == [str(i + 1) for i in range(10)]
        and rows[4]["type"] == "code_f"
    )
    assert "code_x" in rows[5]["reason"]
    assert all(isinstance(r["seconds"], float) for r in rows)
    assert "2/6 valid" in capsys.readouterr().err


def test_validate_type_flag_and_missing_file(tmp_path, capsys):
    src = write_jsonl(tmp_path / "in.jsonl", [{"program": "def f(x):\n    return x", "input": "1"}])
    assert run_cli(["validate", str(src), "--type", "code_i"]) == 0
    (row,) = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert row["type"] == "code_i" and row["valid"]
    assert run_cli(["validate", str(tmp_path / "missing.jsonl")]) == 2


def test_check_command(tmp_path):
    validated = tmp_path / "v.jsonl"
    run_cli(
        [
            "validate",
            str(
                write_jsonl(tmp_path / "p.jsonl", [{"program": "def f(x):\n    return x * 2", "input": "4"}])
            ),
            "--out",
            str(validated),
        ]
    )
    task = read_jsonl(validated)[0]["task"]
    f_inline = {
        "type": "code_f",
        "program": "",
        "inputs": [str(i) for i in range(10)],
        "outputs": [str(i + 1) for i in range(10)],
        "message": "m",
    }
    src = write_jsonl(
        tmp_path / "answers.jsonl",
        [
            {"task": task, "answer": "8"},
            {"task": {**task, "type": "code_i"}, "answer": "4"},
            {"task": {**task, "type": "code_i"}, "completion": "<answer>```input\n3\n```</answer>"},
            {
                "type": "code_o",
                "program": "def f(x):\n    return x",
                "input": "1",
                "output": "1",
                "answer": "1.0",
            },
            {**f_inline, "answer": "def f(n):\n    return n + 1"},
            {**f_inline, "completion": "no tags"},
            {"task": task},
            "[1, 2]",
        ],
    )
    out = tmp_path / "checked.jsonl"
    assert run_cli(["check", str(src), "--out", str(out)]) == 1  # lines 7 and 8 are malformed
    rows = read_jsonl(out)
    assert [r["correct"] for r in rows] == [True, True, False, False, True, False, False, False]
    assert rows[3]["reason"] == "wrong" and rows[5]["reason"] == "format"
    assert "completion" in rows[6]["reason"] and rows[7]["reason"] == "bad_line: not a JSON object"


def hostile_lines() -> list[dict]:
    lines = []
    for path in sorted(HOSTILE.glob("*.py")):
        source = path.read_text()
        calls = []
        for line in source.splitlines():
            if line.startswith("# calls: "):
                calls = json.loads(line[len("# calls: ") :])
        lines.append({"program": source, "input": calls[0] if calls else "", "name": path.stem})
    return lines


def expects_ok(program: str) -> bool:
    for line in program.splitlines():
        if line.startswith("# expect: "):
            return any(alt.strip().split(" ")[0] == "ok" for alt in line[len("# expect: ") :].split("|"))
    return False


def pwned_files() -> list[str]:
    hits = []
    for d in ["/tmp", "/var/tmp", "/dev/shm", "/", os.getcwd(), str(Path(__file__).parents[1])]:
        try:
            hits += [os.path.join(d, n) for n in os.listdir(d) if n.startswith("populora_pwned")]
        except OSError:
            continue
    return hits


@pytest.mark.slow
def test_hostile_corpus_through_validate(tmp_path):
    lines = hostile_lines()
    if len(lines) < 40:
        pytest.skip("the hostile corpus (tests/hostile) is not present")
    before, procs_before = pwned_files(), descendants(os.getpid())
    src = write_jsonl(tmp_path / "hostile.jsonl", lines)
    out = tmp_path / "verdicts.jsonl"
    start = time.monotonic()
    assert run_cli(["validate", str(src), "--out", str(out), "--wall-seconds", "2"]) == 0
    assert time.monotonic() - start < 120
    rows = read_jsonl(out)
    assert len(rows) == len(lines)
    banned = [r for r in rows if (r["reason"] or "").startswith("banned:")]
    assert len(banned) >= 0.7 * len(rows)  # the AST check rejects most before anything runs
    for line, row in zip(lines, rows):
        if row["valid"]:  # nothing passes unless the sandbox, unfiltered, also finds it harmless
            assert expects_ok(line["program"]), line["name"]
    assert descendants(os.getpid()) <= procs_before  # no stray processes left by the run
    assert pwned_files() == before


@pytest.mark.slow
def test_bench_corpus_verdicts_match_labels(tmp_path):
    from populora.bench.executor import corpus_proposals, load_corpus
    from populora.sandbox import Sandbox, SandboxLimits
    from populora.tasks.validation import validate_many

    rows = load_corpus()
    assert len(rows) >= 200
    assert len({r["program"] for r in rows}) >= 200
    with Sandbox(limits=SandboxLimits(wall_seconds=1.0, cpu_seconds=1)) as sb:
        verdicts = validate_many(corpus_proposals(rows), sb)
    got = [(r["program"][:40], v.reason) for r, v in zip(rows, verdicts)]
    assert got == [(r["program"][:40], r["expect"]) for r in rows]
    assert 0.5 < sum(v.valid for v in verdicts) / len(rows) < 0.9  # realistic mix of valid and invalid


def test_naive_executor_agrees_with_sandbox():
    from populora.bench.executor import NaiveExecutor, corpus_proposals, load_corpus
    from populora.sandbox import Sandbox, SandboxLimits
    from populora.tasks.validation import validate_many

    rows = load_corpus()
    picked, seen = [], set()
    for r in rows:  # one proposal per expected outcome, except the slow limit cases
        kind = (r["expect"] or "valid").split(":")[0]
        if kind not in seen and kind not in ("timeout", "memory"):
            seen.add(kind)
            picked.append(r)
    limits = SandboxLimits(wall_seconds=2.0, cpu_seconds=2)
    proposals = corpus_proposals(picked)
    with Sandbox(limits=limits) as sb:
        ours = validate_many(proposals, sb)
    naive = validate_many(proposals, NaiveExecutor(limits, workers=2))
    assert len(picked) >= 10
    assert [v.reason for v in ours] == [v.reason for v in naive] == [r["expect"] for r in picked]


def test_commands_are_registered():
    from populora.cli import COMMAND_MODULES
    from populora.commands.bench import BENCHMARKS

    assert "populora.commands.tasks" in COMMAND_MODULES
    assert BENCHMARKS["executor"] == "populora.bench.executor"
    from populora.bench import executor

    parser = argparse.ArgumentParser()
    executor.add_arguments(parser)
    args = parser.parse_args([])
    assert (args.corpus, args.wall_seconds, args.no_serial, args.repeat) == (None, 1.0, False, 1)


def test_validate_exits_nonzero_naming_file_and_line_of_a_malformed_line(tmp_path, capsys):
    good = {"program": "def f(x):\n    return x", "input": "1"}
    src = write_jsonl(tmp_path / "p.jsonl", [good, "{not json", good])
    assert run_cli(["validate", str(src), "--out", str(tmp_path / "o.jsonl")]) == 1
    err = capsys.readouterr().err
    assert f"{src}: line 2 is malformed (bad_line: invalid JSON" in err
    assert len(read_jsonl(tmp_path / "o.jsonl")) == 3  # the good lines' results are still written


@pytest.mark.parametrize("text", ["", "\n\n"])
def test_validate_exits_nonzero_on_an_empty_file(tmp_path, capsys, text):
    src = tmp_path / "empty.jsonl"
    src.write_text(text)
    assert run_cli(["validate", str(src), "--out", str(tmp_path / "o.jsonl")]) == 1
    assert f"{src}: no lines to validate (empty file)" in capsys.readouterr().err


def test_validate_exits_zero_when_every_line_reads(tmp_path):
    src = write_jsonl(tmp_path / "p.jsonl", [{"program": "def f(x):\n    return x", "input": "1"}])
    assert run_cli(["validate", str(src), "--out", str(tmp_path / "o.jsonl")]) == 0

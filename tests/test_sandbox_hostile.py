"""The hostile corpus (tests/hostile/*.py) through Sandbox.run_many, with no AST filter."""

from __future__ import annotations

import dataclasses
import fnmatch
import functools
import json
import os
import time
from pathlib import Path

import pytest
from procutil import descendants

from populora.sandbox import STATUSES, Program, Sandbox, SandboxLimits
from populora.sandbox.executor import UID_BASE, UID_SPAN
from populora.sandbox.results import MAX_DETAIL, is_sandbox_reason

CORPUS = Path(__file__).parent / "hostile"
SECRET = "populora-test-secret-7d1f"
LIMITS = SandboxLimits(wall_seconds=3.0, cpu_seconds=2, memory_mb=512)
HONEST_CLI = "def f(xs):\n    return sorted(xs)"
PWNED_DIRS = ["/tmp", "/var/tmp", "/dev/shm", "/", "/root", os.getcwd(), str(Path(__file__).parents[1])]


def headers(source: str) -> dict[str, str]:
    """The ``# key: value`` lines at the top of a corpus program."""
    meta = {}
    for line in source.splitlines():
        if not line.startswith("# "):
            break
        key, _, value = line[2:].partition(": ")
        meta[key] = value
    return meta


def load_meta() -> dict[str, dict[str, str]]:
    """Every corpus program's headers, by name."""
    return {path.stem: headers(path.read_text()) for path in sorted(CORPUS.glob("*.py"))}


def alternatives_of(expect: str) -> list[tuple[str, str | None]]:
    alternatives, status = [], None
    for alt in expect.split("|"):
        alt = alt.strip()
        if " " in alt:
            status, reason = alt.split(" ", 1)
        elif alt in STATUSES:
            status, reason = alt, None
        else:
            reason = alt
        alternatives.append((status, reason))
    return alternatives


def load_corpus() -> list[tuple[str, Program, list[tuple[str, str | None]], list[str] | None]]:
    cases = []
    for path in sorted(CORPUS.glob("*.py")):
        source = path.read_text()
        meta = headers(source)
        alternatives, status = [], None
        for alt in meta["expect"].split("|"):
            alt = alt.strip()
            if " " in alt:
                status, reason = alt.split(" ", 1)
            elif alt in STATUSES:
                status, reason = alt, None
            else:
                reason = alt
            alternatives.append((status, reason))
        values = json.loads(meta["values"]) if "values" in meta else None
        program = Program(
            source, entry=json.loads(meta.get("entry", '"f"')), calls=tuple(json.loads(meta["calls"]))
        )
        cases.append((path.stem, program, alternatives, values))
    return cases


def matches(outcome, alternatives) -> bool:
    for status, reason in alternatives:
        if outcome.status != status:
            continue
        if reason is None and outcome.reason is None:
            return True
        if reason is not None and outcome.reason is not None and fnmatch.fnmatchcase(outcome.reason, reason):
            return True
    return False


def sandbox_uid_processes(root: int | None = None) -> list[int]:
    """Descendants of ``root`` (this process) owned by a sandbox child uid; none between batches.

    Only descendants: other sandboxes on the machine (other test runs) use the same uid range.
    """
    found = []
    for pid in descendants(root or os.getpid()):
        try:
            uid = os.stat(f"/proc/{pid}").st_uid
        except OSError:
            continue
        if UID_BASE <= uid < UID_BASE + UID_SPAN:
            found.append(pid)
    return found


def processes_mentioning(text: str) -> list[int]:
    """Processes whose command line contains ``text`` (a sandbox's scratch path is in its servers' and
    children's command lines)."""
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit() and int(name) != os.getpid():
            try:
                with open(f"/proc/{name}/cmdline", "rb") as fh:
                    if text.encode() in fh.read():
                        found.append(int(name))
            except OSError:
                continue
    return found


def pwned_files() -> list[str]:
    hits = []
    for d in PWNED_DIRS:
        try:
            hits += [os.path.join(d, n) for n in os.listdir(d) if n.startswith("populora_pwned")]
        except OSError:
            continue
    return hits


@functools.lru_cache(maxsize=1)
def isolation_mode() -> str:
    with Sandbox(workers=1) as sb:
        return sb.mode


def test_corpus_is_large_and_well_formed():
    cases = load_corpus()
    assert len(cases) >= 80
    for name, _, alternatives, _ in cases:
        assert alternatives and all(s in STATUSES for s, _ in alternatives), name


@pytest.mark.slow
def test_hostile_corpus_is_contained(monkeypatch):
    monkeypatch.setenv("POPULORA_TEST_SECRET", SECRET)
    assert not pwned_files(), "leftovers from an earlier run; remove them first"
    cases = load_corpus()
    # what this test process ran before (other tests of its pytest-xdist worker) is not the sandbox's
    procs_before = descendants(os.getpid())
    with Sandbox(limits=LIMITS, workers=2) as sb:
        if sb.mode != "full":
            pytest.skip(f"expectations are for full isolation; this platform gives {sb.mode!r}")
        servers_before = set(sb.server_pids())
        start = time.monotonic()
        outcomes = sb.run_many([program for _, program, _, _ in cases])
        elapsed = time.monotonic() - start
        wrong = []
        for (name, _, alternatives, values), outcome in zip(cases, outcomes):
            if not matches(outcome, alternatives) or (values is not None and outcome.ok and outcome.values != values):
                wrong.append(
                    f"{name}: got {outcome.status}/{outcome.reason} {outcome.values} ({outcome.detail})"
                )
            assert outcome.seconds < LIMITS.wall_seconds + 2.0, name
            assert len(outcome.stdout) <= LIMITS.max_stdout_chars, name
            assert SECRET not in outcome.stdout + outcome.detail + "".join(outcome.values), name
            # reasons feed metric names: a fixed grammar; details are bounded and printable
            assert is_sandbox_reason(outcome.reason), (name, outcome.reason)
            assert len(outcome.detail) <= MAX_DETAIL and outcome.detail.isprintable(), name
        assert not wrong, "\n".join(wrong)
        # bounded time: 2 lanes, every timeout costs at most about the wall limit
        n_timeouts = sum(o.status == "timeout" for o in outcomes)
        assert elapsed < (n_timeouts * LIMITS.wall_seconds) / 2 + 30
        # nothing left behind, the fork servers unharmed and still usable
        assert sandbox_uid_processes() == []
        assert servers_before <= set(sb.server_pids())
        assert not pwned_files()
        leftovers = [p.name for p in sb.scratch.iterdir() if not p.name.endswith(".log")]
        assert leftovers == []
        assert sb.run(Program("def f(a):\n    return a * 2", calls=("21",))).values == ["42"]
    assert descendants(os.getpid()) <= procs_before  # nothing of the sandbox's is left running


@pytest.mark.slow
def test_tasks_validate_cli_handles_the_corpus_without_harm(tmp_path):
    """`populora tasks validate` (AST check + sandbox) on the whole corpus: exit 0, one result a line."""
    if isolation_mode() != "full":
        pytest.skip(f"the corpus is only safe to run with full isolation, not {isolation_mode()!r}")
    import subprocess
    import sys

    meta = load_meta()
    rows, names = [], []
    for name, program, _, _ in load_corpus():
        if meta[name].get("task") == "code_f":
            rows.append({"program": program.source, "inputs": list(program.calls), "type": "code_f",
                         "message": "a hostile program"})
        else:
            rows.append({"program": program.source, "input": program.calls[0], "type": "code_o"})
        names.append(name)
        rows.append({"program": HONEST_CLI, "input": "[3, 1, 2]", "type": "code_o"})  # after each attack
        names.append("honest")
    corpus = tmp_path / "hostile.jsonl"
    corpus.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "results.jsonl"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "populora.cli",
            "tasks",
            "validate",
            str(corpus),
            "--out",
            str(out),
            "--wall-seconds",
            "1",
        ],
        env={**os.environ, "TMPDIR": str(tmp_path)},  # the CLI's sandbox scratch lives here
        capture_output=True,
        text=True,
        timeout=300,
        cwd=Path(__file__).parents[1],
    )
    assert done.returncode == 0, done.stderr[-2000:]
    results = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["line"] for r in results] == list(range(1, len(rows) + 1))
    assert all(isinstance(r["valid"], bool) for r in results)
    # the issue-13 item-7 spellings: contained by the sandbox alone (the corpus test), and rejected
    # by the AST filter before they run; issue 32's families: each with the reason it says, or at
    # least never a task; and every honest program after an attack is a valid task
    for name, r in zip(names, results):
        if name == "honest":
            assert r["valid"] is True, r
        elif name.startswith("filter_"):
            assert r["valid"] is False and str(r["reason"]).startswith("banned:"), (name, r)
        if name in meta and "filter" in meta[name]:
            assert r["reason"] == meta[name]["filter"], (name, r)
        if name in meta and "validate" in meta[name] and not may_be_valid(meta[name]):
            assert r["valid"] is False, (name, r)
    assert not pwned_files()
    assert processes_mentioning(str(tmp_path)) == []


def may_be_valid(meta: dict[str, str]) -> bool:
    """Whether a program's ``validate`` header accepts a valid task (then its own program must be
    judged right by the checker, and the re-run must confirm it)."""
    return "valid" in [r for _, r in alternatives_of(meta["validate"])]


def own_answer(task) -> str:
    """The answer a task's own program gives, as a student would write it: the program (code_f),
    the gold input (code_i) or the gold output (code_o)."""
    payload = {"code_f": task.program, "code_i": task.input}.get(task.type, task.output)
    block = {"code_f": "python", "code_i": "input"}.get(task.type, "output")
    return f"<answer>\n```{block}\n{payload}\n```\n</answer>"


@pytest.mark.slow
def test_determinism_families_through_validation_alone(monkeypatch):
    """issue 32's and 37's determinism families through the validator with the AST check switched
    off (the sandbox and the determinism check alone), in one batch (one step: four fresh seeds),
    each attack followed by an honest proposal that must be a valid task. A program may end valid
    only where its header says so, and then, run as a student's answer, its own program must be
    judged right by the checker (one semantics, issue 37) and the check stage's re-run must confirm
    its gold."""
    if isolation_mode() != "full":
        pytest.skip(f"expectations are for full isolation; this platform gives {isolation_mode()!r}")
    from populora.tasks import programs, validation
    from populora.tasks.checking import check_and_rerun
    from populora.tasks.config import TaskEnv
    from populora.tasks.records import Proposal

    monkeypatch.setattr(programs, "check_program", lambda *a, **k: None)
    meta = load_meta()
    env = TaskEnv(require_think=False)
    cases = [(name, program) for name, program, _, _ in load_corpus()
             if "validate" in meta[name] and "limits" not in meta[name]]
    assert len(cases) >= 30
    batch = []
    for i, (name, program) in enumerate(cases):
        task = meta[name].get("task", "code_o")
        inputs = program.calls if task == "code_f" else program.calls[:1]
        batch.append(Proposal(type=task, program=program.source, inputs=inputs, message="m", step=1))
        batch.append(Proposal(type="code_o", program=HONEST_CLI, inputs=(f"[{i}, 1, 2]",), step=1))
    # one batch: nothing of one program can reach another (each input alone, each in a child of its
    # own, forked from a template that holds no state of any program)
    with Sandbox(limits=LIMITS, workers=2) as sb:
        verdicts = validation.validate_many(batch, sb, env)
        for (name, _), attack, honest in zip(cases, verdicts[0::2], verdicts[1::2]):
            allowed = [r for _, r in alternatives_of(meta[name]["validate"])]
            assert (attack.reason or "valid") in allowed, (name, attack)
            assert honest.valid, (name, honest)
        valid = [(name, v.task) for (name, _), v in zip(cases, verdicts[0::2]) if v.valid]
        judgements, changed = check_and_rerun([(t, own_answer(t)) for _, t in valid], [t for _, t in valid], sb, env)
    for (name, t), judgement in zip(valid, judgements):
        assert judgement.correct and t.id not in changed, (name, judgement, changed)


def test_time_bombs_do_not_go_off():
    """issue 37: programs that read every clock still left to them (the frozen monotonic clocks,
    timestamps in the memory they inherit) give the same answer seconds apart."""
    if isolation_mode() != "full":
        pytest.skip(f"expectations are for full isolation; this platform gives {isolation_mode()!r}")
    meta = load_meta()
    programs = [program for name, program, _, _ in load_corpus() if "steady" in meta[name]]
    assert len(programs) >= 2
    with Sandbox(limits=LIMITS, workers=1) as sb:
        first = sb.run_many(programs)
        time.sleep(1.5)
        later = sb.run_many(programs)
    assert all(o.ok for o in first), first
    assert [o.values for o in first] == [o.values for o in later]


@pytest.mark.slow
def test_gold_limits_families_are_judged_only_under_their_own_limits(monkeypatch):
    """issue 37: programs whose gold depends on a sandbox limit (``# limits:``, a list of overrides of
    ``LIMITS``; the first is the one they are validated under), with the AST check off. If valid, the
    task records its limits; under the same limits the checker judges its own program right and the re-run confirms its gold; under every other limit the checker refuses
    (``limits_changed:<field>``) and re-runs nothing: never judged against a student under other
    limits."""
    if isolation_mode() != "full":
        pytest.skip(f"expectations are for full isolation; this platform gives {isolation_mode()!r}")
    from populora.tasks import programs, validation
    from populora.tasks.checking import check_and_rerun
    from populora.tasks.config import TaskEnv
    from populora.tasks.records import GoldLimits, Proposal

    monkeypatch.setattr(programs, "check_program", lambda *a, **k: None)
    meta = load_meta()
    env = TaskEnv(require_think=False)
    cases = [(name, program) for name, program, _, _ in load_corpus() if "limits" in meta[name]]
    assert len(cases) >= 2
    variants = sorted({json.dumps(v, sort_keys=True) for name, _ in cases for v in json.loads(meta[name]["limits"])})
    sandboxes = {v: Sandbox(limits=dataclasses.replace(LIMITS, **json.loads(v)), workers=2) for v in variants}
    try:
        for step, (name, program) in enumerate(cases, start=1):
            kind = meta[name].get("task", "code_o")
            first, *others = [json.dumps(v, sort_keys=True) for v in json.loads(meta[name]["limits"])]
            inputs = program.calls if kind == "code_f" else program.calls[:1]
            attack = Proposal(type=kind, program=program.source, inputs=inputs, message="m", step=step)
            (verdict,) = validation.validate_many([attack], sandboxes[first], env)
            assert (verdict.reason or "valid") in [r for _, r in alternatives_of(meta[name]["validate"])], name
            if not verdict.valid:
                continue
            assert verdict.task.limits == GoldLimits.of(sandboxes[first].limits), name
            for limits in (first, *others):
                (judgement,), changed = check_and_rerun([(verdict.task, own_answer(verdict.task))], [verdict.task],
                                                        sandboxes[limits], env)
                if limits == first:
                    assert judgement.correct and not changed, (name, limits, judgement, changed)
                else:
                    assert not judgement.correct and judgement.reason.startswith("limits_changed:"), (name, judgement)
                    assert not changed, name  # refused, not re-run: nothing to say about its determinism
                    # the danger it guards against: without the record, the same answer judged wrong there
                    legacy = dataclasses.replace(verdict.task, limits=None)
                    (judged,), _ = check_and_rerun([(legacy, own_answer(legacy))], [], sandboxes[limits], env)
                    assert judged.reason == "wrong", (name, judged)
    finally:
        for sb in sandboxes.values():
            sb.close()

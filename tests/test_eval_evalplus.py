"""EvalPlus self-check on the real HumanEval+ / MBPP+ files: canonical solutions pass base and plus
tests, a deliberately wrong solution passes nothing. The canonicals go through exactly the path a
model's output takes (``eval.runner.samples.score_samples``, i.e. ``populora score``: the kind's sample
reading, ``prepare_program``, EvalPlus), never straight into EvalPlus.

CI uses a fixed slice of each set (EvalPlus runs every plus input of every task; the full 164 + 378
tasks take several minutes on 2 cores); set POPULORA_EVAL_FULL=1 to check every task.

Full run measured on the shared 2-core machine: about 3 minutes for HumanEval+ and 5.5 to 7.5 minutes for
MBPP+ (canonical + wrong solution of every task).

Known exception: HumanEval/32 (``find_zero``). evalplus 0.3.1's special oracle for it ends the
test with ``continue`` before recording the test as passed, so no solution, not even the canonical
one, can pass it; the test asserts exactly this so that a fixed evalplus is noticed.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from eval.benchmarks import benchmarks_dir, load_items
from eval.benchmarks.evalplus import canonical_solutions, prepare_program, solution_source
from eval.runner.samples import score_samples
from eval.runner.settings import EvalSettings

DATA = benchmarks_dir()  # the shipped test sets (eval/data), or $POPULORA_BENCHMARKS_DIR
FULL = os.environ.get("POPULORA_EVAL_FULL") == "1"
CI_SLICE = 12
BROKEN_IN_EVALPLUS = {"HumanEval/32"}


def _score(bench, programs, tmp_path, items):
    """pass (base and plus) per task of ``{task_id: program}`` through the samples path."""
    s = EvalSettings(data_dir=str(DATA), cache_dir=str(tmp_path), evalplus_min_time_limit=20.0,
                     evalplus_gt_time_limit_factor=20.0, evalplus_max_memory_gb=16)
    records, agg = score_samples(bench, [{"task_id": t, "solution": p} for t, p in programs.items()], items, s)
    return {r["task_id"]: r["metrics"]["base"] and r["metrics"]["plus"] for r in records}, agg


@pytest.mark.slow
@pytest.mark.parametrize("bench", ["humaneval_plus", "mbpp_plus"])
def test_canonical_pass_and_wrong_fail(bench, tmp_path):
    canon = canonical_solutions(bench, data_dir=DATA)
    extra = {"humaneval_plus": ["HumanEval/32"], "mbpp_plus": ["Mbpp/630"]}[bench]
    ids = list(canon) if FULL else list(canon)[:CI_SLICE] + extra
    items = load_items(bench, data_dir=DATA)
    entry = {it.item_id: it.meta["entry_point"] for it in items}
    wrong = {t: f"def {entry[t]}(*args, **kwargs):\n    raise RuntimeError('deliberately wrong')\n" for t in ids}
    # generous time limits: this runs on a shared, loaded CI machine where correct programs can time out;
    # 16 GiB address space: under EvalPlus's default 4 GiB the canonical Mbpp/255 fails (see score_evalplus)
    passed, agg = _score(bench, {t: canon[t] for t in ids}, tmp_path, items)
    failing = {t for t, ok in passed.items() if not ok}
    retry = sorted(failing - BROKEN_IN_EVALPLUS)
    if retry:
        # Heavy plus inputs (e.g. Mbpp/599 sums 10^8 numbers) can exceed their time limit while other
        # jobs load the machine: a failing canonical task is scored once more on its own, and only a
        # task that fails twice counts (load-induced failures moved between full runs: 392, 599).
        again, _ = _score(bench, {t: canon[t] for t in retry}, tmp_path, items)
        failing -= {t for t, ok in again.items() if ok}
    assert failing == (BROKEN_IN_EVALPLUS & set(ids))
    assert agg["n_tasks"] == len(ids)
    wrong_passed, _ = _score(bench, wrong, tmp_path, items)
    assert not any(wrong_passed.values())


@pytest.mark.slow
def test_mbpp_630_canonical_passes_from_a_model_output(tmp_path):
    """Mbpp/630's canonical solution has a yield-only helper that EvalPlus's sanitizer drops; written
    as a chat model would (prose + fenced block), it must still pass through the generation path."""
    from eval.benchmarks import BENCHMARKS
    from eval.benchmarks.families import family_of

    items = [it for it in load_items("mbpp_plus", data_dir=DATA) if it.item_id == "Mbpp/630"]
    body = canonical_solutions("mbpp_plus", data_dir=DATA)["Mbpp/630"]
    completion = f"Here is the solution:\n```python\n{body.strip()}\n```\nIt enumerates neighbours."
    record = {"prompt": "...", "completion": completion, "template": "r1", "finish_reason": "stop"}
    kind = family_of(BENCHMARKS["mbpp_plus"])
    s = EvalSettings(data_dir=str(DATA), cache_dir=str(tmp_path), evalplus_min_time_limit=20.0,
                     evalplus_gt_time_limit_factor=20.0, evalplus_max_memory_gb=16)
    v = kind.score(BENCHMARKS["mbpp_plus"], items, {"m": {"Mbpp/630": kind.answer(items[0], record)}}, s)["m"]["Mbpp/630"]
    assert v.metrics == {"base": True, "plus": True}, v
    assert "def adjac" in v.answer and v.notes == ()


def test_prepare_program_keeps_definitions_and_sanitizes_only_what_needs_it():
    gen = "def helper(xs):\n    yield from xs\n\ndef f(xs):\n    return list(helper(xs))\n"
    assert prepare_program(gen, "f") == (gen, ())  # a valid module with the entry point: as written
    decorated = "import functools\n@functools.lru_cache\ndef g(n):\n    return n\n\ndef f(n):\n    return g(n)\n"
    assert prepare_program(decorated, "f") == (decorated, ())
    with_tests = gen + "\nprint(f([1]))\nassert f([2]) == [3]\n"
    program, notes = prepare_program(with_tests, "f")
    assert notes == ("dropped_top_level_statements",) and "assert" not in program and "def helper" in program
    guarded = gen + "\nif __name__ == '__main__':\n    print(f([1]))\n"
    assert prepare_program(guarded, "f") == (guarded, ())
    prose = "Sure! Here it is:\n\ndef f(x):\n    return x + 1\n\nHope it helps."
    program, notes = prepare_program(prose, "f")
    assert notes == ("sanitized",) and program.startswith("def f(x):") and "Hope" not in program
    # EvalPlus's own sanitizer loses the yield helper: the reason for prepare_program
    from eval.benchmarks.evalplus import sanitize_solution

    assert "def helper" not in sanitize_solution(gen, "f")


def test_solution_source_by_template():
    item = load_items("humaneval_plus", data_dir=DATA)[0]
    prompt = item.question.rstrip()
    body = "\n    return True\n"
    assert solution_source(item, prompt, body, "base") == prompt + body
    chat = "Here:\n```python\ndef has_close_elements(numbers, threshold):\n    return False\n```\nDone."
    assert solution_source(item, "...", chat, "chat").startswith("def has_close_elements")
    opened = "\ndef has_close_elements(numbers, threshold):\n    return 1\n```\ntrailing text"
    assert solution_source(item, "prefix ```python", opened, "chat").strip().endswith("return 1")
    r1 = "<think>hmm</think> <answer>```python\ndef has_close_elements(a, b):\n    return 2\n```</answer>"
    assert "return 2" in solution_source(item, "x", r1, "r1")


def test_a_repeated_program_runs_once_and_every_copy_gets_its_verdict(tmp_path, monkeypatch):
    """Samples of a sampled evaluation repeat programs: EvalPlus runs each distinct program of a task
    once, and each adapter (or sample) that wrote it gets that program's verdict."""
    import subprocess

    import eval.benchmarks.evalplus as ep

    canon = canonical_solutions("humaneval_plus", data_dir=DATA)
    ids = ["HumanEval/0", "HumanEval/2"]
    items = {it.item_id: it for it in load_items("humaneval_plus", data_dir=DATA) if it.item_id in ids}
    wrong = {t: f"def {items[t].meta['entry_point']}(*args):\n    return None\n" for t in ids}
    written = []
    real_run = subprocess.run

    def counting_run(cmd, **kw):
        written.append(len(Path(cmd[4]).read_text().splitlines()))  # the samples file EvalPlus reads
        return real_run(cmd, **kw)

    monkeypatch.setattr(ep.subprocess, "run", counting_run)
    solutions = {"a": {t: canon[t] for t in ids}, "b": {t: canon[t] for t in ids}, "c": wrong,
                 "d": {"HumanEval/0": canon["HumanEval/0"], "HumanEval/2": wrong["HumanEval/2"]}}
    out = ep.score_evalplus("humaneval_plus", solutions, cache_dir=tmp_path, data_dir=DATA,
                            min_time_limit=20.0, gt_time_limit_factor=20.0)
    assert written == [4]  # 2 tasks x 2 distinct programs, not 4 adapters x 2
    assert {a: [out[a]["items"][t]["plus"] for t in ids] for a in solutions} == {
        "a": [True, True], "b": [True, True], "c": [False, False], "d": [True, False]}

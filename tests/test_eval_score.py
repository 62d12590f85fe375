"""`populora score BENCH SAMPLES.jsonl`: outputs made elsewhere go through populora eval's own
extraction and scorers; verdicts per sample as JSON lines, then the aggregate."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from eval.benchmarks import benchmarks_dir, load_items
from eval.benchmarks.math_answers import gold_as_completion, perturb_answer
from populora.cli import main

REPO = Path(__file__).resolve().parent.parent
DATA = benchmarks_dir()  # the shipped test sets (eval/data), or $POPULORA_BENCHMARKS_DIR
LCB = REPO / "tests" / "fixtures" / "livecodebench"


def _jsonl(path: Path, rows) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _output(capsys):
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines() if x.strip()]
    return lines[:-1], lines[-1]["aggregate"]


def test_math_answers_scored_per_sample(tmp_path, capsys):
    items = load_items("gsm8k", data_dir=DATA)[:3]
    rows = [{"id": items[0].item_id, "answer": gold_as_completion(items[0].gold)},
            {"id": items[1].item_id, "answer": gold_as_completion(perturb_answer(items[1].gold))},
            {"id": items[2].item_id, "answer": gold_as_completion(items[2].gold)}]
    assert main(["score", "gsm8k", str(_jsonl(tmp_path / "s.jsonl", rows)), "--data-dir", str(DATA)]) == 0
    records, agg = _output(capsys)
    assert [r["metrics"]["acc"] for r in records] == [True, False, True]
    assert records[1]["reason"] == "wrong_answer" and records[1]["line"] == 2
    assert agg["n_tasks"] == 3 and agg["metrics"]["gsm8k"]["pass@1"] == pytest.approx(2 / 3)
    lo, hi = agg["metrics"]["gsm8k"]["ci95"]
    assert lo < 2 / 3 < hi


def test_several_samples_per_task_give_pass_at_k(tmp_path, capsys):
    items = load_items("gsm8k", data_dir=DATA)[:2]
    right = [gold_as_completion(it.gold) for it in items]
    wrong = [gold_as_completion(perturb_answer(it.gold)) for it in items]
    rows = [{"id": items[0].item_id, "answer": a} for a in (right[0], wrong[0], wrong[0])]  # 1 of 3
    rows += [{"id": items[1].item_id, "answer": a} for a in (wrong[1], wrong[1], wrong[1], right[1])]  # 1 of 4
    assert main(["score", "gsm8k", str(_jsonl(tmp_path / "s.jsonl", rows)), "--data-dir", str(DATA)]) == 0
    _, agg = _output(capsys)
    m = agg["metrics"]["gsm8k"]
    assert m["pass@1"] == pytest.approx((1 / 3 + 1 / 4) / 2)
    assert list(m["pass@k"]) == ["1", "2", "3"]  # up to the fewest samples of a task
    assert m["pass@k"]["2"] == pytest.approx(((1 - 1 / 3) + (1 - 3 / 6)) / 2)  # 1 - C(n-c,2)/C(n,2) per task
    assert m["pass@k"]["3"] == pytest.approx((1 + 1 - 1 / 4) / 2)


def test_bad_samples_name_the_line_and_field(tmp_path, capsys):
    assert main(["score", "gsm8k", str(_jsonl(tmp_path / "a.jsonl", [{"id": "0", "text": "5"}])), "--data-dir", str(DATA)]) == 2
    assert "a.jsonl: line 1 (0) lacks field 'answer'" in capsys.readouterr().err
    assert main(["score", "gsm8k", str(_jsonl(tmp_path / "b.jsonl", [{"id": "nope", "answer": "5"}])), "--data-dir", str(DATA)]) == 2
    assert "b.jsonl: line 1: id 'nope' is not an item of gsm8k" in capsys.readouterr().err
    (tmp_path / "c.jsonl").write_text("{not json\n")
    assert main(["score", "gsm8k", str(tmp_path / "c.jsonl"), "--data-dir", str(DATA)]) == 2
    assert "c.jsonl: line 1 is not valid JSON" in capsys.readouterr().err


@pytest.mark.slow
def test_evalplus_solution_and_completion_samples(tmp_path, capsys):
    from eval.benchmarks.evalplus import canonical_solutions

    items = {it.item_id: it for it in load_items("humaneval_plus", data_dir=DATA)[:2]}
    canon = canonical_solutions("humaneval_plus", data_dir=DATA)
    t0, t1 = list(items)
    rows = [{"task_id": t0, "solution": canon[t0]},
            {"task_id": t1, "completion": canon[t1][len(items[t1].question):]},  # EvalPlus: prompt + completion
            {"task_id": t1, "completion": "\n    return None\n"}]  # a second, wrong sample of the same task
    out = tmp_path / "verdicts.jsonl"
    assert main(["score", "humaneval_plus", str(_jsonl(tmp_path / "s.jsonl", rows)), "--data-dir", str(DATA),
                 "--cache-dir", str(tmp_path / "cache"), "--out", str(out), "--evalplus-min-time-limit", "20"]) == 0
    agg = json.loads(capsys.readouterr().out.splitlines()[-1])["aggregate"]
    records = [json.loads(x) for x in out.read_text().splitlines()[:-1]]
    assert [(r["task_id"], r["sample"], r["metrics"]["plus"]) for r in records] == [(t0, 0, True), (t1, 0, True), (t1, 1, False)]
    assert agg["metrics"]["HumanEval+"]["pass@1"] == pytest.approx((1 + 0.5) / 2)  # mean over samples, then tasks


@pytest.mark.slow
def test_livecodebench_completions_use_lcb_extraction(tmp_path, capsys):
    rows = [{"task_id": "toy001", "completion": "Try:\n```python\nprint(0)\n```\nBetter:\n```python\n"
                                                "a, b = map(int, input().split())\nprint(a + b)\n```"},
            {"question_id": "toy003", "completion": "no code block, so nothing is scored"}]
    assert main(["score", "livecodebench", str(_jsonl(tmp_path / "s.jsonl", rows)), "--data", str(LCB)]) == 0
    records, agg = _output(capsys)
    assert [(r["metrics"]["pass"], r["reason"]) for r in records] == [(True, "ok"), (False, "no_code")]
    assert agg["metrics"]["LiveCodeBench"]["n_tasks"] == 2

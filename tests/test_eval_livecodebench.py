"""LiveCodeBench loader and scorer on the toy fixture: stdin and functional problems run in the
project's sandbox; a problem passes only when every public and private test passes. The parity
with LiveCodeBench's own scorer is in test_eval_lcb_parity.py."""

from __future__ import annotations

import base64
import json
import pickle
import zlib
from pathlib import Path

import pytest

from eval.benchmarks import BenchmarkDataError
from eval.benchmarks.lcb_harness import same_output
from eval.benchmarks.livecodebench import empty_private_warning, load_livecodebench, score_livecodebench

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "livecodebench"

GOOD = {
    "toy001": "a, b = map(int, input().split())\nprint(a + b)\n",
    "toy002": "class Solution:\n    def maxPairSum(self, nums: List[int]) -> int:\n        s = sorted(nums)\n        return s[-1] + s[-2]\n",
    "toy003": "def main():\n    n = int(input())\n    xs = list(map(int, input().split()))\n    print(f'{sum(xs) / n:.10f}')\n\n"
              "if __name__ == '__main__':\n    main()\n",
    "toy004": "class Solution:\n    def sortedSquares(self, nums):\n        return tuple(sorted(x * x for x in nums))\n",
}
BAD = {
    "toy001": ("a, b = map(int, input().split())\nprint(a - b)\n", "wrong_answer"),
    # passes the public test [1, 5, 3] -> 8? no: 2 * 5 = 10; fails at once
    "toy002": ("class Solution:\n    def maxPairSum(self, nums):\n        return 2 * max(nums)\n", "wrong_answer"),
    "toy003": ("while True:\n    pass\n", "timeout"),
    "toy004": ("class Solution:\n    def sortedSquares(self, nums):\n        raise ValueError('no')\n", "runtime_error"),
}


def test_stdout_comparison_like_lcb():
    assert same_output("7\n", "7")
    assert same_output("  1 2 \n3\n\n", "1 2\n3")
    assert same_output("2.5000000000\n", "2.5")  # numeric tokens compare as decimals
    assert not same_output("1.333333\n", "1.3333333333")  # LCB: exact decimal equality
    assert not same_output("1 2\n", "1 2\n3")
    assert not same_output("x\n", "1")


def test_window_is_inclusive_like_lcb():
    ids = {it.item_id for it in load_livecodebench(FIXTURE, start="2024-09-14", end="2025-01-10")}
    assert ids == {"toy001", "toy002", "toy003", "toy004"}  # toy001 on the start date, toy003 on the end date
    assert {it.item_id for it in load_livecodebench(FIXTURE, start="2024-09-15", end="2025-01-09")} == {"toy002", "toy004"}


def _write_release(tmp_path, private):
    row = {"question_title": "t", "question_content": "q", "platform": "atcoder", "question_id": "p1", "contest_id": "c",
           "contest_date": "2024-09-01T00:00:00", "starter_code": "", "difficulty": "easy",
           "public_test_cases": json.dumps([]), "metadata": "{}",
           "private_test_cases": base64.b64encode(zlib.compress(pickle.dumps(json.dumps(private)))).decode()}
    (tmp_path / "test.jsonl").write_text(json.dumps(row) + "\n")


def test_a_problem_without_tests_is_refused_at_load_time(tmp_path):
    _write_release(tmp_path, [])
    with pytest.raises(BenchmarkDataError, match=r"test\.jsonl: line 1: problem 'p1' has no test cases"):
        load_livecodebench(tmp_path, release="v1", start=None, end=None)


def test_empty_private_tests_are_announced(tmp_path):
    items = load_livecodebench(FIXTURE)
    assert empty_private_warning(items) is None
    public_only = [type(items[0])(it.benchmark, it.item_id, it.question, None, {**it.meta, "private_tests": 0}) for it in items[:2]]
    w = empty_private_warning(public_only)
    assert "2 of 2 problems have no private tests" in w and "toy001" in w


@pytest.mark.slow
def test_scorer_passes_good_and_fails_bad_programs():
    items = {it.item_id: it for it in load_livecodebench(FIXTURE)}
    cands = [(items[k], v) for k, v in GOOD.items()] + [(items[k], v[0]) for k, v in BAD.items()]
    verdicts = score_livecodebench(cands, timeout_s=2.0)
    good, bad = verdicts[: len(GOOD)], verdicts[len(GOOD) :]
    assert all(v.passed for v in good), good
    assert [v.tests_run for v in good] == [len(items[k].meta["tests"]) for k in GOOD]
    assert [v.reason for v in bad] == [r for _, r in BAD.values()]
    assert not any(v.passed for v in bad)


def test_a_repeated_program_runs_once_and_every_copy_gets_its_verdict(monkeypatch):
    from populora.sandbox import Sandbox

    items = {it.item_id: it for it in load_livecodebench(FIXTURE)}
    ran = []
    real = Sandbox.run_many
    monkeypatch.setattr(Sandbox, "run_many", lambda self, programs, *a, **k: ran.append(len(programs))
                        or real(self, programs, *a, **k))
    good, bad = GOOD["toy001"], BAD["toy001"][0]
    cands = [(items["toy001"], good), (items["toy001"], bad), (items["toy001"], good), (items["toy001"], ""),
             (items["toy002"], good), (items["toy001"], bad)]
    verdicts = score_livecodebench(cands, timeout_s=2.0)
    assert ran == [3]  # toy001 good and bad, toy002 with toy001's program (another item: runs on its own)
    assert [v.reason for v in verdicts] == ["ok", "wrong_answer", "ok", "no_code", verdicts[4].reason, "wrong_answer"]
    assert verdicts[0] == verdicts[2] and not verdicts[4].passed


@pytest.mark.slow
def test_a_private_test_failure_fails_the_problem():
    items = {it.item_id: it for it in load_livecodebench(FIXTURE)}
    # right on the public test (3 4 -> 7), wrong on a private one (large numbers)
    code = "a, b = map(int, input().split())\nprint(a + b if a < 100 else 0)\n"
    [v] = score_livecodebench([(items["toy001"], code)], timeout_s=2.0)
    assert not v.passed and v.reason == "wrong_answer" and v.tests_run == 3


def test_the_leaderboard_prints_how_many_problems_the_release_and_window_hold():
    """With --limit 1 the score file still records the window's problem count, counted by the loader
    from the data, and the leaderboard's caption and provenance print it."""
    from eval.leaderboard.labels import benchmark_text
    from eval.leaderboard.page import _provenance_lines
    from eval.runner.pipeline import load_benchmarks, load_every_item, provenance
    from eval.runner.settings import EvalSettings

    s = EvalSettings(benchmarks=["livecodebench"], data_paths={"livecodebench": str(FIXTURE)}, limit=1)
    window = load_livecodebench(FIXTURE)  # the default release and window
    wider = load_livecodebench(FIXTURE, start=None, end=None)
    assert len(wider) > len(window) > 1
    every, items = load_every_item(s), load_benchmarks(s)
    assert [len(every["livecodebench"]), len(items["livecodebench"])] == [len(window), 1]
    prov = provenance(s, items, totals={b: len(v) for b, v in every.items()})
    data = prov["data"]["livecodebench"]
    assert (data["n_items"], data["n_total"], data["window"]) == (1, len(window), ["2024-08-01", "2025-02-01"])
    text = benchmark_text({"run": {"data": {"livecodebench": data}}}, ["LiveCodeBench"])
    assert text == (f"LiveCodeBench code_generation_lite release_v5: 1 items (contest dates 2024-08-01 to 2025-02-01, "
                    f"inclusive; {len(window)} problems in the release and window)")
    lines = _provenance_lines({"run": prov})
    assert any(f"release_v5 (1 items, window 2024-08-01..2025-02-01 (inclusive), {len(window)} problems in the release "
               "and window)" in line for line in lines), lines
    s.lcb_start = s.lcb_end = None
    assert len(load_every_item(s)["livecodebench"]) == len(wider)

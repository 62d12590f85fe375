"""LiveCodeBench scorer on the toy fixture: stdin and functional problems run in the project's
sandbox; a problem passes only when every public and private test passes."""

from __future__ import annotations

from pathlib import Path

import pytest

from eval.livecodebench import functional_matches, load_livecodebench, score_livecodebench, stdout_matches

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
    "toy004": ("class Solution:\n    def sortedSquares(self, nums):\n        raise ValueError('no')\n", "runtime_error:ValueError"),
}


def test_stdout_comparison_like_lcb():
    assert stdout_matches("7\n", "7")
    assert stdout_matches("  1 2 \n3\n\n", "1 2\n3")
    assert stdout_matches("2.5000000000\n", "2.5")  # numeric tokens compare as decimals
    assert not stdout_matches("1.333333\n", "1.3333333333")  # LCB: exact decimal equality
    assert not stdout_matches("1 2\n", "1 2\n3")
    assert functional_matches(repr("[1, 4]"), "[1, 4]")
    assert not functional_matches(repr("[4, 1]"), "[1, 4]")
    assert not functional_matches("not a repr", "1")


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


@pytest.mark.slow
def test_a_private_test_failure_fails_the_problem():
    items = {it.item_id: it for it in load_livecodebench(FIXTURE)}
    # right on the public test (3 4 -> 7), wrong on a private one (large numbers)
    code = "a, b = map(int, input().split())\nprint(a + b if a < 100 else 0)\n"
    [v] = score_livecodebench([(items["toy001"], code)], timeout_s=2.0)
    assert not v.passed and v.reason == "wrong_answer" and v.tests_run == 3

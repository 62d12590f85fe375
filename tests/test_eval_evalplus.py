"""EvalPlus self-check on the real HumanEval+ / MBPP+ files: canonical solutions pass base and plus
tests, a deliberately wrong solution passes nothing.

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

from eval.benchmarks import ENV_DIR, load_items
from eval.prompts import solution_source
from eval.score_code import canonical_solutions, sanitize_solution, score_evalplus

DATA = Path(os.environ.get(ENV_DIR, Path(__file__).resolve().parent.parent.parent / "shared" / "benchmarks"))
needs_data = pytest.mark.skipif(not (DATA / "gsm8k" / "test.jsonl").is_file(), reason=f"benchmark files not in {DATA}")
FULL = os.environ.get("POPULORA_EVAL_FULL") == "1"
CI_SLICE = 12
BROKEN_IN_EVALPLUS = {"HumanEval/32"}


@needs_data
@pytest.mark.slow
@pytest.mark.parametrize("bench", ["humaneval_plus", "mbpp_plus"])
def test_canonical_pass_and_wrong_fail(bench, tmp_path):
    canon = canonical_solutions(bench, data_dir=DATA)
    ids = list(canon) if FULL else list(canon)[:CI_SLICE] + (["HumanEval/32"] if bench == "humaneval_plus" else [])
    entry = {it.item_id: it.meta["entry_point"] for it in load_items(bench, data_dir=DATA)}
    wrong = {t: f"def {entry[t]}(*args, **kwargs):\n    raise RuntimeError('deliberately wrong')\n" for t in ids}
    # generous time limits: this runs on a shared, loaded CI machine where correct programs can time out;
    # 16 GiB address space: under EvalPlus's default 4 GiB the canonical Mbpp/255 fails (see score_evalplus)
    res = score_evalplus(bench, {"canonical": {t: canon[t] for t in ids}, "wrong": wrong}, cache_dir=tmp_path,
                         data_dir=DATA, min_time_limit=20.0, gt_time_limit_factor=20.0, max_memory_gb=16)
    failing = {t for t, v in res["canonical"]["items"].items() if not (v["base"] and v["plus"])}
    retry = sorted(failing - BROKEN_IN_EVALPLUS)
    if retry:
        # Heavy plus inputs (e.g. Mbpp/599 sums 10^8 numbers) can exceed their time limit while other
        # jobs load the machine: a failing canonical task is scored once more on its own, and only a
        # task that fails twice counts (load-induced failures moved between full runs: 392, 599).
        again = score_evalplus(bench, {"canonical": {t: canon[t] for t in retry}}, cache_dir=tmp_path, data_dir=DATA,
                               min_time_limit=20.0, gt_time_limit_factor=20.0, max_memory_gb=16)
        failing -= {t for t, v in again["canonical"]["items"].items() if v["base"] and v["plus"]}
    assert failing == (BROKEN_IN_EVALPLUS & set(ids))
    assert res["canonical"]["n"] == len(ids)
    assert res["wrong"]["base"] == 0.0 and res["wrong"]["plus"] == 0.0


def test_solution_source_by_template():
    item = load_items("humaneval_plus", data_dir=DATA)[0] if (DATA / "humaneval_plus").is_dir() else None
    if item is None:
        pytest.skip("benchmark files missing")
    prompt = item.question.rstrip()
    body = "\n    return True\n"
    assert solution_source(item, prompt, body, "base") == prompt + body
    chat = "Here:\n```python\ndef has_close_elements(numbers, threshold):\n    return False\n```\nDone."
    assert solution_source(item, "...", chat, "chat").startswith("def has_close_elements")
    opened = "\ndef has_close_elements(numbers, threshold):\n    return 1\n```\ntrailing text"
    assert solution_source(item, "prefix ```python", opened, "chat").strip().endswith("return 1")
    r1 = "<think>hmm</think> <answer>```python\ndef has_close_elements(a, b):\n    return 2\n```</answer>"
    assert "return 2" in solution_source(item, "x", r1, "r1")
    # EvalPlus's sanitizer keeps the entry point and drops junk around it
    assert sanitize_solution("print('hi')\ndef has_close_elements(a, b):\n    return 3\n", "has_close_elements").startswith("def")

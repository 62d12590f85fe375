"""`populora eval` on bad inputs: --limit below 1, a changed plan in a used workdir, and the score table."""

from __future__ import annotations

import argparse

import pytest

from eval.runner.generate import ShardError, plan_difference, write_or_check_plan
from eval.runner.score_table import score_table
from eval.runner.settings import EvalSettings
from populora.commands import eval as eval_cmd


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    eval_cmd.register(parser.add_subparsers())
    return parser.parse_args(["eval", "--runs", "r", *argv])


@pytest.mark.parametrize("value", ["0", "-1", "x"])
def test_limit_below_one_is_an_error(value, capsys):
    with pytest.raises(SystemExit) as e:
        parse(["--limit", value])
    assert e.value.code == 2
    assert "--limit" in capsys.readouterr().err


def test_limit_of_one_is_accepted():
    assert parse(["--limit", "1"]).limit == 1


def test_settings_refuse_a_limit_below_one():
    with pytest.raises(ValueError, match="limit must be a whole number >= 1"):
        EvalSettings(limit=0)


def test_a_changed_plan_is_refused_in_one_short_line_naming_workdir(tmp_path):
    items = {"humaneval": [f"HumanEval/{i}" for i in range(164)]}
    write_or_check_plan(tmp_path, {"items": items})
    with pytest.raises(ShardError) as e:
        write_or_check_plan(tmp_path, {"items": {**items, "gsm8k": [f"gsm8k/{i}" for i in range(1319)]}})
    text = str(e.value)
    assert "--workdir" in text and "added: gsm8k" in text
    assert "\n" not in text and len(text) < 300


def test_plan_difference_cuts_long_values():
    assert plan_difference("a", "b") == "planned 'a', now 'b'"
    assert plan_difference([1, 2], [1]) == "2 planned, 1 now"
    assert len(plan_difference("x" * 1000, "y" * 1000)) < 200


def test_score_table_one_line_per_adapter():
    rows = [
        {"key": "base", "benchmark": "humaneval", "metric": "pass@1", "value": 0.25, "n": 4},
        {"key": "run/t0", "benchmark": "humaneval", "metric": "pass@1", "value": 0.5, "n": 4},
        {"key": "run/t0", "benchmark": "gsm8k", "metric": "pass@1", "value": None, "n": 0},
    ]
    lines = score_table(rows).splitlines()
    assert lines[0].startswith("scores: pass@1")
    assert lines[1].split() == ["adapter", "humaneval/pass@1", "gsm8k/pass@1"]
    assert lines[2].split() == ["base", "25.0", "(4)"]
    assert lines[3].split() == ["run/t0", "50.0", "(4)", "-"]
    assert score_table([]) == ""

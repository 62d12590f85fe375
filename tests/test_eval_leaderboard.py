"""Leaderboard tables from score files: averages over complete groups only, blanks for missing values,
population rows grouped with their run, the base row labelled with its model and runs, item counts,
95% intervals, best-per-column marks, provenance and the output files."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from eval.benchmarks import BENCHMARKS
from eval.leaderboard.page import AVERAGE_RULE, GROUPS, build_table, read_scores, write_leaderboard
from eval.stats import wilson_interval

PROV = {"model": "tiny", "backend": "hf", "dtype": "auto", "template": "base", "decoding": "greedy (temperature 0), pass@1",
        "max_new_tokens": {"gsm8k": 8}, "limit": None, "commit": "abc123", "date": "2026-01-01 00:00 UTC",
        "stop": {"gsm8k": ["\nQuestion:"]}, "libraries": {"evalplus": "0.3.1", "math-verify": "0.9.0"},
        "scorers": {"evalplus": {"parallel": 1, "min_time_limit_s": 1.0, "gt_time_limit_factor": 4.0, "max_memory_gb": 4.0},
                    "livecodebench": {"test_timeout_s": 6, "release": "release_v5", "window": ["2024-08-01", "2025-02-01"]}},
        "data": {"gsm8k": {"benchmark": "gsm8k", "version": "GSM8K test (1319)", "file": "test.jsonl", "sha256": "37" * 32,
                           "n_items": 10, "warnings": ["gsm8k: a warning the user must see"]}}}


def _row(run, member, role, column, value, n=10):
    key = "base" if role == "base" else f"{run}__{member}"
    k = round(value * n)
    return {"key": key, "run": run, "member_id": member, "role": role, "benchmark": "x", "metric": "m",
            "column": column, "value": value, "n": n, "passed": k, "ci95": list(wilson_interval(k, n))}


def _write(run_dir: Path, rows, prov=PROV):
    (run_dir / "eval").mkdir(parents=True)
    runs = {run_dir.name: {"steps_done": 3, "status": "finished", "config_sha256": "ab" * 32,
                           "members": {"t0": {"born_step": 0, "operator": None, "rank": 8, "alpha": 16.0}}}}
    (run_dir / "eval" / "scores.json").write_text(json.dumps({"provenance": {**prov, "runs": runs}, "rows": rows}))


def _scores(tmp_path, prov_b=PROV):
    base = [_row("-", "base", "base", "HumanEval+", 0.1), _row("-", "base", "base", "gsm8k", 0.1)]
    pop = [_row("pop", "t0", "teacher", "HumanEval+", 0.2), _row("pop", "t0", "teacher", "gsm8k", 0.4),
           _row("pop", "s0", "student", "HumanEval+", 0.6), _row("pop", "s0", "student", "gsm8k", 0.8), *base]
    single = [_row("single", "b0", "baseline", "HumanEval+", 0.5), _row("single", "b0", "baseline", "gsm8k", 0.9), *base]
    _write(tmp_path / "pop", pop)
    _write(tmp_path / "single", single, prov_b)
    return pop, single


def test_table_statistics_and_grouping(tmp_path):
    _scores(tmp_path)
    rows, _ = read_scores([tmp_path / "pop", tmp_path / "single"])
    cols, table = build_table(rows)
    assert cols == ["HumanEval+", "gsm8k"]  # incomplete groups: no averages at all
    labels = [t["label"] for t in table]
    assert labels == ["t0 (teacher)", "s0 (student)", "population mean (n=2)", "population min (n=2)",
                      "population max (n=2)", "population std (n=2)", "b0 (baseline)",
                      "base model tiny"]  # population rows with their run, base last
    by = {t["label"]: t for t in table}
    assert by["population mean (n=2)"]["values"]["HumanEval+"] == pytest.approx(0.4)
    assert by["population std (n=2)"]["values"]["gsm8k"] == pytest.approx(0.2)
    assert by["population min (n=2)"]["values"]["HumanEval+"] == pytest.approx(0.2)
    for t in table:
        assert t["values"].get("code avg") is None and t["values"].get("overall") is None


def test_averages_only_over_complete_groups():
    full = {c: 0.5 for c in GROUPS["code"] + GROUPS["math"]}
    rows = [_row("r", "a", "student", c, v) for c, v in full.items()]
    no_lcb = [_row("r", "b", "student", c, v) for c, v in full.items() if c != "LiveCodeBench"]
    no_math = [_row("r", "c", "student", c, v) for c, v in full.items() if c in GROUPS["code"]]
    cols, table = build_table(rows + no_lcb + no_math)
    by = {t["member"]: t["values"] for t in table if t["kind"] == "adapter"}
    assert by["a"]["code avg"] == pytest.approx(0.5) and by["a"]["overall"] == pytest.approx(0.5)
    assert by["b"]["code avg"] is None and by["b"]["math avg"] == pytest.approx(0.5) and by["b"]["overall"] is None
    assert by["c"]["code avg"] == pytest.approx(0.5) and by["c"]["math avg"] is None and by["c"]["overall"] is None
    mean = next(t for t in table if t["kind"] == "population_mean")["values"]
    assert mean["LiveCodeBench"] is None  # one member lacks it: blank, not a mean over the others
    assert cols[-3:] == ["code avg", "math avg", "overall"]


def test_files_written_with_blanks_counts_and_intervals(tmp_path):
    _scores(tmp_path)
    paths = write_leaderboard([tmp_path / "pop", tmp_path / "single"], tmp_path / "out")
    md = paths["md"].read_text()
    assert "| b0 (baseline) | 50.0 | **90.0** |" in md  # best gsm8k
    assert "| s0 (student) | **60.0** | 80.0 |" in md  # best HumanEval+
    assert "HumanEval+ (n=10)" in md and AVERAGE_RULE in md
    assert md.count("base model tiny, evaluated with") == 1  # one base row although both runs carry it
    assert "GSM8K test (1319)" in md and "commit abc123" in md and "max new tokens 8" in md and "stop ['\\nQuestion:']" in md
    assert "backend hf" in md and "evalplus 0.3.1" in md and "4.0 GiB per test process" in md and "6 s per test" in md
    assert "run pop: trained 3 steps (finished)" in md and "LoRA rank 8" in md
    assert "WARNING: gsm8k: a warning the user must see" in md
    rows = list(csv.DictReader(paths["csv"].open()))
    s0 = next(r for r in rows if r["member"] == "s0")
    lo, hi = wilson_interval(6, 10)
    assert float(s0["HumanEval+ ci95 low"]) == pytest.approx(lo) and float(s0["HumanEval+ ci95 high"]) == pytest.approx(hi)
    assert s0["HumanEval+ n"] == "10"
    assert {r["kind"] for r in rows} >= {"adapter", "population_mean", "population_std"}
    html = paths["html"].read_text()
    assert "data:image/png;base64,iVBOR" in html and "<b>90.0</b>" in html and "class='ci'" in html
    assert paths["png"].read_bytes()[:4] == b"\x89PNG"


def test_missing_values_are_blank_never_zero(tmp_path):
    pop = [_row("pop", "t0", "teacher", "HumanEval+", 0.2), _row("pop", "s0", "student", "gsm8k", 0.8)]
    _write(tmp_path / "pop", pop)
    paths = write_leaderboard([tmp_path / "pop"], tmp_path / "out")
    assert "| t0 (teacher) | 20.0 |  |" in paths["md"].read_text()
    t0 = next(r for r in csv.DictReader(paths["csv"].open()) if r["member"] == "t0")
    assert t0["gsm8k"] == "" and t0["gsm8k ci95 low"] == ""


def test_differing_settings_are_flagged(tmp_path):
    _scores(tmp_path, prov_b={**PROV, "template": "chat"})
    md = write_leaderboard([tmp_path / "pop", tmp_path / "single"], tmp_path / "out")["md"].read_text()
    assert "WARNING: the runs were evaluated with different settings" in md


def test_two_base_models_get_two_labelled_rows(tmp_path):
    _scores(tmp_path, prov_b={**PROV, "model": "smollm2-135m"})
    rows, _ = read_scores([tmp_path / "pop", tmp_path / "single"])
    labels = [t["note"] for t in build_table(rows)[1] if t["role"] == "base"]
    assert labels == ["base model smollm2-135m, evaluated with run single", "base model tiny, evaluated with run pop"]


def test_missing_scores_name_the_file(tmp_path):
    (tmp_path / "run").mkdir()
    with pytest.raises(FileNotFoundError, match="populora eval --runs"):
        write_leaderboard([tmp_path / "run"], tmp_path / "out")


def test_columns_come_from_the_specs():
    assert GROUPS["code"] == ("HumanEval+", "MBPP+", "LiveCodeBench")
    assert GROUPS["math"] == tuple(b for b, s in BENCHMARKS.items() if s.group == "math")

"""Leaderboard tables from score files: averages, population statistics, best-per-column marks,
reference rows, provenance and the three output files (HTML with the embedded PNG chart)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from eval.leaderboard import build_table, write_leaderboard

PROV = {"model": "tiny", "template": "base", "decoding": "greedy (temperature 0), pass@1", "max_new_tokens": {"gsm8k": 8},
        "limit": None, "commit": "abc123", "date": "2026-01-01 00:00 UTC",
        "data": {"gsm8k": {"benchmark": "gsm8k", "version": "GSM8K test (1319)", "file": "test.jsonl", "sha256": "37" * 32, "n_items": 1319}}}


def _row(run, member, role, column, value):
    key = "base" if role == "base" else f"{run}__{member}"
    return {"key": key, "run": run, "member_id": member, "role": role, "benchmark": "x", "metric": "m",
            "column": column, "value": value, "n": 10}


def _write(run_dir: Path, rows, prov=PROV):
    (run_dir / "eval").mkdir(parents=True)
    (run_dir / "eval" / "scores.json").write_text(json.dumps({"provenance": prov, "rows": rows}))


def _scores(tmp_path, prov_b=PROV):
    pop = [_row("pop", "t0", "teacher", "HumanEval+", 0.2), _row("pop", "t0", "teacher", "gsm8k", 0.4),
           _row("pop", "s0", "student", "HumanEval+", 0.6), _row("pop", "s0", "student", "gsm8k", 0.8),
           _row("-", "base", "base", "HumanEval+", 0.1), _row("-", "base", "base", "gsm8k", 0.1)]
    single = [_row("single", "b0", "baseline", "HumanEval+", 0.5), _row("single", "b0", "baseline", "gsm8k", 0.9),
              _row("-", "base", "base", "HumanEval+", 0.1), _row("-", "base", "base", "gsm8k", 0.1)]
    _write(tmp_path / "pop", pop)
    _write(tmp_path / "single", single, prov_b)
    return pop, single


def test_table_statistics(tmp_path):
    pop, single = _scores(tmp_path)
    cols, table = build_table(pop + single[:2])
    assert cols == ["HumanEval+", "gsm8k", "code avg", "math avg", "overall"]
    by = {t["label"]: t for t in table}
    s0 = by["pop / student / s0"]["values"]
    assert s0["code avg"] == pytest.approx(0.6) and s0["math avg"] == pytest.approx(0.8) and s0["overall"] == pytest.approx(0.7)
    mean = by["pop / population mean (n=2)"]["values"]
    assert mean["HumanEval+"] == pytest.approx(0.4) and mean["overall"] == pytest.approx(0.5)
    assert by["pop / population std (n=2)"]["values"]["gsm8k"] == pytest.approx(0.2)
    assert by["pop / population min (n=2)"]["values"]["HumanEval+"] == pytest.approx(0.2)
    assert by["pop / population max (n=2)"]["values"]["gsm8k"] == pytest.approx(0.8)
    assert "base model" in by and "single / baseline / b0" in by


def test_files_written_with_best_marked(tmp_path):
    _scores(tmp_path)
    paths = write_leaderboard([tmp_path / "pop", tmp_path / "single"], tmp_path / "out")
    md = paths["md"].read_text()
    assert "| single / baseline / b0 | 50.0 | **90.0** |" in md  # best gsm8k
    assert "| pop / student / s0 | **60.0** | 80.0 |" in md  # best HumanEval+
    assert md.count("base model") == 1  # the base row appears once although both runs carry it
    assert "GSM8K test (1319)" in md and "commit abc123" in md and "max new tokens 8" in md
    rows = list(csv.DictReader(paths["csv"].open()))
    assert {r["kind"] for r in rows} >= {"adapter", "population_mean", "population_std"}
    html = paths["html"].read_text()
    assert "data:image/png;base64,iVBOR" in html and "<b>90.0</b>" in html
    assert paths["png"].read_bytes()[:4] == b"\x89PNG"


def test_differing_settings_are_flagged(tmp_path):
    _scores(tmp_path, prov_b={**PROV, "template": "chat"})
    md = write_leaderboard([tmp_path / "pop", tmp_path / "single"], tmp_path / "out")["md"].read_text()
    assert "WARNING: the runs were evaluated with different settings" in md


def test_missing_scores_name_the_file(tmp_path):
    (tmp_path / "run").mkdir()
    with pytest.raises(FileNotFoundError, match="populora eval --runs"):
        write_leaderboard([tmp_path / "run"], tmp_path / "out")

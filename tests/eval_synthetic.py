"""Synthetic evaluated runs for the leaderboard tests: run directories with a ``config.yaml`` (seed,
population) and a ``scores.json`` whose rows are made by the pipeline's own ``score_rows`` from
synthetic per-sample verdicts (no model, no benchmark data: item ids are ``q0``, ``q1``, ...)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import yaml

from eval.benchmarks import BENCHMARKS
from eval.benchmarks.families import ScoredAnswer
from eval.runner.pipeline import score_rows
from eval.runner.runs import EvalAdapter

SAMPLING = {"samples": 8, "temperature": 0.6, "top_p": 0.95, "seed": 0}


def provenance(benches, n_items, sampling=SAMPLING, limit=None):
    data = {}
    for b in benches:
        spec = BENCHMARKS[b]
        d = {"benchmark": b, "version": spec.version, "file": "x", "sha256": "ab" * 32, "n_items": n_items, "warnings": []}
        if spec.loader:
            d = {"benchmark": b, "version": "code_generation_lite release_v5", "files": {"test5.jsonl": "cd" * 32},
                 "window": ["2024-08-01", "2025-02-01"], "n_items": n_items, "warnings": []}
        data[b] = d
    greedy = sampling["samples"] == 1 and sampling["temperature"] == 0
    return {"model": "tiny", "backend": "hf", "dtype": "auto", "template": "base",
            "decoding": "greedy (temperature 0), pass@1" if greedy else "sampled", "sampling": sampling,
            "max_new_tokens": {b: 8 for b in benches}, "limit": limit, "commit": "abc123", "date": "2026-01-01 00:00 UTC",
            "stop": {}, "libraries": {}, "scorers": {}, "data": data}


def verdicts(rng, rates, samples):
    """item -> ``samples`` verdicts with success probability ``rates[item]`` (one metric per spec)."""
    return {f"q{i}": [rng.random() < p for _ in range(samples)] for i, p in enumerate(rates)}


def rows_for(adapter: EvalAdapter, bench: str, per_item: dict[str, list[bool]]) -> list[dict]:
    metrics = [m for m, _ in BENCHMARKS[bench].column_names()]
    return score_rows(adapter, bench, {i: [ScoredAnswer({m: v for m in metrics}) for v in vs] for i, vs in per_item.items()})


def make_sweep(root: Path, *, configs=(("4t4s", 8, 0.10), ("baseline", 1, 0.0)), seeds=(0, 1, 2),
               benches=("humaneval_plus", "gsm8k"), n_items=30, samples=8, base_rate=0.3, seed=0) -> list[Path]:
    """Runs ``<config>-s<seed>`` for every configuration ``(name, members, effect)``: an item's solve
    probability is its difficulty (shared by every run) plus the configuration's effect plus noise."""
    rng = np.random.default_rng(seed)
    difficulty = {b: np.clip(rng.normal(base_rate, 0.25, n_items), 0.02, 0.98) for b in benches}
    sampling = SAMPLING if samples > 1 else {"samples": 1, "temperature": 0.0, "top_p": 1.0, "seed": 0}
    prov = provenance(benches, n_items, {**sampling, "samples": samples})
    base_rows = [r for b in benches for r in rows_for(EvalAdapter.base(), b, verdicts(rng, difficulty[b], samples))]
    runs = []
    for name, members, effect in configs:
        for s in seeds:
            run = root / f"{name}-s{s}"
            (run / "eval").mkdir(parents=True)
            baseline = name.startswith("baseline")
            teachers = 1 if baseline else members // 2
            (run / "config.yaml").write_text(yaml.safe_dump(
                {"name": run.name, "seed": s, "population": {"teachers": teachers, "students": members - teachers if not baseline else 1,
                                                             "baseline": baseline}}))
            ids = [("b0", "baseline")] if baseline else \
                [(f"t{i}", "teacher") for i in range(teachers)] + [(f"s{i}", "student") for i in range(members - teachers)]
            rows = []
            seed_shift = rng.normal(0, 0.02)
            for mid, role in ids:
                a = EvalAdapter(run.name, mid, role, Path("/nonexistent"))
                member_shift = rng.normal(0, 0.03)
                for b in benches:
                    p = np.clip(difficulty[b] + effect + seed_shift + member_shift, 0, 1)
                    rows += rows_for(a, b, verdicts(rng, p, samples))
            info = {run.name: {"steps_done": 3, "status": "finished", "config_sha256": "ab" * 32, "seed": s, "members": {}}}
            (run / "eval" / "scores.json").write_text(json.dumps({"provenance": {**prov, "runs": info},
                                                                  "rows": rows + base_rows}))
            (run / "members.json").write_text(json.dumps([{"id": m, "role": r, "adapter_dir": f"adapters/{m}"} for m, r in ids]))
            runs.append(run)
    return runs

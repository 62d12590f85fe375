"""The evaluation pipeline: load benchmarks -> generate (sharded, resumable) -> merge -> score.

Scores are written to ``<workdir>/scores.json`` and, per run, to ``<run>/eval/scores.json``
(that run's adapters plus the base model as a reference row), which ``populora leaderboard``
reads. A score row (one per adapter, benchmark and metric) carries the value (pass@1: greedy, or
avg@N of N samples), the item count, a 95% Wilson interval, the number of samples per item, pass@k
for every k <= N (``eval.stats``: the unbiased estimator of Chen et al. 2021) and every item's solve
rate (correct samples / N), which the leaderboard's seed and paired statistics read. Per-sample
verdicts go to ``<workdir>/verdicts/<adapter>/<benchmark>.jsonl`` (one record per item and sample).
Each score file carries the provenance: engine (backend, dtype), decoding, library versions,
benchmark versions and checksums, template, stop strings, token budgets, the scorers' limits, each
run's training state, configuration and seed, model and git commit.

Every benchmark is handled through its family (``eval.benchmarks.families``): the loop below never tests a name.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict
from pathlib import Path

from eval.benchmarks import BENCHMARKS, REPO_ROOT, Item, data_fingerprint, load_items
from eval.benchmarks.families import ScoredAnswer, family_of
from eval.runner.decoding import Decoding
from eval.runner.engine import make_engine
from eval.runner.generate import (
    ShardError,
    append_records,
    generate_shard,
    load_merged_samples,
    make_plan,
    merge,
    write_or_check_plan,
)
from eval.runner.runs import EvalAdapter, check_base_model, read_run, run_info
from eval.runner.settings import EvalSettings
from eval.stats import avg_at_n, pass_at_k_curve, wilson_interval

__all__ = ["METRICS", "EvalSettings", "evaluate_runs", "make_engine", "load_benchmarks", "score_rows"]

# Leaderboard columns: (benchmark, metric) -> column name
METRICS = {(b, metric): col for b, spec in BENCHMARKS.items() for metric, col in spec.column_names()}


def load_every_item(s: EvalSettings) -> dict[str, list[Item]]:
    """Every item of each selected benchmark (LiveCodeBench: every problem of the release in the date
    window), before ``--limit``."""
    items = {}
    for b in s.benchmarks:
        opts = s.lcb_options() if BENCHMARKS[b].loader else {}
        items[b] = load_items(b, data_dir=s.data_dir, path=s.data_paths.get(b), **opts)
    return items


def first_items(items: Mapping[str, list[Item]], limit: int | None) -> dict[str, list[Item]]:
    """The first ``limit`` items of every benchmark (all of them when ``limit`` is None)."""
    return {b: its[:limit] if limit else its for b, its in items.items()}


def load_benchmarks(s: EvalSettings) -> dict[str, list[Item]]:
    """The items evaluated: every item of each benchmark, or its first ``--limit``."""
    return first_items(load_every_item(s), s.limit)


def collect_adapters(run_dirs: Sequence[str | Path], only: Sequence[str] | None = None, include_base: bool = True) -> list[EvalAdapter]:
    """Adapters of the runs (``only``: member ids or ``run/member`` names to keep), then the base."""
    adapters = [a for r in run_dirs for a in read_run(r)]
    if only:
        wanted = set(only)
        adapters = [a for a in adapters if a.member_id in wanted or f"{a.run}/{a.member_id}" in wanted]
        if not adapters:
            raise ValueError(f"--adapters {', '.join(only)}: no such member in {', '.join(map(str, run_dirs))}")
    keys = [a.key for a in adapters]
    if len(set(keys)) != len(keys):
        raise ValueError("two runs share a directory name; evaluate them under distinct names")
    return adapters + ([EvalAdapter.base()] if include_base else [])


def git_commit() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=10)
        dirty = subprocess.run(["git", "status", "--porcelain"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=10)
        return out.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "") if out.returncode == 0 else "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def library_versions() -> dict[str, str | None]:
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for pkg in ("evalplus", "math-verify", "lm-eval", "torch", "transformers", "peft", "vllm"):
        try:
            out[pkg] = version(pkg)
        except PackageNotFoundError:
            out[pkg] = None
    return out


def provenance(s: EvalSettings, items: Mapping[str, Sequence[Item]], run_dirs: Sequence[str | Path] = (),
               stops: Mapping[str, Sequence[str]] | None = None, totals: Mapping[str, int] | None = None) -> dict:
    """What was evaluated and how; per benchmark ``n_items`` (evaluated) and ``n_total`` (``totals``: every
    item the benchmark holds; LiveCodeBench: the problems of the release in the date window, counted by
    its loader)."""
    data = {}
    for b in items:
        opts = s.lcb_options() if BENCHMARKS[b].loader else {}
        data[b] = {**data_fingerprint(b, s.data_dir, s.data_paths.get(b), **opts), "n_items": len(items[b]),
                   **({"n_total": totals[b]} if totals and b in totals else {}),
                   "warnings": family_of(BENCHMARKS[b]).warnings(items[b])}
    return {
        "model": s.policy.model, "backend": s.policy.engine, "dtype": s.policy.dtype, "template": s.template,
        "decoding": s.decoding.label(), "sampling": s.decoding.to_json(), "max_new_tokens": s.budgets(), "limit": s.limit,
        "stop": {b: list(v) for b, v in (stops or {}).items()},
        "scorers": {"evalplus": {"parallel": s.parallel(), "min_time_limit_s": s.evalplus_min_time_limit,
                                 "gt_time_limit_factor": s.evalplus_gt_time_limit_factor,
                                 "max_memory_gb": s.evalplus_max_memory_gb or 4.0},
                    "livecodebench": {"test_timeout_s": s.lcb_timeout_s, "release": s.lcb_release,
                                      "window": [s.lcb_start, s.lcb_end]}},
        "libraries": library_versions(), "data": data, "runs": {Path(r).name: run_info(r) for r in run_dirs},
        "commit": git_commit(), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }


def _plan_stops(workdir: Path) -> dict:
    path = workdir / "plan.json"
    return json.loads(path.read_text()).get("stop", {}) if path.is_file() else {}


def generate_stage(s: EvalSettings, adapters: Sequence[EvalAdapter], items, workdir: Path, backend=None, log=print) -> None:
    from eval.benchmarks.prompts import stop_strings, stop_token_ids
    from populora.policy.engine import engine_class

    for b, its in items.items():
        for w in family_of(BENCHMARKS[b]).warnings(its):
            log(f"WARNING: {w}")
    own = backend is None
    backend = backend or make_engine(s, adapters)
    try:
        tok = backend.tokenizer
        stops = {b: stop_strings(b, s.template, tok) for b in items}
        plan = make_plan(adapters, items, template=s.template, max_new_tokens=s.budgets(), shards=s.shard[1],
                         slice_size=s.slice_size, model=s.policy.model, stops=stops, decoding=s.decoding)
        write_or_check_plan(workdir, plan)
        chunk = s.chunk_size if s.chunk_size is not None else engine_class(s.policy.engine).eval_chunk_size(s.policy)
        if chunk and s.chunk_size is None:  # the engine's chunk is in rows: a request brings N of them
            chunk = max(1, chunk // s.decoding.samples)
        log(f"decoding: {s.decoding.label()}")
        t0 = time.perf_counter()
        n = generate_shard(backend, adapters, items, workdir, template=s.template, max_new_tokens=s.budgets(),
                           shard=s.shard, slice_size=s.slice_size, chunk_size=chunk, stops=stops,
                           stop_ids=stop_token_ids(s.template, tok), progress=log, decoding=s.decoding)
        log(f"generated {n} completions in {time.perf_counter() - t0:.1f}s (shard {s.shard[0]}/{s.shard[1]})")
    finally:
        if own:
            backend.close()


def score_rows(who: EvalAdapter, bench: str, verdicts: Mapping[str, ScoredAnswer | Sequence[ScoredAnswer]]) -> list[dict]:
    """One row per metric of ``bench``: value (pass@1 = avg@N), item count, 95% Wilson interval
    (of the items' mean solve rate: conservative for N > 1), samples per item N, pass@k for k = 1..N,
    and each item's solve rate. ``verdicts[item_id]``: the item's N verdicts (or one verdict)."""
    per_item = {i: [v] if isinstance(v, ScoredAnswer) else list(v) for i, v in verdicts.items()}
    counts = {len(vs) for vs in per_item.values()}
    if len(counts) > 1:
        raise ValueError(f"{who.key}/{bench}: items with different numbers of samples {sorted(counts)}")
    samples = counts.pop() if counts else 1
    rows = []
    for metric, column in BENCHMARKS[bench].column_names():
        correct = {i: sum(bool(v.metrics[metric]) for v in vs) for i, vs in per_item.items()}
        n = len(correct)
        value = avg_at_n(list(correct.values()), samples) if n else None
        passed = sum(correct.values()) / samples
        lo, hi = wilson_interval(passed, n)
        rows.append({"key": who.key, "run": who.run, "member_id": who.member_id, "role": who.role, "benchmark": bench,
                     "metric": metric, "column": column, "value": value, "n": n,
                     "passed": int(passed) if samples == 1 else passed, "ci95": [lo, hi], "samples": samples,
                     "avg_at_n": value,
                     "pass_at_k": {str(k): v for k, v in pass_at_k_curve(list(correct.values()), samples).items()} if n else {},
                     "solve_rates": {i: c / samples for i, c in correct.items()}})
    return rows


def score_stage(s: EvalSettings, adapters: Sequence[EvalAdapter], items, workdir: Path, log=print) -> list[dict]:
    """Score the merged generations through each benchmark's family; one row per (adapter, benchmark, metric)."""
    rows: list[dict] = []
    samples = s.decoding.samples
    for bench, its in items.items():
        spec = BENCHMARKS[bench]
        family = family_of(spec)
        recs = {a.key: load_merged_samples(workdir, a.key, bench) for a in adapters}
        # one scorer call for every sample of every adapter: "who" is an (adapter, sample) pair
        answers = {f"{a.key}#{j}": {it.item_id: family.answer(it, recs[a.key][it.item_id][j]) for it in its}
                   for a in adapters for j in range(samples)}
        t0 = time.perf_counter()
        verdicts = family.score(spec, its, answers, s)
        for a in adapters:
            path = workdir / "verdicts" / a.key / f"{bench}.jsonl"
            if path.exists():
                path.unlink()
            append_records(path, [{"item_id": it.item_id, "sample": j, **verdicts[f"{a.key}#{j}"][it.item_id].to_json()}
                                  for it in its for j in range(samples)])
            rows.extend(score_rows(a, bench, {it.item_id: [verdicts[f"{a.key}#{j}"][it.item_id] for j in range(samples)]
                                              for it in its}))
        log(f"scored {bench} for {len(adapters)} adapters x {samples} sample(s) in {time.perf_counter() - t0:.1f}s")
    return rows


def write_scores(rows: Sequence[dict], prov: dict, workdir: Path, run_dirs: Sequence[str | Path]) -> list[Path]:
    """``<workdir>/scores.json`` and ``<run>/eval/scores.json`` (run's rows + base rows)."""
    written = []
    targets = [(workdir / "scores.json", list(rows), prov)]
    for r in run_dirs:
        name = Path(r).name
        run_prov = {**prov, "runs": {name: prov["runs"].get(name, {})}}
        targets.append((Path(r) / "eval" / "scores.json", [x for x in rows if x["run"] == name or x["role"] == "base"], run_prov))
    for path, rs, p in targets:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(json.dumps({"provenance": p, "rows": rs}, indent=1) + "\n")
        os.replace(tmp, path)
        written.append(path)
    return written


def evaluate_runs(run_dirs: Sequence[str | Path], s: EvalSettings, *, workdir: Path, only: Sequence[str] | None = None,
                  stage: str = "all", backend=None, log: Callable[[str], None] = print) -> list[dict]:
    """``stage``: ``generate`` (this shard only), ``merge``, ``score`` (merge + score) or ``all``."""
    adapters = collect_adapters(run_dirs, only, s.include_base)
    if s.check_base:
        check_base_model(adapters, s.policy.model)
    every = load_every_item(s)
    items = first_items(every, s.limit)
    if stage in ("generate", "all"):
        generate_stage(s, adapters, items, workdir, backend, log)
        if stage == "generate" or s.shard[1] > 1:
            return []
    plan_file = workdir / "plan.json"
    if not plan_file.is_file():
        raise ShardError(f"{plan_file}: missing; generate first (--stage generate or all)")
    planned = json.loads(plan_file.read_text())
    if planned["items"] != {b: [it.item_id for it in its] for b, its in items.items()}:
        raise ShardError(f"{plan_file}: benchmarks or items differ from this invocation (--benchmarks/--limit); give another --workdir")
    if [a["key"] for a in planned["adapters"]] != [a.key for a in adapters]:
        raise ShardError(f"{plan_file}: adapters differ from this invocation (--runs/--adapters/--no-base); give another --workdir")
    if Decoding.from_json(planned.get("decoding")) != s.decoding:
        raise ShardError(f"{plan_file}: decoding differs from this invocation (planned "
                         f"{Decoding.from_json(planned.get('decoding')).short()}, now {s.decoding.short()}); pass the same "
                         "--samples/--temperature/--top-p/--seed, or give another --workdir")
    merge(workdir)
    if stage == "merge":
        return []
    rows = score_stage(s, adapters, items, workdir, log)
    prov = provenance(s, items, run_dirs, _plan_stops(workdir), {b: len(its) for b, its in every.items()})
    for p in write_scores(rows, prov, workdir, run_dirs):
        log(f"wrote {p}")
    return rows


def settings_dict(s: EvalSettings) -> dict:
    return asdict(s)

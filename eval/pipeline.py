"""The evaluation pipeline: load benchmarks -> generate (sharded, resumable) -> merge -> score.

Scores are written to ``<workdir>/scores.json`` and, per run, to ``<run>/eval/scores.json``
(that run's adapters plus the base model as a reference row), which ``populora leaderboard``
reads. Each score file carries the provenance: benchmark versions and checksums, template,
decoding, token budgets, model and git commit.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from eval.benchmarks import BENCHMARKS, REPO_ROOT, Item, data_fingerprint, load_items
from eval.generate import ShardError, generate_shard, load_merged, make_plan, merge, write_or_check_plan
from eval.runs import EvalAdapter, check_base_model, read_run

# Leaderboard columns: (benchmark, metric) -> column name
METRICS = {
    ("humaneval_plus", "base"): "HumanEval", ("humaneval_plus", "plus"): "HumanEval+",
    ("mbpp_plus", "base"): "MBPP", ("mbpp_plus", "plus"): "MBPP+",
    ("livecodebench", "pass"): "LiveCodeBench",
    **{(b, "acc"): b for b in BENCHMARKS if BENCHMARKS[b].kind == "math"},
}


@dataclass
class EvalSettings:
    model: str = "tiny"
    backend: str = "hf"
    device: str = "auto"
    dtype: str = "auto"
    max_batch_size: int = 64
    template: str = "base"
    benchmarks: list[str] = field(default_factory=lambda: list(BENCHMARKS))
    max_new_tokens: dict[str, int] = field(default_factory=dict)  # overrides of the registry defaults
    limit: int | None = None  # first N items of every benchmark
    slice_size: int = 64
    chunk_size: int = 64
    shard: tuple[int, int] = (0, 1)
    data_dir: str | None = None
    data_paths: dict[str, str] = field(default_factory=dict)  # benchmark -> file (LCB: directory)
    lcb_release: str = "release_v5"
    lcb_start: str | None = "2024-08-01"
    lcb_end: str | None = "2025-02-01"
    lcb_timeout_s: float = 6.0
    evalplus_parallel: int | None = None
    evalplus_max_memory_gb: float | None = None  # None: EvalPlus's default (4 GiB per test process)
    cache_dir: str | None = None
    include_base: bool = True
    check_base: bool = True  # refuse adapters recorded as trained on another base model than ``model``

    def budgets(self) -> dict[str, int]:
        return {b: int(self.max_new_tokens.get(b, BENCHMARKS[b].max_new_tokens)) for b in self.benchmarks}


def load_benchmarks(s: EvalSettings) -> dict[str, list[Item]]:
    items = {}
    for b in s.benchmarks:
        opts = {}
        if b == "livecodebench":
            opts = {"release": s.lcb_release, "start": s.lcb_start, "end": s.lcb_end}
        its = load_items(b, data_dir=s.data_dir, path=s.data_paths.get(b), **opts)
        items[b] = its[: s.limit] if s.limit else its
    return items


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


def make_engine(s: EvalSettings, adapters: Sequence[EvalAdapter]):
    """One backend with every adapter loaded (PEFT directories) next to the base."""
    from populora.policy import PolicyConfig, make_backend
    from populora.policy.adapters import AdapterWeights

    cfg = PolicyConfig(engine=s.backend, model=s.model, device=s.device, dtype=s.dtype, max_batch_size=s.max_batch_size)
    backend = make_backend(cfg, max_new_tokens=max(s.budgets().values(), default=None))
    for a in adapters:
        if a.adapter_dir is not None:
            backend.add_adapter(a.key, AdapterWeights.load_peft(a.adapter_dir))
    return backend


def git_commit() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=10)
        dirty = subprocess.run(["git", "status", "--porcelain"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=10)
        return out.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "") if out.returncode == 0 else "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def provenance(s: EvalSettings, items: Mapping[str, Sequence[Item]]) -> dict:
    lcb = {"release": s.lcb_release}
    data = {b: {**data_fingerprint(b, s.data_dir, s.data_paths.get(b), **(lcb if b == "livecodebench" else {})),
                "n_items": len(items[b])} for b in items}
    if "livecodebench" in data:
        data["livecodebench"]["window"] = [s.lcb_start, s.lcb_end]
    return {
        "model": s.model, "template": s.template, "decoding": "greedy (temperature 0), pass@1",
        "max_new_tokens": s.budgets(), "limit": s.limit, "data": data, "commit": git_commit(),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }


def generate_stage(s: EvalSettings, adapters: Sequence[EvalAdapter], items, workdir: Path, backend=None, log=print) -> None:
    plan = make_plan(adapters, items, template=s.template, max_new_tokens=s.budgets(), shards=s.shard[1],
                     slice_size=s.slice_size, model=s.model)
    write_or_check_plan(workdir, plan)
    own = backend is None
    backend = backend or make_engine(s, adapters)
    try:
        t0 = time.perf_counter()
        n = generate_shard(backend, adapters, items, workdir, template=s.template, max_new_tokens=s.budgets(),
                           shard=s.shard, slice_size=s.slice_size, chunk_size=s.chunk_size, progress=log)
        log(f"generated {n} completions in {time.perf_counter() - t0:.1f}s (shard {s.shard[0]}/{s.shard[1]})")
    finally:
        if own:
            backend.close()


def score_stage(s: EvalSettings, adapters: Sequence[EvalAdapter], items, workdir: Path, log=print) -> list[dict]:
    """Score the merged generations; one row per (adapter, benchmark, metric)."""
    from eval.prompts import solution_source
    from eval.score_code import sanitize_solution, score_evalplus

    rows: list[dict] = []

    def add(a: EvalAdapter, bench: str, metric: str, value: float, n: int) -> None:
        rows.append({"key": a.key, "run": a.run, "member_id": a.member_id, "role": a.role, "benchmark": bench,
                     "metric": metric, "column": METRICS[(bench, metric)], "value": value, "n": n})

    for bench, its in items.items():
        kind = BENCHMARKS[bench].kind
        recs = {a.key: load_merged(workdir, a.key, bench) for a in adapters}
        t0 = time.perf_counter()
        if bench in ("humaneval_plus", "mbpp_plus"):
            sols = {
                a.key: {it.item_id: sanitize_solution(
                    solution_source(it, recs[a.key][it.item_id]["prompt"], recs[a.key][it.item_id]["completion"], s.template),
                    it.meta["entry_point"]) for it in its}
                for a in adapters
            }
            res = score_evalplus(bench, sols, cache_dir=s.cache_dir, data_dir=s.data_dir, path=s.data_paths.get(bench),
                                 parallel=s.evalplus_parallel, max_memory_gb=s.evalplus_max_memory_gb)
            for a in adapters:
                add(a, bench, "base", res[a.key]["base"], len(its))
                add(a, bench, "plus", res[a.key]["plus"], len(its))
        elif bench == "livecodebench":
            from eval.livecodebench import score_livecodebench

            cands = [(it, solution_source(it, recs[a.key][it.item_id]["prompt"], recs[a.key][it.item_id]["completion"], s.template))
                     for a in adapters for it in its]
            verdicts = score_livecodebench(cands, timeout_s=s.lcb_timeout_s)
            for k, a in enumerate(adapters):
                mine = verdicts[k * len(its) : (k + 1) * len(its)]
                add(a, bench, "pass", sum(v.passed for v in mine) / len(its), len(its))
        elif kind == "math":
            from eval.math_answers import is_correct

            for a in adapters:
                ok = sum(is_correct(recs[a.key][it.item_id]["completion"], it.gold) for it in its)
                add(a, bench, "acc", ok / len(its), len(its))
        log(f"scored {bench} for {len(adapters)} adapters in {time.perf_counter() - t0:.1f}s")
    return rows


def write_scores(rows: Sequence[dict], prov: dict, workdir: Path, run_dirs: Sequence[str | Path]) -> list[Path]:
    """``<workdir>/scores.json`` and ``<run>/eval/scores.json`` (run's rows + base rows)."""
    written = []
    targets = [(workdir / "scores.json", list(rows))]
    for r in run_dirs:
        name = Path(r).name
        targets.append((Path(r) / "eval" / "scores.json", [x for x in rows if x["run"] == name or x["role"] == "base"]))
    for path, rs in targets:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(json.dumps({"provenance": prov, "rows": rs}, indent=1) + "\n")
        os.replace(tmp, path)
        written.append(path)
    return written


def evaluate_runs(run_dirs: Sequence[str | Path], s: EvalSettings, *, workdir: Path, only: Sequence[str] | None = None,
                  stage: str = "all", backend=None, log: Callable[[str], None] = print) -> list[dict]:
    """``stage``: ``generate`` (this shard only), ``merge``, ``score`` (merge + score) or ``all``."""
    adapters = collect_adapters(run_dirs, only, s.include_base)
    if s.check_base:
        check_base_model(adapters, s.model)
    items = load_benchmarks(s)
    if stage in ("generate", "all"):
        generate_stage(s, adapters, items, workdir, backend, log)
        if stage == "generate" or s.shard[1] > 1:
            return []
    plan_file = workdir / "plan.json"
    if not plan_file.is_file():
        raise ShardError(f"{plan_file}: missing; generate first (--stage generate or all)")
    planned = json.loads(plan_file.read_text())
    if planned["items"] != {b: [it.item_id for it in its] for b, its in items.items()}:
        raise ShardError(f"{plan_file}: benchmarks or items differ from this invocation (--benchmarks/--limit)")
    if [a["key"] for a in planned["adapters"]] != [a.key for a in adapters]:
        raise ShardError(f"{plan_file}: adapters differ from this invocation (--runs/--adapters/--no-base)")
    merge(workdir)
    if stage == "merge":
        return []
    rows = score_stage(s, adapters, items, workdir, log)
    for p in write_scores(rows, provenance(s, items), workdir, run_dirs):
        log(f"wrote {p}")
    return rows


def settings_dict(s: EvalSettings) -> dict:
    return asdict(s)

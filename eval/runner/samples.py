"""Scoring generations made anywhere (``populora score``), through the path ``populora eval`` uses.

A samples file is JSON lines in EvalPlus's samples format: code benchmarks take ``task_id`` plus
``solution`` (a full program) or ``completion`` (EvalPlus: appended to the item's prompt;
LiveCodeBench: the raw model output, from which LCB's rule extracts the code; ``question_id`` may
name the item); math benchmarks take ``id`` (or ``task_id``) plus ``answer`` (the model's answer
text, e.g. its whole output with a final ``\\boxed{}``). A task may have several samples (pass@1 is
then their mean per task, averaged over tasks, and pass@k is reported for every k up to the fewest
samples of a task, by the unbiased estimator of ``eval.stats``). The benchmark's family (``eval.benchmarks.families``) turns each
sample into the scored answer and scores all of them at once: the same extraction, program
preparation and scorer as for the generations of ``populora eval``.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

from eval.benchmarks import BENCHMARKS, Item
from eval.benchmarks.families import family_of
from eval.runner.settings import EvalSettings
from eval.stats import pass_at_k, wilson_interval


class SamplesError(ValueError):
    """A samples file that cannot be scored; the message names the file, line and field."""


def read_samples(path: str | Path) -> list[dict]:
    path = Path(path)
    if not path.is_file():
        raise SamplesError(f"{path}: no such samples file")
    out = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines()):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise SamplesError(f"{path}: line {n + 1} is not valid JSON ({e})") from e
        if not isinstance(row, dict):
            raise SamplesError(f"{path}: line {n + 1} is not a JSON object")
        out.append({**row, "_line": n + 1})
    if not out:
        raise SamplesError(f"{path}: no samples")
    return out


def score_samples(bench: str, samples: Sequence[dict], items: Sequence[Item], settings: EvalSettings,
                  where: str = "samples") -> tuple[list[dict], dict]:
    """Per-sample verdict records and the aggregate (pass@1 per metric with a 95% Wilson interval)."""
    spec = BENCHMARKS[bench]
    family = family_of(spec)
    by_id = {it.item_id: it for it in items}
    # the k-th sample of each task is scored as "sample k": one scorer call for all of them
    answers: dict[str, dict[str, str]] = defaultdict(dict)
    order: list[tuple[str, str, int]] = []
    seen: dict[str, int] = defaultdict(int)
    for s in samples:
        field = next((f for f in family.sample_id_field() if f in s), None)
        if field is None:
            raise SamplesError(f"{where}: line {s.get('_line')} has none of the id fields {family.sample_id_field()}")
        tid = str(s[field])
        if tid not in by_id:
            raise SamplesError(f"{where}: line {s.get('_line')}: {field} {tid!r} is not an item of {bench}")
        try:
            answer = family.answer_from_sample(by_id[tid], s)
        except KeyError as e:
            raise SamplesError(f"{where}: line {s.get('_line')} ({tid}) lacks field {e.args[0]!r} "
                               f"(see `populora score --help`)") from e
        who = f"sample{seen[tid]}"
        seen[tid] += 1
        answers[who][tid] = answer
        order.append((who, tid, s.get("_line")))
    results = {}
    for who, per in answers.items():  # the scorer wants every "who" to cover the same items
        sub = [by_id[t] for t in per]
        results[who] = family.score(spec, sub, {who: per}, settings)[who]
    records = []
    per_task: dict[str, list[dict]] = defaultdict(list)
    for who, tid, line in order:
        v = results[who][tid]
        rec = {"task_id": tid, "sample": int(who[6:]), "line": line, "metrics": dict(v.metrics), "reason": v.reason,
               "notes": list(v.notes)}
        records.append(rec)
        per_task[tid].append(rec)
    metrics = {}
    for metric, column in spec.column_names():
        rates = [sum(r["metrics"][metric] for r in rs) / len(rs) for rs in per_task.values()]
        k = sum(rates)
        lo, hi = wilson_interval(round(k), len(rates))
        metrics[column] = {"pass@1": k / len(rates), "n_tasks": len(rates), "ci95": [lo, hi]}
        counts = [(len(rs), sum(bool(r["metrics"][metric]) for r in rs)) for rs in per_task.values()]
        fewest = min(n for n, _ in counts)
        if fewest > 1:
            metrics[column]["pass@k"] = {str(kk): sum(pass_at_k(n, c, kk) for n, c in counts) / len(counts)
                                         for kk in range(1, fewest + 1)}
    agg = {"benchmark": bench, "n_samples": len(records), "n_tasks": len(per_task), "n_items_in_benchmark": len(items),
           "metrics": metrics}
    return records, agg

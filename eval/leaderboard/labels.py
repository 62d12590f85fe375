"""What every leaderboard table says about itself: the decoding (greedy, or temperature / top-p /
samples per item), the seeds of each configuration, and per benchmark its version and number of items;
for LiveCodeBench also its release and contest-date window. Read from the score files' provenance,
so a table states what was evaluated, not what the defaults are; runs that disagree are shown as such.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from eval.leaderboard.columns import BENCHMARK_OF
from eval.leaderboard.seeds import RunGroup
from eval.runner.decoding import Decoding


def run_decodings(provs: Mapping[str, dict]) -> dict[str, Decoding]:
    """Each run's decoding (score files written before sampling existed were greedy)."""
    return {run: Decoding.from_json(p.get("sampling") or p.get("decoding")) for run, p in provs.items()}


def decoding_text(provs: Mapping[str, dict]) -> str:
    decs = run_decodings(provs)
    distinct = sorted({_one(d) for d in decs.values()})
    if len(distinct) == 1:
        d = next(iter(decs.values()))
        what = "greedy (temperature 0), pass@1" if d.greedy else \
            f"{distinct[0]}; pass@1 = avg@{d.samples}, pass@k by the unbiased estimator (Chen et al. 2021)"
        return f"decoding: {what}"
    return "decoding: MIXED across runs (" + "; ".join(distinct) + ")"


def _one(d: Decoding) -> str:
    return "greedy" if d.greedy else f"{d.short()} samples per item (sampling seed {d.seed})"


def benchmark_text(provs: Mapping[str, dict], columns: Sequence[str]) -> str:
    """``HumanEval+ v0.1.10: 164 items; ...`` for the benchmarks behind ``columns`` (item counts that
    differ between runs as a range; ``4 items of 164`` with ``--limit``); LiveCodeBench with its release,
    window and the number of problems in them (``n_total``, counted by its loader when evaluated)."""
    parts, seen = [], set()
    for col in columns:
        bench = BENCHMARK_OF.get(col)
        if bench is None or bench in seen:
            continue
        seen.add(bench)
        data = [p["data"][bench] for p in provs.values() if bench in (p.get("data") or {})]
        if not data:
            continue
        versions = sorted({str(d.get("version")) for d in data})
        counts = sorted({d.get("n_items") for d in data if d.get("n_items") is not None})
        n = "" if not counts else (f"{counts[0]}" if len(counts) == 1 else f"{counts[0]}-{counts[-1]}")
        version = " / ".join(versions)
        text = f"{version if _norm(col) in _norm(version) else f'{col} {version}'}: {n} items"
        windows = sorted({tuple(d["window"]) for d in data if d.get("window")})
        totals = sorted({d["n_total"] for d in data if d.get("n_total") is not None})
        total = "" if not totals else (f"{totals[0]}" if len(totals) == 1 else f"{totals[0]}-{totals[-1]}")
        if windows:
            text += " (contest dates " + " / ".join(f"{a or 'start'} to {b or 'end'}" for a, b in windows) + ", inclusive"
            text += f"; {total} problems in the release and window)" if total else ")"
        elif total and totals != counts:
            text += f" of {total}"
        parts.append(text)
    return "; ".join(parts)


def _norm(text: str) -> str:
    return "".join(ch for ch in text.lower() if ch.isalnum())


def seeds_text(groups: Sequence[RunGroup]) -> str:
    return "seeds: " + "; ".join(f"{g.config}: {g.seeds_text()} ({len(g.runs)} run{'s' if len(g.runs) > 1 else ''})"
                                 for g in groups)


def caption(provs: Mapping[str, dict], columns: Sequence[str], groups: Sequence[RunGroup]) -> str:
    """Decoding, seeds, benchmarks (versions, items, LCB window): one line for a table."""
    limits = sorted({p.get("limit") for p in provs.values() if p.get("limit")})
    items = benchmark_text(provs, columns)
    if items:
        items = (f"benchmarks (first {'/'.join(map(str, limits))} items of each, --limit): " if limits else "benchmarks: ") + items
    parts = [decoding_text(provs), seeds_text(groups) if groups else "", items]
    return ". ".join(p for p in parts if p) + "."

"""The score table ``populora eval`` prints when it has scored: one line per adapter, one column per
benchmark metric (pass@1 in percent, with the number of items), from the rows of ``scores.json``; a
sampled evaluation (N samples per item) adds a second table, one line per adapter and benchmark
metric with pass@1 .. pass@N."""

from __future__ import annotations

from collections.abc import Sequence


def _layout(header: list[str], body: list[list[str]]) -> list[str]:
    widths = [max(len(str(line[i])) for line in [header, *body]) for i in range(len(header))]
    return ["  ".join(str(v).ljust(w) for v, w in zip(line, widths)).rstrip() for line in [header, *body]]


def score_table(rows: Sequence[dict]) -> str:
    """A plain-text table of score rows (``eval.runner.pipeline.score_rows``); ``""`` when there are none."""
    if not rows:
        return ""
    columns: list[str] = []
    adapters: list[str] = []
    cells: dict[tuple[str, str], str] = {}
    for r in rows:
        col = f"{r['benchmark']}/{r['metric']}"
        who = r["key"]
        if col not in columns:
            columns.append(col)
        if who not in adapters:
            adapters.append(who)
        value = r.get("value")
        cells[who, col] = "-" if value is None else f"{100 * value:.1f} ({r.get('n', 0)})"
    samples = max(int(r.get("samples", 1)) for r in rows)
    title = "scores: pass@1 in % (items)" if samples == 1 else f"scores: pass@1 = avg@{samples} in % (items)"
    out = [title, *_layout(["adapter", *columns], [[who, *(cells.get((who, c), "") for c in columns)] for who in adapters])]
    if samples > 1:
        ks = list(range(1, samples + 1))
        body = [[r["key"], f"{r['benchmark']}/{r['metric']}",
                 *(f"{100 * r['pass_at_k'][str(k)]:.1f}" if str(k) in (r.get("pass_at_k") or {}) else "" for k in ks)]
                for r in rows]
        out += ["", f"pass@k in % (unbiased estimator, {samples} samples per item)",
                *_layout(["adapter", "benchmark", *(f"pass@{k}" for k in ks)], body)]
    return "\n".join(out)

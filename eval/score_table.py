"""The score table ``populora eval`` prints when it has scored: one line per adapter, one column per
benchmark metric (pass@1 in percent, with the number of items), from the rows of ``scores.json``."""

from __future__ import annotations

from collections.abc import Sequence


def score_table(rows: Sequence[dict]) -> str:
    """A plain-text table of score rows (``eval.pipeline.score_rows``); ``""`` when there are none."""
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
    header = ["adapter", *columns]
    body = [[who, *(cells.get((who, c), "") for c in columns)] for who in adapters]
    widths = [max(len(str(line[i])) for line in [header, *body]) for i in range(len(header))]
    fmt = lambda line: "  ".join(str(v).ljust(w) for v, w in zip(line, widths)).rstrip()  # noqa: E731
    return "\n".join(["scores: pass@1 in % (items)", fmt(header), *(fmt(line) for line in body)])

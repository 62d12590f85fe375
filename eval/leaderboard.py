"""Leaderboards from the score files of runs: Markdown, CSV and HTML (with an embedded bar chart).

One row per adapter (run, role, member id) with a column per benchmark metric, the code average
(HumanEval+, MBPP+, LiveCodeBench), the math average (the seven math sets) and the overall score
(mean of the two averages, as AZR reports it). Per population run: mean, min, max and std over its
members; the single-agent baseline and the base model are reference rows. The best adapter value
of each column is marked (unless all tie). The provenance (data versions and checksums, decoding, token budgets,
commit) is printed under the table; differing settings across runs are flagged.
"""

from __future__ import annotations

import base64
import csv
import html
import io
import json
import statistics
from collections.abc import Sequence
from pathlib import Path

from eval.pipeline import METRICS

CODE_COLUMNS = ("HumanEval+", "MBPP+", "LiveCodeBench")
ALL_COLUMNS = tuple(dict.fromkeys(METRICS.values()))
MATH_COLUMNS = tuple(c for c in ALL_COLUMNS if c not in ("HumanEval", "HumanEval+", "MBPP", "MBPP+", "LiveCodeBench"))
AVERAGES = ("code avg", "math avg", "overall")


def read_scores(run_dirs: Sequence[str | Path]) -> tuple[list[dict], dict[str, dict]]:
    """All score rows of the runs (base rows once) and each run's provenance."""
    rows, provs, seen = [], {}, set()
    for r in run_dirs:
        path = Path(r) / "eval" / "scores.json"
        if not path.is_file():
            raise FileNotFoundError(f"{path}: missing; run `populora eval --runs {r}` first")
        data = json.loads(path.read_text())
        provs[Path(r).name] = data["provenance"]
        for row in data["rows"]:
            ident = (row["key"], row["column"])
            if ident not in seen:
                seen.add(ident)
                rows.append(row)
    return rows, provs


def _mean(xs):
    xs = [x for x in xs if x is not None]
    return sum(xs) / len(xs) if xs else None


def build_table(rows: Sequence[dict]) -> tuple[list[str], list[dict]]:
    """``(columns, table rows)``; a table row has ``label, run, role, member, kind`` and values."""
    columns = [c for c in ALL_COLUMNS if any(r["column"] == c for r in rows)]
    adapters: dict[str, dict] = {}
    for r in rows:
        a = adapters.setdefault(r["key"], {"run": r["run"], "role": r["role"], "member": r["member_id"], "kind": "adapter", "values": {}})
        a["values"][r["column"]] = r["value"]
    for a in adapters.values():
        v = a["values"]
        v["code avg"] = _mean(v.get(c) for c in CODE_COLUMNS if c in columns)
        v["math avg"] = _mean(v.get(c) for c in MATH_COLUMNS if c in columns)
        v["overall"] = _mean([v["code avg"], v["math avg"]])
        a["label"] = "base model" if a["role"] == "base" else f"{a['run']} / {a['role']} / {a['member']}"
    cols = columns + [c for c in AVERAGES if any(a["values"].get(c) is not None for a in adapters.values())]
    order = {"teacher": 0, "student": 1, "baseline": 2, "base": 3}
    table = sorted(adapters.values(), key=lambda a: (a["role"] == "base", a["run"], order[a["role"]], a["member"]))
    pop_runs = sorted({a["run"] for a in table if a["role"] in ("teacher", "student")})
    for run in pop_runs:
        members = [a for a in table if a["run"] == run and a["role"] in ("teacher", "student")]
        for stat, fn in (("mean", statistics.fmean), ("min", min), ("max", max),
                         ("std", lambda xs: statistics.pstdev(xs) if len(xs) > 1 else 0.0)):
            vals = {}
            for c in cols:
                xs = [m["values"][c] for m in members if m["values"].get(c) is not None]
                vals[c] = fn(xs) if xs else None
            table.append({"label": f"{run} / population {stat} (n={len(members)})", "run": run, "role": "population",
                          "member": stat, "kind": f"population_{stat}", "values": vals})
    return cols, table


def best_per_column(cols, table) -> dict[str, float]:
    best = {}
    for c in cols:
        xs = [t["values"].get(c) for t in table if t["kind"] == "adapter" and t["values"].get(c) is not None]
        if xs and min(xs) != max(xs):  # all tied: nothing to mark
            best[c] = max(xs)
    return best


def _fmt(x) -> str:
    return "-" if x is None else f"{100 * x:.1f}"


def _provenance_lines(provs: dict[str, dict]) -> list[str]:
    def strip(p):
        return {k: v for k, v in p.items() if k != "date"}

    distinct = {json.dumps(strip(p), sort_keys=True) for p in provs.values()}
    lines = []
    if len(distinct) > 1:
        lines.append("WARNING: the runs were evaluated with different settings or data; compare with care.")
    for run, p in provs.items() if len(distinct) > 1 else [("all runs", next(iter(provs.values())))]:
        lines.append(f"{run}: model {p['model']}, template {p['template']}, {p['decoding']}, commit {p['commit']}, "
                     f"evaluated {p['date']}" + (f", first {p['limit']} items per benchmark" if p.get("limit") else ""))
        for b, d in p["data"].items():
            digest = d.get("sha256") or ", ".join(f"{f} {h[:12]}" for f, h in d.get("files", {}).items())
            window = f", window {d['window'][0]}..{d['window'][1]}" if d.get("window") else ""
            lines.append(f"  {b}: {d['version']} ({d['n_items']} items{window}), sha256 {digest[:16] if d.get('sha256') else digest}, "
                         f"max new tokens {p['max_new_tokens'].get(b)}")
    return lines


def chart_png(cols, table) -> bytes:
    """Population mean with min-max whiskers per benchmark, next to the baseline and the base model."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series = []  # (label, values, (low, high) or None)
    for t in table:
        if t["kind"] == "population_mean":
            lo = next(x for x in table if x["kind"] == "population_min" and x["run"] == t["run"])
            hi = next(x for x in table if x["kind"] == "population_max" and x["run"] == t["run"])
            series.append((f"{t['run']} (population mean, min-max)", t["values"], (lo["values"], hi["values"])))
    for t in table:
        if t["role"] in ("baseline", "base"):
            series.append((t["label"], t["values"], None))
    fig, ax = plt.subplots(figsize=(max(6, 0.9 * len(cols) * max(1, len(series))), 4))
    width = 0.8 / max(1, len(series))
    for k, (label, vals, whisk) in enumerate(series):
        xs = [i + (k - (len(series) - 1) / 2) * width for i in range(len(cols))]
        ys = [100 * (vals.get(c) or 0.0) for c in cols]
        err = None
        if whisk:
            lo, hi = whisk
            err = [[max(0.0, y - 100 * (lo.get(c) or 0.0)) for y, c in zip(ys, cols)],
                   [max(0.0, 100 * (hi.get(c) or 0.0) - y) for y, c in zip(ys, cols)]]
        ax.bar(xs, ys, width, yerr=err, capsize=3, label=label)
    ax.set_xticks(range(len(cols)))
    ax.set_xticklabels(cols, rotation=30, ha="right")
    ax.set_ylabel("pass@1 / accuracy (%)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    plt.close(fig)
    return buf.getvalue()


def write_leaderboard(run_dirs: Sequence[str | Path], out: str | Path) -> dict[str, Path]:
    rows, provs = read_scores(run_dirs)
    cols, table = build_table(rows)
    best = best_per_column(cols, table)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    prov_lines = _provenance_lines(provs)

    def cell(t, c, bold):
        x = t["values"].get(c)
        s = _fmt(x)
        return bold(s) if t["kind"] == "adapter" and x is not None and x == best.get(c) else s

    md = ["# Leaderboard", "", "Greedy pass@1 / accuracy in %. Best adapter value per column in bold.", "",
          "| adapter | " + " | ".join(cols) + " |", "|---|" + "---:|" * len(cols)]
    md += ["| " + t["label"] + " | " + " | ".join(cell(t, c, lambda s: f"**{s}**") for c in cols) + " |" for t in table]
    md += ["", "## Provenance", "", "```", *prov_lines, "```", ""]
    paths = {"md": out / "leaderboard.md", "csv": out / "leaderboard.csv", "html": out / "leaderboard.html", "png": out / "leaderboard.png"}
    paths["md"].write_text("\n".join(md))

    with open(paths["csv"], "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["run", "role", "member", "kind", *cols])
        for t in table:
            w.writerow([t["run"], t["role"], t["member"], t["kind"], *("" if t["values"].get(c) is None else f"{t['values'][c]:.6f}" for c in cols)])

    png = chart_png(cols, table)
    paths["png"].write_bytes(png)
    head = "".join(f"<th>{html.escape(c)}</th>" for c in cols)
    body = "".join(
        f"<tr class='{t['kind']}'><td>{html.escape(t['label'])}</td>" + "".join(f"<td>{cell(t, c, lambda s: f'<b>{s}</b>')}</td>" for c in cols) + "</tr>"
        for t in table
    )
    page = f"""<!doctype html><html><head><meta charset="utf-8"><title>PopuLoRA leaderboard</title>
<style>body{{font-family:sans-serif}} td,th{{padding:2px 8px;text-align:right}} td:first-child{{text-align:left}}
tr[class^=population]{{background:#eef}} b{{color:#070}}</style></head><body>
<h1>Leaderboard</h1><p>Greedy pass@1 / accuracy in %. Best adapter value per column in bold.</p>
<table><tr><th>adapter</th>{head}</tr>{body}</table>
<h2>Population mean (min-max) vs baseline and base model</h2>
<img alt="bar chart" src="data:image/png;base64,{base64.b64encode(png).decode()}">
<h2>Provenance</h2><pre>{html.escape(chr(10).join(prov_lines))}</pre></body></html>
"""
    paths["html"].write_text(page)
    return paths

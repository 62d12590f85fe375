"""Leaderboards from the score files of runs: Markdown, CSV, HTML and PNG figures.

The page, top to bottom (every table captioned with its decoding, seeds, benchmark versions and item
counts, and LiveCodeBench's release and date window: ``eval.leaderboard.labels``):

1. the claims (``eval.leaderboard.claims``): across-seed tables (mean over seeds of the population mean and of the
   best member, the baseline, the base model, with 95% t intervals across seeds), the paired
   comparison of every population configuration with the baseline (difference, interval,
   p-value; table and forest plot) and the pass@k curves of a sampled evaluation;
2. the per-run table: rows grouped by run (the run's members, right after them the population's mean,
   min, max and std, then the run's single-agent baseline); the base model closes the table as the
   reference, labelled with its model and the runs it was evaluated with. Columns are the
   benchmarks' metrics (each with its item count), then three averages over complete groups only:
   code avg (HumanEval+, MBPP+, LiveCodeBench, shown only when a row has all of them), math avg (the
   seven math sets, only when all seven are there), overall (the mean of the two, as AZR reports it,
   only when both exist). Missing values are blank, never 0. Every adapter cell carries its 95%
   Wilson interval. The best adapter value of a column is bold unless all tie. Below it, a chart with
   one panel per benchmark: population members as points with their mean and min marked, baseline
   and base model as horizontal lines;
3. the provenance: engine, decoding, library versions, scorer limits, data versions and checksums,
   stop strings and token budgets, each run's training state and members.

Files: ``leaderboard.md``, ``.html``, ``.csv`` (per-run table), ``.png`` (chart), ``seeds.csv``,
``paired.csv``, ``passk.csv``, ``claims.json`` and ``passk-<family>.png`` (sampled evaluations).
"""

from __future__ import annotations

import base64
import csv
import html
import json
import statistics
from collections.abc import Sequence
from pathlib import Path

from eval.leaderboard.claims import (
    build_claims,
    claims_html,
    claims_markdown,
    render_figures,
    write_claims_files,
)
from eval.leaderboard.columns import ALL_COLUMNS, AVERAGE_RULE, AVERAGES, GROUPS, group_average

__all__ = ["ALL_COLUMNS", "AVERAGES", "AVERAGE_RULE", "GROUPS", "build_table", "read_scores", "write_leaderboard"]
ROLE_ORDER = {"teacher": 0, "student": 1, "population": 2, "baseline": 3}


def read_scores(run_dirs: Sequence[str | Path]) -> tuple[list[dict], dict[str, dict]]:
    """All score rows of the runs and each run's provenance. The base model's rows are kept once per
    (model, values): runs that evaluated the same base the same way share one base row, which lists them."""
    rows, provs, keys, base_runs, seen = [], {}, {}, {}, set()
    for r in run_dirs:
        path = Path(r) / "eval" / "scores.json"
        if not path.is_file():
            raise FileNotFoundError(f"{path}: missing; run `populora eval --runs {r}` first")
        try:
            data = json.loads(path.read_text())
            prov, run_rows = data["provenance"], data["rows"]
        except (json.JSONDecodeError, KeyError, TypeError) as e:
            raise ValueError(f"{path}: not a score file of `populora eval` ({e!r})") from e
        run, model = Path(r).name, prov.get("model")
        provs[run] = prov
        fingerprint = json.dumps(sorted((x["column"], x["value"]) for x in run_rows if x["role"] == "base"))
        key = keys.setdefault((model, fingerprint), f"base:{model}#{len(keys)}")
        base_runs.setdefault(key, []).append(run)
        for x in run_rows:
            if x["role"] == "base":
                if (key, x["column"]) in seen:
                    continue
                seen.add((key, x["column"]))
                x = {**x, "key": key, "run": "-", "model": model}
            rows.append(x)
    for x in rows:
        if x["role"] == "base":
            x["base_runs"] = base_runs[x["key"]]
    return rows, provs


def build_table(rows: Sequence[dict]) -> tuple[list[str], list[dict]]:
    """``(columns, table rows)``; a table row has ``label, run, role, member, kind, values, ci, n``."""
    columns = [c for c in ALL_COLUMNS if any(r["column"] == c for r in rows)]
    adapters: dict[str, dict] = {}
    for r in rows:
        a = adapters.setdefault(r["key"], {"run": r["run"], "role": r["role"], "member": r["member_id"], "kind": "adapter",
                                           "values": {}, "ci": {}, "n": {}, "base_runs": r.get("base_runs"),
                                           "model": r.get("model")})
        a["values"][r["column"]] = r["value"]
        a["n"][r["column"]] = r.get("n")
        if r.get("ci95"):
            a["ci"][r["column"]] = tuple(r["ci95"])
    for a in adapters.values():
        v = a["values"]
        v["code avg"] = group_average(v, GROUPS["code"])
        v["math avg"] = group_average(v, GROUPS["math"])
        v["overall"] = None if v["code avg"] is None or v["math avg"] is None else (v["code avg"] + v["math avg"]) / 2
        if a["role"] == "base":
            a["label"] = f"base model {a['model']}"
            a["note"] = f"base model {a['model']}, evaluated with run {', '.join(a['base_runs'])}"
        else:
            a["label"] = f"{a['member']} ({a['role']})"
    cols = columns + [c for c in AVERAGES if any(a["values"].get(c) is not None for a in adapters.values())]
    table: list[dict] = []
    # population runs first, then single-agent (baseline) runs, each alphabetically
    runs = sorted({a["run"] for a in adapters.values() if a["role"] != "base"},
                  key=lambda r: (not any(a["run"] == r and a["role"] in ("teacher", "student") for a in adapters.values()), r))
    for run in runs:
        mine = sorted((a for a in adapters.values() if a["run"] == run), key=lambda a: (ROLE_ORDER[a["role"]], a["member"]))
        members = [a for a in mine if a["role"] in ("teacher", "student")]
        table.extend(members)
        if members:
            table.extend(_population_rows(run, members, cols))
        table.extend(a for a in mine if a["role"] == "baseline")
    table.extend(sorted((a for a in adapters.values() if a["role"] == "base"), key=lambda a: a["note"]))
    return cols, table


def _population_rows(run: str, members: list[dict], cols: Sequence[str]) -> list[dict]:
    out = []
    for stat, fn in (("mean", statistics.fmean), ("min", min), ("max", max),
                     ("std", lambda xs: statistics.pstdev(xs) if len(xs) > 1 else 0.0)):
        vals = {}
        for c in cols:
            xs = [m["values"].get(c) for m in members]
            vals[c] = None if any(x is None for x in xs) else fn(xs)  # a missing member value: blank
        out.append({"label": f"population {stat} (n={len(members)})", "run": run, "role": "population", "member": stat,
                    "kind": f"population_{stat}", "values": vals, "ci": {}, "n": {}})
    return out


def best_per_column(cols, table) -> dict[str, float]:
    best = {}
    for c in cols:
        xs = [t["values"].get(c) for t in table if t["kind"] == "adapter" and t["values"].get(c) is not None]
        if xs and min(xs) != max(xs):  # all tied: nothing to mark
            best[c] = max(xs)
    return best


def column_counts(cols, table) -> dict[str, str]:
    """Item count per column ("164", or "4-164" when runs were evaluated on different slices)."""
    out = {}
    for c in cols:
        ns = {t["n"].get(c) for t in table if t["kind"] == "adapter" and t["n"].get(c) is not None}
        out[c] = "" if not ns else (str(next(iter(ns))) if len(ns) == 1 else f"{min(ns)}-{max(ns)}")
    return out


def _fmt(x) -> str:
    return "" if x is None else f"{100 * x:.1f}"


def _provenance_lines(provs: dict[str, dict]) -> list[str]:
    def strip(p):
        return {k: v for k, v in p.items() if k not in ("date", "runs")}

    distinct = {json.dumps(strip(p), sort_keys=True) for p in provs.values()}
    lines = []
    if len(distinct) > 1:
        lines.append("WARNING: the runs were evaluated with different settings or data; compare with care.")
    shared = len(distinct) == 1
    for run, p in ([("all runs", next(iter(provs.values())))] if shared else list(provs.items())):
        lines.append(f"{run}: model {p['model']}, backend {p.get('backend', '?')}, dtype {p.get('dtype', '?')}, "
                     f"template {p['template']}, {p['decoding']}, commit {p['commit']}, evaluated {p['date']}"
                     + (f", first {p['limit']} items per benchmark" if p.get("limit") else ""))
        libs = p.get("libraries") or {}
        if libs:
            lines.append("  libraries: " + ", ".join(f"{k} {v}" for k, v in libs.items() if v))
        sc = p.get("scorers") or {}
        if "evalplus" in sc:
            e = sc["evalplus"]
            lines.append(f"  EvalPlus: {e['parallel']} workers, time limit max({e['min_time_limit_s']} s, "
                         f"{e['gt_time_limit_factor']} x canonical), {e['max_memory_gb']} GiB per test process")
        if "livecodebench" in sc:
            lines.append(f"  LiveCodeBench: {sc['livecodebench']['test_timeout_s']} s per test (LCB's alarm)")
        for b, d in p["data"].items():
            digest = d.get("sha256") or ", ".join(f"{f} {h[:12]}" for f, h in d.get("files", {}).items())
            window = f", window {d['window'][0]}..{d['window'][1]} (inclusive)" if d.get("window") else ""
            if d.get("n_total") is not None:
                window += f", {d['n_total']} {'problems in the release and window' if d.get('window') else 'in the benchmark'}"
            stops = (p.get("stop") or {}).get(b)
            lines.append(f"  {b}: {d['version']} ({d['n_items']} items{window}), sha256 {digest[:16] if d.get('sha256') else digest}, "
                         f"max new tokens {p['max_new_tokens'].get(b)}" + (f", stop {stops!r}" if stops is not None else ""))
            lines.extend(f"  WARNING: {w}" for w in d.get("warnings") or [])
    for run, p in provs.items():
        info = (p.get("runs") or {}).get(run)
        if not info:
            continue
        cfg = (info.get("config_sha256") or "")[:12]
        seed = f", seed {info['seed']}" if info.get("seed") is not None else ""
        lines.append(f"run {run}: trained {info.get('steps_done')} steps ({info.get('status')}), config sha256 {cfg or '-'}{seed}")
        for mid, m in info.get("members", {}).items():
            lines.append(f"  {mid}: born at step {m.get('born_step')}, operator {m.get('operator')}, "
                         f"LoRA rank {m.get('rank')}, alpha {m.get('alpha')}")
    return lines


_CSS = """body{font-family:system-ui,sans-serif;margin:16px;max-width:1368px}
table{border-collapse:collapse;font-size:12px;width:100%}
th,td{padding:2px 5px;text-align:right;border-bottom:1px solid #e4e4e4}
th{font-weight:600;vertical-align:bottom;background:#f6f6f6}
td{white-space:nowrap}
td:first-child,th:first-child{text-align:left}
tr.run td{background:#e8eef8;font-weight:600;text-align:left}
tr[class^=population] td{background:#f2f2fb;color:#333}
tr.base td{background:#f7f7f0}
b{color:#070}
.ci{display:block;color:#888;font-size:10px}
.n{display:block;color:#888;font-weight:400;font-size:10px}
img{max-width:100%}
caption{caption-side:top;text-align:left;font-size:11px;color:#444;padding:4px 0;white-space:normal}
table.claims{margin-bottom:14px}
table.claims td:first-child b{color:#111}
#paired td:last-child{white-space:normal;color:#666}
#paired td:nth-child(2),#paired th:nth-child(2),#paired td:last-child,#paired th:last-child{text-align:left}
tr.population_mean td{background:#f2f2fb}
tr.baseline td{background:#fbf3e8}
figure{margin:8px 0 18px 0}
figcaption{font-size:11px;color:#444;max-width:1000px}
svg{max-width:100%;height:auto}
p.labels,p.note{font-size:12px;color:#333}
pre{white-space:pre-wrap;font-size:11px;background:#fafafa;padding:8px}
p.rule{font-size:12px;color:#444}"""


def write_leaderboard(run_dirs: Sequence[str | Path], out: str | Path, *, seed_key: str = "seed") -> dict[str, Path]:
    """Write every leaderboard file of ``run_dirs`` into ``out``; returns their paths by kind."""
    rows, provs = read_scores(run_dirs)
    claims = build_claims(run_dirs, rows, provs, seed_key=seed_key)
    cols, table = build_table(rows)
    best = best_per_column(cols, table)
    counts = column_counts(cols, table)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    prov_lines = _provenance_lines(provs)
    from eval.leaderboard.figures import chart_png

    png = chart_png(cols, table)
    render_figures(claims)

    def is_best(t, c):
        x = t["values"].get(c)
        return t["kind"] == "adapter" and x is not None and x == best.get(c)

    def head(c):
        return f"{c} (n={counts[c]})" if counts.get(c) else c

    metric = "pass@1" if claims.max_k == 1 else f"pass@1 (avg@{claims.max_k})"
    intro = f"{metric} / accuracy in %. Best adapter value per column in bold; blank = not evaluated."
    md = ["# Leaderboard", "", f"*{claims.caption}*", "", *claims_markdown(claims), "## Per run", "", intro, "",
          f"*{claims.caption}*", "", "| adapter | " + " | ".join(head(c) for c in cols) + " |", "|---|" + "---:|" * len(cols)]
    current = None
    for t in table:
        if t["role"] != "base" and t["run"] != current:
            current = t["run"]
            md.append(f"| **run {current}** |" + " |" * len(cols))
        md.append("| " + t.get("note", t["label"]) + " | " + " | ".join(f"**{_fmt(t['values'].get(c))}**" if is_best(t, c)
                                                        else _fmt(t["values"].get(c)) for c in cols) + " |")
    md += ["", AVERAGE_RULE, "", "## Provenance", "", "```", *prov_lines, "```", ""]
    paths = {"md": out / "leaderboard.md", "csv": out / "leaderboard.csv", "html": out / "leaderboard.html",
             "png": out / "leaderboard.png"}
    paths["md"].write_text("\n".join(md))

    with open(paths["csv"], "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["run", "role", "member", "kind", *[x for c in cols for x in (c, f"{c} ci95 low", f"{c} ci95 high", f"{c} n")]])
        for t in table:
            cells = []
            for c in cols:
                v, ci = t["values"].get(c), t["ci"].get(c)
                cells += ["" if v is None else f"{v:.6f}", "" if not ci else f"{ci[0]:.6f}", "" if not ci else f"{ci[1]:.6f}",
                          t["n"].get(c) or ""]
            w.writerow([t["run"], t["role"], t["member"], t["kind"], *cells])
    paths["png"].write_bytes(png)
    paths.update(write_claims_files(claims, out))

    def cell(t, c):
        v = t["values"].get(c)
        if v is None:
            return "<td></td>"
        text = f"<b>{_fmt(v)}</b>" if is_best(t, c) else _fmt(v)
        ci = t["ci"].get(c)
        if ci:
            text += f"<span class='ci'>{_fmt(ci[0])}&ndash;{_fmt(ci[1])}</span>"
        return f"<td title='{html.escape(c)}: {_fmt(v)}%'>{text}</td>"

    thead = "".join(f"<th>{html.escape(c)}" + (f"<span class='n'>n={counts[c]}</span>" if counts.get(c) else "") + "</th>"
                    for c in cols)
    body, current = [], None
    for t in table:
        if t["role"] != "base" and t["run"] != current:
            current = t["run"]
            body.append(f"<tr class='run'><td colspan='{len(cols) + 1}'>run {html.escape(current)}</td></tr>")
        elif t["role"] == "base":
            current = "-"
            body.append(f"<tr class='run'><td colspan='{len(cols) + 1}'>reference: {html.escape(t['note'])}</td></tr>")
        body.append(f"<tr class='{t['kind'] if t['role'] != 'base' else 'base'}'><td>{html.escape(t['label'])}</td>"
                    + "".join(cell(t, c) for c in cols) + "</tr>")
    page = f"""<!doctype html><html><head><meta charset="utf-8"><title>PopuLoRA leaderboard</title>
<style>{_CSS}</style></head><body>
<h1>Leaderboard</h1><p class="labels">{html.escape(claims.caption)}</p>
{claims_html(claims)}
<h2>Per run</h2><p>{intro} Second line of a cell: 95% Wilson interval.</p>
<table id="leaderboard"><caption>{html.escape(claims.caption)}</caption><thead><tr><th>adapter</th>{thead}</tr></thead>
<tbody>{''.join(body)}</tbody></table>
<p class="rule">{html.escape(AVERAGE_RULE)}</p>
<h2>Per benchmark: population members, mean and min vs baseline and base model</h2>
<img id="chart" alt="small multiples: one panel per benchmark" src="data:image/png;base64,{base64.b64encode(png).decode()}">
<h2>Provenance</h2><pre>{html.escape(chr(10).join(prov_lines))}</pre></body></html>
"""
    paths["html"].write_text(page)
    return paths

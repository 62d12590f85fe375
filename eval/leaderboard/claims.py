"""The leaderboard's statistical sections, the ones a paper's claims rest on: across-seed tables,
the paired comparison against the baseline, and the pass@k curves; built once (:func:`build_claims`)
and written as Markdown, HTML, CSV and JSON.

- across seeds (``eval.leaderboard.seeds``): per configuration, the mean over seeds of the population mean and of
  the best member, the baseline and the base model, each with its 95% Student-t interval across
  seeds; at pass@1 (greedy, or avg@N) and, for a sampled evaluation, at pass@N;
- paired (``eval.leaderboard.paired``): population mean minus baseline per benchmark and for the code and math
  averages, with the interval and p-value of ``eval.stats.paired_test``, as a table and a forest plot
  (a p-value about two runs only, one seed per arm, is marked and says so);
- pass@k (``eval.leaderboard.passk``): one figure per benchmark family (PNG, embedded in the HTML).

Every table carries its caption (``eval.leaderboard.labels``): decoding, seeds, benchmark versions and item
counts, LiveCodeBench's release and date window.
"""

from __future__ import annotations

import base64
import csv
import html
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from eval.leaderboard.columns import MAIN_COLUMNS
from eval.leaderboard.labels import caption, decoding_text, seeds_text
from eval.leaderboard.paired import ONE_SEED_MARK, Comparison, compare
from eval.leaderboard.passk import FAMILY_TITLES, Curve, curves, families
from eval.leaderboard.seeds import (
    AdapterScores,
    RunGroup,
    SeedRow,
    adapter_scores,
    group_runs,
    identify_runs,
    present_columns,
    seed_table,
)
from eval.stats import Interval

T_RULE = ("Mean over seeds; second line: 95% Student-t interval across seeds, mean ± t(0.975, s-1) · sd / √s over the "
          "s seeds' values, clipped to [0, 100] (population mean = mean over a run's members; best member = the run's highest member on that "
          "column, chosen on the same items, so optimistic). One seed: no interval exists. The base model has no "
          "training seed.")


PAIRED_RULE = ("Difference = population mean (over members) minus baseline, in points of pass@1, on the items every run of "
               "both was evaluated on. 95% interval and two-sided p from a linear mixed model of items and runs, paired by "
               "item: Var = (1/s_pop + 1/s_base) · s²(run means) + σ²(population × item) / items, method-of-moments "
               "estimates, Student t with Satterthwaite's df; the spread of the run means holds the item noise, counted "
               "once. Code / math avg: the mean of their benchmarks' differences. Not corrected for multiple comparisons.")
ONE_SEED_RULE = (f"{ONE_SEED_MARK} one seed per arm: the p-value is about these two runs on these items only, not about "
                 "the method (with one run of each, how runs of other seeds differ is not measured).")


def paired_rule(comparisons: Sequence[Comparison]) -> str:
    """The paired table's rule, with what † means when a row carries it."""
    runs_only = any(c.test is not None and c.test.about_runs for c in comparisons)
    return f"{PAIRED_RULE} {ONE_SEED_RULE}" if runs_only else PAIRED_RULE


@dataclass
class Claims:
    groups: list[RunGroup]
    columns: list[str]
    seed_tables: list[tuple[str, int | None, list[SeedRow]]]  # (title, k, rows)
    comparisons: list[Comparison]
    curves: dict[str, dict[str, list[Curve]]]  # family -> column -> curves
    max_k: int
    caption: str
    figure_caption: str  # the short form a figure carries: decoding and seeds (its panels name items)
    items: dict[str, str] = field(default_factory=dict)  # column -> item count ("40", or "4-40" if runs differ)
    figures: dict[str, bytes] = field(default_factory=dict)  # family -> PNG


def max_common_k(scores: Mapping[str, AdapterScores]) -> int:
    """The largest k that every adapter has on every column it was evaluated on (1 when greedy)."""
    ks = [max(pk) for a in scores.values() for pk in a.pass_at_k.values() if pk]
    return min(ks) if ks else 1


def build_claims(run_dirs: Sequence[str | Path], rows: Sequence[dict], provs: Mapping[str, dict], *,
                 seed_key: str = "seed") -> Claims:
    members: dict[str, dict[str, str]] = {}  # run -> member -> role, as evaluated
    for r in rows:
        if r["role"] != "base":
            members.setdefault(r["run"], {})[r["member_id"]] = r["role"]
    groups = group_runs(identify_runs(run_dirs, seed_key, {run: list(m.values()) for run, m in members.items()}))
    scores = adapter_scores(rows)
    cols = present_columns(scores)
    k = max_common_k(scores)
    tables = [("pass@1" if k == 1 else f"pass@1 (avg@{k})", None, seed_table(groups, scores, cols))]
    if k > 1:
        tables.append((f"pass@{k}", k, seed_table(groups, scores, cols, k)))
    main = [c for c in MAIN_COLUMNS if c in cols]
    comps = compare(groups, scores, main)
    fams = {fam: {c: curves(groups, scores, c) for c in fcols} for fam, fcols in families(main).items()} if k > 1 else {}
    short = f"{decoding_text(provs)}. {seeds_text(groups)}." if groups else f"{decoding_text(provs)}."
    counts = {c: sorted({a.n[c] for a in scores.values() if a.n.get(c)}) for c in cols}
    items = {c: (str(ns[0]) if len(ns) == 1 else f"{ns[0]}-{ns[-1]}") for c, ns in counts.items() if ns}
    return Claims(groups, cols, tables, comps, fams, k, caption(provs, cols, groups), short, items)


def render_figures(claims: Claims) -> dict[str, bytes]:
    from eval.leaderboard.figures import passk_png

    for fam, panels in claims.curves.items():
        claims.figures[fam] = passk_png(f"pass@k, {FAMILY_TITLES.get(fam, fam)}", panels, claims.figure_caption,
                                        claims.items)
    return claims.figures


# -- formatting -------------------------------------------------------------------------------------
def _pct(x: float | None, sign: bool = False) -> str:
    return "" if x is None else (f"{100 * x:+.1f}" if sign else f"{100 * x:.1f}")


def _p(p: float) -> str:
    return "< 0.001" if p < 0.001 else f"{p:.3f}"


def p_text(c: Comparison) -> str:
    """The p-value as the tables and the forest plot print it, marked when it is about the runs only."""
    return _p(c.test.p_value) + (f" {ONE_SEED_MARK}" if c.test.about_runs else "")


def _interval_text(iv: Interval | None) -> tuple[str, str]:
    """(value, second line): ``("34.2", "32.9–35.5")``, ``("34.2", "1 seed")`` or ``("", "")``."""
    if iv is None:
        return "", ""
    if iv.low is None:
        return _pct(iv.mean), ("no interval" if iv.n == 1 else "")
    return _pct(iv.mean), f"{_pct(iv.low)}–{_pct(iv.high)}"


def _seed_cell_md(iv: Interval | None, base: bool) -> str:
    value, second = _interval_text(iv)
    if not value or base:
        return value
    return f"{value} [{second}]" if iv.low is not None else f"{value} (1 seed)"


def _seeds_of(row: SeedRow) -> str:
    return "-" if row.group is None else str(len(row.group.runs))


def comparison_rows(claims: Claims) -> list[list[str]]:
    out = []
    for c in claims.comparisons:
        name = f"{c.config} − {c.baseline}"
        if c.test is None:
            out.append([name, c.column, "", "", "", "", "", f"no test: {c.reason}"])
            continue
        t = c.test
        items = str(sum(t.items)) if len(t.items) == 1 else f"{sum(t.items)} ({len(t.items)} benchmarks)"
        out.append([name, c.column, _pct(t.difference, True), f"[{_pct(t.low, True)}, {_pct(t.high, True)}]", p_text(c),
                    items, f"{t.seeds_a} / {t.seeds_b}", c.note])
    return out


PAIRED_HEAD = ["population − baseline", "benchmark", "Δ pass@1 (points)", "95% CI", "p", "items", "seeds (pop / base)", "note"]


def claims_markdown(claims: Claims) -> list[str]:
    md = []
    for title, _k, rows in claims.seed_tables:
        md += [f"## Across seeds: {title} in %", "", f"*{claims.caption} {T_RULE}*", "",
               "| configuration | seeds | " + " | ".join(claims.columns) + " |", "|---|---:|" + "---:|" * len(claims.columns)]
        for r in rows:
            md.append(f"| {r.label} | {_seeds_of(r)} | "
                      + " | ".join(_seed_cell_md(r.cells.get(c), r.group is None) for c in claims.columns) + " |")
        md.append("")
    md += ["## Population vs baseline: paired differences", "",
           f"*{claims.caption} {paired_rule(claims.comparisons)}*", ""]
    if claims.comparisons:
        md += ["| " + " | ".join(PAIRED_HEAD) + " |", "|---|---|---:|---:|---:|---:|---:|---|"]
        md += ["| " + " | ".join(r) + " |" for r in comparison_rows(claims)]
    else:
        md.append("No population configuration to compare (the leaderboard has no population runs).")
    md += ["", "## pass@k", ""]
    if claims.figures:
        md += [f"![pass@k, {FAMILY_TITLES.get(f, f)}](passk-{f}.png)" for f in claims.figures]
        md += ["", f"*{claims.caption} Lines: mean over seeds; bands: 95% t interval across seeds; best member = the "
                   "highest member at each k.*"]
    else:
        md.append("Greedy evaluation (one sample per item): pass@k for k > 1 needs `populora eval --samples N`.")
    return md + [""]


def claims_html(claims: Claims) -> str:
    from eval.leaderboard.figures import forest_svg

    parts = []
    for title, k, rows in claims.seed_tables:
        tid = "seeds" if k is None else f"seeds-pass{k}"
        head = "".join(f"<th>{html.escape(c)}</th>" for c in claims.columns)
        body = []
        for r in rows:
            cells = []
            for c in claims.columns:
                value, second = _interval_text(r.cells.get(c))
                second = "" if r.group is None else second  # the base model: no seeds, nothing to say per cell
                cells.append(f"<td>{value}<span class='ci'>{html.escape(second)}</span></td>" if value else "<td></td>")
            kind = "base" if r.group is None else ("baseline" if r.group.baseline else "population_mean"
                                                   if r.stat == "population mean" else "best")
            seeds = "no training seed" if r.group is None else f"{len(r.group.runs)} seed{'s' if len(r.group.runs) > 1 else ''}"
            what = "" if r.group is None or (r.group.baseline and r.label == r.config) else f"{r.stat}, "
            body.append(f"<tr class='{kind}'><td><b>{html.escape(r.config if r.group else r.label)}</b>"
                        f"<span class='ci'>{html.escape(what + seeds)}</span></td>{''.join(cells)}</tr>")
        parts.append(f"<h2>Across seeds: {html.escape(title)} in %</h2>")
        parts.append(f"<table id='{tid}' class='claims'><caption>{html.escape(claims.caption)} {html.escape(T_RULE)}</caption>"
                     f"<thead><tr><th>configuration</th>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>")
    parts.append("<h2>Population vs baseline: paired differences</h2>")
    cap = f"{claims.caption} {paired_rule(claims.comparisons)}"
    if claims.comparisons:
        body = "".join(("<tr class='one-seed'>" if c.test is not None and c.test.about_runs else "<tr>")
                       + "".join(f"<td>{html.escape(x)}</td>" for x in r) + "</tr>"
                       for c, r in zip(claims.comparisons, comparison_rows(claims)))
        parts.append(f"<table id='paired' class='claims'><caption>{html.escape(cap)}</caption><thead><tr>"
                     + "".join(f"<th>{html.escape(h)}</th>" for h in PAIRED_HEAD) + f"</tr></thead><tbody>{body}</tbody></table>")
        svg = forest_svg(claims.comparisons)
        if svg:
            parts.append(f"<figure class='forest'>{svg}<figcaption>Forest plot of the table above: {html.escape(cap)}"
                         "</figcaption></figure>")
    else:
        parts.append("<p class='note'>No population configuration to compare (no population runs).</p>")
    parts.append("<h2>pass@k</h2>")
    if claims.figures:
        for fam, png in claims.figures.items():
            parts.append(f"<figure class='passk'><img id='passk-{fam}' alt='pass@k against k, {html.escape(FAMILY_TITLES.get(fam, fam))}' "
                         f"src='data:image/png;base64,{base64.b64encode(png).decode()}'><figcaption>{html.escape(claims.caption)} "
                         "Lines: mean over seeds; bands: 95% t interval across seeds; best member = the highest member at "
                         "each k.</figcaption></figure>")
    else:
        parts.append("<p class='note'>Greedy evaluation (one sample per item): pass@k for k &gt; 1 needs "
                     "<code>populora eval --samples N</code>.</p>")
    return "\n".join(parts)


def write_claims_files(claims: Claims, out: Path) -> dict[str, Path]:
    """``seeds.csv``, ``paired.csv``, ``passk.csv``, ``claims.json`` and ``passk-<family>.png``."""
    paths = {"seeds_csv": out / "seeds.csv", "paired_csv": out / "paired.csv", "passk_csv": out / "passk.csv",
             "claims_json": out / "claims.json"}
    with open(paths["seeds_csv"], "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["metric", "configuration", "statistic", "column", "mean", "ci95 low", "ci95 high", "seeds", "per seed"])
        for title, _k, rows in claims.seed_tables:
            for r in rows:
                for c in claims.columns:
                    iv = r.cells.get(c)
                    if iv is not None:
                        w.writerow([title, r.config, r.stat, c, f"{iv.mean:.6f}", "" if iv.low is None else f"{iv.low:.6f}",
                                    "" if iv.high is None else f"{iv.high:.6f}", iv.n,
                                    " ".join(f"{x:.6f}" for x in r.per_seed.get(c, []))])
    with open(paths["paired_csv"], "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["configuration", "baseline", "column", "difference", "ci95 low", "ci95 high", "p", "se", "df", "items",
                    "seeds pop", "seeds baseline", "p about", "note"])
        for c in claims.comparisons:
            t = c.test
            w.writerow([c.config, c.baseline, c.column, *([""] * 10 if t is None else
                        [f"{t.difference:.6f}", f"{t.low:.6f}", f"{t.high:.6f}", f"{t.p_value:.6f}", f"{t.se:.6f}",
                         f"{t.df:.2f}", sum(t.items), t.seeds_a, t.seeds_b,
                         "these runs on these items" if t.about_runs else "the methods"]), c.note or c.reason])
    with open(paths["passk_csv"], "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["family", "column", "curve", "k", "mean", "ci95 low", "ci95 high", "seeds"])
        for fam, panels in claims.curves.items():
            for col, cs in panels.items():
                for cv in cs:
                    for k, iv in sorted(cv.points.items()):
                        w.writerow([fam, col, cv.label, k, f"{iv.mean:.6f}", "" if iv.low is None else f"{iv.low:.6f}",
                                    "" if iv.high is None else f"{iv.high:.6f}", iv.n])
    data = {
        "caption": claims.caption, "columns": claims.columns, "max_k": claims.max_k,
        "groups": [{"config": g.config, "baseline": g.baseline, "runs": g.runs, "seeds": g.seeds} for g in claims.groups],
        "seed_tables": [{"metric": title, "k": k, "rows": [
            {"label": r.label, "config": r.config, "statistic": r.stat, "per_seed": r.per_seed,
             "cells": {c: None if iv is None else iv.to_json() for c, iv in r.cells.items()}} for r in rows]}
            for title, k, rows in claims.seed_tables],
        "paired": {"method": paired_rule(claims.comparisons),
                   "comparisons": [c.to_json() for c in claims.comparisons]},
        "passk": {fam: {col: [{"label": cv.label, "kind": cv.kind, "config": cv.config,
                               "points": {str(k): iv.to_json() for k, iv in sorted(cv.points.items())}} for cv in cs]
                        for col, cs in panels.items()} for fam, panels in claims.curves.items()},
    }
    paths["claims_json"].write_text(json.dumps(data, indent=1) + "\n")
    for fam, png in claims.figures.items():
        paths[f"passk_{fam}"] = out / f"passk-{fam}.png"
        paths[f"passk_{fam}"].write_bytes(png)
    return paths


"""``populora report``: one self-contained HTML page comparing runs side by side.

Every figure is a matplotlib PNG written into ``<report>_files/`` next to the page and embedded in
the page as base64, so the HTML file alone can be mailed around. The numbers behind the
complexity and coverage figures go to ``<report>_files/data.json``, and the CVT centroids used to
``<report>_files/coverage_centroids.npy`` (pass them back with ``--centroids`` to compare a later
report cell for cell). How to read each figure: ``docs/diagnostics.md``.
"""

from __future__ import annotations

import base64
import html
import io
import json
import os
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from populora.diagnostics import lineage, plots
from populora.diagnostics.coverage import (
    DEFAULT_CELLS,
    DEFAULT_SEED,
    DESCRIPTOR_BOUNDS,
    Coverage,
    load_centroids,
    save_centroids,
)
from populora.diagnostics.runs import Run, load_run
from populora.tasks.complexity import FEATURES, complexity_metrics, mean_features

CAPTIONS = {
    "solve_rates": "Student solve rate (top) and teacher valid rate (bottom) per task type. A single agent "
                   "that self-calibrates drifts towards solve rate 1 (it proposes what it can solve); an arms "
                   "race keeps student solve rates away from 0 and 1, oscillating as teachers adapt.",
    "complexity": "Mean complexity of the valid programs proposed at each step (AST depth, McCabe cyclomatic "
                  "complexity, lines of code, distinct variables, cognitive complexity); dotted: the seed tasks' mean. "
                  "Rising curves: teachers write harder programs; falling: the proposer simplifies to stay "
                  "solvable.",
    "coverage": "Cumulative fraction of the CVT archive's cells holding at least one valid program (same "
                "centroids and descriptor bounds for every run), and the cells first reached at each step. "
                "Expanding coverage means new kinds of programs keep appearing; a plateau means stagnation.",
    "ratings": "TrueSkill mu of every member (band: +-sigma; red teachers, blue students) and the role means "
               "(dashed). Members differentiating (spreading mu) is the signature of an arms race.",
    "rating_spread": "Standard deviation of mu across the live members of each role.",
    "entropy_length": "Completion tokens per trained sequence and the policy entropy at sampled positions, per role. "
                      "Collapse shows as shrinking responses and entropy.",
    "lineage": "Family tree: each member is a bar over its life in its slot (x = step); arrows go from each "
               "parent, at the child's birth, to the child, coloured by the operator that made it.",
    "retention": "Reward of one member after its weights were replaced by a child made by each operator, "
                 "trained under identical conditions; the parent continuing (black) and the controls "
                 "copy_parent and linear_0_5 (dashed) are the references. Children that recover the parent's "
                 "reward within a few steps retain its skill.",
}


@dataclass
class Report:
    html: Path
    folder: Path
    figures: dict[str, Path]
    data: dict


def _unique_names(runs: list[Run]) -> None:
    seen: dict[str, int] = defaultdict(int)
    for r in runs:
        seen[r.name] += 1
    for r in runs:
        if seen[r.name] > 1:
            r.name = f"{r.name} ({r.path.name})"


def complexity_per_step(run: Run) -> dict[int, dict[str, float]]:
    by_step: dict[int, list[str]] = defaultdict(list)
    for t in run.tasks:
        by_step[t.step].append(t.program)
    return {s: f for s, progs in sorted(by_step.items()) if (f := mean_features(progs))}


def complexity_by_role_type(run: Run) -> dict[int, dict[str, float]]:
    """``{step: {complexity/<role>/<type>/<feature>: mean}}``, the names the step loop would log."""
    by_step: dict[int, list] = defaultdict(list)
    for t in run.tasks:
        by_step[t.step].append(t)
    return {s: complexity_metrics(ts, run.role_of) for s, ts in sorted(by_step.items())}


def complexity_by_type(run: Run) -> dict[str, dict[str, float]]:
    by_type: dict[str, list[str]] = defaultdict(list)
    for t in run.tasks:
        by_type[t.type].append(t.program)
        by_type["all"].append(t.program)
    out = {tt: {"tasks": len(p), **mean_features(p)} for tt, p in sorted(by_type.items())}
    if run.seed_tasks:
        out["seed tasks"] = {"tasks": len(run.seed_tasks), **mean_features(t.program for t in run.seed_tasks)}
    return out


def load_retention(run: Run) -> dict | None:
    f = run.retention_dir / "retention.json"
    if not f.is_file():
        return None
    try:
        return json.loads(f.read_text())
    except json.JSONDecodeError as e:
        raise ValueError(f"{f}: invalid JSON ({e})") from e


def _png(fig, path: Path) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plots.plt.close(fig)
    data = buf.getvalue()
    path.write_bytes(data)
    return base64.b64encode(data).decode("ascii")


def _table(rows: list[dict], columns: list[str] | None = None) -> str:
    if not rows:
        return "<p><i>none</i></p>"
    columns = columns or list(dict.fromkeys(k for r in rows for k in r))  # every key, first-seen order
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in columns)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(_fmt(r.get(c)))}</td>" for c in columns) + "</tr>"
                   for r in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _fmt(v) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        return f"{v:.3g}"
    return str(v)


def _examples_html(run: Run, max_steps: int) -> str:
    by_step: dict[int, list[dict]] = defaultdict(list)
    for e in run.examples:
        by_step[int(e["step"])].append(e)
    steps = sorted(by_step)
    if max_steps < 2:
        steps = steps[-1:] if max_steps == 1 else []
    elif len(steps) > max_steps:  # evenly spaced, always the first and the last step
        idx = sorted({round(i * (len(steps) - 1) / (max_steps - 1)) for i in range(max_steps)})
        steps = [steps[i] for i in idx]
    parts = []
    for s in steps:
        items = []
        for e in by_step[s]:
            if e.get("valid"):
                solved = f"{e.get('student_correct', 0)}/{e.get('student_attempts', 0)} solved"
                io_ = f"input {e.get('input')!r} -> output {e.get('output')!r}"
                items.append(f"<li><b>{html.escape(str(e.get('teacher')))}</b> {html.escape(e['type'])} "
                             f"({html.escape(solved)})<pre>{html.escape(e.get('program', ''))}</pre>"
                             f"<small>{html.escape(io_[:400])}</small></li>")
            else:
                items.append(f"<li><b>{html.escape(str(e.get('teacher')))}</b> {html.escape(str(e.get('type')))}: "
                             f"rejected ({html.escape(str(e.get('reason')))})</li>")
        parts.append(f"<h4>step {s}</h4><ul>{''.join(items)}</ul>")
    return "".join(parts) or "<p><i>no examples.jsonl</i></p>"


def build_report(run_dirs: list[str | os.PathLike], out: str | os.PathLike, *, centroids_file: str | None = None,
                 cells: int = DEFAULT_CELLS, seed: int = DEFAULT_SEED, example_steps: int = 8) -> Report:
    """Render the report of ``run_dirs`` to ``out`` (HTML) and ``<out>_files/`` (PNGs, data)."""
    runs = [load_run(d) for d in run_dirs]
    _unique_names(runs)
    out = Path(out)
    folder = out.with_name(out.stem + "_files")
    folder.mkdir(parents=True, exist_ok=True)

    cov = Coverage(load_centroids(centroids_file) if centroids_file else None, cells=cells, seed=seed)
    cov_series = {r.name: cov.series(r.tasks, r.steps) for r in runs}
    cplx = {r.name: complexity_per_step(r) for r in runs}
    retention = [(r.name, res) for r in runs if (res := load_retention(r)) is not None]
    save_centroids(folder / "coverage_centroids.npy", cov.centroids)

    figures = {
        "solve_rates": plots.solve_rates(runs),
        "complexity": plots.complexity(runs, cplx, mean_features(t.program for t in runs[0].seed_tasks)),
        "coverage": plots.coverage(runs, cov_series, cov.cells),
        "ratings": plots.ratings(runs),
        "rating_spread": plots.rating_spread(runs),
        "entropy_length": plots.entropy_length(runs),
        "lineage": plots.lineage_tree(runs),
    }
    if retention:
        figures["retention"] = plots.retention(retention)
    paths, sections = {}, []
    for name, fig in figures.items():
        paths[name] = folder / f"{name}.png"
        b64 = _png(fig, paths[name])
        sections.append(f'<h2 id="{name}">{name.replace("_", " ")}</h2><p class="cap">{html.escape(CAPTIONS[name])}'
                        f'</p><img id="{name}" alt="{name}" src="data:image/png;base64,{b64}"/>')

    data = {
        "coverage": {"cells": cov.cells, "seed": seed, "bounds": DESCRIPTOR_BOUNDS,
                     "runs": {n: {"steps": c.steps, "coverage": c.coverage, "new_cells": c.new_cells,
                                  "programs": c.programs} for n, c in cov_series.items()}},
        "complexity_per_step": {n: {str(s): v for s, v in d.items()} for n, d in cplx.items()},
        "complexity_by_type": {r.name: complexity_by_type(r) for r in runs},
        "complexity_by_role_type_step": {r.name: {str(s): v for s, v in complexity_by_role_type(r).items()}
                                         for r in runs},
        "task_source": {r.name: r.task_source for r in runs},
    }
    (folder / "data.json").write_text(json.dumps(data, indent=1, sort_keys=True))

    overview = [{"run": r.name, "directory": str(r.path), "kind": "single-agent baseline" if r.baseline else
                 "population", "steps": r.last_step, "members ever": len(lineage.lives(r.lineage)),
                 "evolution events": len(lineage.events_table(r.lineage)), "valid programs": len(r.tasks),
                 "final coverage": f"{100 * cov_series[r.name].coverage[-1]:.1f}%" if r.steps else "",
                 "program source": r.task_source} for r in runs]
    per_run = []
    for r in runs:
        ctab = [{"type": tt, **v} for tt, v in complexity_by_type(r).items()]
        per_run.append(
            f"<h3>{html.escape(r.name)}</h3><h4>complexity of valid programs by type (means)</h4>"
            f"{_table(ctab, ['type', 'tasks', *FEATURES])}"
            f"<h4>evolution events</h4>{_table(lineage.events_table(r.lineage))}"
            f"<h4>example tasks</h4>{_examples_html(r, example_steps)}")
    ret_tables = "".join(
        f"<h3>{html.escape(n)}: retention ({html.escape(res['role'])} {html.escape(res['member'])}, "
        f"{res['steps']} steps)</h3>{_table(res.get('summary', []))}" for n, res in retention)
    page = f"""<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>PopuLoRA report: {html.escape(', '.join(r.name for r in runs))}</title>
<style>body{{font-family:sans-serif;max-width:1400px;margin:auto;padding:1em}} img{{max-width:100%}}
table{{border-collapse:collapse;font-size:12px;margin:.5em 0}} td,th{{border:1px solid #ccc;padding:2px 6px}}
pre{{background:#f6f6f6;padding:4px;font-size:11px;max-height:240px;overflow:auto}} .cap{{color:#444}}</style>
</head><body><h1>PopuLoRA run report</h1>
{_table(overview)}
<p class="cap">Coverage: CVT archive of {cov.cells} cells (seed {seed}) over descriptors
{html.escape(', '.join(f'{k} in [{lo:g}, {hi:g}]' for k, (lo, hi) in DESCRIPTOR_BOUNDS.items()))}.</p>
{''.join(sections)}
{'<h2>retention summary</h2>' + ret_tables if retention else ''}
<h2>per run</h2>{''.join(per_run)}
</body></html>
"""
    out.write_text(page, encoding="utf-8")
    return Report(out, folder, paths, data)

"""What a person reads of a 64-member run: the leaderboard, the HTML report and `populora status`.

A hand-made run of 32 teachers + 32 students (the runner's file layout; 32 of them replaced by children
at step 3) and a leaderboard of its 64 members beside a baseline. In the figures no two labels overlap
(measured on matplotlib's own renderer: tick labels, member names at the ends of the rating lines and on
the lineage bars) and the lineage draws one arrow per parent link. In headless Chromium (marker
``browser``) both pages fit a 1400 px window: nothing scrolls sideways, no table label wraps, every
figure loads. `populora status` lists the members in population order, one line each.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from test_diagnostics_report import PROGRAMS, _jsonl, _member

from populora.diagnostics.lineage import edges, lives
from populora.diagnostics.runs import load_run

ROOT = Path(__file__).resolve().parents[1]
T = S = 32
STEPS = 6


def _ids():
    return [f"t{i}" for i in range(T)] + [f"s{i}" for i in range(S)]


def make_big_run(root: Path, name: str = "pop-32t32s") -> Path:
    """32T+32S over 6 steps; at step 3 the odd slots of each role are replaced by children of slot 0 and 2."""
    rd = root / name
    (rd / "checkpoints" / f"step_{STEPS:06d}").mkdir(parents=True)
    (rd / "config.yaml").write_text(f"name: {name}\npopulation: {{teachers: {T}, students: {S}}}\n")
    founders = _ids()
    children = {m: f"{m}-3" for m in founders if int(m[1:]) % 2}
    rows = []
    for s in range(1, STEPS + 1):
        row = {"step": s, "teacher/proposals": 96, "teacher/valid_tasks": 12}
        for i, tt in enumerate(("code_o", "code_i", "code_f")):
            row[f"student/{tt}/solve_rate"] = 0.3 + 0.1 * ((s + i) % 3)
            row[f"teacher/{tt}/valid_rate"] = 0.5
        live = founders if s <= 3 else [children.get(m, m) for m in founders]
        for j, mid in enumerate(live):
            row[f"adapter/{mid}/sequences"] = 3
            row[f"adapter/{mid}/optimizer_steps"] = 1
            row[f"adapter/{mid}/completion_tokens"] = 30 + j % 7
            row[f"train/{mid}/entropy/mean"] = 2.0 + 0.01 * j
            row[f"member/{mid}/reward_mean"] = 0.01 * j
            row[f"member/{mid}/mu"] = 25.0 + 0.05 * (j % 32) * s - (2.0 if mid.endswith("-3") else 0.0)
            row[f"member/{mid}/sigma"] = 8.3 - 0.5 * s
        rows.append(row)
    _jsonl(rd / "metrics.jsonl", rows)
    role = {"t": "teacher", "s": "student"}
    lineage = [{"event": "founder", "step": 0, "member": _member(m, role[m[0]], int(m[1:])), "replaced": None}
               for m in founders]
    for old, new in children.items():
        parents = [f"{old[0]}0", f"{old[0]}2"]
        lineage.append({"event": "replacement", "step": 3, "member": _member(new, role[old[0]], int(old[1:]), 3,
                                                                            parents, "ties_merge"),
                        "replaced": old, "replaced_score": -5.0, "kind": "crossover"})
    _jsonl(rd / "lineage.jsonl", lineage)
    examples = [{"step": s, "teacher": "t0", "type": "code_o", "valid": True, "program": PROGRAMS[s % 4], "input": "3",
                 "output": "4", "message": "", "student_correct": 1, "student_attempts": 3} for s in range(1, STEPS + 1)]
    _jsonl(rd / "examples.jsonl", examples)
    tasks = [{"id": f"x{s}", "type": "code_i", "program": PROGRAMS[s % 4], "input": "2", "output": "3",
              "teacher_id": f"t{s}", "step": s} for s in range(1, STEPS + 1)]
    state = {"step": STEPS, "members": [], "buffers": {"code_o": {"type": "code_o", "capacity": 64, "tasks": tasks}}}
    (rd / "checkpoints" / f"step_{STEPS:06d}" / "state.json").write_text(json.dumps(state))
    return rd


@pytest.fixture(scope="module")
def big_run(tmp_path_factory) -> Path:
    return make_big_run(tmp_path_factory.mktemp("runs"))


def _overlaps(fig) -> list[tuple[str, str]]:
    """Pairs of visible, non-empty texts of one axes whose drawn boxes overlap (tick labels and annotations)."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    out = []
    for ax in fig.axes:
        texts = [t for t in (*ax.get_xticklabels(), *ax.get_yticklabels(), *ax.texts) if t.get_visible() and t.get_text()]
        boxes = [(t.get_text(), t.get_window_extent(renderer)) for t in texts]
        out += [(a, b) for i, (a, x) in enumerate(boxes) for b, y in boxes[i + 1:] if x.overlaps(y)]
    return out


def test_the_lineage_of_64_members_draws_every_link_with_labels_apart(big_run):
    from matplotlib.text import Annotation

    from populora.diagnostics import plots

    run = load_run(big_run)
    fig = plots.lineage_tree([run])
    (ax,) = fig.axes
    arrows = [a for a in ax.texts if isinstance(a, Annotation) and not a.get_text()]
    assert len(arrows) == len(edges(run.lineage)) == 64  # two parents for each of 32 children
    assert len(ax.get_yticklabels()) == T + S and len(lives(run.lineage)) == 96
    assert _overlaps(fig) == []
    assert any(t.get_text() == "t1-3" for t in ax.texts)  # names stay where they fit


def test_the_ratings_of_64_members_keep_their_labels_apart(big_run):
    from populora.diagnostics import plots

    fig = plots.ratings([load_run(big_run)])
    (ax,) = fig.axes
    assert len(ax.lines) >= T + S and _overlaps(fig) == []
    assert 0 < len(ax.texts) < T + S  # the names that fit are written, the rest dropped


def test_the_leaderboard_chart_keeps_64_members_inside_their_run(monkeypatch, tmp_path):
    from eval.leaderboard.figures import chart_png, pyplot
    from eval.leaderboard.page import build_table, read_scores

    cols, table = build_table(read_scores(_write_scores(tmp_path))[0])
    plt = pyplot()
    made, real = [], plt.subplots
    monkeypatch.setattr(plt, "subplots", lambda *a, **k: made.append(real(*a, **k)) or made[-1])
    chart_png(cols, table)
    fig, axes = made[0]
    for ax in axes.flat:
        for coll in ax.collections:
            xs = coll.get_offsets()[:, 0]
            if len(xs) == T + S:  # the members of the one population run, around x = 0
                assert xs.min() >= -0.45 and xs.max() <= 0.45, (xs.min(), xs.max())


def _leaderboard_rows():
    from test_eval_leaderboard import _row

    from eval.leaderboard.columns import GROUPS

    cols = [*GROUPS["code"], *GROUPS["math"]]
    members = [(f"t{i}-120" if i % 2 else f"t{i}", "teacher") for i in range(T)]
    members += [(f"s{i}-120" if i % 2 else f"s{i}", "student") for i in range(S)]
    rows = []
    for j, (m, role) in enumerate(members):
        rows += [_row("pop-32t32s-s0", m, role, c, (j + k) % 11 / 20, 164) for k, c in enumerate(cols)]
    rows += [_row("baseline-s0", "a0", "baseline", c, 0.3, 164) for c in cols]
    rows += [_row("-", "base", "base", c, 0.25, 164) for c in cols]
    return rows


def _write_scores(tmp_path) -> list[Path]:
    """Score files of the 64-member run and of a baseline run, as `populora eval` writes them."""
    from test_eval_leaderboard import PROV, _write

    rows = _leaderboard_rows()
    for run in ("pop-32t32s-s0", "baseline-s0"):
        _write(tmp_path / run, [r for r in rows if r["run"] in (run, "-")], PROV)
    return [tmp_path / "pop-32t32s-s0", tmp_path / "baseline-s0"]


def _write_leaderboard(tmp_path) -> Path:
    from eval.leaderboard.page import write_leaderboard

    return write_leaderboard(_write_scores(tmp_path), tmp_path / "out")["html"]


@pytest.mark.browser
@pytest.mark.slow
def test_the_64_member_leaderboard_and_report_fit_a_1400px_page(big_run, tmp_path):
    from test_eval_leaderboard_browser import measure

    from populora.diagnostics.report import build_report

    got = measure(_write_leaderboard(tmp_path / "lb"), tmp_path, "leaderboard64")
    # members, mean/min/max/std, the baseline, the base model, and a heading row for each of the three
    assert got["tables"]["leaderboard"]["rows"] == T + S + 4 + 1 + 1 + 3
    report = build_report([big_run], tmp_path / "report.html").html
    page = measure(report, tmp_path, "report64")
    lineage = next(i for i in page["images"] if i["id"] == "lineage")
    assert lineage["loaded"] > 0 and lineage["right"] <= 1400


def test_status_lists_64_members_in_population_order_one_line_each(big_run):
    import os

    out = subprocess.run([sys.executable, "-m", "populora.cli", "status", str(big_run)], cwd=ROOT, capture_output=True,
                         text=True, timeout=120, env={**os.environ, "COLUMNS": "100"})
    assert out.returncode == 0, out.stderr
    listed = [m.group(1) for m in re.finditer(r"^[│|]\s*([ts]\d+(?:-\d+)?)\s*[│|]", out.stdout, re.M)]
    want = [f"t{i}-3" if i % 2 else f"t{i}" for i in range(T)] + [f"s{i}-3" if i % 2 else f"s{i}" for i in range(S)]
    assert listed == want
    assert all(len(line) <= 100 for line in out.stdout.splitlines())
    assert re.search(r"^teachers: 32, mean mu [\d.]+, highest t\d+(-3)? [\d.]+, lowest t\d+(-3)? [\d.]+$", out.stdout, re.M)

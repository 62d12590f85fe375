"""Matplotlib figures of the run report (Agg backend, no display needed).

Each function takes the loaded runs (``runs.Run``) plus what was computed for them and returns a
``Figure``; runs are compared side by side (one line per run, or one panel per run). They are in
the spirit of the paper's figures: solve rates over time (fig. 3), program complexity (fig. 4),
coverage (fig. 5), TrueSkill ratings (fig. 6), entropy and response length (fig. 9), retention
of evolved children (fig. 19); plus the lineage tree.
"""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

from populora.diagnostics import arms_race as ar  # noqa: E402
from populora.diagnostics.lineage import edges, lives  # noqa: E402
from populora.tasks.complexity import FEATURES  # noqa: E402

ROLE_COLORS = {"teacher": "tab:red", "student": "tab:blue", "agent": "tab:green"}


def _run_color(i: int) -> str:
    return f"C{i % 10}"


def _step_axis(ax) -> None:
    ax.set_xlabel("step")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))


def _note(ax, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, fontsize=9, color="0.4", wrap=True)


def _finish(ax, title: str, empty: str) -> None:
    """Title and step axis; a legend when something was drawn with a label, else the note ``empty``."""
    ax.set_title(title, fontsize=10)
    _step_axis(ax)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7)
    else:
        _note(ax, empty)


def drop_overlapping(fig: Figure, texts: Sequence) -> int:
    """Remove every text of ``texts`` (annotations placed in data coordinates) that would overlap a text kept
    before it, or a tick label, once drawn: with 64 members, labels at the ends of 64 rating lines or on
    the bars of 64 lineage rows cannot all be read. Returns how many were removed (a member whose label
    went is still drawn, and named by its row or in the tables)."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    kept = [t.get_window_extent(renderer) for ax in fig.axes for t in (*ax.get_xticklabels(), *ax.get_yticklabels())
            if t.get_visible() and t.get_text()]
    removed = 0
    for text in texts:
        box = text.get_window_extent(renderer)
        if any(box.overlaps(other) for other in kept):
            text.remove()
            removed += 1
        else:
            kept.append(box)
    return removed


def _panels(n: int, ncols: int | None = None, w: float = 4.2, h: float = 3.0):
    ncols = ncols or n
    nrows = (n + ncols - 1) // ncols
    fig, axes = plt.subplots(nrows, ncols, figsize=(w * ncols, h * nrows), squeeze=False)
    flat = list(axes.flat)
    for ax in flat[n:]:
        ax.set_visible(False)
    return fig, flat[:n]


def task_types(runs: Sequence) -> list[str]:
    """The task types the runs logged (``teacher/<type>/valid_rate``), in the kinds' order."""
    from populora.tasks.kinds import kind_names

    seen = {k.split("/")[1] for run in runs for row in run.metrics for k in row
            if k.startswith("teacher/") and k.endswith("/valid_rate")}
    return [t for t in kind_names() if t in seen] or list(kind_names())[:3]


def solve_rates(runs: Sequence) -> Figure:
    """Row 1: student solve rate per task type; row 2: teacher valid rate per task type."""
    types = task_types(runs)
    fig, axes = plt.subplots(2, len(types), figsize=(4.4 * len(types), 6.2), squeeze=False)
    for col, tt in enumerate(types):
        for row, (scope, metric, label) in enumerate((("student", "solve_rate", "student solve rate"),
                                                     ("teacher", "valid_rate", "teacher valid rate"))):
            ax = axes[row][col]
            drawn = False
            for i, run in enumerate(runs):
                s, v = ar.series(run.metrics, f"{scope}/{tt}/{metric}")
                if s:
                    ax.plot(s, v, marker=".", color=_run_color(i), label=run.name)
                    drawn = True
            ax.set_title(f"{label}: {tt}", fontsize=10)
            ax.set_ylim(-0.05, 1.05)
            _step_axis(ax)
            if not drawn:
                _note(ax, "not logged")
    if axes[0][0].get_legend_handles_labels()[0]:
        axes[0][0].legend(fontsize=8)
    fig.tight_layout()
    return fig


def complexity(runs: Sequence, per_step: dict[str, dict[int, dict[str, float]]],
               seeds: dict[str, float] | None = None) -> Figure:
    """Mean complexity features of each step's valid programs; ``per_step[run.name][step][feature]``.

    ``seeds``: the features' means over the hand-written seed tasks, drawn as a dotted reference.
    """
    fig, axes = _panels(len(FEATURES), 3)
    for ax, feat in zip(axes, FEATURES):
        if seeds and feat in seeds:
            ax.axhline(seeds[feat], color="0.6", ls=":", lw=1.2, label="seed tasks")
        drawn = False
        for i, run in enumerate(runs):
            data = per_step.get(run.name, {})
            steps = sorted(data)
            if steps:
                ax.plot(steps, [data[s][feat] for s in steps], marker=".", color=_run_color(i), label=run.name)
                drawn = True
        ax.set_title(feat.replace("_", " "), fontsize=10)
        _step_axis(ax)
        if not drawn:
            _note(ax, "no valid programs")
    if axes[0].get_legend_handles_labels()[0]:
        axes[0].legend(fontsize=8)
    fig.tight_layout()
    return fig


def coverage(runs: Sequence, cov: dict, cells: int) -> Figure:
    """Cumulative CVT coverage and cells first reached per step; ``cov[run.name]`` is a CoverageSeries."""
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 3.6))
    for i, run in enumerate(runs):
        c = cov[run.name]
        a1.plot(c.steps, [100 * x for x in c.coverage], marker=".", color=_run_color(i),
                label=f"{run.name} ({c.programs} programs)")
        a2.plot(c.steps, c.new_cells, marker=".", color=_run_color(i), label=run.name)
    a1.set_title(f"cumulative coverage (% of {cells} CVT cells)", fontsize=10)
    a2.set_title("cells first reached at each step", fontsize=10)
    for ax in (a1, a2):
        _step_axis(ax)
    a1.legend(fontsize=8)
    fig.tight_layout()
    return fig


def ratings(runs: Sequence) -> Figure:
    """One panel per run: TrueSkill mu of every member (band: +-sigma), coloured by role; each line's end
    named where the name does not cover another (``drop_overlapping``)."""
    fig, axes = _panels(len(runs))
    labels: dict = {}
    for ax, run in zip(axes, runs):
        mus = ar.per_member(run.metrics, "mu")
        ax.set_title(f"{run.name}: TrueSkill mu", fontsize=10)
        _step_axis(ax)
        if not mus:
            _note(ax, "no ratings (single-agent baseline)" if run.baseline else "no ratings logged")
            continue
        sig = ar.per_member(run.metrics, "sigma")
        names = []
        for mid, (s, v) in mus.items():
            color = ROLE_COLORS.get(run.role_of(mid), "0.5")
            ax.plot(s, v, color=color, lw=1, marker=".", ms=4)
            ss, sv = sig.get(mid, ([], []))
            if ss == s:
                ax.fill_between(s, [m - d for m, d in zip(v, sv)], [m + d for m, d in zip(v, sv)], color=color,
                                alpha=0.08)
            names.append(ax.annotate(mid, (s[-1], v[-1]), fontsize=6, color=color))
        labels[ax] = names
        stats = ar.rating_stats(run.metrics, ar.ids_by_role(run.roles, run.metrics))
        for role, (s, m, _) in stats.items():
            ax.plot(s, m, color=ROLE_COLORS.get(role, "0.3"), lw=2.5, ls="--", label=f"{role} mean")
        ax.legend(fontsize=7)
    fig.tight_layout()
    drop_overlapping(fig, [t for names in labels.values() for t in names])
    return fig


def rating_spread(runs: Sequence) -> Figure:
    """Per role, the std of mu over live members: differentiation of the population."""
    fig, ax = plt.subplots(figsize=(6, 3.4))
    for i, run in enumerate(runs):
        stats = ar.rating_stats(run.metrics, ar.ids_by_role(run.roles, run.metrics))
        for role, (s, _, sd) in stats.items():
            ax.plot(s, sd, color=_run_color(i), ls="-" if role == "teacher" else ":", marker=".",
                    label=f"{run.name} {role}s")
    _finish(ax, "spread of TrueSkill mu within a role (std)", "no ratings in these runs")
    fig.tight_layout()
    return fig


def entropy_length(runs: Sequence) -> Figure:
    """Response length (completion tokens per sequence) and policy entropy, per role and run."""
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 3.6))
    panels = ((a1, ar.response_length, "response length (completion tokens / sequence)"),
              (a2, ar.entropy, "policy entropy at sampled positions (nats / token)"))
    for i, run in enumerate(runs):
        by_role = ar.ids_by_role(run.roles, run.metrics)
        for ax, metric, _ in panels:
            for role, (s, m, _) in ar.role_stats(run.metrics, metric, by_role).items():
                ax.plot(s, m, color=_run_color(i), ls="-" if role != "student" else ":", marker=".",
                        label=f"{run.name} {role}s")
    for ax, _, title in panels:
        _finish(ax, title, "not logged in these runs")
    fig.tight_layout()
    return fig


ROW_INCHES = 0.16  # ours: one slot's row of the lineage tree (7-point tick labels need ~0.1 in)


def lineage_tree(runs: Sequence) -> Figure:
    """One panel per run: each member a bar over its life in its slot; edges parent -> child. Panels grow
    with the slots (``ROW_INCHES`` a row), so 64 members' rows keep their labels apart; a member's name
    is written where it covers no other (``drop_overlapping``)."""
    rows = max([_lineage_rows(lives(run.lineage)) for run in runs] or [0])
    fig, axes = _panels(len(runs), w=5.5, h=max(3.6, ROW_INCHES * rows + 1.2))
    names = []
    for ax, run in zip(axes, runs):
        life = lives(run.lineage)
        ax.set_title(f"{run.name}: lineage", fontsize=10)
        _step_axis(ax)
        if not life:
            _note(ax, "no lineage.jsonl records")
            continue
        roles = sorted({m.role for m in life.values()}, key=lambda r: ("teacher", "agent", "student").index(r)
                       if r in ("teacher", "agent", "student") else 9)
        offset, base = 0, {}
        for role in roles:
            base[role] = offset
            offset += 1 + max(m.slot for m in life.values() if m.role == role) + 1  # a gap between bands
        end = max(run.last_step, max((m.died or m.born) for m in life.values()))
        y = {mid: base[m.role] + m.slot for mid, m in life.items()}
        ops = sorted({m.operator for m in life.values() if m.operator})
        op_color = {op: f"C{i % 10}" for i, op in enumerate(ops)}
        for mid, m in life.items():
            x1 = m.died if m.died is not None else end
            color = ROLE_COLORS.get(m.role, "0.5")
            ax.plot([m.born, x1], [y[mid], y[mid]], color=color, lw=4, alpha=0.3 + 0.7 * (m.generation % 2 == 0),
                    solid_capstyle="butt")
            ax.plot([m.born], [y[mid]], marker="|", ms=12, color=color)  # birth (children: the replacement)
            names.append(ax.annotate(mid, (m.born, y[mid] + 0.15), fontsize=6))
        for parent, child, op in edges(run.lineage):
            if parent in y and child in y:
                ax.annotate("", xy=(life[child].born, y[child]), xytext=(life[child].born - 0.4, y[parent]),
                            arrowprops={"arrowstyle": "->", "color": op_color.get(op, "0.3"), "lw": 1.2})
        for op, c in op_color.items():
            ax.plot([], [], color=c, label=op)
        ticks = [(base[r] + s, f"{r} {s}") for r in roles
                 for s in range(1 + max(m.slot for m in life.values() if m.role == r))]
        ax.set_yticks([t for t, _ in ticks])
        ax.set_yticklabels([lbl for _, lbl in ticks], fontsize=7)
        ax.set_xlim(-0.5, end + 0.5)
        ax.set_ylim(-0.8, offset - 0.2)
        if ops:
            ax.legend(fontsize=6, loc="upper left", bbox_to_anchor=(1.0, 1.0), title="operator", title_fontsize=6)
    fig.tight_layout()
    drop_overlapping(fig, names)
    return fig


def _lineage_rows(life: dict) -> int:
    """Rows of a run's lineage panel: the slots of each role and a gap between the roles."""
    roles = {m.role for m in life.values()}
    return sum(2 + max(m.slot for m in life.values() if m.role == r) for r in roles)


def retention(results: Sequence[tuple[str, dict]]) -> Figure:
    """Reward curves of every retention arm (thick black: the parent continuing)."""
    fig, axes = _panels(len(results), w=6, h=3.8)
    for ax, (name, res) in zip(axes, results):
        if res.get("reward_at_checkpoint") is not None:
            ax.axhline(res["reward_at_checkpoint"], color="0.5", ls=":", label="parent at the checkpoint")
        for i, (arm, a) in enumerate(sorted(res["arms"].items())):
            s = [x - res["checkpoint_step"] for x in a["steps"]]  # steps since the child was made
            r = a["reward_mean"]
            if arm == "parent":
                ax.plot(s, r, color="black", lw=2.5, marker="o", ms=5, label="parent (continues)", zorder=5)
            elif arm in ("copy_parent", "linear_0_5"):
                ax.plot(s, r, ls="--", lw=1.8, marker="s", ms=4, label=f"{arm} (control)")
            else:
                ax.plot(s, r, lw=1, marker=".", color=plt.get_cmap("tab20")(i % 20), label=arm)
        ax.set_title(f"{name}: retention of {res['role']} {res['member']} from step {res['checkpoint_step']}",
                     fontsize=9)
        _step_axis(ax)
        ax.set_xlabel("steps of training since the child was made")
        ax.set_xlim(0.5, res["steps"] + 0.5)
        if res["steps"] <= 20:
            ax.set_xticks(range(1, res["steps"] + 1))
        ax.set_ylabel("member reward (mean)")
        ax.legend(fontsize=6, ncol=2)
    fig.tight_layout()
    return fig

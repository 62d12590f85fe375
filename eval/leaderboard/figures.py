"""The leaderboard's figures: the per-run small multiples and the pass@k curves (matplotlib PNG,
the ``eval`` extra, imported through ``populora.extras.require``), and the forest plot of the paired
comparisons (inline SVG: no dependency, and a browser can measure it).

- ``chart_png``: one panel per benchmark: population members as points with their mean and min
  marked, baseline and base model as horizontal lines.
- ``passk_png``: one figure per benchmark family, one panel per benchmark: pass@k (%) against k on a
  log2 axis; base model grey, baselines black dashed, each population configuration in its colour
  (mean: solid with its across-seed 95% band, best member: dotted).
- ``forest_svg``: one row per comparison: the difference in percentage points, its 95% interval, and
  the p-value; a dashed line at 0. A row whose p-value is about two runs only (one seed per arm) is
  marked † and drawn dashed, and a line under the plot says what the mark means.
"""

from __future__ import annotations

import html
import io
import math
import statistics
from collections.abc import Mapping, Sequence

from eval.leaderboard.columns import AVERAGES, GROUPS
from eval.leaderboard.paired import ONE_SEED_MARK, ONE_SEED_NOTE

PALETTE = ("#1f5fbf", "#c0392b", "#2e8b57", "#8e44ad", "#d35400", "#16a085", "#7f8c8d", "#b7950b")


def pyplot():
    """matplotlib's pyplot on the Agg backend (the ``eval`` extra)."""
    from populora.extras import require

    matplotlib = require("matplotlib", "eval", "populora leaderboard's figures")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _png(fig, plt) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    plt.close(fig)
    return buf.getvalue()


def chart_png(cols, table) -> bytes:
    """One panel per benchmark: members as points (mean and min marked), baseline and base as lines."""
    plt = pyplot()

    panels = [c for c in cols if c in GROUPS["code"] + GROUPS["math"] or c in AVERAGES]
    ncols = min(5, max(1, len(panels)))
    nrows = (len(panels) + ncols - 1) // ncols
    fig, axes = plt.subplots(nrows, ncols, figsize=(13.4, 2.6 * nrows + 0.7), squeeze=False)
    pop_runs = sorted({t["run"] for t in table if t["role"] in ("teacher", "student")})
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    handles = {}
    for ax, col in zip(axes.flat, panels):
        top = 0.0
        for x, run in enumerate(pop_runs):
            ys = [100 * t["values"][col] for t in table if t["run"] == run and t["role"] in ("teacher", "student")
                  and t["values"].get(col) is not None]
            if not ys:
                continue
            jitter = [x + 0.08 * (k - (len(ys) - 1) / 2) for k in range(len(ys))]
            handles["member"] = ax.scatter(jitter, ys, s=14, color="#555", zorder=3, label="member")
            handles["population mean"] = ax.scatter([x], [statistics.fmean(ys)], marker="D", s=40, color="#1f5fbf", zorder=4,
                                         label="population mean")
            handles["population min"] = ax.scatter([x], [min(ys)], marker="v", s=40, color="#c0392b", zorder=4, label="population min")
            top = max(top, *ys)
        refs = [t for t in table if t["role"] in ("baseline", "base")]
        for k, t in enumerate(refs):
            y = t["values"].get(col)
            if y is None:
                continue
            style = dict(color="#777", ls="-", lw=1.2) if t["role"] == "base" else dict(color=colors[k % len(colors)], ls="--", lw=1.4)
            name = "base model" if t["role"] == "base" else f"baseline {t['run']}/{t['member']}"
            handles[name] = ax.axhline(100 * y, label=name, **style)
            top = max(top, 100 * y)
        ax.set_title(col, fontsize=10)
        ax.set_xlim(-0.6, max(0.6, len(pop_runs) - 0.4))
        ax.set_xticks(range(len(pop_runs)))
        ax.set_xticklabels(pop_runs, fontsize=8)
        ax.set_ylim(0, max(5.0, top * 1.15))  # never below 0, visible when all values are 0
        ax.tick_params(axis="y", labelsize=8)
        ax.grid(axis="y", alpha=0.3)
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    fig.supylabel("pass@1 / accuracy (%)", fontsize=9)
    if handles:
        fig.legend(handles.values(), handles.keys(), loc="lower center", ncol=min(6, len(handles)), fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0.07 if handles else 0, 1, 1))
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    plt.close(fig)
    return buf.getvalue()


def passk_png(title: str, panels: Mapping[str, Sequence], caption: str = "",
              items: Mapping[str, str] | None = None) -> bytes:
    """One figure: a panel per benchmark column (``panels[col]``: its ``eval.leaderboard.passk.Curve`` list), the
    legend on the right, ``caption`` (decoding, seeds) under the title; ``items[col]``: its item count."""
    import textwrap

    plt = pyplot()
    cols = [c for c in panels if panels[c]]
    ncols = min(4, max(1, len(cols)))
    nrows = max(1, (len(cols) + ncols - 1) // ncols)
    legend_w = 2.9
    width = 3.2 * ncols + legend_w
    wrapped = textwrap.wrap(caption, int(14 * (width - legend_w))) if caption else []
    head_h = 0.4 + 0.13 * len(wrapped)
    height = 2.9 * nrows + head_h
    fig, axes = plt.subplots(nrows, ncols, figsize=(width, height), squeeze=False)
    configs = sorted({c.config for cs in panels.values() for c in cs if c.kind in ("population mean", "best member")})
    colour = {cfg: PALETTE[i % len(PALETTE)] for i, cfg in enumerate(configs)}
    handles = {}
    for ax, col in zip(axes.flat, cols):
        ks_all = sorted({k for c in panels[col] for k in c.points})
        for curve in panels[col]:
            ks = sorted(curve.points)
            ys = [100 * curve.points[k].mean for k in ks]
            if curve.kind == "base model":
                style = dict(color="#888", ls="-", lw=1.3, marker=".")
            elif curve.kind == "baseline":
                style = dict(color="#111", ls="--", lw=1.5, marker="s", ms=3)
            elif curve.kind == "population mean":
                style = dict(color=colour[curve.config], ls="-", lw=1.8, marker="o", ms=3.5)
            else:
                style = dict(color=colour[curve.config], ls=":", lw=1.6, marker="^", ms=3.5)
            (line,) = ax.plot(ks, ys, label=curve.label, **style)
            handles.setdefault(curve.label, line)
            if curve.kind in ("population mean", "baseline") and all(curve.points[k].low is not None for k in ks):
                ax.fill_between(ks, [100 * curve.points[k].low for k in ks], [100 * curve.points[k].high for k in ks],
                                color=style["color"], alpha=0.08, lw=0)
        ax.set_xscale("log", base=2)
        if ks_all:
            ax.set_xticks(ks_all)
            ax.set_xticklabels([str(k) for k in ks_all], fontsize=8)
            ax.set_xlim(ks_all[0] / 1.15, ks_all[-1] * 1.15)
        ax.minorticks_off()
        n = (items or {}).get(col)
        ax.set_title(f"{col} ({n} items)" if n else col, fontsize=10)
        ax.set_xlabel("k (samples, log scale)", fontsize=8)
        ax.set_ylim(0, 100)
        ax.tick_params(axis="y", labelsize=8)
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(cols):]:
        ax.axis("off")
    fig.supylabel("pass@k (%)", fontsize=9)
    fig.suptitle(title, fontsize=11, x=0.01, ha="left")
    if wrapped:
        fig.text(0.01, 1 - 0.4 / height, "\n".join(wrapped), ha="left", va="top", fontsize=7.5, color="#444")
    if handles:
        fig.legend(handles.values(), handles.keys(), loc="center left", bbox_to_anchor=(1 - legend_w / width + 0.01, 0.5),
                   fontsize=8, frameon=False, title="mean over seeds\n(band: 95% t interval)", title_fontsize=8)
    fig.tight_layout(rect=(0, 0, 1 - legend_w / width, 1 - head_h / height))
    return _png(fig, plt)


def _nice_step(span: float) -> float:
    raw = span / 4
    mag = 10 ** math.floor(math.log10(raw)) if raw > 0 else 1
    return next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)


def forest_svg(comparisons: Sequence, width: int = 1000) -> str:
    """The forest plot of ``eval.leaderboard.paired.Comparison`` rows that have a test (differences in points)."""
    rows = [c for c in comparisons if c.test is not None]
    if not rows:
        return ""
    label_w, text_w, row_h, top, bottom = 250, 250, 22, 34, 40
    plot_w = width - label_w - text_w
    span = max(1.0, *(abs(100 * x) for c in rows for x in (c.test.low, c.test.high, c.test.difference)))
    step = _nice_step(2 * span)
    span = step * math.ceil(span * 1.05 / step)

    def x(v: float) -> float:
        return label_w + plot_w * (100 * v + span) / (2 * span)

    lines, y = [], top
    configs = []
    for c in rows:
        if (c.config, c.baseline) not in configs:
            configs.append((c.config, c.baseline))
    body = []
    for cfg, base in configs:
        body.append(f'<text class="forest-group" x="4" y="{y + 15}" font-weight="600">'
                    f'{html.escape(cfg)} population mean − {html.escape(base)}</text>')
        y += row_h
        for c in (r for r in rows if (r.config, r.baseline) == (cfg, base)):
            t = c.test
            cy = y + row_h / 2
            avg = c.column in AVERAGES
            sig = t.p_value < 0.05
            bold = ' font-weight="600"' if avg else ""
            fill = "#1f5fbf" if sig else "#fff"
            cx = x(t.difference)
            marker = (f'<rect x="{cx - 5:.1f}" y="{cy - 5}" width="10" height="10" fill="{fill}" stroke="#1f5fbf" '
                      f'stroke-width="1.5" transform="rotate(45 {cx:.1f} {cy})"/>' if avg else
                      f'<circle cx="{cx:.1f}" cy="{cy}" r="4" fill="{fill}" stroke="#1f5fbf" stroke-width="1.5"/>')
            mark = f" {ONE_SEED_MARK}" if t.about_runs else ""
            dash = ' stroke-dasharray="5 3"' if t.about_runs else ""
            summary = f"{100 * t.difference:+.1f} [{100 * t.low:+.1f}, {100 * t.high:+.1f}]  {_p(t.p_value)}{mark}"
            body.append(
                f'<g class="forest-row" data-config="{html.escape(cfg)}" data-column="{html.escape(c.column)}" '
                f'data-difference="{100 * t.difference:.4f}" data-low="{100 * t.low:.4f}" data-high="{100 * t.high:.4f}" '
                f'data-p="{t.p_value:.6f}"><title>{html.escape(c.column)}: {html.escape(summary)}</title>'
                f'<text x="16" y="{cy + 4}"{bold}>{html.escape(c.column)}{mark}</text>'
                f'<line x1="{x(t.low):.1f}" x2="{x(t.high):.1f}" y1="{cy}" y2="{cy}" stroke="#333" stroke-width="1.6"'
                f'{dash}/>'
                f'{marker}<text x="{label_w + plot_w + 10}" y="{cy + 4}">{html.escape(summary)}</text></g>')
            y += row_h
    runs_only = any(c.test.about_runs for c in rows)
    height = y + bottom + (18 if runs_only else 0)
    ticks = []
    v = -span
    while v <= span + 1e-9:
        tx = label_w + plot_w * (v + span) / (2 * span)
        ticks.append(f'<line x1="{tx:.1f}" x2="{tx:.1f}" y1="{top - 6}" y2="{y}" stroke="#eee"/>'
                     f'<text x="{tx:.1f}" y="{y + 16}" text-anchor="middle">{"0" if abs(v) < 1e-9 else f"{v:+g}"}</text>')
        v += step
    zero = label_w + plot_w / 2
    lines.append(f'<line x1="{zero}" x2="{zero}" y1="{top - 6}" y2="{y}" stroke="#888" stroke-dasharray="4 3"/>')
    head = (f'<text x="{label_w + plot_w / 2}" y="16" text-anchor="middle" font-weight="600">difference in points '
            f'(population mean − baseline); filled: p &lt; 0.05</text>'
            f'<text x="{label_w + plot_w + 10}" y="16" font-weight="600">Δ [95% CI]  p</text>'
            f'<text x="{label_w + plot_w / 2}" y="{y + 32}" text-anchor="middle" fill="#555">◆ group average (code, math)  '
            f'● benchmark</text>'
            + (f'<text class="forest-one-seed" x="4" y="{y + 50}" fill="#555">'
               f'{ONE_SEED_MARK} (dashed) {html.escape(ONE_SEED_NOTE)}</text>' if runs_only else ""))
    return (f'<svg id="forest" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}" font-family="system-ui,sans-serif" font-size="12" role="img" '
            f'aria-label="forest plot of the paired differences">{"".join(ticks)}{"".join(lines)}{head}{"".join(body)}</svg>')


def _p(p: float) -> str:
    return "p < 0.001" if p < 0.001 else f"p = {p:.3f}"

"""The HTML leaderboard as a person sees it: headless Chromium (Debian's ``chromium``) renders full
leaderboards at 1400 px and the page is measured: every table's right edge is inside the viewport,
nothing scrolls sideways, no row label wraps, every figure fits and has loaded. Two pages: a greedy
two-run leaderboard (8 members, every benchmark column), and a sampled sweep of three seeds per
configuration (two population sizes and the baseline, every benchmark) whose across-seed tables,
paired table, forest plot and pass@k figures are read back from the rendered page. Marker ``browser``:
skipped without Chromium unless POPULORA_REQUIRE_BROWSER=1 (then a missing Chromium fails)."""

from __future__ import annotations

import html
import json
import re
import subprocess

import pytest
from conftest import chromium_binary
from test_eval_leaderboard import PROV, _row, _write

from eval.leaderboard.page import GROUPS, write_leaderboard

WIDTH = 1400
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]
MEASURE = """<script>
window.addEventListener('load', () => {
  const box = el => el.getBoundingClientRect();
  const tables = [...document.querySelectorAll('table')];
  const labels = [...document.querySelectorAll('table tbody td:first-child')].filter(td => !td.colSpan || td.colSpan < 2);
  const lh = parseFloat(getComputedStyle(labels[0]).fontSize) * 1.6;
  const forest = document.getElementById('forest');
  document.body.setAttribute('data-measure', JSON.stringify({
    viewport: window.innerWidth, scrollWidth: document.documentElement.scrollWidth,
    tables: Object.fromEntries(tables.map(t => [t.id, {right: box(t).right, rows: t.tBodies[0].rows.length,
                                                      caption: t.caption ? t.caption.textContent : ''}])),
    wrapped: labels.filter(td => box(td).height > 2 * lh).map(td => td.textContent),
    images: [...document.querySelectorAll('img')].map(i => ({id: i.id, right: box(i).right, loaded: i.naturalWidth})),
    forest: forest ? {right: box(forest).right, width: box(forest).width,
                      rows: [...forest.querySelectorAll('.forest-row')].map(g => ({column: g.dataset.column,
                        config: g.dataset.config, lo: +g.dataset.low, hi: +g.dataset.high, d: +g.dataset.difference,
                        p: +g.dataset.p, line: box(g.querySelector('line')), text: g.querySelector('text:last-of-type').textContent}))}
                   : null,
    paired: [...document.querySelectorAll('#paired tbody tr')].map(tr => [...tr.cells].map(td => td.textContent))}));
});
</script></body>"""


def browser(*args: str, profile) -> subprocess.CompletedProcess:
    exe = chromium_binary()
    if exe is None:
        pytest.fail("POPULORA_REQUIRE_BROWSER=1 but no chromium on PATH (apt-get install chromium)")
    return subprocess.run([exe, *FLAGS, f"--user-data-dir={profile}", f"--window-size={WIDTH},1000", *args],
                          capture_output=True, text=True, timeout=120)


def _full_leaderboard(tmp_path):
    cols = ["HumanEval", "MBPP", *GROUPS["code"], *GROUPS["math"]]
    rows = {"pop-4t4s-long-run-name": [], "baseline-single-agent": []}
    for i, member in enumerate(["teacher-0", "teacher-1", "teacher-2", "teacher-3", "student-0", "student-1", "student-2", "student-3"]):
        role = "teacher" if member.startswith("teacher") else "student"
        rows["pop-4t4s-long-run-name"] += [_row("pop-4t4s-long-run-name", member, role, c, (i + k) % 9 / 10, 164) for k, c in enumerate(cols)]
    rows["baseline-single-agent"] += [_row("baseline-single-agent", "single", "baseline", c, 0.3, 164) for c in cols]
    base = [_row("-", "base", "base", c, 0.25, 164) for c in cols]
    for run, rs in rows.items():
        _write(tmp_path / run, rs + base, PROV)
    return write_leaderboard([tmp_path / r for r in rows], tmp_path / "out")["html"]


def measure(page, tmp_path, name):
    probe = tmp_path / f"{name}-probe.html"
    probe.write_text(page.read_text().replace("</body>", MEASURE))
    out = browser("--virtual-time-budget=5000", "--dump-dom", probe.as_uri(), profile=tmp_path / f"{name}-profile")
    m = re.search(r'data-measure="([^"]*)"', out.stdout)
    assert m, out.stderr[-2000:]
    got = json.loads(html.unescape(m.group(1)))
    assert got["viewport"] == WIDTH
    assert got["scrollWidth"] <= WIDTH, (got["scrollWidth"], got["tables"])
    assert all(t["right"] <= WIDTH for t in got["tables"].values()), got["tables"]
    assert got["wrapped"] == [], got["wrapped"]
    assert got["images"] and all(i["right"] <= WIDTH and i["loaded"] > 0 for i in got["images"]), got["images"]
    shot = tmp_path / f"{name}-shot.png"
    browser(f"--screenshot={shot}", page.as_uri(), profile=tmp_path / f"{name}-profile2")
    assert shot.read_bytes()[:4] == b"\x89PNG"
    return got


@pytest.mark.browser
@pytest.mark.slow
def test_leaderboard_fits_a_1400px_page(tmp_path):
    got = measure(_full_leaderboard(tmp_path), tmp_path, "greedy")
    assert {"leaderboard", "seeds", "paired"} <= set(got["tables"])
    assert got["forest"] is None  # no per-item data in these score files: no test, and the table says why


@pytest.mark.browser
@pytest.mark.slow
def test_sampled_sweep_of_three_seeds_reads_back_from_the_page(tmp_path):
    from eval_synthetic import make_sweep

    from eval.benchmarks import BENCHMARKS

    runs = make_sweep(tmp_path / "runs", configs=(("4t4s", 8, 0.12), ("1t1s", 2, 0.02), ("baseline", 1, 0.0)),
                      benches=tuple(BENCHMARKS), n_items=30)
    got = measure(write_leaderboard(runs, tmp_path / "out")["html"], tmp_path, "sweep")
    tables = got["tables"]
    assert tables["seeds"]["rows"] == tables["seeds-pass8"]["rows"] == 2 * 2 + 1 + 1  # 2 populations x 2, baseline, base
    for t in ("seeds", "seeds-pass8", "paired", "leaderboard"):  # every table states what it shows
        cap = tables[t]["caption"]
        assert "T=0.6, top-p 0.95, N=8 samples per item" in cap and "4t4s: seeds 0, 1, 2 (3 runs)" in cap, t
        assert "HumanEval+ v0.1.10: 30 items" in cap and "release_v5: 30 items (contest dates 2024-08-01 to 2025-02-01" in cap
    assert {i["id"] for i in got["images"]} == {"passk-evalplus", "passk-livecodebench", "passk-math", "chart"}
    forest = got["forest"]
    assert forest["right"] <= WIDTH and len(forest["rows"]) == len(got["paired"]) == 2 * (10 + 2)
    for row, cells in zip(forest["rows"], got["paired"]):
        assert cells[1] == row["column"] and cells[0] == f"{row['config']} − baseline"
        assert float(cells[2]) == pytest.approx(row["d"], abs=0.051)  # the table's rounding
        assert row["lo"] <= row["d"] <= row["hi"] and row["line"]["width"] > 0
        assert cells[4] in row["text"]  # the p-value printed beside the interval
    big = next(r for r in forest["rows"] if r["config"] == "4t4s" and r["column"] == "math avg")
    assert big["lo"] > 0 and big["p"] < 0.05

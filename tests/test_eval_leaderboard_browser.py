"""The HTML leaderboard as a person sees it: headless Chromium (Debian's ``chromium``) renders a full
leaderboard (two runs, every benchmark column) at 1400 px and the page is measured: the table's right
edge is inside the viewport, nothing scrolls sideways, no row label wraps, the chart fits. Marker
``browser``: skipped without Chromium unless POPULORA_REQUIRE_BROWSER=1 (then a missing Chromium fails)."""

from __future__ import annotations

import json
import re
import subprocess

import pytest
from conftest import chromium_binary
from test_eval_leaderboard import PROV, _row, _write

from eval.leaderboard import GROUPS, write_leaderboard

WIDTH = 1400
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]
MEASURE = """<script>
window.addEventListener('load', () => {
  const t = document.getElementById('leaderboard').getBoundingClientRect();
  const labels = [...document.querySelectorAll('#leaderboard tbody td:first-child')];
  const lh = parseFloat(getComputedStyle(labels[0]).fontSize) * 1.6;
  const img = document.querySelector('img').getBoundingClientRect();
  document.body.setAttribute('data-measure', JSON.stringify({
    viewport: window.innerWidth, tableRight: t.right, scrollWidth: document.documentElement.scrollWidth,
    wrapped: labels.filter(td => td.getBoundingClientRect().height > 2 * lh).map(td => td.textContent),
    imgRight: img.right}));
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


@pytest.mark.browser
@pytest.mark.slow
def test_leaderboard_fits_a_1400px_page(tmp_path):
    page = _full_leaderboard(tmp_path)
    probe = tmp_path / "probe.html"
    probe.write_text(page.read_text().replace("</body>", MEASURE))
    out = browser("--virtual-time-budget=5000", "--dump-dom", probe.as_uri(), profile=tmp_path / "profile")
    m = re.search(r'data-measure="([^"]*)"', out.stdout)
    assert m, out.stderr[-2000:]
    got = json.loads(m.group(1).replace("&quot;", '"'))
    assert got["viewport"] == WIDTH
    assert got["tableRight"] <= WIDTH and got["scrollWidth"] <= WIDTH, got
    assert got["wrapped"] == [] and got["imgRight"] <= WIDTH, got
    shot = tmp_path / "shot.png"
    browser(f"--screenshot={shot}", page.as_uri(), profile=tmp_path / "profile2")
    assert shot.read_bytes()[:4] == b"\x89PNG"

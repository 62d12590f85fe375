"""`populora status`: a closed pipe is not an error, and the member table says its values are the last step's."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def fake_run(rd: Path, members: int) -> Path:
    rd.mkdir()
    (rd / "config.yaml").write_text("name: fake\n")
    row = {"step": 3, **{f"member/m{i}/mu": 25.0 for i in range(members)}}
    (rd / "metrics.jsonl").write_text(json.dumps(row) + "\n")
    return rd


def test_status_piped_into_head_exits_zero(tmp_path):
    rd = fake_run(tmp_path / "run", members=3000)  # far more than a pipe buffer holds
    proc = subprocess.run(["bash", "-c", f'set -o pipefail; "{sys.executable}" -m populora.cli status "{rd}" | head -1'],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("run ") and proc.stderr == ""


def test_member_table_is_labelled_as_last_step_values(tmp_path):
    rd = fake_run(tmp_path / "run", members=2)
    proc = subprocess.run([sys.executable, "-m", "populora.cli", "status", str(rd)], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "members: values of the last step (3)" in proc.stdout

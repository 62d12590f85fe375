"""Stop a tiny run with SIGUSR2 and resume it, W&B offline: the stop prints the resume command, the
resume prints its step, one W&B run id throughout, and adapters/ holds only the current members."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from populora.run_dir import RunDir
from populora.selfplay.metrics import read_metrics
from populora.selfplay.runner import resume_line, stop_line

ROOT = Path(__file__).resolve().parents[1]
TINY = str(ROOT / "configs" / "tiny.yaml")


def test_prune_adapters_keeps_only_current_members(tmp_path):
    for name in ("t0", "t1", "t9"):
        (tmp_path / "adapters" / name).mkdir(parents=True)
    (tmp_path / "members.json").write_text(json.dumps([{"id": "t0"}, {"id": "t1"}]))
    assert RunDir(tmp_path).prune_adapters() == ["t9"]
    assert sorted(p.name for p in (tmp_path / "adapters").iterdir()) == ["t0", "t1"]
    (tmp_path / "members.json").write_text("{torn")
    assert RunDir(tmp_path).prune_adapters() == []  # no readable member list: nothing removed


def test_stop_and_resume_lines():
    assert stop_line(Path("runs/x"), 4, "interrupted by signal SIGUSR2") == (
        "interrupted by signal SIGUSR2: stopped after step 4 with a checkpoint; "
        "continue with `populora train --resume runs/x`")
    assert resume_line(Path("runs/x"), 4, 6, Path("runs/x/checkpoints/step_4")) == (
        "resuming runs/x from step 4 of 6 (checkpoint runs/x/checkpoints/step_4)")
    assert "starting again from step 0" in resume_line(Path("r"), 0, 6, None)


def _env(tmp_path: Path) -> dict:
    return {**os.environ, "WANDB_MODE": "offline", "WANDB_SILENT": "true", "WANDB_DIR": str(tmp_path / "elsewhere"),
            "WANDB_CONFIG_DIR": str(tmp_path / "wandb-config"), "WANDB_CACHE_DIR": str(tmp_path / "wandb-cache")}


@pytest.mark.slow
def test_sigusr2_stop_and_resume_with_wandb_offline(tmp_path):
    pytest.importorskip("wandb")
    rd = tmp_path / "run"
    cli = [sys.executable, "-m", "populora.cli", "train"]
    proc = subprocess.Popen([*cli, "--config", TINY, "--run-dir", str(rd), "--quiet", "run.wandb=offline",
                             "selfplay.sequences_per_adapter=3"],  # resume does not depend on the batch
                            cwd=ROOT, env=_env(tmp_path), stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 300
    while time.time() < deadline and not read_metrics(rd) and proc.poll() is None:
        time.sleep(0.05)
    proc.send_signal(signal.SIGUSR2)
    _, err = proc.communicate(timeout=300)
    first = json.loads((rd / "summary.json").read_text())
    assert first["status"] == "interrupted by signal SIGUSR2", err
    stopped = first["steps_done"]
    assert f"stopped after step {stopped} with a checkpoint; continue with `populora train --resume {rd}`" in err
    run_id = (rd / "wandb_id").read_text().strip()

    done = subprocess.run([*cli, "--resume", str(rd), "--quiet"], cwd=ROOT, env=_env(tmp_path),
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert f"resuming {rd} from step {stopped} of 6" in done.stderr
    assert json.loads((rd / "summary.json").read_text())["status"] == "finished"
    assert (rd / "wandb_id").read_text().strip() == run_id
    runs = sorted((rd / "wandb").glob("offline-run-*"))
    assert len(runs) == 2 and all(p.name.endswith(f"-{run_id}") for p in runs)
    assert not (tmp_path / "elsewhere").exists()
    members = {m["id"] for m in json.loads((rd / "members.json").read_text())}
    assert {p.name for p in (rd / "adapters").iterdir()} == members
    lineage = [json.loads(line) for line in (rd / "lineage.jsonl").read_text().splitlines()]
    replaced = {e["replaced"] for e in lineage if e.get("event") == "replacement"}
    assert replaced and not replaced & {p.name for p in (rd / "adapters").iterdir()}

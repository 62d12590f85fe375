"""The main job on `tiny`: compute matching, resume after SIGKILL, corrupt checkpoints, failures."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from populora.checkpoint import list_checkpoints, load_latest
from populora.policy.adapters import AdapterWeights
from populora.selfplay.metrics import read_metrics, without_timings
from populora.selfplay.runner import train

ROOT = Path(__file__).resolve().parents[1]
TINY = str(ROOT / "configs" / "tiny.yaml")
BASELINE = ["population.baseline=true", "population.teachers=1", "population.students=1"]

pytestmark = pytest.mark.slow


def _final_adapters(rd: Path) -> dict[str, AdapterWeights]:
    return {p.name: AdapterWeights.load_peft(p) for p in sorted((rd / "adapters").iterdir())}


@pytest.fixture(scope="module")
def straight_run(tmp_path_factory) -> Path:
    rd = tmp_path_factory.mktemp("runs") / "straight"
    summary = train(TINY, [], run_dir=str(rd), progress=False)
    assert summary["status"] == "finished" and summary["steps_done"] == 6
    return rd


def test_every_exported_member_trained_at_least_min_age_steps(straight_run: Path):
    """The exported population holds no newborn: evolution runs only where a child trains
    evolution.min_age steps before the end (tiny: interval 3, min_age 2, 6 steps: at step 3 only)."""
    from populora.config import load_config

    cfg = load_config(TINY)
    members = json.loads((straight_run / "members.json").read_text())
    assert any(m["operator"] for m in members)  # evolution did run (at step 3) ...
    for m in members:  # ... and every member of the final population trained long enough
        assert cfg.selfplay.steps - m["born_step"] >= cfg.evolution.min_age, m
    rows = read_metrics(straight_run)
    assert [r["step"] for r in rows if "evolution/replaced" in r] == [3]
    # ratings before evolution (member/*) and of the population that goes on (population/*)
    step3 = rows[2]
    assert any(k.startswith("population/") for k in step3) and not any(k.startswith("population/") for k in rows[5])


def test_run_directory_is_complete(straight_run: Path):
    rd = straight_run
    for name in ("config.yaml", "metrics.jsonl", "lineage.jsonl", "members.json", "summary.json", "examples.jsonl"):
        assert (rd / name).is_file(), name
    rows = read_metrics(rd)
    assert [r["step"] for r in rows] == [1, 2, 3, 4, 5, 6]
    last = rows[-1]
    for key in ("teacher/code_o/valid_rate", "student/code_o/solve_rate", "time/generate_s"):
        assert key in last, key
    live = json.loads((rd / "members.json").read_text())
    for m in live:  # replaced members get new ids; every live one is logged under its own id
        for key in (f"member/{m['id']}/mu", f"member/{m['id']}/sigma"):
            assert key in last, key
        if m["born_step"] < last["step"]:  # a child born at the end of this step has not trained yet
            assert f"adapter/{m['id']}/optimizer_steps" in last
    members = json.loads((rd / "members.json").read_text())
    assert sorted(m["role"] for m in members) == ["student", "student", "teacher", "teacher"]
    for m in members:  # final adapters are loadable PEFT directories
        AdapterWeights.load_peft(rd / m["adapter_dir"])
    # evolution ran at step 3 and 6 (interval 3): replacements are in the lineage
    lineage = [json.loads(x) for x in (rd / "lineage.jsonl").read_text().splitlines()]
    assert any(e.get("event") == "replacement" for e in lineage)


def test_compute_matching_population_vs_baseline(straight_run: Path, tmp_path: Path):
    """Every adapter of a 2T+2S population trains on exactly the baseline agent's sequences and steps."""
    rd = tmp_path / "baseline"
    train(TINY, BASELINE + ["selfplay.steps=3"], run_dir=str(rd), progress=False)
    base_rows = read_metrics(rd)
    pop_rows = read_metrics(straight_run)[:3]
    for b, p in zip(base_rows, pop_rows):
        want_seq, want_opt = b["adapter/a0/sequences"], b["adapter/a0/optimizer_steps"]
        assert want_seq == 6 and want_opt == 1
        ids = sorted({k.split("/")[1] for k in p if k.startswith("adapter/") and k.endswith("/sequences")})
        assert len(ids) == 4
        for mid in ids:
            assert p[f"adapter/{mid}/sequences"] == want_seq, (mid, p[f"adapter/{mid}/sequences"])
            assert p[f"adapter/{mid}/optimizer_steps"] == want_opt
            assert p[f"adapter/{mid}/completion_tokens"] > 0  # tokens are logged (not matched)


def _spawn_train(rd: Path, extra: list[str]) -> subprocess.Popen:
    code = (
        "import sys; from populora.selfplay.runner import train; "
        f"train({TINY!r}, {extra!r}, run_dir={str(rd)!r}, progress=False)"
    )
    return subprocess.Popen([sys.executable, "-c", code], cwd=ROOT)


def test_sigkill_and_resume_is_bit_identical(straight_run: Path, tmp_path: Path):
    rd = tmp_path / "killed"
    proc = _spawn_train(rd, [])
    deadline = time.time() + 300
    while time.time() < deadline and not any(s >= 3 for s, _ in list_checkpoints(rd / "checkpoints")):
        time.sleep(0.05)
        assert proc.poll() is None, "the run ended before it could be killed"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert load_latest(rd / "checkpoints").step >= 3
    summary = train(None, [], run_dir=str(rd), resume=True, progress=False)
    assert summary["steps_done"] == 6
    want, got = _final_adapters(straight_run), _final_adapters(rd)
    assert want.keys() == got.keys()
    for k in want:
        assert want[k].equal(got[k]), f"adapter {k} differs after resume"
    assert json.loads((rd / "members.json").read_text()) == json.loads((straight_run / "members.json").read_text())
    a = [without_timings(r) for r in read_metrics(straight_run)]
    b = [without_timings(r) for r in read_metrics(rd)]
    assert [r["step"] for r in b] == [1, 2, 3, 4, 5, 6]
    assert a[3:] == b[3:]
    # resubmitting a finished run is a no-op
    again = train(None, [], run_dir=str(rd), resume=True, progress=False)
    assert again["steps_done"] == 6 and len(read_metrics(rd)) == 6


def test_corrupt_checkpoint_falls_back_to_previous(straight_run: Path, tmp_path: Path):
    rd = tmp_path / "corrupt"
    shutil.copytree(straight_run, rd)
    ckpts = list_checkpoints(rd / "checkpoints")
    assert len(ckpts) == 2  # keep_checkpoints=2
    (_, newest), (prev_step, _) = ckpts[-1], ckpts[-2]
    blob = next((newest / "adapters").iterdir()) / "adapter_model.safetensors"
    data = bytearray(blob.read_bytes())
    data[-10] ^= 0xFF
    blob.write_bytes(bytes(data))
    assert load_latest(rd / "checkpoints").step == prev_step
    # a partial (manifest-less) directory is also skipped
    (newest / "manifest.json").unlink()
    assert load_latest(rd / "checkpoints").step == prev_step


def test_resume_falls_back_past_a_corrupt_newest_checkpoint_and_sets_it_aside(straight_run: Path, tmp_path: Path):
    rd = tmp_path / "fallback"
    shutil.copytree(straight_run, rd)
    (newest_step, newest), (prev_step, _) = list_checkpoints(rd / "checkpoints")[-1], list_checkpoints(rd / "checkpoints")[-2]
    assert (newest / "optimizer").is_dir() and not (newest / "optimizer.pt").exists()  # no pickle written
    state = next((newest / "optimizer").glob("*.safetensors"))
    data = bytearray(state.read_bytes())
    data[-3] ^= 0xFF
    state.write_bytes(bytes(data))
    summary = train(None, [], run_dir=str(rd), resume=True, progress=False)
    assert summary["steps_done"] == 6 and summary["status"] == "finished"
    assert (rd / "checkpoints" / f"unusable-{newest.name}").is_dir()  # kept for a look, never loaded again
    assert [s for s, _ in list_checkpoints(rd / "checkpoints")] == [prev_step, newest_step]
    want, got = _final_adapters(straight_run), _final_adapters(rd)
    assert all(want[k].equal(got[k]) for k in want) and want.keys() == got.keys()
    assert [without_timings(r) for r in read_metrics(rd)] == [without_timings(r) for r in read_metrics(straight_run)]


def test_existing_run_is_not_clobbered(straight_run: Path):
    from populora.config import ConfigError

    with pytest.raises(ConfigError, match="already holds a run"):
        train(TINY, [], run_dir=str(straight_run), progress=False)
    with pytest.raises(ConfigError, match="cannot change on resume"):
        train(None, ["lora.rank=8"], run_dir=str(straight_run), resume=True, progress=False)


def test_sigterm_checkpoints_and_stops(tmp_path: Path):
    rd = tmp_path / "term"
    proc = _spawn_train(rd, ["selfplay.steps=50", "run.checkpoint_every=100"])
    deadline = time.time() + 300
    while time.time() < deadline and len(read_metrics(rd)) < 2:
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=300) == 0
    summary = json.loads((rd / "summary.json").read_text())
    assert summary["status"].startswith("interrupted by signal SIGTERM")
    ck = load_latest(rd / "checkpoints")
    assert ck is not None and ck.step == summary["steps_done"] >= 2

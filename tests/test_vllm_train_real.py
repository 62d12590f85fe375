"""``populora train ... policy.engine=vllm`` end to end on the real vLLM engine (the CPU build here).

Marked ``vllm`` (skipped without vLLM unless POPULORA_REQUIRE_VLLM=1) and ``slow``. The engine runs
with vLLM's default multiprocessing, as on a GPU node: its own EngineCore process (and a worker), so
that killing it and signalling it are what they would be on a cluster.

- two ranks (``--nproc 2``), one engine each: the engine of rank 1 is killed by pid in the middle of
  the run; both ranks stop with a one-line error naming the engine and the cause, exit non-zero, and
  leave the last checkpoint intact;
- ``--resume`` on two ranks runs to the end, evolution included, while Slurm's preemption signal
  (SIGUSR2) is sent to every process the trainers started (engine processes, sandbox fork servers):
  none of them dies, and none is left behind. (One run serves both, so that the suite starts four
  engines rather than five; a one-rank run of the vLLM engine is in test_vllm_publish_real.)
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from procutil import descendants, running

from populora.checkpoint import find_latest

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[1]
TRAIN = [sys.executable, "-m", "populora.cli", "train", "--quiet"]
TINY_VLLM = ["--config", str(ROOT / "configs" / "tiny.yaml"), "policy.engine=vllm", "policy.lora.rank=8",
             "policy.vllm.enforce_eager=true",
             "selfplay.sequences_per_adapter=3",  # tiny.yaml: 6; what is checked does not depend on it
             "selfplay.steps=4", "evolution.min_age=1"]  # tiny.yaml: 6 steps, min_age 2
STEPS = 4  # one step before the kill, three after the resume; evolution at step 3 (interval 3), its children train at step 4


def _env(tmp_path: Path) -> dict:
    return {**os.environ, "VLLM_CACHE_ROOT": str(tmp_path / "vllm-cache"), "PYTHONUNBUFFERED": "1"}


def _name(pid: int) -> str:
    """A process's command line (vLLM renames its processes: VLLM::EngineCore, VLLM::Worker)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _parent(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


def _rank_of(pid: int) -> int:
    """RANK from a trainer's environment, as torchrun set it."""
    with open(f"/proc/{pid}/environ", "rb") as f:
        env = dict(item.split(b"=", 1) for item in f.read().split(b"\0") if b"=" in item)
    return int(env[b"RANK"])


def _steps_logged(rd: Path) -> int:
    path = rd / "metrics.jsonl"
    return len(path.read_text().splitlines()) if path.exists() else 0


def _wait(predicate, timeout: float, proc: subprocess.Popen, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if proc.poll() is not None:
            raise AssertionError(f"the run ended (exit {proc.returncode}) while waiting for {what}")
        if time.monotonic() > deadline:
            _kill_tree(proc)
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.5)


def _kill_tree(proc: subprocess.Popen) -> None:
    for pid in [proc.pid, *descendants(proc.pid)]:  # torchrun's ranks are not in its process group
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _finish(proc: subprocess.Popen, timeout: float) -> int:
    try:
        return proc.wait(timeout)
    except subprocess.TimeoutExpired:
        _kill_tree(proc)
        raise


def _summary(rd: Path) -> dict:
    return json.loads((rd / "summary.json").read_text())


def test_killing_one_ranks_engine_stops_every_rank_and_resume_finishes_the_run(tmp_path):
    rd = tmp_path / "run"
    err = tmp_path / "stderr"
    proc = subprocess.Popen([*TRAIN, "--nproc", "2", "--run-dir", str(rd), *TINY_VLLM], cwd=tmp_path,
                            env=_env(tmp_path), stdout=subprocess.DEVNULL, stderr=err.open("w"),
                            start_new_session=True)
    _wait(lambda: _steps_logged(rd) >= 1, 900, proc, "step 1")
    engines = sorted((p for p in descendants(proc.pid) if "EngineCore" in _name(p)), key=int)
    assert len(engines) == 2, "one engine per rank"
    ranks = {p: _rank_of(_parent(p)) for p in engines}  # the engine's parent is its rank's trainer
    assert sorted(ranks.values()) == [0, 1]
    victim = next(p for p, r in ranks.items() if r == 1)
    os.kill(victim, signal.SIGKILL)
    code = _finish(proc, 300)
    text = err.read_text()
    assert code != 0, text[-2000:]
    failures = [line for line in text.splitlines() if line.startswith("populora train: rank ")]
    assert len(failures) == 2, text[-3000:]  # both ranks stopped, each with one line
    for line in failures:
        assert re.search(r"generation engine 'vllm' failed on rank 1 \(\w+ requests\): vllm engine \(cpu\) of rank 1: "
                         rf"its process \S+ \(pid {victim}\) died \(killed by SIGKILL\); the last checkpoint is "
                         rf"intact: `populora train --resume {re.escape(str(rd))}` continues from it", line), line
    summary = _summary(rd)
    assert summary["status"].startswith("failed: generation engine 'vllm' failed on rank 1")
    ckpt, skipped = find_latest(rd / "checkpoints")
    assert ckpt is not None and not skipped and ckpt.step == summary["steps_done"] >= 1
    assert _steps_logged(rd) == ckpt.step  # nothing of the failed step was logged or saved

    # the resumed run goes to the end, evolution included, while Slurm's preemption signal reaches every
    # process the trainers started (what `scancel --signal=USR2` does to the step, the trainers left out)
    steps_before = _steps_logged(rd)
    log = tmp_path / "resumed-stderr"
    proc = subprocess.Popen([*TRAIN, "--nproc", "2", "--resume", str(rd)], cwd=tmp_path, env=_env(tmp_path),
                            stdout=subprocess.DEVNULL, stderr=log.open("w"), start_new_session=True)
    _wait(lambda: _steps_logged(rd) > steps_before, 900, proc, "a step after the resume")
    trainers = {p for p in descendants(proc.pid) if "populora.cli" in _name(p)}
    helpers = [p for p in descendants(proc.pid) if p not in trainers]
    engine = [p for p in helpers if "EngineCore" in _name(p)]
    servers = [p for p in helpers if "sandbox/server.py" in _name(p)]
    assert len(engine) == 2 and servers, {p: _name(p) for p in helpers}
    for pid in helpers:
        try:
            os.kill(pid, signal.SIGUSR2)
        except ProcessLookupError:
            pass
    time.sleep(2)
    assert all(running(p) for p in engine + servers), "a process the trainer started died of SIGUSR2"
    assert _finish(proc, 900) == 0, log.read_text()[-3000:]
    summary = _summary(rd)
    assert summary["status"] == "finished" and summary["steps_done"] == STEPS
    lineage = [json.loads(line) for line in (rd / "lineage.jsonl").read_text().splitlines()]
    assert any(e.get("event") == "replacement" for e in lineage)  # evolution ran
    time.sleep(1)
    assert not [p for p in helpers if running(p)], "processes left behind"
    assert [json.loads(line)["step"] for line in (rd / "metrics.jsonl").read_text().splitlines()] == \
        list(range(1, STEPS + 1))
    assert {"rank-0", "rank-1"} <= {p.name for p in (tmp_path / "vllm-cache").iterdir()}

"""Resume refuses, and changes nothing, when it cannot continue a run faithfully (no model is loaded)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from populora import checkpoint
from populora.checkpoint import MANIFEST, CheckpointError, save_checkpoint
from populora.config import ConfigError, load_config, to_yaml
from populora.jsonl import JsonlError
from populora.selfplay.runner import resume_point, train

ROOT = Path(__file__).resolve().parents[1]
TINY = str(ROOT / "configs" / "tiny.yaml")


def _run_dir(tmp_path: Path, overrides=()) -> Path:
    rd = tmp_path / "run"
    rd.mkdir()
    cfg = load_config(TINY, list(overrides))
    cfg.run.dir = str(rd)
    (rd / "config.yaml").write_text(to_yaml(cfg))
    return rd


def _checkpoint(rd: Path, step: int) -> Path:
    from test_checkpoint import _payload

    adapters, opts, state = _payload()
    return save_checkpoint(rd / "checkpoints", step, adapters, opts, state, keep=10)


def _metrics(rd: Path, steps, extra: str = "") -> None:
    (rd / "metrics.jsonl").write_text("".join(json.dumps({"step": s, "x": 1.0}) + "\n" for s in steps) + extra)
    (rd / "lineage.jsonl").write_text(
        "".join(json.dumps({"event": "founder", "step": 0, "member": {"id": m, "role": "teacher"}}) + "\n"
                for m in ("t0", "t1")))


def _snapshot(root: Path) -> dict[str, bytes | None]:
    return {p.relative_to(root).as_posix(): (p.read_bytes() if p.is_file() else None) for p in sorted(root.rglob("*"))}


def _cli_resume(rd: Path, capsys) -> tuple[int, str]:
    from populora.cli import main

    code = main(["train", "--resume", str(rd), "--quiet"])
    return code, capsys.readouterr().err


def test_every_checkpoint_corrupt_refuses_with_exit_1_and_touches_nothing(tmp_path, capsys):
    rd = _run_dir(tmp_path)
    for step in (3, 4):
        _checkpoint(rd, step)
        (rd / "checkpoints" / f"step_{step:06d}" / MANIFEST).unlink()
    _metrics(rd, [1, 2, 3, 4, 5])
    before = _snapshot(rd)
    with pytest.raises(CheckpointError, match=r"no usable checkpoint \(step_000004: .*manifest.json: missing"):
        train(None, [], run_dir=str(rd), resume=True, progress=False)
    code, err = _cli_resume(rd, capsys)
    assert code == 1 and "nothing was changed" in err and err.count("\n") == 1
    assert _snapshot(rd) == before  # no rotation, no truncation, no tensorboard directory


def test_checkpoints_gone_after_logged_steps_is_refused(tmp_path, capsys):
    rd = _run_dir(tmp_path)  # tiny: a checkpoint every step
    _metrics(rd, [1, 2, 3])
    before = _snapshot(rd)
    code, err = _cli_resume(rd, capsys)
    assert code == 1 and "metrics.jsonl reaches step 3" in err
    assert _snapshot(rd) == before


def test_a_finished_run_without_checkpoints_is_refused(tmp_path, capsys):
    rd = _run_dir(tmp_path)
    (rd / "summary.json").write_text(json.dumps({"status": "finished", "steps_done": 6}))
    before = _snapshot(rd)
    code, err = _cli_resume(rd, capsys)
    assert code == 1 and "summary.json" in err
    assert _snapshot(rd) == before


def test_no_checkpoint_ever_completed_starts_over(tmp_path):
    rd = _run_dir(tmp_path, ["run.checkpoint_every=5"])
    _metrics(rd, [1, 2])  # stopped before its first checkpoint (step 5): nothing to lose
    cfg = load_config(TINY, ["run.checkpoint_every=5"])
    assert resume_point(cfg, rd) == (None, [])
    # stopped while writing the first checkpoint, after step 5's metrics line (the order of a step:
    # the line, then the checkpoint; a Slurm requeue killed a CI sweep job there): nothing to lose
    _metrics(rd, [1, 2, 3, 4, 5])
    assert resume_point(cfg, rd) == (None, [])
    # a step after the first checkpoint step: that checkpoint was committed, and is gone
    _metrics(rd, [1, 2, 3, 4, 5, 6])
    with pytest.raises(CheckpointError, match="reaches step 6"):
        resume_point(cfg, rd)


def test_a_run_killed_while_writing_its_first_checkpoint_resumes_from_step_0(tmp_path, capsys):
    rd = _run_dir(tmp_path)  # tiny: a checkpoint every step
    _metrics(rd, [1])  # step 1's line, then killed while its checkpoint was staged, not committed
    staging = checkpoint.staging_dir(rd / "checkpoints", 1)
    staging.mkdir(parents=True)
    (staging / "t0").mkdir()
    (staging / "t0" / "adapter_model.safetensors").write_bytes(b"half a file")
    assert resume_point(load_config(TINY), rd) == (None, [])
    _metrics(rd, [1, 2])  # but a step after it: checkpoint 1 was committed, and is gone
    code, err = _cli_resume(rd, capsys)
    assert code == 1 and "metrics.jsonl reaches step 2" in err


def test_a_malformed_metrics_line_stops_the_resume_and_is_kept(tmp_path, capsys):
    rd = _run_dir(tmp_path)
    _checkpoint(rd, 2)
    _metrics(rd, [1], extra='{"step": 2, oops\n{"step": 3}\n')
    (rd / "examples.jsonl").write_text('{"step": 1}\n{"step": 3}\n')
    before = _snapshot(rd)
    with pytest.raises(JsonlError, match=r"metrics.jsonl:2: invalid JSON"):
        train(None, [], run_dir=str(rd), resume=True, progress=False)
    code, err = _cli_resume(rd, capsys)
    assert code == 1 and "metrics.jsonl:2" in err
    assert _snapshot(rd) == before  # neither the bad line nor examples.jsonl's step 3 was dropped


def test_a_list_shaped_summary_stops_the_resume(tmp_path, capsys):
    rd = _run_dir(tmp_path)
    _checkpoint(rd, 6)
    _metrics(rd, range(1, 7))
    (rd / "summary.json").write_text("[1, 2]")
    before = _snapshot(rd)
    code, err = _cli_resume(rd, capsys)
    assert code == 1 and "summary.json: invalid run summary (a JSON array" in err
    assert _snapshot(rd) == before


@pytest.mark.parametrize("text, match", [
    ("model: [1, 2\n", "YAML syntax error at line 2"),
    ("- a\n- b\n", "non-empty YAML mapping"),
    ("", "non-empty YAML mapping"),
    ("policy: {rank: 3}\n", "rank"),
])
def test_a_damaged_saved_config_is_named(tmp_path, capsys, text, match):
    rd = _run_dir(tmp_path)
    (rd / "config.yaml").write_text(text)
    with pytest.raises(ConfigError, match=match) as e:
        train(None, [], run_dir=str(rd), resume=True, progress=False)
    assert str(e.value).startswith(f"{rd / 'config.yaml'}: ")
    code, err = _cli_resume(rd, capsys)
    assert code == 2 and err.count("\n") == 1 and "config.yaml" in err


def test_a_resume_error_names_the_overrides_or_the_saved_config(tmp_path):
    from populora.run_dir import RunDir

    rd = _run_dir(tmp_path)
    # the saved config reads alone: the error is the override's (an omegaconf type error, and a
    # value the run section's own check refuses)
    for bad in ("selfplay.steps=abc", "run.collective_timeout_s=-1"):
        with pytest.raises(ConfigError, match=r"^command-line overrides: ") as e:
            RunDir(rd).read_config([bad])
        assert bad.split("=")[0].split(".")[-1] in str(e.value)
    # a damaged saved config is the file's, with or without a (good) override
    (rd / "config.yaml").write_text("policy: {rank: 3}\n")
    for overrides in ([], ["selfplay.steps=9"]):
        with pytest.raises(ConfigError, match="rank") as e:
            RunDir(rd).read_config(overrides)
        assert str(e.value).startswith(f"{rd / 'config.yaml'}: ")

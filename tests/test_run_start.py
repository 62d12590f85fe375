"""A run exists once it has started (its model loaded, step 0 saved): a failed start can be started
again with new settings, a non-empty directory that is not a run is refused, and environment
failures of `populora train` (model, config file, disk) are one line naming the file and the fix."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest

from populora.cli import main
from populora.model_source import check_model, directory_problem
from populora.run_dir import RunDir, RunDirError

REPO = Path(__file__).resolve().parent.parent
TINY = str(REPO / "configs" / "tiny.yaml")


def one_line(err: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1, err
    return lines[0]


# -- the run directory's start rules (milliseconds) -----------------------------------------------
def test_new_start_rules(tmp_path):
    assert RunDir(tmp_path / "missing").check_new_start() == "new"
    (tmp_path / "empty").mkdir()
    assert RunDir(tmp_path / "empty").check_new_start() == "new"
    junk = tmp_path / "junk"
    junk.mkdir()
    (junk / "metrics.jsonl").write_text('{"step": 1}\n')
    with pytest.raises(RunDirError, match="is not empty and holds no run"):
        RunDir(junk).check_new_start()


def test_a_failed_start_is_not_a_run_and_is_replaced(tmp_path):
    run = RunDir(tmp_path / "r")
    run.create("name: a\n", code={"commit": "abc"})
    (run.path / "train.log").write_text("loading\n")
    (run.path / "notes.txt").write_text("mine\n")  # not the run's: stays
    assert not run.holds_run() and run.failed_start()
    run.record_start_error("ModelNotFound: no config.json")
    assert run.start_error() == "ModelNotFound: no config.json"
    assert run.check_new_start() == "over"
    assert sorted(run.clear_start()) == ["config.yaml", "run.json", "train.log"]
    assert sorted(p.name for p in run.path.iterdir()) == ["notes.txt"]
    run.create("name: b\n")
    run.mark_started()
    record = json.loads((run.path / "run.json").read_text())
    assert run.holds_run() and record["started"] is True and "error" not in record


def test_a_run_with_steps_is_refused_and_a_stepless_one_started_over(tmp_path):
    run = RunDir(tmp_path / "r")
    run.create("name: a\n")
    run.mark_started()
    assert run.check_new_start() == "over"  # started, but no step completed
    (run.path / "metrics.jsonl").write_text('{"step": 1}\n')
    with pytest.raises(RunDirError, match=r"already holds a run \(1 step\(s\) done\)"):
        run.check_new_start()
    with pytest.raises(RunDirError, match="refusing to clear"):
        run.clear_start()


def test_a_directory_written_before_runs_recorded_their_start_is_a_run(tmp_path):
    (tmp_path / "config.yaml").write_text("name: old\n")
    (tmp_path / "run.json").write_text('{"format": 1}')
    assert RunDir(tmp_path).holds_run() and not RunDir(tmp_path).failed_start()


# -- the model, checked before anything loads (milliseconds) -----------------------------------------
def test_model_directory_problems_name_the_missing_part(tmp_path):
    assert "does not exist" in directory_problem(tmp_path / "nope")
    (tmp_path / "m").mkdir()
    assert "no config.json" in directory_problem(tmp_path / "m")
    (tmp_path / "m" / "config.json").write_text("{}")
    assert "no weights" in directory_problem(tmp_path / "m")
    (tmp_path / "m" / "model.safetensors.index.json").write_text(json.dumps(
        {"weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}}))
    (tmp_path / "m" / "model-00001-of-00002.safetensors").write_bytes(b"x")
    assert "1 missing (model-00002-of-00002.safetensors)" in directory_problem(tmp_path / "m")
    (tmp_path / "m" / "model-00002-of-00002.safetensors").write_bytes(b"x")
    assert "no tokenizer" in directory_problem(tmp_path / "m")
    (tmp_path / "m" / "tokenizer.json").write_text("{}")
    assert directory_problem(tmp_path / "m") is None
    assert check_model("tiny").problem is None


def test_a_hub_id_offline_or_unreachable_is_one_line_without_retries(tmp_path):
    offline = check_model("org/model", hf_home=tmp_path, env={"HF_HUB_OFFLINE": "1"}, probe=None)
    assert "not in the Hugging Face cache" in offline.problem and "HF_HUB_OFFLINE=1" in offline.problem
    tries = []
    down = check_model("org/model", hf_home=tmp_path, env={}, probe=lambda: tries.append(1) or "timed out")
    assert tries == [1] and "cannot be reached from this machine (timed out)" in down.problem
    # cached: the snapshot is checked as a directory; an unreachable Hub is then no problem
    snap = tmp_path / "hub" / "models--org--model" / "snapshots" / "0123"
    snap.mkdir(parents=True)
    (tmp_path / "hub" / "models--org--model" / "refs").mkdir()
    (tmp_path / "hub" / "models--org--model" / "refs" / "main").write_text("0123")
    (snap / "config.json").write_text("{}")
    assert "no weights" in check_model("org/model", hf_home=tmp_path, env={}, probe=None).problem
    (snap / "model.safetensors").write_bytes(b"x")
    (snap / "tokenizer.json").write_text("{}")
    cached = check_model("org/model", hf_home=tmp_path, env={}, probe=lambda: "timed out")
    assert cached.problem is None and cached.cached_dir == snap and cached.hub_unreachable


# -- populora train: one line, nothing created ----------------------------------------------------------
def test_train_with_a_missing_or_empty_model_is_one_line_and_creates_nothing(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    for model, fragment in ((tmp_path / "nope", "does not exist"), (tmp_path / "empty", "no config.json")):
        code = main(["train", "--config", TINY, "--run-dir", str(tmp_path / "r"), f"policy.model={model}"])
        line = one_line(capsys.readouterr().err)
        assert code == 2 and fragment in line and line.startswith(f"populora train: policy.model={model}: ")
        assert not (tmp_path / "r").exists()


def test_train_with_an_offline_hub_id_is_one_line_at_once(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    code = main(["train", "--config", TINY, "--run-dir", str(tmp_path / "r"), "policy.model=org/not-cached"])
    line = one_line(capsys.readouterr().err)
    assert code == 2 and "Hugging Face Hub id, not in the Hugging Face cache" in line and "huggingface-cli" in line


def test_unreadable_or_binary_config_file_is_one_line(tmp_path, capsys, monkeypatch):
    binary = tmp_path / "bin.yaml"
    binary.write_bytes(b"\xe1\x00\xff" * 50)
    assert main(["train", "--config", str(binary), "--run-dir", str(tmp_path / "r")]) == 2
    assert f"{binary}: not a text file" in one_line(capsys.readouterr().err)
    assert main(["train", "--config", str(tmp_path), "--run-dir", str(tmp_path / "r")]) == 2
    assert "a directory, not a config file" in one_line(capsys.readouterr().err)
    from omegaconf import OmegaConf

    def denied(path):
        raise PermissionError(errno.EACCES, "Permission denied", str(path))

    monkeypatch.setattr(OmegaConf, "load", denied)
    assert main(["train", "--config", TINY, "--run-dir", str(tmp_path / "r")]) == 2
    assert "cannot read the config file (Permission denied)" in one_line(capsys.readouterr().err)


def test_disk_full_during_a_run_is_one_line_naming_the_run(tmp_path, capsys, monkeypatch):
    from populora.selfplay import runner

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(runner, "train", full)
    monkeypatch.setattr("populora.selfplay.runner.train", full)
    code = main(["train", "--config", TINY, "--run-dir", str(tmp_path / "r")])
    line = one_line(capsys.readouterr().err)
    assert code == 1 and "no space left on the device" in line and str(tmp_path / "r") in line
    assert f"populora train --resume {tmp_path / 'r'}" in line


def test_argparse_errors_are_one_line(capsys):
    with pytest.raises(SystemExit) as e:
        main(["eval", "--runs", "x", "--limit", "0"])
    assert e.value.code == 2
    line = one_line(capsys.readouterr().err)
    assert line.startswith("populora eval: argument --limit: must be >= 1") and "populora eval --help" in line


def test_nproc_warns_when_ranks_outnumber_cores_or_members(monkeypatch):
    from populora.commands.train import nproc_warnings
    from populora.config import load_config

    monkeypatch.setattr("populora.cpus.available_cpus", lambda: 2)
    cfg = load_config(TINY, ["population.teachers=2", "population.students=2", "policy.device=cpu"])
    warnings = nproc_warnings(8, cfg)
    assert len(warnings) == 2 and "8 ranks on 2 CPU core(s)" in warnings[0] and "members (4)" in warnings[1]
    assert nproc_warnings(2, cfg) == []


@pytest.mark.slow
def test_a_failed_start_is_retried_with_a_corrected_model(tmp_path, capsys):
    """The walk of the issue: a model that passes the quick check but does not load leaves a failed
    start (status says so, --resume refuses it); the same command with a corrected model starts."""
    bad = tmp_path / "bad-model"
    bad.mkdir()
    (bad / "config.json").write_text("{}")
    (bad / "model.safetensors").write_bytes(b"not safetensors")
    (bad / "tokenizer.json").write_text("{}")
    rd = tmp_path / "run"
    args = ["train", "--config", TINY, "--run-dir", str(rd), "--quiet", "selfplay.steps=1", "sandbox.workers=1"]
    assert main([*args, f"policy.model={bad}"]) == 2
    line = one_line(capsys.readouterr().err)
    assert "the run did not start" in line and "train.log" in line
    assert RunDir(rd).failed_start() and "Traceback" in (rd / "train.log").read_text()
    assert main(["status", str(rd)]) == 0 and "never started" in capsys.readouterr().out
    assert main(["train", "--resume", str(rd)]) == 2 and "never started" in one_line(capsys.readouterr().err)
    assert main(args) == 0
    err = capsys.readouterr().err
    assert "starting" in err and "over" in err
    record = json.loads((rd / "run.json").read_text())
    assert record["started"] is True and record["code"]["commit"] and record["code"]["source"]
    assert (rd / "summary.json").is_file()
    assert main(args) == 2 and "already holds a run" in capsys.readouterr().err


def test_ctrl_c_during_eval_says_how_to_continue(monkeypatch, capsys):
    import populora.commands.eval as eval_cmd

    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(eval_cmd, "run_eval", interrupted)
    assert main(["eval", "--runs", "runs/x"]) == 130
    line = one_line(capsys.readouterr().err)
    assert line.startswith("interrupted; ") and "run the same command again to continue" in line


def test_a_vllm_preset_without_vllm_is_one_line_naming_the_extra(tmp_path, capsys, monkeypatch):
    import populora.extras

    real = populora.extras.available
    monkeypatch.setattr(populora.extras, "available", lambda m: m != "vllm" and real(m))
    code = main(["train", "--config", TINY, "--run-dir", str(tmp_path / "r"), "policy.engine=vllm",
                 "policy.lora.rank=8"])
    line = one_line(capsys.readouterr().err)
    assert code == 2 and "policy.engine=vllm: needs the 'vllm' extra" in line and "pip install" in line
    assert not (tmp_path / "r").exists()


def test_eval_with_a_missing_model_is_one_line(tmp_path, capsys):
    code = main(["eval", str(tmp_path / "run"), "--model", str(tmp_path / "nope"), "--benchmarks", "gsm8k"])
    line = one_line(capsys.readouterr().err)
    assert code == 2 and line.startswith(f"populora eval: --model {tmp_path / 'nope'}: ") and "does not exist" in line


def test_a_full_disk_reported_by_safetensors_becomes_an_os_error_naming_the_path(tmp_path):
    from populora.selfplay.runner import disk_errors

    class SafetensorError(Exception):  # how safetensors' Rust side reports a failed write
        pass

    with pytest.raises(OSError) as e, disk_errors(tmp_path / "ckpt"):
        raise SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)")
    assert e.value.errno == errno.ENOSPC and e.value.filename == str(tmp_path / "ckpt")
    with pytest.raises(KeyError), disk_errors(tmp_path):
        raise KeyError("not a disk error")


@pytest.mark.slow
def test_a_real_full_disk_is_one_line_and_the_run_resumes_after_space_is_freed(tmp_path, capsys):
    import subprocess

    disk = tmp_path / "disk"
    disk.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(disk)],
                                           capture_output=True).returncode != 0:
        pytest.skip("needs root and a tmpfs mount")
    try:
        rd = disk / "run"
        args = ["train", "--config", TINY, "--run-dir", str(rd), "--quiet", "sandbox.workers=1", "selfplay.steps=3"]
        assert main(args) == 1
        line = one_line(capsys.readouterr().err)
        assert "no space left on the device" in line and f"populora train --resume {rd}" in line
        subprocess.run(["mount", "-o", "remount,size=64m", str(disk)], check=True)
        assert main(["train", "--resume", str(rd), "--quiet"]) == 0
        assert json.loads((rd / "summary.json").read_text())["status"] == "finished"
    finally:
        subprocess.run(["umount", str(disk)], capture_output=True)

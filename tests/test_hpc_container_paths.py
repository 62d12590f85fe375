"""Benchmark data and models inside the container: the image's shipped test sets or a bound copy, checked
before submission."""

from __future__ import annotations

from pathlib import Path

import pytest

from eval import benchmarks
from jobs import sweep
from jobs.container_paths import benchmarks_inside, host_path, parse_bind, path_problems
from jobs.profiles import ContainerSpec, load_profile

REPO = Path(__file__).resolve().parent.parent


def with_binds(binds, **env):
    paper = load_profile("paper-1xh100")
    return paper.replace(container=ContainerSpec(image="x.sif", binds=tuple(binds)), env={**paper.env, **env})


def test_parse_bind():
    assert parse_bind("/a") == ("/a", "/a")
    assert parse_bind("/a:/b") == ("/a", "/b") and parse_bind("/a:/b:ro") == ("/a", "/b")


def test_host_path_follows_the_deepest_bind(tmp_path):
    prof = with_binds([f"{tmp_path}:/data", f"{tmp_path / 'm'}:/data/models"])
    assert host_path(prof, "/data/benchmarks") == tmp_path / "benchmarks"
    assert host_path(prof, "/data/models/qwen") == tmp_path / "m" / "qwen"
    assert host_path(prof, "/elsewhere/x") is None
    assert host_path(prof.replace(container=None), "/elsewhere/x") == Path("/elsewhere/x")


def test_a_container_job_with_no_copy_bound_reads_the_images_shipped_test_sets(tmp_path):
    assert benchmarks_inside(with_binds([]), []) is None  # the image's eval/data: nothing to bind
    assert path_problems(with_binds([]), with_binds([]), ["tiny"], []) == ([], [])
    bound = with_binds([f"{tmp_path}:/opt/populora/benchmarks"])
    assert benchmarks_inside(bound, []) == str(benchmarks.IMAGE_DIR)  # a user's copy bound over it


def test_a_users_copy_the_jobs_cannot_see_is_an_error_naming_the_path_and_the_bind(tmp_path):
    unseen = with_binds([], POPULORA_BENCHMARKS_DIR="/data/bench")
    errors, _ = path_problems(unseen, unseen, ["tiny"], [])
    assert len(errors) == 1 and "benchmark data /data/bench: not visible" in errors[0]
    assert "/path/to/benchmarks:/data/bench" in errors[0]
    errors, _ = path_problems(with_binds([]), with_binds([]), ["tiny"], ["--data-dir", "/data/b2"])
    assert errors and "benchmark data /data/b2: not visible" in errors[0]


def test_bound_data_and_model_pass_and_a_missing_source_is_named(tmp_path):
    (tmp_path / "bench").mkdir()
    (tmp_path / "models" / "qwen").mkdir(parents=True)
    good = with_binds([f"{tmp_path / 'bench'}:/opt/populora/benchmarks", f"{tmp_path / 'models'}:/models"])
    assert path_problems(good, good, ["/models/qwen"], ["--model", "/models/qwen"]) == ([], [])
    errors, _ = path_problems(good, good, ["/models/llama"], [])
    assert errors == [f"model /models/llama (bound from {tmp_path / 'models' / 'llama'}): does not exist on this "
                      f"machine; profile 'paper-1xh100' ({REPO / 'slurm' / 'profiles' / 'paper-1xh100.yaml'})"]
    gone = with_binds([f"{tmp_path / 'nowhere'}:/opt/populora/benchmarks"])
    errors, _ = path_problems(gone, gone, ["tiny"], [])
    assert any(f"container.binds: {tmp_path / 'nowhere'} does not exist" in e for e in errors)


def test_a_hub_id_warns_about_nodes_without_internet(tmp_path):
    (tmp_path / "bench").mkdir()
    prof = with_binds([f"{tmp_path / 'bench'}:/opt/populora/benchmarks"])
    errors, warnings = path_problems(prof, prof, ["Qwen/Qwen2.5-Coder-7B"], [])
    assert errors == [] and "HF_HUB_OFFLINE=1" in warnings[0] and "local path" in warnings[0]
    offline = with_binds([f"{tmp_path / 'bench'}:/opt/populora/benchmarks"], HF_HUB_OFFLINE="1")
    assert path_problems(offline, offline, ["Qwen/Qwen2.5-Coder-7B"], []) == ([], [])


def test_sweep_refuses_data_the_jobs_cannot_read_before_anything_is_written(tmp_path, monkeypatch):
    """The shipped test sets need nothing; LiveCodeBench's tests, the one download, are not there."""
    monkeypatch.setattr(sweep, "preflight", lambda profile: None)  # no Slurm or image on this machine
    plan = sweep.build_plan(sweep.load_spec(REPO / "configs" / "sweeps" / "populations-7b.yaml"), tmp_path / "sw",
                            validate=False)
    with pytest.raises(sweep.SweepError, match="benchmark livecodebench: LiveCodeBench release_v5: missing"):
        sweep.submit_sweep(plan)
    assert not (tmp_path / "sw").exists()
    text = sweep.dry_run_text(plan)
    assert "would refuse to submit: benchmark livecodebench" in text and "benchmark gsm8k" not in text


def test_a_dry_run_that_would_be_refused_exits_1(tmp_path, capsys):
    from populora.cli import build_parser

    args = build_parser().parse_args(["sweep", str(REPO / "configs" / "sweeps" / "populations-7b.yaml"),
                                      "--out", str(tmp_path / "sw"), "--dry-run"])
    assert args.func(args) == 1
    assert "would refuse to submit: benchmark livecodebench" in capsys.readouterr().out
    assert not (tmp_path / "sw").exists()

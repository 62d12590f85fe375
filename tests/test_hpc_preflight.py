"""The sweep's preflight (jobs/preflight.py) and the profile settings real sites need: a dry run refuses
an empty model directory and missing LiveCodeBench tests and prints the disk it will use; the model
is written once; the leaderboard runs on its own (CPU) profile; wckey and caches come from the
profile; jobs run the installed copy of the code, and each run records its commit."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import cloudpickle
import pytest

from eval.benchmarks import BENCHMARKS, benchmarks_dir
from jobs import sweep
from jobs.executors import job_setup, sbatch_script
from jobs.profiles import CACHE_DIRS, load_profile, profile_from_dict
from populora.cli import main

REPO = Path(__file__).resolve().parent.parent
# where_populora_is runs in a job's subprocess, where this test module cannot be imported
cloudpickle.register_pickle_by_value(sys.modules[__name__])


def site(tmp_path, model_files=("config.json", "model.safetensors", "tokenizer.json"), lcb=False):
    """A cluster site: a profile with an image, a model directory bound at /models and benchmark data
    (GSM8K, and LiveCodeBench's prompts without its tests) bound at the image's benchmark directory."""
    models, bench = tmp_path / "models" / "qwen", tmp_path / "bench"
    models.mkdir(parents=True)
    for name in model_files:
        (models / name).write_text(json.dumps(QWEN_CONFIG) if name == "config.json" else "{}")
    (bench / "gsm8k").mkdir(parents=True)
    shutil.copy(benchmarks_dir() / BENCHMARKS["gsm8k"].relpath, bench / BENCHMARKS["gsm8k"].relpath)
    (bench / "livecodebench").mkdir()
    (tmp_path / "img.sif").write_text("")
    profiles = tmp_path / "profiles"
    profiles.mkdir()
    (profiles / "site.yaml").write_text(json.dumps({
        "executor": "slurm", "partition": "gpu", "gpus_per_node": 8, "tasks_per_node": 8, "mem_gb": 480,
        "container": {"image": str(tmp_path / "img.sif"), "binds": [f"{models.parent}:/models",
                                                                    f"{bench}:/opt/populora/benchmarks"]}}))
    return profiles


QWEN_CONFIG = {"hidden_size": 3584, "intermediate_size": 18944, "num_hidden_layers": 28, "num_attention_heads": 28,
               "num_key_value_heads": 4, "vocab_size": 152064, "model_type": "qwen2"}


def sweep_file(tmp_path, benchmarks=("gsm8k", "livecodebench"), **extra):
    data = {"name": "s", "config": "configs/4t4s-7b.yaml", "model": "/models/qwen", "profile": "site",
            "populations": ["4t4s", "baseline"], "seeds": [0],
            "eval": {"benchmarks": list(benchmarks), "args": ["--limit", "4"]}, **extra}
    (tmp_path / "s.yaml").write_text(json.dumps(data))
    return str(tmp_path / "s.yaml")


def test_dry_run_refuses_an_empty_model_and_missing_lcb_tests_and_prints_the_disk(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("POPULORA_PROFILES_DIR", str(site(tmp_path, model_files=())))
    code = main(["sweep", sweep_file(tmp_path), "--dry-run", "--out", str(tmp_path / "sw")])
    out, err = capsys.readouterr()
    refusals = err.strip().splitlines()
    assert code == 1 and len(refusals) == 2, err
    assert "/models/qwen" in refusals[0] and "no config.json" in refusals[0] and "'site', 'site[eval]'" in refusals[0]
    assert "benchmark livecodebench: LiveCodeBench release_v5: missing" in refusals[1] and "huggingface-cli" in refusals[1]
    assert "disk each run writes" in out and "4t4s-s0" in out and f"under {tmp_path / 'sw'}" in out
    assert not (tmp_path / "sw").exists()


def test_a_complete_site_passes_with_the_disk_of_each_run(tmp_path, monkeypatch):
    monkeypatch.setenv("POPULORA_PROFILES_DIR", str(site(tmp_path)))
    plan = sweep.build_plan(sweep.load_spec(sweep_file(tmp_path, benchmarks=["gsm8k"])), tmp_path / "sw")
    pf = sweep.run_preflight(plan)
    assert pf.errors == [], pf.errors
    disk = {d.name: d for d in pf.disk}
    # Qwen2.5-7B, LoRA r=32 on all seven projections: 80,740,352 parameters; float32 weights + AdamW
    assert disk["4t4s-s0"].member_bytes == 80_740_352 * 12  # 0.97 GB, as the issue measured
    assert disk["4t4s-s0"].checkpoints == (3 + 1) * 8 * 80_740_352 * 12  # keep_checkpoints 3, +1 being written
    assert disk["baseline-s0"].members == 1 and disk["baseline-s0"].adapters == 80_740_352 * 4
    assert 0 < disk["baseline-s0"].eval_outputs < disk["4t4s-s0"].eval_outputs  # 2 adapters vs 9 (base included)
    assert pf.needed_bytes == sum(d.total for d in pf.disk) and pf.free_bytes > 0
    monkeypatch.setattr(shutil, "disk_usage", lambda p: shutil._ntuple_diskusage(100, 90, 10 * 10**9))
    pf = sweep.run_preflight(plan)
    assert len(pf.errors) == 1 and pf.errors[0].startswith("disk: the sweep writes up to") and "10.0 GB free" in pf.errors[0]


def test_each_model_part_and_a_foreign_eval_model_are_named(tmp_path, monkeypatch):
    monkeypatch.setenv("POPULORA_PROFILES_DIR", str(site(tmp_path, model_files=("config.json", "tokenizer.json"))))
    plan = sweep.build_plan(sweep.load_spec(sweep_file(tmp_path, benchmarks=["gsm8k"])), tmp_path / "sw")
    assert [e for e in sweep.run_preflight(plan).errors if "no weights" in e]
    with pytest.raises(sweep.SweepError, match="the model is given twice"):
        sweep.load_spec(sweep_file(tmp_path, eval={"benchmarks": ["gsm8k"], "args": ["--model", "/models/other"]}))
    data = json.loads(Path(sweep_file(tmp_path)).read_text())
    del data["model"]
    data["overrides"] = ["policy.model=/models/qwen"]
    data["eval"]["args"] = ["--model", "/models/other"]
    plan = sweep.build_plan(sweep.spec_from_dict(data, "t.yaml"), tmp_path / "sw", validate=False)
    assert any("--model /models/other is not the model it trains on (/models/qwen)" in e
               for e in sweep.run_preflight(plan).errors)


def test_the_model_is_written_once_for_training_and_evaluation(tmp_path, monkeypatch):
    monkeypatch.setenv("POPULORA_PROFILES_DIR", str(site(tmp_path)))
    plan = sweep.build_plan(sweep.load_spec(sweep_file(tmp_path)), tmp_path / "sw", validate=False)
    assert all(r.overrides[0] == "policy.model=/models/qwen" for r in plan.runs)
    shards = [c for s in plan.stages if s.key.startswith("eval:") for c in s.calls]
    assert all(c.shard.argv()[-2:] == ["--model", "/models/qwen"] for c in shards)
    board = [s for s in plan.stages if s.key == "leaderboard"][0].calls[0]
    assert all(cmd[-2:] == ["--model", "/models/qwen"] for cmd in board.commands()[:-1])


def test_the_leaderboard_runs_on_its_own_cpu_profile(tmp_path):
    paper = sweep.load_spec(REPO / "configs" / "sweeps" / "populations-7b.yaml")
    plan = sweep.build_plan(paper, tmp_path / "sw", validate=False)
    board = [s for s in plan.stages if s.key == "leaderboard"][0]
    assert (board.profile.name, board.profile.partition, board.profile.gpus) == ("paper-cpu", "cpu", 0)
    script = sbatch_script(board.profile, tmp_path, "b")
    assert "#SBATCH --partition=cpu" in script and "gres" not in script
    default = sweep.build_plan(sweep.spec_from_dict({"name": "x", "config": "configs/tiny.yaml"}), tmp_path / "x",
                               "ci", validate=False)
    assert [s.profile for s in default.stages if s.key == "leaderboard"][0].gpus == 0  # eval profile, no GPU


def test_wckey_is_none_by_default_and_set_by_the_profile(tmp_path):
    paper = load_profile("paper-8xh100")
    assert "--wckey" not in sbatch_script(paper, tmp_path)  # submitit would write --wckey=submitit
    assert "#SBATCH --wckey=proj-42" in sbatch_script(paper.replace(wckey="proj-42"), tmp_path)


def test_cache_directories_are_set_and_bound(tmp_path):
    prof = profile_from_dict("c", {"executor": "slurm", "partition": "p", "cache": str(tmp_path / "c"),
                                   "env": {"HF_HOME": "/data/hf"},
                                   "container": {"image": "x.sif", "binds": ["/data"]}})
    assert prof.container.binds == ("/data", f"{tmp_path / 'c'}:/cache")
    assert prof.env["HF_HOME"] == "/data/hf"  # the profile's own env wins
    assert prof.env["VLLM_CACHE_ROOT"] == "/cache/vllm" and prof.env["TORCH_HOME"] == "/cache/torch"
    bare = profile_from_dict("b", {"executor": "local", "cache": str(tmp_path / "c")})
    assert bare.env == {k: f"{tmp_path / 'c'}/{sub}" for k, sub in CACHE_DIRS.items()}
    shipped = load_profile("paper-8xh100")
    assert shipped.env["HF_HOME"] == "/cache/huggingface" and shipped.container.binds[-1].endswith(":/cache")
    assert 'export TRITON_CACHE_DIR="/cache/triton"' in sbatch_script(shipped, tmp_path)


def test_jobs_run_the_installed_code_not_the_submit_directory():
    lines = job_setup(load_profile("paper-8xh100"))
    assert lines[:2] == ["export PYTHONSAFEPATH=1", "unset PYTHONPATH"]
    own = profile_from_dict("p", {"executor": "local", "env": {"PYTHONPATH": "/opt/extra"}})
    assert "unset PYTHONPATH" not in job_setup(own) and 'export PYTHONPATH="/opt/extra"' in job_setup(own)


def where_populora_is():
    import populora
    from populora.code_version import code_version

    return populora.__file__, code_version()


@pytest.mark.slow
def test_a_local_job_started_beside_a_decoy_checkout_imports_the_installed_copy(tmp_path, monkeypatch):
    """Slurm starts a job in the directory it was submitted from; a `populora/` there must not win."""
    from jobs.executors import make_executor

    decoy = tmp_path / "submit-dir"
    (decoy / "populora").mkdir(parents=True)
    (decoy / "populora" / "__init__.py").write_text("raise ImportError('the decoy checkout was imported')\n")
    monkeypatch.chdir(decoy)
    monkeypatch.setenv("PYTHONPATH", str(decoy))  # the submitting shell's PYTHONPATH is dropped too
    job = make_executor(load_profile("local"), tmp_path / "logs" / "%j").submit(where_populora_is)
    path, code = job.result()
    import populora

    assert Path(path) == Path(populora.__file__) and code["source"] == str(Path(populora.__file__).parent.parent)
    assert code["commit"] and code["version"]
    assert os.environ["PYTHONPATH"] == str(decoy)  # this process untouched

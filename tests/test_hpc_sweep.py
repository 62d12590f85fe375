"""Sweeps without a cluster: sweep files, grid expansion, dry-run scripts, the sweep directory and
manifest, stage order on the in-process and local executors, evaluation retries, status tables."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import cloudpickle
import pytest

from jobs import evaluate, sweep
from jobs.profiles import load_profile
from jobs.stages import Stage, render_stages, submit_stages
from jobs.status import expand_job_id, format_table, parse_sacct, status_rows
from jobs.train import TrainingJob

REPO = Path(__file__).resolve().parent.parent
# Functions of this module run in subprocesses (local executor), where it cannot be imported.
cloudpickle.register_pickle_by_value(sys.modules[__name__])
SWEEPS = REPO / "configs" / "sweeps"


def counter_train(config_file, overrides, run_dir, resume, *, handle_signals=True):
    """Stand-in with the training runner's contract (see tests/test_hpc_slurm.py)."""
    rd = Path(run_dir)
    if resume == "auto":  # the runner's rule: a run directory with a saved config is resumed
        resume = (rd / "config.json").exists()
    if not resume:
        (rd / "checkpoints").mkdir(parents=True)
        (rd / "config.json").write_text(json.dumps(list(overrides)))
    if (rd / "summary.json").exists():
        return json.loads((rd / "summary.json").read_text())
    summary = {"overrides": json.loads((rd / "config.json").read_text()), "resumed": resume,
               "handle_signals": handle_signals}
    (rd / "checkpoints" / "1").write_text("x")
    (rd / "summary.json").write_text(json.dumps(summary))
    return summary


def spec(**changes):
    data = {"name": "s", "config": "configs/tiny.yaml", "populations": ["1t1s", "baseline"], "seeds": [0, 1]}
    data.update(changes)
    return sweep.spec_from_dict(data, "test.yaml")


def test_grid_expansion_populations_seeds_and_keys():
    runs = sweep.expand_runs(spec(grid={"rl.lr": [1e-4, 1e-3], "lora.rank": [4]}, overrides=["selfplay.steps=2"]))
    assert [r.name for r in runs] == [
        "1t1s-s0-lr0.0001-rank4", "1t1s-s0-lr0.001-rank4", "1t1s-s1-lr0.0001-rank4", "1t1s-s1-lr0.001-rank4",
        "baseline-s0-lr0.0001-rank4", "baseline-s0-lr0.001-rank4", "baseline-s1-lr0.0001-rank4",
        "baseline-s1-lr0.001-rank4"]
    last = runs[-1].overrides
    assert last[0] == "selfplay.steps=2"  # common overrides first, so the grid wins
    assert "population.baseline=true" in last and "seed=1" in last and last[-2:] == ("rl.lr=0.001", "lora.rank=4")
    assert "population.baseline=false" in runs[0].overrides


def test_paper_population_sizes():
    runs = sweep.expand_runs(spec(populations=["1t1s", "4t4s", "8t8s", "baseline"], seeds=[0]))
    sizes = {r.name: [o for o in r.overrides if o.startswith("population.")] for r in runs}
    assert sizes["8t8s-s0"] == ["population.teachers=8", "population.students=8", "population.baseline=false"]
    assert sizes["4t4s-s0"][:2] == ["population.teachers=4", "population.students=4"]
    custom = sweep.expand_runs(spec(populations={"2t6s": ["population.teachers=2", "population.students=6"]}))
    assert [o for o in custom[0].overrides if o.startswith("population.")] == [
        "population.teachers=2", "population.students=6"]


@pytest.mark.parametrize("changes, fragment", [
    ({"seed": [1]}, "unknown key(s) seed; valid keys"),
    ({"populations": ["2t2s"]}, "unknown population(s) ['2t2s']"),
    ({"seeds": []}, "seeds must be a non-empty list"),
    ({"grid": {"rl.lr": 1e-4}}, "grid.rl.lr must be a non-empty list"),
    ({"eval": {"shard": 2}}, "eval: unknown key(s) shard"),
    ({"overrides": ["selfplay.steps"]}, "key=value"),
    ({"name": "a b"}, "may only use letters"),
])
def test_bad_sweep_files_are_errors(changes, fragment):
    with pytest.raises(sweep.SweepError) as err:
        spec(**changes)
    assert fragment in str(err.value) and "test.yaml" in str(err.value)


def test_shipped_sweep_files_parse_and_validate():
    names = {p.stem for p in SWEEPS.glob("*.yaml")}
    assert {"populations-7b", "tiny-ci"} <= names
    for path in SWEEPS.glob("*.yaml"):
        s = sweep.load_spec(path)
        runs = sweep.expand_runs(s)
        sweep.validate_run_configs(sweep.resolve_config(s), runs)  # every run's config loads
    paper = sweep.load_spec(SWEEPS / "populations-7b.yaml")
    assert [r.name.split("-")[0] for r in sweep.expand_runs(paper)].count("8t8s") == 3


def test_unknown_config_key_in_grid_fails_before_submission(tmp_path):
    s = spec(grid={"rl.learning_rate": [1e-3]})
    with pytest.raises(sweep.SweepError, match="learning_rate"):
        sweep.build_plan(s, tmp_path / "sw", "debug")
    assert not (tmp_path / "sw").exists()


def test_dry_run_prints_every_sbatch_script(tmp_path):
    plan = sweep.build_plan(sweep.load_spec(SWEEPS / "tiny-ci.yaml"), tmp_path / "sw")
    assert (plan.profile.name, plan.eval_profile.name) == ("ci", "ci-eval")
    text = sweep.dry_run_text(plan)
    # two training jobs (the baseline on the profile's node, 1T1S on 2 of its GPUs as 2 ranks),
    # 2 evaluation arrays, the leaderboard
    assert text.count("#!/bin/bash") == 5
    assert "### stage train: 1 task(s): baseline-s0" in text and "### stage train:2gpu: 1 task(s): 1t1s-s0" in text
    assert text.count("#SBATCH --gres=gpu:8") == 1 and text.count("#SBATCH --gres=gpu:2") == 1
    assert text.count("#SBATCH --ntasks-per-node=2") == 1 and "#SBATCH --mem=4GB" in text
    assert text.count("#SBATCH --gres=gpu:1") == 2  # the two evaluation arrays; the leaderboard has no GPU
    assert "#SBATCH --dependency=afterok:JOBID.train.2gpu\n" in text and "#SBATCH --dependency=afterok:JOBID.train\n" in text
    assert "#SBATCH --dependency=afterok:JOBID.eval.1t1s-s0:JOBID.eval.baseline-s0" in text
    assert "#SBATCH --kill-on-invalid-dep=yes" in text
    assert "population.baseline=true" in text
    assert not (tmp_path / "sw").exists()


def test_missing_image_is_an_error_before_anything_is_written(tmp_path):
    from jobs.executors import ContainerImageError

    s = sweep.load_spec(SWEEPS / "tiny-ci.yaml")
    paper = load_profile("paper-8xh100")
    broken = paper.replace(container=paper.container.__class__(image=str(tmp_path / "missing.sif")))
    # a dry run submits nothing: it warns and prints the scripts
    text = sweep.dry_run_text(sweep.build_plan(s, tmp_path / "sw", broken, validate=False))
    assert "missing.sif" in text and "#SBATCH --ntasks-per-node=8" in text
    # Only the evaluation profile is broken: still nothing is submitted or written.
    local_with_image = broken.replace(executor="local", partition=None)
    plan = sweep.build_plan(s, tmp_path / "sw", "debug", eval_profile=local_with_image, validate=False)
    with pytest.raises(ContainerImageError, match="missing.sif does not exist"):
        sweep.submit_sweep(plan)
    assert not (tmp_path / "sw").exists()


def test_debug_sweep_runs_stages_in_order_and_writes_manifest(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(evaluate, "run_populora", lambda argv: calls.append(list(argv)))
    s = spec(eval={"benchmarks": ["gsm8k", "humaneval_plus"], "shards": 2, "args": ["--limit", "2"]})
    plan = sweep.build_plan(s, tmp_path / "sw", "debug", entry=counter_train, validate=False)
    manifest = sweep.submit_sweep(plan)
    sw = tmp_path / "sw"
    assert [st["key"] for st in manifest["stages"]] == [
        "train", "eval:1t1s-s0", "eval:1t1s-s1", "eval:baseline-s0", "eval:baseline-s1", "leaderboard"]
    assert all(t["state"] == "COMPLETED" for st in manifest["stages"] for t in st["tasks"])
    assert json.loads((sw / "manifest.json").read_text())["runs"][3]["name"] == "baseline-s1"
    summary = json.loads((sw / "runs" / "baseline-s1" / "summary.json").read_text())
    assert "population.baseline=true" in summary["overrides"] and summary["handle_signals"] is False
    run = str(sw / "runs" / "1t1s-s0")
    # each run is evaluated on the model it trained on (the preset's policy.model: tiny)
    assert calls[0] == ["eval", "--runs", run, "--benchmarks", "gsm8k,humaneval_plus", "--shard", "0/2",
                        "--stage", "generate", "--limit", "2", "--model", "tiny"]
    assert len(calls) == 8 + 4 + 1  # 4 runs x 2 shards, 4 scores, 1 leaderboard
    assert calls[8][-6:] == ["--stage", "score", "--limit", "2", "--model", "tiny"]
    assert calls[-1] == ["leaderboard", *(str(sw / "runs" / r) for r in
                                          ("1t1s-s0", "1t1s-s1", "baseline-s0", "baseline-s1")),
                         "--out", str(sw / "leaderboard")]
    with pytest.raises(sweep.SweepError, match="already exists"):
        sweep.submit_sweep(plan)


def test_training_job_resumes_and_finished_run_is_a_noop(tmp_path):
    job = TrainingJob(tmp_path / "r", None, ["a=1"], entry=counter_train)
    first = job()
    assert first["resumed"] is False and (tmp_path / "r" / "config.json").exists()
    assert job() == first  # finished: the same summary, nothing rerun
    resubmission = job.checkpoint()
    assert resubmission.kwargs == {"resume": True} and resubmission.function is job


def test_eval_shard_retries_then_names_the_shard(monkeypatch):
    attempts = []

    def flaky(argv):
        attempts.append(argv)
        if len(attempts) < 2:
            raise evaluate.CommandFailed("first attempt fails")

    monkeypatch.setattr(evaluate, "run_populora", flaky)
    shard = evaluate.EvalShard("r1", ("/runs/r1",), "code", 3, 4)
    assert evaluate.EvalShardJob(shard, max_retries=2, retry_wait_s=0)() == {"shard": "r1:shard3/4", "attempts": 2}
    monkeypatch.setattr(evaluate, "run_populora", lambda argv: (_ for _ in ()).throw(RuntimeError("oom")))
    with pytest.raises(evaluate.ShardFailed, match=r"shard r1:shard3/4 failed 3 times:\n  attempt 1: RuntimeError: oom"):
        evaluate.EvalShardJob(shard, max_retries=2, retry_wait_s=0)()


def test_run_populora_reports_exit_status():
    with pytest.raises(evaluate.CommandFailed, match="exited with status 2"):
        evaluate.run_populora(["sweep", "status"])  # usage error -> 2


def append_line(path, text):
    with open(path, "a") as f:
        f.write(text + "\n")
    return os.getpid()


@pytest.mark.slow
def test_local_executor_waits_for_dependencies(tmp_path):
    local = load_profile("local")
    log = tmp_path / "order.txt"
    stages = [
        Stage("a", "a", local, tmp_path / "a" / "%j", [lambda: append_line(log, "a")], ["a"]),
        Stage("b", "b", local, tmp_path / "b" / "%j", [lambda: append_line(log, "b1"), lambda: append_line(log, "b2")],
              ["b1", "b2"], after=[("a", None)]),
    ]
    done = submit_stages(stages)
    pids = [j.result() for j in done["b"].jobs]
    assert log.read_text().splitlines()[0] == "a" and sorted(log.read_text().split()) == ["a", "b1", "b2"]
    assert os.getpid() not in pids  # ran in subprocesses


def test_plan_rejects_forward_dependencies(tmp_path):
    debug = load_profile("debug")
    with pytest.raises(ValueError, match="not an earlier stage"):
        render_stages([Stage("x", "x", debug, tmp_path, [int], ["x"], after=[("y", None)])])


def test_sacct_parsing_and_status_table(monkeypatch):
    assert expand_job_id("41_[0-2,5%4]") == ["41_0", "41_1", "41_2", "41_5"]
    assert expand_job_id("41_3") == ["41_3"]
    text = "40_0|REQUEUED|0:0|00:00:09\n40_0|COMPLETED|0:0|00:00:20\n40_1|RUNNING|0:0|00:00:05\n" \
           "41_[0-1%8]|PENDING|0:0|00:00:00\n42|CANCELLED by 0|0:0|00:00:00\n"
    states = parse_sacct(text)
    assert states["40_0"]["State"] == "COMPLETED" and states["41_1"]["State"] == "PENDING"
    assert states["42"]["State"] == "CANCELLED"
    manifest = {"stages": [
        {"key": "train", "executor": "slurm", "tasks": [{"label": "a", "job_id": "40_0"}, {"label": "b", "job_id": "40_1"}]},
        {"key": "eval:a", "executor": "slurm", "tasks": [{"label": "a:shard0/2", "job_id": "41_0"},
                                                          {"label": "a:shard1/2", "job_id": "41_1"}]},
        {"key": "leaderboard", "executor": "slurm", "tasks": [{"label": "leaderboard", "job_id": "42"}]}]}
    import jobs.status

    monkeypatch.setattr(jobs.status, "sacct", lambda ids: states)
    rows = status_rows(manifest)
    assert [r["state"] for r in rows] == ["COMPLETED", "RUNNING", "PENDING", "PENDING", "CANCELLED"]
    table = format_table(rows)
    assert table.splitlines()[0].split() == ["STAGE", "TASK", "JOB_ID", "STATE", "EXIT", "ELAPSED"]
    assert table.splitlines()[-1] == "5 task(s): 1 CANCELLED, 1 COMPLETED, 2 PENDING, 1 RUNNING"


def cli(argv):
    from populora.commands import sweep as sweep_cmd

    parser = argparse.ArgumentParser(prog="populora")
    sweep_cmd.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(argv)
    return args.func(args)


def test_cli_dry_run_status_and_errors(tmp_path, capsys):
    assert cli(["sweep", str(SWEEPS / "tiny-ci.yaml"), "--profile", "ci", "--out", str(tmp_path / "sw"),
                "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "sweep tiny-ci: 2 run(s)" in out and "#SBATCH --partition=debug" in out
    assert "eval profile ci-eval (" in out  # --profile sets training only: the sweep file's eval_profile stays
    assert cli(["sweep", str(SWEEPS / "tiny-ci.yaml"), "--profile", "nope", "--dry-run"]) == 2
    assert "unknown profile 'nope'" in capsys.readouterr().err
    assert cli(["sweep", "status", str(tmp_path)]) == 2
    assert "manifest.json does not exist" in capsys.readouterr().err
    (tmp_path / "manifest.json").write_text(json.dumps({"stages": [
        {"key": "train", "executor": "local", "tasks": [{"label": "r", "job_id": "9", "state": "COMPLETED"}]}]}))
    assert cli(["sweep", "status", str(tmp_path)]) == 0
    assert "1 task(s): 1 COMPLETED" in capsys.readouterr().out


def test_quick_start_copied_training_profile_sizes_eval_as_eval(tmp_path, monkeypatch):
    """docs/hpc.md's quick start: the paper training profile copied and passed as --profile."""
    mine = tmp_path / "profiles"
    mine.mkdir()
    (mine / "mycluster.yaml").write_text((REPO / "slurm" / "profiles" / "paper-8xh100.yaml").read_text())
    monkeypatch.setenv("POPULORA_PROFILES_DIR", str(mine))
    paper = sweep.load_spec(SWEEPS / "populations-7b.yaml")
    plan = sweep.build_plan(paper, tmp_path / "sw", "mycluster", validate=False)
    by_key = {s.key: s for s in plan.stages}
    shards = [s for s in plan.stages if s.key.startswith("eval:")]
    assert len(shards) == 18 and all(s.profile.gpus == 1 and s.profile.mem_gb == 120 for s in shards)
    assert by_key["leaderboard"].profile.gpus == 0
    assert by_key["train"].profile.gpus == 8
    # without an eval_profile anywhere: the training profile's evaluation shape, not its whole node
    derived = sweep.build_plan(sweep.spec_from_dict({**vars_of(paper), "eval_profile": None}, "t.yaml"),
                               tmp_path / "sw", "mycluster", validate=False)
    ev = [s.profile for s in derived.stages if s.key.startswith("eval:")][0]
    assert (ev.gpus, ev.tasks_per_node, ev.mem_gb, ev.partition) == (1, 1, 60, "gpu")
    # asked for explicitly, the training profile is used as it is
    asked = sweep.build_plan(paper, tmp_path / "sw", "mycluster", eval_profile="mycluster", validate=False)
    assert [s.profile.gpus for s in asked.stages if s.key.startswith("eval:")][0] == 8


def vars_of(spec) -> dict:
    return {"name": spec.name, "config": spec.config, "profile": spec.profile, "populations": list(spec.populations),
            "seeds": list(spec.seeds), "gpus": dict(spec.gpus), "overrides": list(spec.overrides),
            "eval": {"benchmarks": list(spec.benchmarks), "shards": spec.shards, "args": list(spec.eval_args)}}


def test_dry_run_prints_gpus_and_gpu_hours_per_stage_and_in_total(tmp_path):
    from jobs.resources import resources_table, stage_resources

    plan = sweep.build_plan(sweep.load_spec(SWEEPS / "populations-7b.yaml"), tmp_path / "sw", validate=False)
    text = sweep.dry_run_text(plan)
    assert "allocation" not in text
    assert "run 8t8s-s0 (8 GPU(s))" in text and "run baseline-s0 (1 GPU(s))" in text
    res = {s.key: stage_resources(s) for s in plan.stages}
    assert (res["train"].gpus, res["train"].gpu_hours) == (96, 96 * 24)  # 12 runs x 8 GPUs x 24 h
    assert (res["train:2gpu"].gpus, res["train:1gpu"].gpus) == (6, 3)
    assert res["eval:4t4s-s0"].gpus == 8 and res["eval:4t4s-s0"].gpu_hours == 8 * 12  # 8 shards x 1 GPU x 12 h
    assert res["leaderboard"].gpus == 0
    table = resources_table(plan.stages)
    total = table.splitlines()[-1].split()
    assert total[0] == "total" and int(total[2]) == 96 + 6 + 3 + 18 * 8
    assert float(total[3]) == 96 * 24 + 6 * 24 + 3 * 24 + 18 * 8 * 12
    assert table in text


def test_dry_run_prints_gpu_hours_per_population_size(tmp_path):
    """One line per population of the paper sweep (1T1S .. 32T32S and the baseline): runs, GPUs a run, the
    cost model's estimate, training at the limit, evaluation, total; a run past its limit is marked."""
    from populora.distributed.cost import step_cost

    plan = sweep.build_plan(sweep.load_spec(SWEEPS / "populations-7b.yaml"), tmp_path / "sw")
    text = sweep.dry_run_text(plan)
    head = text.index("GPU-hours per population size")
    lines = {ln.split()[0]: ln.split() for ln in text[head:].splitlines()[2:8]}
    assert list(lines) == ["1t1s", "4t4s", "8t8s", "16t16s", "32t32s", "baseline"]
    for pop, gpus in (("1t1s", 2), ("32t32s", 8), ("baseline", 1)):
        row = lines[pop]
        cfg = plan.configs[f"{pop}-s0"]
        est = 3 * step_cost(cfg, gpus)["step_s"] * cfg.selfplay.steps * gpus / 3600
        assert (int(row[1]), int(row[2]), int(row[4])) == (3, gpus, 200)
        assert float(row[5].rstrip("*")) == pytest.approx(est, abs=0.06)
        assert float(row[6]) == 3 * gpus * 24 and float(row[7]) == 3 * 8 * 12  # at the limit; 3 x 8 shards x 12 h
        assert float(row[8]) == pytest.approx(float(row[6]) + float(row[7]))
    assert lines["32t32s"][5].endswith("*") and not lines["1t1s"][5].endswith("*")  # 34 h estimated vs 24 h

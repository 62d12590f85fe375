"""Sweeps: a grid of training runs -> one training job array -> evaluation arrays -> one leaderboard.

A sweep file (``configs/sweeps/<name>.yaml``) names a config preset and the grid::

    name: populations-7b            # the sweep directory defaults to sweeps/<name>
    config: configs/tiny.yaml       # preset every run starts from
    model: /models/Qwen2.5-Coder-7B # the base model, written once: policy.model of every run and the
                                    # --model of its evaluation (default: the preset's policy.model)
    profile: paper-8xh100           # cluster profile of the training jobs (--profile overrides it)
    eval_profile: paper-1xh100      # profile of evaluation jobs (default: the training profile's
                                    # evaluation shape: one GPU, one rank's CPUs and memory)
    leaderboard_profile: paper-cpu  # profile of the leaderboard job, which needs no GPU (default:
                                    # the evaluation profile without GPUs)
    populations: [1t1s, 4t4s, 8t8s, baseline]   # built-in names, or a mapping name -> [overrides]
    seeds: [0, 1, 2]
    seed_key: seed                  # config key that receives the seed
    grid: {rl.lr: [1.0e-5, 3.0e-5]} # any config key -> list of values (cartesian product)
    overrides: [selfplay.steps=200] # applied to every run, before population / seed / grid
    gpus: {1t1s: 2, baseline: 2}    # GPUs (= ranks) per run of a population; others: the profile's
    eval: {benchmarks: [code, math], shards: 4, max_retries: 2, args: [--model, /models/qwen-7b]}

A training job runs one rank per GPU (the profile's ``tasks_per_node``). Populations listed under
``gpus`` ask Slurm for just that many GPUs of a node (``--gres=gpu:k``, not exclusive), so Slurm packs
several of them on one node; they are submitted as their own training array (``train:<k>gpu``).

Overrides are opaque ``key=value`` strings handed to the training command; every run's config is
validated with ``populora.config.load_config`` before anything is submitted. Each run is evaluated
on the base model it trained on (its ``policy.model``, passed as ``--model``): ``eval.args`` need not
name it, and a ``--model`` there that differs is refused by the preflight (``jobs/preflight.py``),
which also checks every model, benchmark file, bind and the disk the sweep will use.

Sweep directory (refused if it exists)::

    manifest.json   the spec, every run (name, directory, overrides) and every job id, by stage
    sweep.yaml      copy of the sweep file
    runs/<run>/     run directories (training output; evaluation results in runs/<run>/eval/)
    leaderboard/    the leaderboard of all runs
    logs/           submitit pickles and logs (logs/<stage>/<job id>/)
"""

from __future__ import annotations

import datetime as dt
import json
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from jobs.evaluate import evaluation_stages
from jobs.executors import preflight
from jobs.profiles import REPO_ROOT, ClusterProfile, ProfileError, load_profile
from jobs.stages import Stage, SubmittedStage, render_stages, submit_stages
from jobs.sweep_file import (  # noqa: F401 (the sweep file's names, used from here by the CLI and tests)
    EVAL_KEYS,
    POPULATIONS,
    SPEC_KEYS,
    RunSpec,
    SweepError,
    SweepSpec,
    expand_runs,
    load_spec,
    spec_from_dict,
)
from jobs.train import DEFAULT_ENTRY, TrainingJob

MANIFEST = "manifest.json"


def resolve_config(spec: SweepSpec) -> Path:
    """The preset path: as given (from the current directory), else relative to the project root."""
    for candidate in (Path(spec.config), REPO_ROOT / spec.config):
        if candidate.is_file():
            return candidate.absolute()
    raise SweepError(f"sweep file {spec.source}: config {spec.config} does not exist")


def validate_run_configs(config: Path, runs: Sequence[RunSpec]) -> dict[str, Any]:
    """Load every run's config with its overrides so a bad key fails before submission; returns them
    by run name."""
    from populora.config import load_config

    configs = {}
    for run in runs:
        try:
            configs[run.name] = load_config(str(config), list(run.overrides))
        except Exception as exc:
            raise SweepError(f"run {run.name} ({config} + {' '.join(run.overrides)}): {exc}") from exc
    return configs


def run_models(config: Path, runs: Sequence[RunSpec], configs: dict[str, Any] | None = None) -> dict[str, str]:
    """The base model of every run: its resolved config's ``policy.model`` (or, without configs, its
    last ``policy.model=`` override, else the preset's)."""
    if configs:
        return {r.name: configs[r.name].policy.model for r in runs}
    preset = None
    out = {}
    for r in runs:
        given = [o.split("=", 1)[1] for o in r.overrides if o.startswith("policy.model=")]
        if not given and preset is None:
            from populora.config import load_config

            preset = load_config(str(config)).policy.model
        out[r.name] = given[-1] if given else preset
    return out


def eval_args_of(spec: SweepSpec, model: str) -> tuple[str, ...]:
    """``populora eval`` arguments of one run: the sweep's, with ``--model`` the run's base model unless
    the sweep's arguments name one (the preflight refuses one that differs)."""
    return spec.eval_args if "--model" in spec.eval_args else (*spec.eval_args, "--model", model)


@dataclass
class SweepPlan:
    spec: SweepSpec
    sweep_dir: Path
    runs: list[RunSpec]
    stages: list[Stage]
    profile: ClusterProfile
    eval_profile: ClusterProfile
    leaderboard_profile: ClusterProfile | None = None
    config: Path | None = None  # the preset every run starts from
    configs: dict[str, Any] = field(default_factory=dict)  # run name -> resolved Config (when validated)
    models: dict[str, str] = field(default_factory=dict)  # run name -> base model (policy.model)
    eval_args: dict[str, tuple[str, ...]] = field(default_factory=dict)  # run name -> `populora eval` args


def _profile(value: str | ClusterProfile) -> ClusterProfile:
    return value if isinstance(value, ClusterProfile) else load_profile(value)


def build_plan(spec: SweepSpec, sweep_dir: str | Path | None = None, profile: str | ClusterProfile | None = None,
               entry: str | Callable[..., dict] = DEFAULT_ENTRY, validate: bool = True,
               eval_profile: str | ClusterProfile | None = None,
               leaderboard_profile: str | ClusterProfile | None = None) -> SweepPlan:
    """Expand the grid and lay out every job; nothing is written or submitted.

    ``profile`` / ``eval_profile`` / ``leaderboard_profile`` override the sweep file's. Evaluation is
    never sized as training unless asked: its profile is ``eval_profile``, else the sweep file's
    ``eval_profile``, else the training profile's evaluation shape (``ClusterProfile.for_evaluation``:
    one GPU, one rank's CPUs and memory). The leaderboard job runs on ``leaderboard_profile`` (a CPU
    partition's, e.g. ``paper-cpu``), else on the evaluation profile without a GPU."""
    sweep_dir = Path(sweep_dir or spec.out or Path("sweeps") / spec.name).absolute()
    train_profile = _profile(profile or spec.profile)
    eval_choice = eval_profile or spec.eval_profile
    eval_prof = _profile(eval_choice) if eval_choice else train_profile.for_evaluation()
    board_choice = leaderboard_profile or spec.leaderboard_profile
    board_prof = _profile(board_choice) if board_choice else None
    config = resolve_config(spec)
    runs = expand_runs(spec)
    configs = validate_run_configs(config, runs) if validate else {}
    models = run_models(config, runs, configs)
    eval_args = {r.name: eval_args_of(spec, models[r.name]) for r in runs}
    run_dirs = {r.name: sweep_dir / "runs" / r.name for r in runs}
    trains, after = training_stages(spec, runs, run_dirs, config, train_profile, sweep_dir, entry)
    evals = evaluation_stages(run_dirs, spec.benchmarks, spec.shards, sweep_dir / "leaderboard", eval_prof,
                              sweep_dir / "logs", after=after, max_retries=spec.max_retries, extra=(),
                              prefix=spec.name, run_extra=eval_args, leaderboard_profile=board_prof,
                              leaderboard_args=("--seed-key", spec.seed_key) if spec.seed_key != "seed" else ())
    return SweepPlan(spec, sweep_dir, runs, [*trains, *evals], train_profile, eval_prof, board_prof, config,
                     configs, models, eval_args)


def training_stages(spec: SweepSpec, runs: Sequence[RunSpec], run_dirs: dict[str, Path], config: Path,
                    profile: ClusterProfile, sweep_dir: Path, entry) -> tuple[list[Stage], dict[str, tuple[str, int]]]:
    """One training array per GPU count: ``train`` (the profile's whole allocation) and
    ``train:<k>gpu`` for runs placed on k GPUs; returns the stages and each run's (stage, index)."""
    groups: dict[int | None, list[RunSpec]] = {}
    for r in runs:
        groups.setdefault(r.gpus, []).append(r)
    stages, after = [], {}
    for gpus in sorted(groups, key=lambda g: (g is not None, g or 0)):
        members = groups[gpus]
        key = "train" if gpus is None else f"train:{gpus}gpu"
        prof = profile if gpus is None else profile.with_gpus(gpus)
        stages.append(Stage(
            key=key, name=f"{spec.name}-{key.replace(':', '-')}", profile=prof,
            folder=sweep_dir / "logs" / key.replace(":", "-") / "%j",
            calls=[TrainingJob(run_dirs[r.name], str(config), r.overrides, entry=entry) for r in members],
            labels=[r.name for r in members], multi_task=True,
        ))
        after.update({r.name: (key, i) for i, r in enumerate(members)})
    return stages, after


def _stage_record(sub: SubmittedStage) -> dict[str, Any]:
    return {"key": sub.stage.key, "name": sub.stage.name, "job_id": sub.job_id, "dependency": sub.dependency,
            "executor": sub.stage.profile.executor, "folder": str(sub.stage.folder),
            "tasks": [{"label": label, "job_id": str(job.job_id)} for label, job in zip(sub.stage.labels, sub.jobs)]}


def write_manifest(sweep_dir: Path, manifest: dict[str, Any]) -> None:
    tmp = sweep_dir / (MANIFEST + ".tmp")
    tmp.write_text(json.dumps(manifest, indent=2, default=str))
    os.replace(tmp, sweep_dir / MANIFEST)


def read_manifest(sweep_dir: str | Path) -> dict[str, Any]:
    path = Path(sweep_dir) / MANIFEST
    if not path.is_file():
        raise SweepError(f"{path} does not exist: is {sweep_dir} a sweep directory?")
    return json.loads(path.read_text())


def submit_sweep(plan: SweepPlan, wait_local: bool = True) -> dict[str, Any]:
    """Create the sweep directory, submit every stage, record job ids in the manifest as they come.

    Refuses an existing sweep directory. On ``local``/``debug`` profiles stages run one after the
    other, and with ``wait_local`` the call returns when the last stage has finished."""
    if plan.sweep_dir.exists():
        raise SweepError(f"sweep directory {plan.sweep_dir} already exists; choose another --out or remove it")
    profiles = {s.profile.name: s.profile for s in plan.stages}
    for prof in profiles.values():
        preflight(prof)
    pf = run_preflight(plan)
    for w in pf.warnings:
        print(f"warning: {w}", file=sys.stderr)
    if pf.errors:
        raise SweepError("nothing was submitted:\n  " + "\n  ".join(pf.errors) + "\n(see docs/hpc.md, "
                         "'The preflight')")
    for prof in profiles.values():
        if prof.cache:
            Path(prof.cache).mkdir(parents=True, exist_ok=True)
    plan.sweep_dir.mkdir(parents=True)
    (plan.sweep_dir / "runs").mkdir()
    if Path(plan.spec.source).is_file():
        (plan.sweep_dir / "sweep.yaml").write_text(Path(plan.spec.source).read_text())
    manifest: dict[str, Any] = {
        "name": plan.spec.name, "created": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "spec_file": plan.spec.source, "spec": asdict(plan.spec), "profile": plan.profile.name,
        "eval_profile": plan.eval_profile.name, "sweep_dir": str(plan.sweep_dir),
        "runs": [{"name": r.name, "run_dir": str(plan.sweep_dir / "runs" / r.name), "overrides": list(r.overrides)}
                 for r in plan.runs],
        "stages": [],
    }
    write_manifest(plan.sweep_dir, manifest)

    def record(sub: SubmittedStage) -> None:
        manifest["stages"].append(_stage_record(sub))
        write_manifest(plan.sweep_dir, manifest)

    submitted = submit_stages(plan.stages, on_submit=record)
    if wait_local and any(s.stage.profile.executor != "slurm" for s in submitted.values()):
        record_local_results(plan.sweep_dir, manifest, submitted)
    return manifest


def run_preflight(plan: SweepPlan):
    """Every check before submission (``jobs.preflight``): models, benchmark files, binds, disk."""
    from jobs.preflight import run_preflight as check

    return check(plan)


def record_local_results(sweep_dir: Path, manifest: dict[str, Any], submitted: dict[str, SubmittedStage]) -> None:
    """Wait for jobs run without a scheduler and store their final state in the manifest."""
    for entry in manifest["stages"]:
        for task, job in zip(entry["tasks"], submitted[entry["key"]].jobs):
            try:
                job.result()
                task["state"] = "COMPLETED"
            except Exception as exc:
                task["state"] = "FAILED"
                task["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    write_manifest(sweep_dir, manifest)


def describe_submission(manifest: dict[str, Any]) -> str:
    lines = [f"sweep {manifest['name']}: {manifest['sweep_dir']}"]
    for st in manifest["stages"]:
        dep = f" after {st['dependency']}" if st.get("dependency") else ""
        lines.append(f"  {st['key']:<24} job {st['job_id']} ({len(st['tasks'])} task(s)){dep}")
    return "\n".join(lines)


def describe_plan(plan: SweepPlan) -> str:
    ev = plan.eval_profile
    board = next((s.profile for s in plan.stages if s.key == "leaderboard"), None)
    lines = [f"sweep {plan.spec.name}: {len(plan.runs)} run(s) -> {plan.sweep_dir}",
             f"profile {plan.profile.name} ({plan.profile.source}); eval profile {ev.name} ({ev.source}): "
             f"{ev.gpus} GPU(s), {ev.cpus_per_task} CPU(s), {ev.mem_gb or 'default'} GB per shard"
             + (f"; leaderboard profile {board.name} ({board.source}, partition {board.partition})" if board else "")]
    models = sorted(set(plan.models.values()))
    if models:
        lines.append(f"base model (training and evaluation): {', '.join(models)}")
    lines += [f"  run {r.name} ({plan.profile.gpus if r.gpus is None else r.gpus} GPU(s)): {' '.join(r.overrides)}"
              for r in plan.runs]
    return "\n".join(lines)


def dry_run_text(plan: SweepPlan, pf=None) -> str:
    """What ``--dry-run`` prints: the runs, the preflight's problems (one line each), the disk each run
    writes, GPUs and GPU-hours per stage and in total, then every sbatch script (or the local job list)."""
    from jobs.preflight import disk_table
    from jobs.resources import population_table, resources_table

    pf = pf if pf is not None else run_preflight(plan)
    if all(s.profile.executor == "slurm" for s in plan.stages):
        body = render_stages(plan.stages)
    else:
        body = "\n".join(f"### stage {s.key} ({s.profile.executor} executor): {', '.join(s.labels)}"
                         for s in plan.stages)
    notes = [f"would refuse to submit: {e}" for e in pf.errors] + [f"warning: {w}" for w in pf.warnings]
    head = describe_plan(plan) + ("\n" + "\n".join(notes) if notes else "")
    disk = disk_table(pf)
    return (head + "\n\n" + (disk + "\n\n" if disk else "") + resources_table(plan.stages) + "\n\n"
            + population_table(plan) + "\n\n" + body)


def check_profile_name(name: str) -> None:
    """Raise the profile error early (used by the CLI for --profile)."""
    try:
        load_profile(name)
    except ProfileError as exc:
        raise SweepError(str(exc)) from exc

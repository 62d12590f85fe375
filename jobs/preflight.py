"""The sweep's preflight: what its jobs will run, checked on the submitting machine before anything is
submitted, so that a sweep that would fail is refused before it spends a GPU-hour.

Checked by the code the jobs themselves run, on the paths the jobs will see (a path inside a
container is followed through the profile's binds to the host, ``jobs.container_paths``):

* every bind's source exists; the benchmark data, the sweep directory and the preset are visible
  in the jobs that read or write them;
* every run's base model (training profile) and the model of its evaluation (evaluation profile),
  by ``populora.model_source`` (the check ``populora train`` runs before it starts: config,
  weights, tokenizer; a Hub id in the profile's ``HF_HOME`` when the nodes are offline); the
  evaluation's ``--model`` must be the run's training model (evaluation refuses adapters trained
  on another base);
* every selected benchmark's files, loaded by ``eval.runner.pipeline.load_benchmarks`` with the
  ``populora eval`` arguments of the sweep (parsed by ``populora eval``'s own parser);
* the disk each run will use (``RunDisk``) against the free space of the disk of the sweep directory.

``--dry-run`` prints the problems (one line each) and the disk table and exits 1 when there is an
error; a submission with an error is refused with the same lines.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jobs.container_paths import BENCHMARKS_ENV, benchmarks_inside, host_path, is_local_path, path_problems
from jobs.profiles import ClusterProfile

GB = 1e9
BYTES_PER_TOKEN = 4  # ours: a generous mean of UTF-8 bytes per generated token (code, English, LaTeX)
RECORD_OVERHEAD = 512  # ours: the JSON fields of one generation record besides prompt and completion
EVAL_COPIES = 2  # the shards' generation records and their merge (eval/runner/generate.py)
FREE_MARGIN = 0.9  # ours: warn when the sweep would fill more than 90% of the free space


@dataclass(frozen=True)
class RunDisk:
    """The most disk one run writes (bytes), at the end of training and evaluation."""

    name: str
    members: int
    member_bytes: float | None  # one member in a checkpoint: float32 LoRA weights + AdamW's two moments
    checkpoints: float | None  # (run.keep_checkpoints + 1 being written) x members x member_bytes
    adapters: float | None  # the final adapters (float32 PEFT files)
    eval_outputs: float | None  # every generation record at its token budget, twice (shards and merge);
    # None when the benchmarks could not be read (counted as 0 in the total)

    @property
    def total(self) -> float | None:
        if self.checkpoints is None or self.adapters is None:
            return None
        return self.checkpoints + self.adapters + (self.eval_outputs or 0)


@dataclass
class Preflight:
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    disk: list[RunDisk] = field(default_factory=list)
    sweep_dir: Path | None = None
    free_bytes: float | None = None

    @property
    def needed_bytes(self) -> float | None:
        totals = [d.total for d in self.disk]
        return None if not totals or any(t is None for t in totals) else sum(totals)


# -- disk: pure functions of the config, the model's shape and the benchmark items -------------------------
def member_checkpoint_bytes(adapter_params: int) -> float:
    """One member in a checkpoint: float32 weights and AdamW's two float32 moments (populora.checkpoint)."""
    return adapter_params * (4 + 4 + 4)


def eval_output_bytes(adapters: int, prompts: Mapping[str, Sequence[int]], budgets: Mapping[str, int],
                      samples: int) -> float:
    """Generation records of ``adapters`` adapters (the run's members and the base) on every item of every
    benchmark (``prompts``: benchmark -> prompt lengths in bytes), each completion at its budget."""
    per_adapter = sum(n + budgets[b] * BYTES_PER_TOKEN + RECORD_OVERHEAD for b, lengths in prompts.items()
                      for n in lengths)
    return adapters * samples * per_adapter * EVAL_COPIES


def run_disk(name: str, cfg: Any, adapter_params: int | None, prompts: Mapping[str, Sequence[int]],
             budgets: Mapping[str, int], samples: int, include_base: bool = True) -> RunDisk:
    members = 1 if cfg.population.baseline else cfg.population.teachers + cfg.population.students
    evals = eval_output_bytes(members + int(include_base), prompts, budgets, samples) if prompts else None
    if adapter_params is None:
        return RunDisk(name, members, None, None, None, evals)
    one = member_checkpoint_bytes(adapter_params)
    return RunDisk(name, members, one, (cfg.run.keep_checkpoints + 1) * members * one, members * adapter_params * 4,
                   evals)


def existing_ancestor(path: Path) -> Path:
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def _gb(value: float | None) -> str:
    if value is None:
        return "?"
    if value < 0.1 * GB:
        return f"{value / 1e6:.1f} MB"
    return f"{value / GB:.2f} GB" if value < 10 * GB else f"{value / GB:.1f} GB" if value < 1000 * GB else \
        f"{value / 1e12:.2f} TB"


def disk_table(pf: Preflight) -> str:
    """The dry run's table: each run's checkpoints, adapters and evaluation outputs, the total and the free
    space of the disk they are written to."""
    rows = pf.disk
    if not rows:
        return ""
    w = max(len("total"), *(len(r.name) for r in rows))
    lines = ["disk each run writes (estimated: checkpoints = (run.keep_checkpoints + 1 being written) x members x "
             "one member's float32 LoRA weights + AdamW; evaluation: every completion at its token budget)",
             f"{'run':<{w}}  members  per member  checkpoints    adapters  eval outputs       total"]
    for r in rows:
        lines.append(f"{r.name:<{w}}  {r.members:>7}  {_gb(r.member_bytes):>10}  {_gb(r.checkpoints):>11}  "
                     f"{_gb(r.adapters):>10}  {_gb(r.eval_outputs):>12}  {_gb(r.total):>10}")
    free = f"{_gb(pf.free_bytes)} free on that disk" if pf.free_bytes is not None else "free space unknown"
    lines.append(f"{'total':<{w}}  {sum(r.members for r in rows):>7}  {'':>10}  {'':>11}  {'':>10}  {'':>12}  "
                 f"{_gb(pf.needed_bytes):>10}  under {pf.sweep_dir} ({free})")
    return "\n".join(lines)


# -- the checks ------------------------------------------------------------------------------------
def parse_eval_args(args: Sequence[str]) -> argparse.Namespace:
    """The sweep's ``eval.args`` read by ``populora eval``'s own parser; ValueError with its one line."""
    from populora.cli import build_parser

    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        try:
            return build_parser().parse_args(["eval", "--runs", "RUN", *args])
        except SystemExit:
            raise ValueError(f"eval.args {' '.join(args)}: {err.getvalue().strip()}") from None


def _host(profile: ClusterProfile, inside: str | None) -> str | None:
    if inside is None:
        return None
    found = host_path(profile, inside)
    return str(found) if found is not None else None


def benchmark_items(plan, pf: Preflight) -> tuple[dict[str, list[int]], dict[str, int], int]:
    """Load every selected benchmark as ``populora eval`` will (host paths of the job's data); problems go
    to ``pf``. Returns the prompt lengths per benchmark, the token budgets and the samples per item."""
    from eval.benchmarks import PACKAGED_DIR, BenchmarkDataError, resolve_benchmarks
    from eval.runner.pipeline import load_benchmarks
    from eval.runner.settings import EvalSettings

    profile = plan.eval_profile
    try:
        args = parse_eval_args(plan.spec.eval_args)
        benches = resolve_benchmarks(",".join(plan.spec.benchmarks))
    except ValueError as e:
        pf.errors.append(str(e))
        return {}, {}, 1
    inside = benchmarks_inside(profile, plan.spec.eval_args)
    # None: the image's shipped test sets, the same files as this checkout's eval/data
    data_dir = str(PACKAGED_DIR) if inside is None else _host(profile, inside)
    if data_dir is None:  # not visible in the jobs: path_problems names the bind; nothing to load here
        return {}, {}, args.samples
    paths = {k: _host(profile, v) or v for k, v in args.data}
    budgets = {k: int(v) for k, v in args.max_new_tokens}
    prompts: dict[str, list[int]] = {}
    for b in benches:
        s = EvalSettings(benchmarks=[b], data_dir=data_dir, data_paths=paths, limit=args.limit, max_new_tokens=budgets,
                         lcb_release=args.lcb_release, lcb_start=args.lcb_start or None, lcb_end=args.lcb_end or None)
        try:
            items = load_benchmarks(s)[b]
        except (BenchmarkDataError, OSError, ValueError) as e:
            (pf.warnings if args.skip_missing else pf.errors).append(f"benchmark {b}: {e}")
            continue
        prompts[b] = [len(it.question.encode("utf-8")) for it in items]
        budgets[b] = s.budgets()[b]
    return prompts, budgets, args.samples


def model_problems(plan, pf: Preflight) -> None:
    """Every run's model as its training and evaluation jobs will load it."""
    from populora.model_source import check_model

    found: dict[tuple[str, str | None, bool], tuple[str | None, list[str]]] = {}  # one check per place on disk
    for run in plan.runs:
        model = plan.models.get(run.name)
        if model is None:
            continue
        given = _flag_value(plan.eval_args.get(run.name, ()), "--model")
        if given is not None and given != model:
            pf.errors.append(f"run {run.name}: eval.args --model {given} is not the model it trains on ({model}); "
                             "evaluation refuses adapters of another base: remove --model from eval.args")
        for prof in (plan.profile, plan.eval_profile):
            if is_local_path(model):
                host = host_path(prof, model)
                if host is None:  # not visible: path_problems names the missing bind
                    continue
                key = (str(host), None, False)
            else:
                key = (model, _host(prof, prof.env.get("HF_HOME")), _offline(prof.env))
            if key not in found:
                if is_local_path(model):
                    check = check_model(key[0], shown=model)
                else:
                    check = check_model(model, hf_home=key[1], env=prof.env, probe=None)
                found[key] = (check.problem, [])
            found[key][1].append(prof.name)
    for problem, profiles in found.values():
        if problem:
            names = ", ".join(f"'{p}'" for p in dict.fromkeys(profiles))
            pf.errors.append(f"model of profile{'s' if len(set(profiles)) > 1 else ''} {names}: {problem}")


def _offline(env: Mapping[str, str]) -> bool:
    return any(str(env.get(k, "")).lower() in ("1", "true", "yes", "on") for k in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))


def _flag_value(args: Sequence[str], name: str) -> str | None:
    values = [args[i + 1] for i, a in enumerate(args[:-1]) if a == name]
    values += [a.split("=", 1)[1] for a in args if a.startswith(name + "=")]
    return values[-1] if values else None


def visibility_problems(plan, pf: Preflight) -> None:
    """The sweep directory and the preset, written and read by the training jobs at the same path."""
    for prof in {s.profile.name: s.profile for s in plan.stages}.values():
        if prof.container is None:
            continue
        for what, path in (("sweep directory", plan.sweep_dir), ("preset", plan.config)):
            if path is None:
                continue
            host = host_path(prof, str(path))
            if host is None or Path(host) != Path(path):
                pf.errors.append(f"{what} {path}: not visible at the same path in the jobs of profile '{prof.name}' "
                                 f"({prof.source}); add a bind {existing_ancestor(Path(path))} to container.binds or "
                                 "put it under $HOME, /tmp or the current directory")
        if prof.cache and not Path(prof.cache).is_dir():
            pf.warnings.append(f"profile '{prof.name}': cache directory {prof.cache} does not exist yet (created "
                               "when the sweep is submitted)")


def run_preflight(plan) -> Preflight:
    """Every check of the module docstring; nothing is written."""
    pf = Preflight(sweep_dir=plan.sweep_dir)
    errors, warnings = path_problems(plan.profile, plan.eval_profile, list(dict.fromkeys(plan.models.values())),
                                     plan.spec.eval_args)
    pf.errors += errors
    pf.warnings += warnings
    visibility_problems(plan, pf)
    model_problems(plan, pf)
    prompts, budgets, samples = benchmark_items(plan, pf)
    disk_usage(plan, pf, prompts, budgets, samples)
    pf.errors = list(dict.fromkeys(pf.errors))
    pf.warnings = list(dict.fromkeys(pf.warnings))
    return pf


def disk_usage(plan, pf: Preflight, prompts, budgets, samples) -> None:
    """Each run's ``RunDisk`` and the free space where they are written; too little is an error."""
    from populora.config import load_config
    from populora.plan import UnknownModelShape
    from populora.plan.memory import adapter_params
    from populora.plan.shapes import model_shape

    shapes: dict[str, Any] = {}
    for run in plan.runs:
        cfg = plan.configs.get(run.name) or load_config(str(plan.config), list(run.overrides))
        model = cfg.policy.model
        if model not in shapes:
            where = host_path(plan.profile, model) if is_local_path(model) else None
            try:
                shapes[model] = model_shape(str(where) if where is not None else model)
            except UnknownModelShape as e:
                shapes[model] = None
                pf.warnings.append(f"disk of runs on {model}: unknown ({e})")
        shape = shapes[model]
        params = adapter_params(shape, cfg.policy.lora.rank, cfg.policy.lora.target_modules) if shape else None
        pf.disk.append(run_disk(run.name, cfg, params, prompts, budgets, samples))
    root = existing_ancestor(plan.sweep_dir)
    pf.free_bytes = shutil.disk_usage(root).free
    need = pf.needed_bytes
    if need is None:
        return
    if need > pf.free_bytes:
        pf.errors.append(f"disk: the sweep writes up to {_gb(need)} under {plan.sweep_dir}, which has {_gb(pf.free_bytes)} "
                         "free: free space, lower run.keep_checkpoints, or put the sweep on a larger disk (--out)")
    elif need > FREE_MARGIN * pf.free_bytes:
        pf.warnings.append(f"disk: the sweep writes up to {_gb(need)} under {plan.sweep_dir}, more than "
                           f"{FREE_MARGIN:.0%} of its {_gb(pf.free_bytes)} free")


__all__ = ["BENCHMARKS_ENV", "Preflight", "RunDisk", "disk_table", "run_preflight"]

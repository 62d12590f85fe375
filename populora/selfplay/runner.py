"""Run a training job end to end: run directory, resume, signals, checkpoints, summary.

``train(...)`` is the library entry point behind ``populora train`` and the submitit job
(``jobs/train.py``). The algorithm itself is in ``populora.selfplay.loop``; this module only does
the side effects around it.

Run directory layout (``runs/<name>/``)::

    config.yaml        resolved config (what ``--resume`` reads)
    metrics.jsonl      one line per step (stable metric names)
    lineage.jsonl      every birth and replacement of a member
    examples.jsonl     a few tasks per step with their verdicts (for humans)
    tasks.jsonl        every valid task, with its step and teacher (for the diagnostics)
    checkpoints/       atomic checkpoints (see populora.checkpoint)
    adapters/<id>/     final adapters of the current members as PEFT directories (vLLM-loadable);
                       folders of members replaced since are removed (weights in checkpoints/)
    members.json       the final members: id, role, adapter_dir, rating
    summary.json       written when the run ends (finished or interrupted)
    train.log          warnings and library logs of the run (kept out of the progress display)
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import time
from pathlib import Path

from tqdm import tqdm

from populora import checkpoint
from populora.checkpoint import Checkpoint, CheckpointError, Unusable, find_latest, set_aside
from populora.config import Config, ConfigError, config_from_yaml_text, load_config, run_dir_of, to_yaml
from populora.jsonl import JsonlError, read_json_object, step_of, truncate_jsonl_files
from populora.policy.engine import EngineFailure
from populora.selfplay.metrics import MetricsLog, read_metrics
from populora.selfplay.run_log import route_library_output
from populora.selfplay.wandb_log import open_wandb, require_wandb

# Overrides allowed when resuming: they change how long / where, never what is trained.
RESUMABLE_KEYS = ("selfplay.steps", "run.checkpoint_every", "run.keep_checkpoints", "run.tensorboard",
                  "run.collective_timeout_s", "run.wandb")
# JSON-lines files of a run, one row per record with its step: cut back to the checkpoint on resume.
RUN_LOGS = ("metrics.jsonl", "lineage.jsonl", "examples.jsonl", "tasks.jsonl")


class StopFlag:
    """Set by SIGTERM / SIGUSR2 (Slurm preemption); the loop checkpoints and stops between steps."""

    def __init__(self) -> None:
        self.signal: int | None = None

    def __bool__(self) -> bool:
        return self.signal is not None

    def install(self) -> dict:
        old = {}
        for sig in (signal.SIGTERM, signal.SIGUSR2):
            old[sig] = signal.signal(sig, self._handle)
        return old

    def _handle(self, signum, frame) -> None:
        self.signal = signum


def prepare_run(config_file: str | None, overrides: list[str], run_dir: str | None, resume: bool,
                create: bool = True) -> tuple[Config, Path]:
    """Resolve the config and the run directory; refuse to clobber an existing run.

    ``create=False`` (ranks other than 0 of a multi-rank run) only reads: rank 0 creates the directory.
    """
    if resume:
        if run_dir is None:
            raise ConfigError("--resume needs the run directory")
        rd = Path(run_dir)
        cfg_file = rd / "config.yaml"
        if not cfg_file.is_file():
            raise ConfigError(f"{cfg_file}: missing; is {rd} a run directory?")
        bad = [o for o in overrides if o.split("=", 1)[0] not in RESUMABLE_KEYS]
        if bad:
            raise ConfigError(f"override {bad[0]!r} cannot change on resume; allowed keys: {', '.join(RESUMABLE_KEYS)}")
        try:
            cfg = config_from_yaml_text(cfg_file.read_text(encoding="utf-8"))
        except (ConfigError, UnicodeDecodeError) as e:
            raise ConfigError(f"{cfg_file}: {e}") from None
        if overrides:
            from omegaconf import OmegaConf
            from omegaconf.errors import OmegaConfBaseException

            try:
                merged = OmegaConf.merge(OmegaConf.structured(cfg), OmegaConf.from_dotlist(list(overrides)))
                cfg = config_from_yaml_text(OmegaConf.to_yaml(merged))
            except (ConfigError, OmegaConfBaseException) as e:
                raise ConfigError(f"command-line overrides: {str(e).splitlines()[0]}") from None
        return cfg, rd
    cfg = load_config(config_file, overrides)
    rd = Path(run_dir) if run_dir else run_dir_of(cfg)
    if not create:
        cfg.run.dir = str(rd)
        return cfg, rd
    if (rd / "config.yaml").exists():
        raise ConfigError(f"{rd} already holds a run; use `populora train --resume {rd}` or choose another run.dir")
    cfg.run.dir = str(rd)
    rd.mkdir(parents=True, exist_ok=True)
    (rd / "config.yaml").write_text(to_yaml(cfg))
    return cfg, rd


def train(
    config_file: str | None = None,
    overrides: list[str] | tuple[str, ...] = (),
    run_dir: str | None = None,
    resume: bool | str = False,
    *,
    handle_signals: bool = True,
    progress: bool = True,
    env=None,
) -> dict:
    """Run (or resume) one training run on this process's rank; return its summary dict.

    ``resume="auto"`` resumes when the run directory already holds a run (then ``config_file`` and
    ``overrides`` are ignored: the run's saved config wins), else starts it; the decision is rank 0's,
    shared with every rank. Under torchrun or ``srun`` every rank calls this;
    rank 0 owns the run directory's files, each rank writes the checkpoint files of its members.
    Resuming a run that already finished all its steps is a no-op returning the existing summary.
    ``env``: this process's ``RankEnv`` (default: read from the launcher's variables now, before any
    engine starts: vLLM's CPU platform rewrites ``LOCAL_WORLD_SIZE`` in the calling process).
    An ``EngineFailure`` ends the run on every rank: summary.json says ``failed: <cause>``, the last
    checkpoint is left as it was, and the error is raised to the caller.
    """
    from populora.distributed.env import before_cuda, init_comm, rank_env
    from populora.selfplay.loop import SelfPlay  # heavy imports (torch, transformers) only here

    env = env or rank_env()
    before_cuda(env)  # one GPU per rank and the allocator's settings, before CUDA starts (idempotent)
    comm = init_comm(_comm_device(config_file, list(overrides), run_dir, resume),
                     _peek_timeout(config_file, list(overrides), run_dir, resume), env)
    try:
        if resume == "auto":
            resume = comm.gather(_has_run(run_dir) if comm.is_main else None)[0]
            if resume:
                config_file, overrides = None, []
        cfg, rd = prepare_run(config_file, list(overrides), run_dir, bool(resume), create=comm.is_main)
        comm.barrier()  # rank 0 has created the run directory
        return _train(cfg, rd, bool(resume), comm, SelfPlay, handle_signals=handle_signals,
                      progress=progress and comm.is_main)
    finally:
        comm.close()


def _train(cfg: Config, rd: Path, resume: bool, comm, SelfPlay, *, handle_signals: bool, progress: bool) -> dict:
    # Rank 0 decides where to start (and prepares the run directory for it); every rank follows.
    kind, value = comm.gather(_start_point(cfg, rd, resume) if comm.is_main else None)[0]
    if kind == "error":
        raise value
    if kind == "done":
        return value
    ckpt = checkpoint.load_checkpoint(value, verified=True) if kind == "from" else None
    start = ckpt.step if ckpt else 0
    if resume and comm.is_main:
        print(resume_line(rd, start, cfg.selfplay.steps, ckpt.path if ckpt else None), file=sys.stderr, flush=True)
    summary_file = rd / "summary.json"
    require_wandb(cfg)  # on every rank: a missing package stops them all before anything starts
    metrics = MetricsLog(rd, tensorboard=cfg.run.tensorboard, sinks=[open_wandb(cfg, rd)]) if comm.is_main else None

    stop = StopFlag()
    old_handlers = stop.install() if handle_signals else {}
    if progress and comm.is_main:  # the base model, the sandbox and the seed buffers take seconds
        print(f"starting {rd}: loading the base model and starting the sandbox (the progress bar follows)",
              file=sys.stderr, flush=True)
    restore_output = route_library_output(rd) if comm.is_main else (lambda: None)
    sp = SelfPlay(cfg, rd, comm)
    status = "finished"
    try:
        _record_ranks(rd, comm, sp)
        if ckpt:
            sp.restore(ckpt)
        else:
            sp.record_births()
        last_saved, ckpt_seconds = start, None
        bar = tqdm(range(start + 1, cfg.selfplay.steps + 1), desc=cfg.name, unit="step", disable=not progress,
                   initial=start, total=cfg.selfplay.steps)
        sp.on_stage = lambda name: bar.set_postfix_str(name)
        for step in bar:
            t0 = time.perf_counter()
            row = sp.step(step)
            row["time/step_s"] = time.perf_counter() - t0
            if ckpt_seconds is not None:  # the previous checkpoint's cost, reported one step late
                row["time/checkpoint_s"] = ckpt_seconds
            # Metrics first, then the checkpoint: a crash in between leaves a line that resume drops.
            if metrics is not None:
                metrics.log(step, row)
            ckpt_seconds = None
            stopping = comm.any(bool(stop))  # every rank stops after the same step
            if step % cfg.run.checkpoint_every == 0 or step == cfg.selfplay.steps or stopping:
                tc = time.perf_counter()
                _save(sp, rd, step, cfg, comm)
                last_saved, ckpt_seconds = step, time.perf_counter() - tc
            bar.set_postfix_str(_progress_line(row))
            if stopping and step < cfg.selfplay.steps:
                sig = stop.signal or signal.SIGTERM  # the signal reached another rank
                status = f"interrupted by signal {signal.Signals(sig).name}"
                break
        if last_saved != sp.step_done and sp.step_done > 0:
            _save(sp, rd, sp.step_done, cfg, comm)
        sp.export_final(rd)
        summary = sp.summary(status)
        if comm.is_main:
            prune_adapters(rd)
            _write_json(summary_file, summary)
            if status != "finished":
                print(stop_line(rd, sp.step_done, status), file=sys.stderr, flush=True)
        comm.barrier()
        return summary
    except EngineFailure as e:  # raised on every rank together (loop._generate_shared): no collective here
        e.run_dir = str(rd)
        if comm.is_main:
            _write_json(summary_file, sp.summary(f"failed: {e}"))
        raise
    finally:
        sp.close()
        if metrics is not None:
            metrics.close()
        restore_output()
        for sig, handler in old_handlers.items():
            signal.signal(sig, handler)


def resume_line(rd: Path, start: int, steps: int, ckpt_path: Path | None) -> str:
    """What a resume says first: the step it continues from and the checkpoint it read."""
    if ckpt_path is None:
        return f"resuming {rd}: no checkpoint was due yet, starting again from step 0 of {steps}"
    return f"resuming {rd} from step {start} of {steps} (checkpoint {ckpt_path})"


def stop_line(rd: Path, step: int, status: str) -> str:
    """What an interrupted run says last: where it stopped and the command that continues it."""
    return f"{status}: stopped after step {step} with a checkpoint; continue with `populora train --resume {rd}`"


def prune_adapters(rd: Path) -> list[str]:
    """Remove ``adapters/<id>/`` folders of members no longer in ``members.json`` (replaced by evolution
    while a run was interrupted and resumed); their weights stay in the checkpoints and their story in
    ``lineage.jsonl``. Returns the removed ids."""
    import shutil

    try:
        members = json.loads((rd / "members.json").read_text())
    except (OSError, ValueError):
        return []  # no (readable) member list: nothing is known to be stale
    adapters = rd / "adapters"
    if not isinstance(members, list) or not adapters.is_dir():
        return []
    keep = {m.get("id") for m in members if isinstance(m, dict)}
    removed = sorted(p.name for p in adapters.iterdir() if p.is_dir() and p.name not in keep)
    for name in removed:
        shutil.rmtree(adapters / name)
    return removed


def _write_json(path: Path, data) -> None:
    """``data`` as JSON at ``path``, atomically (a reader sees the old file or the new one)."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True))
    os.replace(tmp, path)


def rank_placement(comm, device) -> dict:
    """Where this rank runs: its host, ranks, the ``CUDA_VISIBLE_DEVICES`` it ended with and its device."""
    return {"host": socket.gethostname(), "rank": comm.rank, "local_rank": comm.local_rank,
            "visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"), "device": str(device)}


def _record_ranks(rd: Path, comm, sp) -> None:
    """``RUN_DIR/ranks.json``: every rank's placement (a collective), written by rank 0."""
    ranks = comm.gather(rank_placement(comm, sp.backend.device))  # the trainer's device (Policy passes it on)
    if comm.is_main:
        _write_json(rd / "ranks.json", ranks)


def _has_run(run_dir: str | None) -> bool:
    return run_dir is not None and (Path(run_dir) / "config.yaml").exists()


def peek_config(config_file, overrides, run_dir, resume) -> Config | None:
    """The run's config as this rank can read it before the run directory is set up (no side effects)."""
    try:
        if resume and run_dir and (Path(run_dir) / "config.yaml").exists():
            return config_from_yaml_text((Path(run_dir) / "config.yaml").read_text())
        if config_file:
            return load_config(config_file, overrides)
    except ConfigError:
        return None  # prepare_run reports it
    return None


def _peek_timeout(config_file, overrides, run_dir, resume) -> float:
    cfg = peek_config(config_file, overrides, run_dir, resume)
    return cfg.run.collective_timeout_s if cfg else Config().run.collective_timeout_s


def _comm_device(config_file, overrides, run_dir, resume) -> str:
    """The device collectives use: CUDA for runs on GPUs (NCCL), else CPU (gloo)."""
    cfg = peek_config(config_file, overrides, run_dir, resume)
    device = cfg.policy.device if cfg else "cpu"
    if device.startswith("cuda") or device == "auto":
        import torch

        if torch.cuda.is_available():
            return "cuda"
    return "cpu"


def _start_point(cfg: Config, rd: Path, resume: bool) -> tuple[str, object]:
    """Rank 0's decision, shared with every rank: ``("start", None)``, ``("from", checkpoint path)``,
    ``("done", summary)`` (a finished run: nothing to do, nothing touched) or ``("error", exception)``
    (a run that cannot be resumed as it is: raised on every rank, nothing changed)."""
    if not resume:
        return "start", None
    try:
        ckpt, skipped = resume_point(cfg, rd)
        start = ckpt.step if ckpt else 0
        done = read_json_object(rd / "summary.json", what="run summary")
        if done is not None and start >= cfg.selfplay.steps:
            return "done", done
        # Lines written after the checkpoint are redone: drop them (every file is checked first, and
        # a malformed line stops the resume before anything changes). Without a checkpoint the first
        # one was never due: the lines of those steps and the founders are all written again.
        truncate_jsonl_files([rd / n for n in RUN_LOGS],
                             (lambda row: step_of(row) <= start) if ckpt else (lambda row: False))
        set_aside(skipped)
    except (CheckpointError, JsonlError) as e:
        return "error", e
    return ("from", str(ckpt.path)) if ckpt else ("start", None)


def resume_point(cfg: Config, rd: Path) -> tuple[Checkpoint | None, list[Unusable]]:
    """The newest checkpoint of run ``rd`` that loads, and the newer unusable ones (set aside on resume).

    ``(None, [])`` only when no checkpoint was ever due: no checkpoint directory, no summary and no
    logged step at or past the first checkpoint step (``min(run.checkpoint_every, selfplay.steps)``),
    i.e. the run stopped before its first checkpoint and starting it again loses nothing. Otherwise
    a missing or unusable checkpoint is a CheckpointError naming each one and why, raised before
    anything in the run directory is changed.
    """
    ckpt, skipped = find_latest(rd / "checkpoints")
    if ckpt is not None:
        return ckpt, skipped
    rows = read_metrics(rd)  # a malformed line: JsonlError naming it
    try:
        logged = max((step_of(r) for r in rows), default=0)
    except ValueError as e:
        raise JsonlError(f"{rd / 'metrics.jsonl'}: {e}") from None
    first_due = min(cfg.run.checkpoint_every, cfg.selfplay.steps)
    if skipped or (rd / "summary.json").exists() or logged >= first_due:
        why = "; ".join(f"{u.path.name}: {u.reason}" for u in skipped) or (
            f"{rd / 'checkpoints'} holds none, but metrics.jsonl reaches step {logged}" if logged
            else f"{rd / 'checkpoints'} holds none, but the run wrote summary.json")
        raise CheckpointError(f"cannot resume {rd}: no usable checkpoint ({why}); nothing was changed. "
                              f"To start over, move {rd} away and start a new run")
    return None, []


def _progress_line(row: dict) -> str:
    valid = [v for k, v in row.items() if k.startswith("teacher/") and k.endswith("valid_rate") and v is not None]
    solve = [v for k, v in row.items() if k.startswith("student/") and k.endswith("/solve_rate") and v is not None]
    fmt = lambda xs: f"{sum(xs) / len(xs):.2f}" if xs else "-"  # noqa: E731
    return f"valid {fmt(valid)} solve {fmt(solve)} step {row['time/step_s']:.1f}s"


def _save(sp, rd: Path, step: int, cfg: Config, comm) -> None:
    """Every rank writes the adapters and optimizer states of the members it leads; rank 0 commits the
    checkpoint (state, manifest, atomic rename) once all have written."""
    adapters, opt_states, state = sp.checkpoint_payload()
    root = rd / "checkpoints"
    if comm.is_main:
        checkpoint.begin(root, step)
    comm.barrier()
    staging = checkpoint.staging_dir(root, step)
    for name, weights in adapters.items():
        checkpoint.write_member(staging, name, weights, opt_states[name], base_model=cfg.policy.model)
    comm.barrier()
    if comm.is_main:
        checkpoint.commit(root, step, state, keep=cfg.run.keep_checkpoints)
    comm.barrier()

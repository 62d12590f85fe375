"""Run a training job end to end: run directory, resume, signals, checkpoints, summary.

``train(...)`` is the library entry point behind ``populora train`` and the submitit job
(``jobs/train.py``). The algorithm itself is in ``populora.selfplay.loop``; this module only does
the side effects around it.

The run directory's layout is ``populora.run_dir.RunDir``'s.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import sys
import time
import traceback
from pathlib import Path

from tqdm import tqdm

from populora import checkpoint
from populora.checkpoint import Checkpoint, CheckpointError, Unusable, find_latest, set_aside
from populora.code_version import code_version
from populora.config import Config, ConfigError, load_config, run_dir_of, to_yaml
from populora.extras import MissingExtra
from populora.jsonl import JsonlError, step_of, truncate_jsonl_files
from populora.policy.engine import EngineFailure
from populora.run_dir import RunDir, RunDirError
from populora.selfplay import state
from populora.selfplay.metrics import MetricsLog, progress_line
from populora.selfplay.run_log import route_library_output
from populora.selfplay.wandb_log import open_wandb, require_wandb

# Overrides allowed when resuming: they change how long / where, never what is trained.
RESUMABLE_KEYS = ("selfplay.steps", "run.checkpoint_every", "run.keep_checkpoints", "run.tensorboard", "run.ranks",
                  "run.collective_timeout_s", "run.wandb")


class StartFailed(RuntimeError):
    """The run could not start (its base model or its sandbox did not come up); nothing of the run exists
    yet, and a new start with corrected settings replaces what the attempt wrote."""


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


def resumes(run_dir: str | os.PathLike | None, resume: bool | str) -> bool:
    """Whether a start with ``resume`` (True, False or ``"auto"``) continues the run in ``run_dir``."""
    return _has_run(run_dir) if resume == "auto" else bool(resume)


def read_run_config(config_file: str | None, overrides: list[str], run_dir: str | os.PathLike | None,
                    resume: bool | str) -> Config:
    """The run's config, read once: on resume the run's saved config (with the resumable overrides;
    ``resume="auto"`` ignores ``config_file`` and ``overrides``, the saved config wins), else the preset
    with the overrides. ConfigError naming the file or key. Reads only; nothing is created."""
    if not resumes(run_dir, resume):
        return load_config(config_file, overrides)
    if resume == "auto":
        overrides = []
    if run_dir is None:
        raise ConfigError("--resume needs the run directory")
    run = RunDir(run_dir)
    if run.failed_start():
        raise ConfigError(never_started_line(run))
    if not run.holds_run():
        raise ConfigError(f"{run.config_file}: missing; is {run.path} a run directory?")
    bad = [o for o in overrides if o.split("=", 1)[0] not in RESUMABLE_KEYS]
    if bad:
        raise ConfigError(f"override {bad[0]!r} cannot change on resume; allowed keys: {', '.join(RESUMABLE_KEYS)}")
    try:
        return run.read_config(overrides)
    except RunDirError as e:
        raise ConfigError(str(e)) from None


def prepare_run(config_file: str | None, overrides: list[str], run_dir: str | None, resume: bool,
                create: bool = True, cfg: Config | None = None) -> tuple[Config, Path]:
    """Resolve the config (``cfg`` when the caller has read it already, with the same arguments) and the
    run directory; refuse to clobber an existing run.

    ``create=False`` (ranks other than 0 of a multi-rank run) only reads: rank 0 creates the directory.
    """
    cfg = cfg if cfg is not None else read_run_config(config_file, overrides, run_dir, resume)
    if resume:
        return cfg, RunDir(run_dir).path
    run = RunDir(run_dir if run_dir else run_dir_of(cfg))
    rd = run.path
    cfg.run.dir = str(rd)
    if not create:
        return cfg, rd
    try:
        start = run.check_new_start()
    except RunDirError as e:  # a run with steps (resume it) or a directory that holds no run: as a setting
        raise ConfigError(str(e)) from None
    if start == "over":  # a failed start, or a run that never completed a step
        why = run.start_error()
        print(f"starting {rd} over: its previous start never completed a step"
              + (f" ({why})" if why else "") + "; its files are replaced", file=sys.stderr, flush=True)
        run.clear_start()
    run.create(to_yaml(cfg), code=code_version())
    return cfg, rd


def never_started_line(run: RunDir) -> str:
    """What ``--resume`` and ``status`` say of a start that never got its model loaded."""
    why = run.start_error()
    return (f"{run.path}: the run never started" + (f" ({why})" if why else " (its start stopped before the base "
            "model loaded and step 0 was saved)") + f"; start it again, with corrected settings: `populora train --config PRESET --run-dir "
            f"{run.path} [key=value ...]`")


def train(
    config_file: str | None = None,
    overrides: list[str] | tuple[str, ...] = (),
    run_dir: str | None = None,
    resume: bool | str = False,
    *,
    handle_signals: bool = True,
    progress: bool = True,
    env=None,
    config: Config | None = None,
) -> dict:
    """Run (or resume) one training run on this process's rank; return its summary dict.

    ``resume="auto"`` resumes when the run directory already holds a run (then ``config_file`` and
    ``overrides`` are ignored: the run's saved config wins), else starts it; the decision is rank 0's,
    shared with every rank. Under torchrun or ``srun`` every rank calls this;
    rank 0 owns the run directory's files, each rank writes the checkpoint files of its members.
    Resuming a run that already finished all its steps is a no-op returning the existing summary.
    ``env``: this process's ``RankEnv`` (default: read from the launcher's variables now, before any
    engine starts: vLLM's CPU platform rewrites ``LOCAL_WORLD_SIZE`` in the calling process).
    ``config``: the run's config when the caller has read it already (``read_run_config`` with the
    same arguments; ``populora train`` reads it once for its memory check), else it is read here, once.
    An ``EngineFailure`` ends the run on every rank: summary.json says ``failed: <cause>``, the last
    checkpoint is left as it was, and the error is raised to the caller.
    """
    from populora.distributed.env import before_cuda, init_comm, rank_env
    from populora.selfplay.loop import SelfPlay  # heavy imports (torch, transformers) only here

    env = env or rank_env()
    before_cuda(env)  # one GPU per rank and the allocator's settings, before CUDA starts (idempotent)
    # the config is read once, before the ranks meet (its device and timeout set up the collectives);
    # a config that cannot be read is reported by prepare_run below, on every rank
    read_as = resumes(run_dir, resume)
    if config is None:
        config = peek_config(config_file, list(overrides), run_dir, resume)
    comm = init_comm(_comm_device(config), _timeout(config), env)
    try:
        if resume == "auto":
            resume = comm.gather(_has_run(run_dir) if comm.is_main else None)[0]
            if resume:
                config_file, overrides = None, []
        reuse = config if bool(resume) == read_as else None  # the run appeared or vanished meanwhile: read again
        cfg, rd = prepare_run(config_file, list(overrides), run_dir, bool(resume), create=comm.is_main, cfg=reuse)
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
    run = RunDir(rd)
    require_wandb(cfg)  # on every rank: a missing package stops them all before anything starts
    metrics = MetricsLog(rd, tensorboard=cfg.run.tensorboard, sinks=[open_wandb(cfg, rd)]) if comm.is_main else None

    stop = StopFlag()
    old_handlers = stop.install() if handle_signals else {}
    if progress and comm.is_main:  # the base model, the sandbox and the seed buffers take seconds
        print(f"starting {rd}: loading the base model and starting the sandbox (the progress bar follows)",
              file=sys.stderr, flush=True)
    restore_output = route_library_output(rd) if comm.is_main else (lambda: None)
    try:
        sp = SelfPlay(cfg, rd, comm)  # the base model loads here
    except BaseException as e:
        cause = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:500]
        if comm.is_main:  # a failed start: kept in run.json for `populora status`; a new start replaces it
            run.record_start_error(cause)
            if isinstance(e, Exception):
                with open(run.log_file, "a", encoding="utf-8") as log:
                    log.write(traceback.format_exc())
        restore_output()
        if metrics is not None:
            metrics.close()
        if isinstance(e, (ConfigError, MissingExtra, OSError, EngineFailure)) or not isinstance(e, Exception):
            raise  # each has its own one line (a missing extra, the environment, a bad setting)
        raise StartFailed(f"{rd}: the run did not start: {cause} (the traceback is in {run.log_file}); fix it and "
                          f"start again: `populora train --config PRESET --run-dir {rd} [key=value ...]`") from e
    status = "finished"
    try:
        _record_ranks(run, comm, sp)
        if ckpt:
            state.restore(sp, ckpt)
        else:
            sp.record_births()
        if comm.is_main and not run.holds_run():
            run.mark_started()  # the model loaded and step 0 (the founders) is saved: the run exists
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
            bar.set_postfix_str(progress_line(row))
            if stopping and step < cfg.selfplay.steps:
                sig = stop.signal or signal.SIGTERM  # the signal reached another rank
                status = f"interrupted by signal {signal.Signals(sig).name}"
                break
        if last_saved != sp.step_done and sp.step_done > 0:
            _save(sp, rd, sp.step_done, cfg, comm)
        with disk_errors(RunDir(rd).adapters):
            state.export_final(sp)
        summary = state.summary(sp, status)
        if comm.is_main:
            run.prune_adapters()
            run.write_summary(summary)
            if status != "finished":
                print(stop_line(rd, sp.step_done, status), file=sys.stderr, flush=True)
        comm.barrier()
        return summary
    except EngineFailure as e:  # raised on every rank together (Ranks.generate): no collective here
        e.run_dir = str(rd)
        if comm.is_main:
            run.write_summary(state.summary(sp, f"failed: {e}"))
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
        return f"resuming {rd}: no checkpoint was completed yet, starting again from step 0 of {steps}"
    return f"resuming {rd} from step {start} of {steps} (checkpoint {ckpt_path})"


def stop_line(rd: Path, step: int, status: str) -> str:
    """What an interrupted run says last: where it stopped and the command that continues it."""
    return f"{status}: stopped after step {step} with a checkpoint; continue with `populora train --resume {rd}`"


def rank_placement(comm, device) -> dict:
    """Where this rank runs: its host, ranks, the ``CUDA_VISIBLE_DEVICES`` it ended with and its device."""
    return {"host": socket.gethostname(), "rank": comm.rank, "local_rank": comm.local_rank,
            "visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"), "device": str(device)}


def _record_ranks(run: RunDir, comm, sp) -> None:
    """``RUN_DIR/ranks.json``: every rank's placement (a collective), written by rank 0."""
    ranks = comm.gather(rank_placement(comm, sp.backend.device))  # the trainer's device (Policy passes it on)
    if comm.is_main:
        run.write_ranks(ranks)


def _has_run(run_dir: str | None) -> bool:
    return run_dir is not None and RunDir(run_dir).holds_run()


def peek_config(config_file, overrides, run_dir, resume) -> Config | None:
    """``read_run_config``, or None when the config cannot be read (``prepare_run`` then reports why)."""
    try:
        return read_run_config(config_file, list(overrides), run_dir, resume)
    except (ConfigError, RunDirError):
        return None


def _timeout(cfg: Config | None) -> float:
    return cfg.run.collective_timeout_s if cfg else Config().run.collective_timeout_s


def _comm_device(cfg: Config | None) -> str:
    """The device collectives use: CUDA for runs on GPUs (NCCL), else CPU (gloo)."""
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
    run = RunDir(rd)
    try:
        run.format()
        ckpt, skipped = resume_point(cfg, rd)
        start = ckpt.step if ckpt else 0
        done = run.read_summary()
        if done is not None and start >= cfg.selfplay.steps:
            return "done", done
        # Lines written after the checkpoint are redone: drop them (every file is checked first, and
        # a malformed line stops the resume before anything changes). Without a checkpoint the first
        # one was never due: the lines of those steps and the founders are all written again.
        truncate_jsonl_files(run.step_logs(), (lambda row: step_of(row) <= start) if ckpt else (lambda row: False))
        set_aside(skipped)
    except (CheckpointError, JsonlError, RunDirError) as e:
        return "error", e
    return ("from", str(ckpt.path)) if ckpt else ("start", None)


def resume_point(cfg: Config, rd: Path) -> tuple[Checkpoint | None, list[Unusable]]:
    """The newest checkpoint of run ``rd`` that loads, and the newer unusable ones (set aside on resume).

    ``(None, [])`` only when no checkpoint was ever completed: no checkpoint, no summary and no logged
    step past the first checkpoint step (``min(run.checkpoint_every, selfplay.steps)``), i.e. the run
    stopped before its first checkpoint, or while writing it (a step's metrics line is written before
    its checkpoint: a preemption between the two, as Slurm's requeue gives, leaves the line of the
    first checkpoint step and no checkpoint), and starting it again loses nothing. A step logged past
    the first checkpoint step means a checkpoint was committed before it (they are written between
    steps), so a missing or unusable checkpoint is then a CheckpointError naming each one and why,
    raised before anything in the run directory is changed.
    """
    run = RunDir(rd)
    ckpt, skipped = find_latest(run.checkpoints)
    if ckpt is not None:
        return ckpt, skipped
    rows = run.read_metrics()  # a malformed line: JsonlError naming it
    try:
        logged = max((step_of(r) for r in rows), default=0)
    except ValueError as e:
        raise JsonlError(f"{run.metrics_file}: {e}") from None
    first_due = min(cfg.run.checkpoint_every, cfg.selfplay.steps)
    if skipped or run.summary_file.exists() or logged > first_due:
        why = "; ".join(f"{u.path.name}: {u.reason}" for u in skipped) or (
            f"{run.checkpoints} holds none, but metrics.jsonl reaches step {logged}" if logged
            else f"{run.checkpoints} holds none, but the run wrote summary.json")
        raise CheckpointError(f"cannot resume {rd}: no usable checkpoint ({why}); nothing was changed. "
                              f"To start over, move {rd} away and start a new run")
    return None, []


@contextlib.contextmanager
def disk_errors(path: Path):
    """Errors of writing files under ``path`` as ``OSError`` naming it: safetensors reports a full disk
    as ``SafetensorError: ... (os error 28)``, which would otherwise reach the user as a traceback."""
    try:
        yield
    except OSError:
        raise
    except Exception as e:
        m = re.search(r"os error (\d+)", str(e))
        if m is None:
            raise
        code = int(m.group(1))
        raise OSError(code, os.strerror(code), str(path)) from e


def _save(sp, rd: Path, step: int, cfg: Config, comm) -> None:
    """Every rank writes the adapters and optimizer states of the members it leads; rank 0 commits the
    checkpoint (state, manifest, atomic rename) once all have written."""
    adapters, opt_states, run_state = state.checkpoint_payload(sp)
    root = RunDir(rd).checkpoints
    if comm.is_main:
        checkpoint.begin(root, step)
    comm.barrier()
    staging = checkpoint.staging_dir(root, step)
    with disk_errors(staging):
        for name, weights in adapters.items():
            checkpoint.write_member(staging, name, weights, opt_states[name], base_model=cfg.policy.model)
    comm.barrier()
    if comm.is_main:
        checkpoint.commit(root, step, run_state, keep=cfg.run.keep_checkpoints)
    comm.barrier()

"""Evaluation as job arrays: one array task per shard, then a merge + score + leaderboard job.

Every task runs a ``populora`` command in-process through ``populora.cli.main``, so the jobs depend
only on the command line, not on the evaluation library's internals:

* shard ``i`` of ``N`` (array task ``i``, numbered from 0):
  ``populora eval --runs RUN --benchmarks B --shard i/N --stage generate [ARGS...]``; the
  evaluation splits its (adapter x benchmark x slice) work units over the ``N`` shards;
* after the whole array (``afterok``), one job without a GPU runs, for every run,
  ``populora eval --runs RUN --benchmarks B --shard 0/N --stage score [ARGS...]`` (merges the
  ``N`` shards, then scores), and finally ``populora leaderboard RUN... --out DIR``.

Evaluation results live in each run directory (``RUN/eval/``), where ``populora leaderboard`` reads
them. A shard that fails (non-zero exit or exception) is retried in the same job up to
``max_retries`` more times; if it keeps failing, the job fails with :class:`ShardFailed`, whose
message names the shard, and Slurm cancels the dependent leaderboard job (``afterok`` with
``--kill-on-invalid-dep=yes``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jobs.profiles import ClusterProfile
from jobs.stages import Stage

log = logging.getLogger(__name__)


class CommandFailed(RuntimeError):
    """A ``populora`` command run in-process exited with a non-zero status."""


class ShardFailed(RuntimeError):
    """An evaluation shard failed on every attempt."""


def run_populora(argv: Sequence[str]) -> None:
    """Run ``populora ARGV`` in this process; raise :class:`CommandFailed` on a non-zero exit."""
    from populora.cli import main

    try:
        status = main(list(argv))
    except SystemExit as exc:  # argparse errors exit; keep them as failures of this command
        status = exc.code if isinstance(exc.code, int) else 1
    if status:
        raise CommandFailed(f"`populora {' '.join(argv)}` exited with status {status}")


@dataclass(frozen=True)
class EvalShard:
    """Shard ``index`` of ``count`` of the evaluation of ``runs`` on ``benchmarks`` (comma list)."""

    label: str
    runs: tuple[str, ...]
    benchmarks: str
    index: int
    count: int
    extra: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        return f"{self.label}:shard{self.index}/{self.count}"

    def argv(self) -> list[str]:
        return ["eval", "--runs", *self.runs, "--benchmarks", self.benchmarks,
                "--shard", f"{self.index}/{self.count}", "--stage", "generate", *self.extra]


class EvalShardJob:
    """Run one shard, retrying a failure up to ``max_retries`` more times (``retry_wait_s`` apart)."""

    def __init__(self, shard: EvalShard, max_retries: int = 2, retry_wait_s: float = 5.0) -> None:
        self.shard = shard
        self.max_retries = max_retries
        self.retry_wait_s = retry_wait_s

    def __call__(self) -> dict[str, Any]:
        errors = []
        for attempt in range(1, self.max_retries + 2):
            try:
                run_populora(self.shard.argv())
                return {"shard": self.shard.name, "attempts": attempt}
            except Exception as exc:  # any failure of the shard is retried, then reported
                errors.append(f"attempt {attempt}: {type(exc).__name__}: {exc}")
                log.warning("evaluation shard %s failed (%s)", self.shard.name, errors[-1])
                if attempt <= self.max_retries:
                    time.sleep(self.retry_wait_s)
        raise ShardFailed(f"evaluation shard {self.shard.name} failed {len(errors)} times:\n  " + "\n  ".join(errors))

    def __repr__(self) -> str:
        return f"EvalShardJob({self.shard.name})"


class LeaderboardJob:
    """Merge and score every run's shards, then write the leaderboard of all runs."""

    def __init__(self, runs: Sequence[str], benchmarks: str, shards: int, out: str,
                 extra: Sequence[str] = (), leaderboard_args: Sequence[str] = (),
                 run_extra: Mapping[str, Sequence[str]] | None = None) -> None:
        self.runs = list(runs)
        self.benchmarks = benchmarks
        self.shards = shards
        self.out = out
        self.extra = list(extra)
        self.leaderboard_args = list(leaderboard_args)  # e.g. --seed-key (the sweep's seed_key)
        self.run_extra = {k: list(v) for k, v in (run_extra or {}).items()}  # run dir -> its own eval args

    def commands(self) -> list[list[str]]:
        scores = [["eval", "--runs", run, "--benchmarks", self.benchmarks, "--shard", f"0/{self.shards}",
                   "--stage", "score", *self.extra, *self.run_extra.get(run, ())] for run in self.runs]
        return [*scores, ["leaderboard", *self.runs, "--out", self.out, *self.leaderboard_args]]

    def __call__(self) -> dict[str, Any]:
        for argv in self.commands():
            run_populora(argv)
        return {"leaderboard": self.out, "runs": self.runs}


def eval_shards(label: str, runs: Sequence[str], benchmarks: Sequence[str], shards: int,
                extra: Sequence[str] = ()) -> list[EvalShard]:
    """The ``shards`` tasks of one evaluation array."""
    if shards < 1:
        raise ValueError(f"shards must be >= 1, got {shards}")
    if not benchmarks:
        raise ValueError("no benchmarks to evaluate")
    joined = ",".join(benchmarks)
    return [EvalShard(label, tuple(runs), joined, i, shards, tuple(extra)) for i in range(shards)]


def evaluation_stages(runs: Mapping[str, str | Path], benchmarks: Sequence[str], shards: int,
                      leaderboard_dir: str | Path, profile: ClusterProfile, logs: str | Path,
                      after: Mapping[str, tuple[str, int | None]] | None = None,
                      max_retries: int | None = None, extra: Sequence[str] = (),
                      prefix: str = "populora", leaderboard_args: Sequence[str] = (),
                      run_extra: Mapping[str, Sequence[str]] | None = None,
                      leaderboard_profile: ClusterProfile | None = None) -> list[Stage]:
    """One evaluation array per run (after ``after[run]`` when given) and one merge + score +
    leaderboard stage after all of them, without a GPU (merging, scoring and tables need none): on
    ``leaderboard_profile`` (a CPU partition's), else on ``profile`` without GPUs. ``runs`` maps a
    run's name to its directory; ``extra`` are further ``populora eval`` arguments of every run
    (``--limit``, ``--samples``, ...), ``run_extra`` those of one run (its ``--model``),
    ``leaderboard_args`` further ``populora leaderboard`` arguments (``--seed-key``)."""
    retries = profile.max_retries if max_retries is None else max_retries
    run_extra = run_extra or {}
    stages: list[Stage] = []
    for name, run_dir in runs.items():
        shard_list = eval_shards(name, [str(Path(run_dir).absolute())], benchmarks, shards,
                                 (*extra, *run_extra.get(name, ())))
        stages.append(Stage(
            key=f"eval:{name}", name=f"{prefix}-eval-{name}", profile=profile,
            folder=Path(logs).absolute() / "eval" / name / "%j",
            calls=[EvalShardJob(s, retries) for s in shard_list], labels=[s.name for s in shard_list],
            after=[after[name]] if after and name in after else [],
        ))
    board = LeaderboardJob([str(Path(r).absolute()) for r in runs.values()], ",".join(benchmarks), shards,
                           str(Path(leaderboard_dir).absolute()), extra, leaderboard_args,
                           {str(Path(runs[n]).absolute()): v for n, v in run_extra.items() if n in runs})
    stages.append(Stage(
        key="leaderboard", name=f"{prefix}-leaderboard", profile=(leaderboard_profile or profile).without_gpus(),
        folder=Path(logs).absolute() / "leaderboard" / "%j", calls=[board], labels=["leaderboard"],
        after=[(s.key, None) for s in stages],
    ))
    return stages

"""A run directory (``runs/<name>/``): the ONE owner of its layout, its readers, writers and format version.

Training writes it, resume reads it back, and evaluation, the leaderboard, diagnostics, retention tests
and ``populora status`` read it; all of them go through ``RunDir``, so a file's name and format are
written down once, here::

    run.json           the layout's format version, whether the run has started, the code that runs it
    config.yaml        resolved config (what ``--resume`` reads)
    metrics.jsonl      one line per step (stable metric names; ``populora.selfplay.metrics``)
    lineage.jsonl      every birth and replacement of a member
    examples.jsonl     a few tasks per step with their verdicts (for humans)
    tasks.jsonl        every valid task, with its step and teacher (for the diagnostics)
    checkpoints/       atomic checkpoints (``populora.checkpoint``)
    adapters/<id>/     final adapters of the current members as PEFT directories (vLLM-loadable);
                       folders of members replaced since are removed (weights in checkpoints/)
    members.json       the final members: id, role, adapter_dir, rating, parents, operator, born_step
    summary.json       written when the run ends (finished, interrupted or failed)
    ranks.json         where each rank ran: host, rank, local_rank, visible_devices, device
    train.log          warnings and library logs of the run (kept out of the progress display)
    tensorboard/       event files (when tensorboard is installed and ``run.tensorboard``)
    wandb/, wandb_id   Weights & Biases' own files and the run's W&B id (``run.wandb``)

A run exists once it has started: ``run.json`` is written with ``"started": false`` when a start
begins, and says ``true`` once the base model has loaded and step 0 (the founders, in
``lineage.jsonl``) is saved. Until then the directory is a failed or unfinished start: a new start
replaces its files (with new settings), ``--resume`` refuses it, ``populora status`` says so. A
run that never completed a step may also be started over; one that did is refused (``--resume``).
A non-empty directory without ``run.json`` or ``config.yaml`` is not a run and is never written into.

A directory written before ``run.json`` existed has format 1 (the same layout). A run of a newer
format than this code knows is refused with a message naming it. JSON files are written atomically
(a reader sees the old file or the new one); JSON-lines files are appended and fsynced, and readers
skip a torn last line (``populora.jsonl``). Nothing here imports torch; the config is read lazily.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from populora.jsonl import json_kind, read_json_object, read_jsonl

FORMAT = 1  # the layout this code writes and reads (``run.json``'s "format")


class RunDirError(ValueError):
    """A run directory is missing, of an unknown format, or a file in it cannot be read (the message
    names the file)."""


def write_json_atomic(path: Path, data: Any, *, sort_keys: bool = True) -> None:
    """``data`` as indented JSON at ``path``, atomically (a reader sees the old file or the new one)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=sort_keys))
    os.replace(tmp, path)


def append_jsonl(path: Path, rows: Iterable[dict], *, sort_keys: bool = False, fsync: bool = False) -> None:
    """Append one JSON line per row (``fsync``: to disk before returning)."""
    with open(path, "a", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, sort_keys=sort_keys) + "\n")
        if fsync:
            f.flush()
            os.fsync(f.fileno())


def _reads_alone(config_text: str) -> bool:
    """Whether a saved config reads without overrides (its renamed-key warnings were shown once)."""
    import warnings

    from populora.config import ConfigError, config_from_yaml_text

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            config_from_yaml_text(config_text)
    except ConfigError:
        return False
    return True

class RunDir:
    """The files of one run directory (see the module docstring). Cheap to make: nothing is read
    until asked."""

    FORMAT_FILE = "run.json"
    CONFIG = "config.yaml"
    METRICS = "metrics.jsonl"
    LINEAGE = "lineage.jsonl"
    EXAMPLES = "examples.jsonl"
    TASKS = "tasks.jsonl"
    CHECKPOINTS = "checkpoints"
    ADAPTERS = "adapters"
    MEMBERS = "members.json"
    SUMMARY = "summary.json"
    RANKS = "ranks.json"
    LOG = "train.log"
    TENSORBOARD = "tensorboard"
    WANDB = "wandb"
    WANDB_ID = "wandb_id"
    # JSON-lines files with one row per record and its step: cut back to the checkpoint on resume
    STEP_LOGS = (METRICS, LINEAGE, EXAMPLES, TASKS)

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)

    def __repr__(self) -> str:
        return f"RunDir({str(self.path)!r})"

    def __str__(self) -> str:
        return str(self.path)

    # -- paths ----------------------------------------------------------------------------------------
    @property
    def name(self) -> str:
        return self.path.name

    @property
    def config_file(self) -> Path:
        return self.path / self.CONFIG

    @property
    def metrics_file(self) -> Path:
        return self.path / self.METRICS

    @property
    def lineage_file(self) -> Path:
        return self.path / self.LINEAGE

    @property
    def examples_file(self) -> Path:
        return self.path / self.EXAMPLES

    @property
    def tasks_file(self) -> Path:
        return self.path / self.TASKS

    @property
    def checkpoints(self) -> Path:
        return self.path / self.CHECKPOINTS

    @property
    def adapters(self) -> Path:
        return self.path / self.ADAPTERS

    def adapter_dir(self, member_id: str) -> Path:
        return self.adapters / member_id

    @property
    def members_file(self) -> Path:
        return self.path / self.MEMBERS

    @property
    def summary_file(self) -> Path:
        return self.path / self.SUMMARY

    @property
    def ranks_file(self) -> Path:
        return self.path / self.RANKS

    @property
    def log_file(self) -> Path:
        return self.path / self.LOG

    @property
    def tensorboard_dir(self) -> Path:
        return self.path / self.TENSORBOARD

    @property
    def wandb_dir(self) -> Path:
        return self.path / self.WANDB

    @property
    def wandb_id_file(self) -> Path:
        return self.path / self.WANDB_ID

    def step_logs(self) -> list[Path]:
        return [self.path / n for n in self.STEP_LOGS]

    # -- the run as a whole -------------------------------------------------------------------------
    def run_record(self) -> dict | None:
        """``run.json`` (None when missing or unreadable: the caller decides from the other files)."""
        try:
            return self._object(self.FORMAT_FILE, "run format file")
        except ValueError:
            return None

    def holds_run(self) -> bool:
        """Whether a run has started here: ``run.json`` says so, or (a directory written before runs
        recorded their start) its config is there."""
        record = self.run_record()
        if record is not None and "started" in record:
            return record["started"] is True
        return self.config_file.is_file()

    def failed_start(self) -> bool:
        """A start that never got its model loaded and step 0 saved (``run.json`` says ``started: false``)."""
        record = self.run_record()
        return record is not None and record.get("started") is False

    def start_error(self) -> str | None:
        """Why the start failed, as recorded (None when unknown or not a failed start)."""
        record = self.run_record() or {}
        return record.get("error") if record.get("started") is False else None

    def steps_done(self) -> int:
        """The last step this run completed: its newest checkpoint or metrics line (0: none)."""
        # checkpoint directories by name (populora.checkpoint's step_NNNNNN; that module needs torch)
        saved = [int(p.name[5:]) for p in self.checkpoints.glob("step_*") if p.name[5:].isdigit()] \
            if self.checkpoints.is_dir() else []
        try:
            logged = max((r["step"] for r in self.read_metrics() if isinstance(r.get("step"), int)), default=0)
        except ValueError:  # a damaged metrics.jsonl: count the run as having steps (never clear it)
            logged = 1
        return max([logged, *saved])

    def has_files(self) -> bool:
        """Whether the directory exists and holds anything."""
        return self.path.is_dir() and any(self.path.iterdir())

    def check_new_start(self) -> str:
        """Whether a new run may start here: ``"new"`` (missing or empty directory), ``"over"`` (a failed
        start, or a run that never completed a step: its files are replaced). Raises ``RunDirError``
        for a run with completed steps (resume it) and for a non-empty directory that holds no run."""
        if not self.has_files():
            return "new"
        if not (self.path / self.FORMAT_FILE).exists() and not self.config_file.exists():
            raise RunDirError(f"{self.path} is not empty and holds no run (no {self.FORMAT_FILE} or {self.CONFIG}); "
                              "give an empty or new directory (--run-dir, or run.dir=)")
        done = self.steps_done()
        summary = self._summary_or_none()
        if done > 0 or (summary is not None and str(summary.get("status", "")).startswith("finished")):
            raise RunDirError(f"{self.path} already holds a run ({done} step(s) done); continue it with "
                              f"`populora train --resume {self.path}` or choose another run directory")
        return "over"

    def _summary_or_none(self) -> dict | None:
        try:
            return self.read_summary()
        except ValueError:
            return None

    def clear_start(self) -> list[str]:
        """Remove the files of a start that never completed a step (the layout's own names only; anything
        else in the directory stays). Refuses a run with completed steps. Returns the removed names."""
        if self.steps_done() > 0:
            raise RunDirError(f"{self.path}: refusing to clear a run with completed steps")
        removed = []
        for name in (self.FORMAT_FILE, self.CONFIG, *self.STEP_LOGS, self.CHECKPOINTS, self.ADAPTERS, self.MEMBERS,
                     self.SUMMARY, self.RANKS, self.LOG, self.TENSORBOARD, self.WANDB, self.WANDB_ID):
            p = self.path / name
            if p.is_dir() and not p.is_symlink():
                shutil.rmtree(p)
            elif p.exists() or p.is_symlink():
                p.unlink()
            else:
                continue
            removed.append(name)
        return removed

    def create(self, config_yaml: str, code: dict | None = None) -> None:
        """Begin a new run: ``run.json`` (format, ``started: false``, the code that runs it) and its
        resolved config. The run exists once :meth:`mark_started` has been called."""
        self.path.mkdir(parents=True, exist_ok=True)
        write_json_atomic(self.path / self.FORMAT_FILE, {"format": FORMAT, "started": False, "code": code or {}})
        self.config_file.write_text(config_yaml)

    def mark_started(self) -> None:
        """The base model has loaded and step 0 is saved: from now on this directory holds a run."""
        record = {k: v for k, v in (self.run_record() or {"format": FORMAT}).items() if k != "error"}
        write_json_atomic(self.path / self.FORMAT_FILE, {**record, "started": True})

    def record_start_error(self, error: str) -> None:
        """A start that failed before :meth:`mark_started`: keep why (``populora status`` shows it)."""
        record = self.run_record()
        if record is not None and record.get("started") is False:
            write_json_atomic(self.path / self.FORMAT_FILE, {**record, "error": error})

    def format(self) -> int:
        """The layout version of this run directory (1 when it predates ``run.json``); a format newer
        than this code knows is a ``RunDirError``."""
        try:
            data = self._object(self.FORMAT_FILE, "run format file")
        except ValueError as e:
            raise RunDirError(str(e)) from None
        version = 1 if data is None else data.get("format")
        if not isinstance(version, int) or isinstance(version, bool) or version < 1:
            raise RunDirError(f"{self.path / self.FORMAT_FILE}: 'format' must be a positive integer, got {version!r}")
        if version > FORMAT:
            raise RunDirError(f"{self.path}: run directory format {version} is newer than this populora reads "
                              f"(format {FORMAT}); upgrade populora")
        return version

    # -- readers ------------------------------------------------------------------------------------
    def read_config_text(self) -> str:
        if not self.config_file.is_file():
            raise RunDirError(f"{self.config_file}: missing; is {self.path} a run directory?")
        try:
            return self.config_file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise RunDirError(f"{self.config_file}: cannot read ({e})") from None

    def read_config_data(self) -> dict:
        """The saved config as plain YAML data (no validation, no torch): for readers that need a fact
        or two (the run's name, whether it is the baseline). ``{}`` when there is no config."""
        if not self.config_file.is_file():
            return {}
        import yaml

        try:
            data = yaml.safe_load(self.read_config_text())
        except yaml.YAMLError as e:
            mark = getattr(e, "problem_mark", None)
            at = f" at line {mark.line + 1}" if mark is not None else ""
            raise RunDirError(f"{self.config_file}: cannot parse (YAML error{at})") from None
        if data is None:
            return {}
        if not isinstance(data, dict):
            raise RunDirError(f"{self.config_file}: a YAML {json_kind(data)} where a mapping of sections is expected")
        return data

    def read_config(self, overrides: list[str] | tuple[str, ...] = ()):
        """The run's resolved config (``populora.config.Config``), with ``key=value`` ``overrides`` on
        top; errors name the file (or the overrides)."""
        from populora.config import ConfigError, config_from_yaml_text

        self.format()
        text = self.read_config_text()
        try:
            return config_from_yaml_text(text, overrides)
        except ConfigError as e:
            # the overrides' error when the saved config reads without them (checked on this error
            # path only: a good resume reads the config once)
            where = "command-line overrides" if overrides and _reads_alone(text) else str(self.config_file)
            raise ConfigError(f"{where}: {e}") from None

    def read_metrics(self) -> list[dict]:
        """The rows of ``metrics.jsonl``, one per step ([] before the first step); a malformed line
        other than a torn last one is a ``JsonlError`` naming file and line."""
        return read_jsonl(self.metrics_file)

    def read_lineage(self, strict: bool = True) -> list[dict]:
        """Every birth record; a malformed line is an error naming file and line (with ``strict``,
        even a torn last line: the lineage is written with fsync, so a torn line is damage)."""
        return read_jsonl(self.lineage_file, strict=strict, what="lineage record")

    def read_examples(self) -> list[dict]:
        return read_jsonl(self.examples_file, what="example")

    def _object(self, name: str, what: str) -> dict | None:
        """A JSON object file (None when missing); a damaged one is a ``JsonlError`` naming it."""
        return read_json_object(self.path / name, what=what)

    def read_summary(self) -> dict | None:
        """``summary.json`` (None when the run has not ended)."""
        return self._object(self.SUMMARY, "run summary")

    def read_members(self) -> list[dict]:
        """``members.json``: a JSON list of member objects (error naming the file when missing or bad)."""
        path = self.members_file
        if not path.is_file():
            raise RunDirError(f"{path}: missing; a run directory lists its adapters in members.json")
        try:
            members = json.loads(path.read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
            raise RunDirError(f"{path}: invalid JSON ({e})") from None
        if not isinstance(members, list):
            raise RunDirError(f"{path}: expected a JSON list of members, got {type(members).__name__}")
        return members

    def read_ranks(self) -> list[dict]:
        """``ranks.json``: one object per rank ([] when the run never started a rank)."""
        path = self.ranks_file
        if not path.is_file():
            return []
        try:
            ranks = json.loads(path.read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
            raise RunDirError(f"{path}: not a JSON list ({e})") from None
        if not isinstance(ranks, list) or not all(isinstance(r, dict) for r in ranks):
            raise RunDirError(f"{path}: not a JSON list of objects")
        return ranks

    # -- writers ------------------------------------------------------------------------------------
    def write_summary(self, summary: dict) -> None:
        write_json_atomic(self.summary_file, summary)

    def write_ranks(self, ranks: list[dict]) -> None:
        write_json_atomic(self.ranks_file, ranks)

    def write_members(self, members: list[dict]) -> None:
        """``members.json``, atomically (indented, keys in the order given)."""
        write_json_atomic(self.members_file, members, sort_keys=False)

    def append_tasks(self, tasks: Iterable) -> None:
        """Every valid task of a step (``Task`` records), one JSON line each."""
        append_jsonl(self.tasks_file, (t.to_json() for t in tasks))

    def append_examples(self, rows: Iterable[dict]) -> None:
        append_jsonl(self.examples_file, rows)

    def append_lineage(self, records: Iterable[dict]) -> None:
        """Birth records, fsynced (the family tree must survive a crash)."""
        self.path.mkdir(parents=True, exist_ok=True)
        append_jsonl(self.lineage_file, records, sort_keys=True, fsync=True)

    def prune_adapters(self) -> list[str]:
        """Remove ``adapters/<id>/`` folders of members no longer in ``members.json`` (replaced by
        evolution while a run was interrupted and resumed); their weights stay in the checkpoints and
        their story in ``lineage.jsonl``. Returns the removed ids."""
        try:
            members = self.read_members()
        except RunDirError:
            return []  # no (readable) member list: nothing is known to be stale
        if not self.adapters.is_dir():
            return []
        keep = {m.get("id") for m in members if isinstance(m, dict)}
        removed = sorted(p.name for p in self.adapters.iterdir() if p.is_dir() and p.name not in keep)
        for name in removed:
            shutil.rmtree(self.adapters / name)
        return removed

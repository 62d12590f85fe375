"""Atomic, member-keyed checkpoints of a run, and finding the newest good one.

A checkpoint is a directory ``checkpoints/step_<N>/`` holding:

- ``adapters/<name>/``: every live adapter as a PEFT directory (vLLM- and peft-loadable);
- ``optimizer/<name>.safetensors`` + ``optimizer/<name>.json``: each adapter's AdamW state, tensors
  and the rest apart (``populora.optimizer_state``; no pickle, so loading cannot run code);
- ``state.json``: everything else (step, members, ratings, lineage, buffers, counters);
- ``manifest.json``: sha256 and size of every other file, written last.

Writing is in three parts so that the ranks of a distributed run each write their own members:
``begin`` (one process: an empty staging directory ``.tmp-step_<N>``), ``write_member`` (every rank,
for the members it leads), ``commit`` (one process, after every rank is done: state, manifest, fsync,
rename into place, prune). A crash at any point leaves either the previous checkpoint or a ``.tmp-*``
directory that is ignored and cleaned up. ``save_checkpoint`` does the three in one process. On load,
every file is checked against the manifest; a checkpoint that fails the check is reported and skipped
in favour of the previous good one (``find_latest`` says why each newer one was skipped). Adapters and
optimizer states are then read on first access, one member at a time, so a rank reads only the
members it needs.

Checkpoints written before this layout hold one ``optimizer.pt`` (a ``torch.save`` pickle). It is
read with ``torch.load(weights_only=True)``, torch's restricted unpickler that builds tensors and
plain containers only; a file that needs anything else is refused with a message naming it.

Public functions, each on one checkpoint directory or one root of them: ``begin`` /
``write_member`` / ``commit`` and ``save_checkpoint``, ``list_checkpoints``, ``verify``,
``load_checkpoint``, ``find_latest`` / ``load_latest`` and ``set_aside``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import pickle
import re
import shutil
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import torch

from populora.optimizer_state import OptimizerStateError, load_state, save_state
from populora.policy.adapters import AdapterFormatError, AdapterWeights

log = logging.getLogger(__name__)

MANIFEST = "manifest.json"
STATE = "state.json"
OPTIMIZER = "optimizer"  # directory: <adapter>.safetensors + <adapter>.json per adapter
LEGACY_OPTIMIZER = "optimizer.pt"  # older checkpoints: one torch.save pickle of every adapter's state
ADAPTERS = "adapters"
UNUSABLE_PREFIX = "unusable-"  # unusable checkpoints set aside on resume keep their files under this name
_SAFE_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")


class CheckpointError(RuntimeError):
    """No usable checkpoint, or a checkpoint that fails verification (message says which file)."""


@dataclass
class Unusable:
    """A checkpoint directory that failed to load, and why."""

    step: int
    path: Path
    reason: str


class _LazyMembers(Mapping):
    """``{adapter name: value}`` read from the checkpoint on first access (and kept)."""

    def __init__(self, names: list[str], read: Callable[[str], object]) -> None:
        self._names, self._read, self._cache = list(names), read, {}

    def __getitem__(self, name: str):
        if name not in self._names:
            raise KeyError(f"checkpoint has no adapter {name!r}; it has {sorted(self._names)}")
        if name not in self._cache:
            self._cache[name] = self._read(name)
        return self._cache[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)


@dataclass
class Checkpoint:
    step: int
    path: Path
    adapters: Mapping[str, AdapterWeights] = field(default_factory=dict)
    optimizer_states: Mapping[str, dict] = field(default_factory=dict)
    state: dict = field(default_factory=dict)


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _fsync_tree(root: Path) -> None:
    for dirpath, _, files in os.walk(root):
        for name in files:
            with open(os.path.join(dirpath, name), "rb") as f:
                os.fsync(f.fileno())
        fd = os.open(dirpath, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def step_dir_name(step: int) -> str:
    return f"step_{step:06d}"


def staging_dir(root: str | os.PathLike, step: int) -> Path:
    """Where checkpoint ``step`` is written before it is committed (the same path for every rank)."""
    return Path(root) / f".tmp-{step_dir_name(step)}"


def begin(root: str | os.PathLike, step: int) -> Path:
    """A fresh, empty staging directory for checkpoint ``step`` (call from one process)."""
    Path(root).mkdir(parents=True, exist_ok=True)
    tmp = staging_dir(root, step)
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    return tmp


def write_member(staging: Path, name: str, weights: AdapterWeights, optimizer_state: dict,
                 base_model: str | None = None) -> None:
    """One adapter's weights and optimizer state into the staging directory (any rank).

    Adapter names become file names: letters, digits, ``_``, ``.``, ``-``, not starting with ``.``.
    """
    if not _SAFE_NAME.match(name):
        raise CheckpointError(f"adapter name {name!r} cannot be a file name in a checkpoint")
    weights.save_peft(staging / ADAPTERS / name, base_model_name_or_path=base_model)
    save_state(staging / OPTIMIZER / name, optimizer_state)


def commit(root: str | os.PathLike, step: int, state: dict, keep: int = 2) -> Path:
    """Write the state and the manifest, fsync and rename the staging directory into place; keep the
    newest ``keep`` checkpoints up to ``step``. Call from one process after every ``write_member``."""
    root, tmp = Path(root), staging_dir(root, step)
    final = root / step_dir_name(step)
    try:
        (tmp / STATE).write_text(json.dumps({"step": step, **state}, sort_keys=True))
        files = {}
        for p in sorted(tmp.rglob("*")):
            if p.is_file():
                files[p.relative_to(tmp).as_posix()] = {"sha256": _sha256(p), "bytes": p.stat().st_size}
        (tmp / MANIFEST).write_text(json.dumps({"step": step, "files": files}, indent=1, sort_keys=True))
        _fsync_tree(tmp)
        if final.exists():  # re-saving the same step (e.g. after a resume): replace it
            shutil.rmtree(final)
        os.replace(tmp, final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    _prune(root, step, keep)
    return final


def save_checkpoint(
    root: str | os.PathLike,
    step: int,
    adapters: Mapping[str, AdapterWeights],
    optimizer_states: Mapping[str, dict],
    state: dict,
    *,
    keep: int = 2,
    base_model: str | None = None,
) -> Path:
    """Write checkpoint ``step`` atomically under ``root`` from one process; keep the newest ``keep``
    ones up to ``step``."""
    for name in adapters.keys() | optimizer_states.keys():
        if not _SAFE_NAME.match(name):
            raise CheckpointError(f"adapter name {name!r} cannot be a file name in a checkpoint")
    staging = begin(root, step)
    for name, weights in adapters.items():
        write_member(staging, name, weights, optimizer_states[name], base_model)
    return commit(root, step, state, keep)


def _prune(root: Path, step: int, keep: int) -> None:
    """Delete all but the newest ``keep`` checkpoints up to ``step``, and stale temporary directories.

    Checkpoints after ``step`` are left alone: after a resume from an older checkpoint they are
    the unusable ones that were skipped (``set_aside`` moves them away), never to be counted as
    newer than the good one just written.
    """
    steps = sorted(((s, p) for s, p in list_checkpoints(root) if s <= step), reverse=True)
    for _, path in steps[keep:]:
        shutil.rmtree(path, ignore_errors=True)
    for stale in root.glob(".tmp-*"):
        if stale != staging_dir(root, step):
            shutil.rmtree(stale, ignore_errors=True)


def list_checkpoints(root: str | os.PathLike) -> list[tuple[int, Path]]:
    """(step, path) of every complete-looking checkpoint directory, oldest first."""
    root = Path(root)
    out = []
    if root.is_dir():
        for p in root.iterdir():
            if p.is_dir() and p.name.startswith("step_") and p.name[5:].isdigit():
                out.append((int(p.name[5:]), p))
    return sorted(out)


def verify(path: Path) -> dict:
    """Check every file against the manifest; return the manifest or raise CheckpointError."""
    mf = path / MANIFEST
    if not mf.is_file():
        raise CheckpointError(f"{mf}: missing (partial checkpoint)")
    try:
        manifest = json.loads(mf.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
        raise CheckpointError(f"{mf}: invalid JSON ({e})") from e
    files = manifest.get("files") if isinstance(manifest, dict) else None
    if not isinstance(files, dict) or not isinstance(manifest.get("step"), int):
        raise CheckpointError(f"{mf}: expected an object with 'step' (an int) and 'files' (an object)")
    for rel, meta in files.items():
        f = path / rel
        if Path(rel).is_absolute() or ".." in Path(rel).parts:
            raise CheckpointError(f"{mf}: file {rel!r} is outside the checkpoint")
        if not isinstance(meta, dict) or not isinstance(meta.get("bytes"), int) or not isinstance(meta.get("sha256"), str):
            raise CheckpointError(f"{mf}: entry {rel!r} needs 'bytes' (an int) and 'sha256' (a string)")
        if not f.is_file():
            raise CheckpointError(f"{f}: listed in the manifest but missing")
        if f.stat().st_size != meta["bytes"] or _sha256(f) != meta["sha256"]:
            raise CheckpointError(f"{f}: content does not match the manifest (corrupt)")
    return manifest


def _read_optimizer_state(path: Path, name: str) -> dict:
    try:
        return load_state(path / OPTIMIZER / name)
    except OptimizerStateError as e:
        raise CheckpointError(str(e)) from e


def load_legacy_optimizer_states(path: Path) -> dict[str, dict]:
    """Every adapter's optimizer state from the older one-file layout; never unpickles code."""
    legacy = path / LEGACY_OPTIMIZER
    try:
        states = torch.load(legacy, map_location="cpu", weights_only=True)
    except (pickle.UnpicklingError, RuntimeError, EOFError, ValueError, TypeError, AttributeError) as e:
        raise CheckpointError(f"{legacy}: refused: it holds more than plain tensors and containers "
                              f"(restricted load: {_unpickle_reason(e)}); it is never loaded with full pickle") from e
    if not isinstance(states, dict):
        raise CheckpointError(f"{legacy}: expected a dict of optimizer states, got {type(states).__name__}")
    return states


def _unpickle_reason(e: BaseException) -> str:
    """The line of torch's weights-only error that says what was refused (not its advice to unpickle)."""
    lines = [x.strip() for x in str(e).splitlines() if x.strip()]
    said = next((x for x in lines if "GLOBAL" in x or "Unsupported" in x or "error" in x.lower()), None)
    return (said or (lines[0] if lines else type(e).__name__))[:300]


def _read_adapter(path: Path, name: str) -> AdapterWeights:
    try:
        return AdapterWeights.load_peft(path / ADAPTERS / name)
    except (AdapterFormatError, OSError) as e:
        raise CheckpointError(str(e)) from e


def load_checkpoint(path: str | os.PathLike, *, verified: bool = False) -> Checkpoint:
    """Verify one checkpoint directory and read its state; CheckpointError naming the file when it is
    unusable. Adapters and (new-layout) optimizer states are read on first access. ``verified=True``:
    the caller already verified it (rank 0 did, for every rank)."""
    path = Path(path)
    try:
        manifest = json.loads((path / MANIFEST).read_text(encoding="utf-8")) if verified else verify(path)
        state = json.loads((path / STATE).read_text(encoding="utf-8"))
        step = int(manifest["step"])
    except CheckpointError:
        raise
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError, KeyError, TypeError, ValueError) as e:
        raise CheckpointError(f"{path / STATE}: unreadable ({e})") from e
    if not isinstance(state, dict):
        raise CheckpointError(f"{path / STATE}: expected a JSON object, got {type(state).__name__}")
    names = sorted(p.name for p in (path / ADAPTERS).iterdir() if p.is_dir()) if (path / ADAPTERS).is_dir() else []
    adapters = _LazyMembers(names, lambda n: _read_adapter(path, n))
    if (path / OPTIMIZER).is_dir():
        optimizer_states: Mapping[str, dict] = _LazyMembers(names, lambda n: _read_optimizer_state(path, n))
    elif (path / LEGACY_OPTIMIZER).is_file():
        optimizer_states = load_legacy_optimizer_states(path)  # one file: checked now, whole
    else:
        raise CheckpointError(f"{path / OPTIMIZER}: missing (and no {LEGACY_OPTIMIZER} of the older layout)")
    return Checkpoint(step, path, adapters, optimizer_states, state)


def find_latest(root: str | os.PathLike) -> tuple[Checkpoint | None, list[Unusable]]:
    """The newest checkpoint that loads, and the newer ones that did not (newest first, with why).

    ``(None, [...])`` when none loads; ``(None, [])`` when there is no checkpoint at all.
    """
    skipped: list[Unusable] = []
    for step, path in reversed(list_checkpoints(root)):
        try:
            return load_checkpoint(path), skipped
        except (CheckpointError, OSError, ValueError, RuntimeError) as e:
            log.warning("checkpoint %s (step %d) is unusable, trying the previous one: %s", path, step, e)
            skipped.append(Unusable(step, path, str(e)))
    return None, skipped


def load_latest(root: str | os.PathLike) -> Checkpoint | None:
    """The newest checkpoint that verifies; corrupt ones are logged and skipped. None if there is none."""
    return find_latest(root)[0]


def set_aside(unusable: list[Unusable]) -> list[Path]:
    """Rename unusable checkpoints to ``unusable-step_<N>[-<k>]`` beside them: kept for a look, never loaded.

    Called once a resume from an older checkpoint has been decided, so that the run, going past
    their steps again, neither loads nor overwrites them. Returns the new paths.
    """
    moved = []
    for u in unusable:
        target = u.path.with_name(UNUSABLE_PREFIX + u.path.name)
        k = 1
        while target.exists():
            target = u.path.with_name(f"{UNUSABLE_PREFIX}{u.path.name}-{k}")
            k += 1
        os.replace(u.path, target)
        log.warning("set aside unusable checkpoint %s as %s: %s", u.path, target.name, u.reason)
        moved.append(target)
    return moved

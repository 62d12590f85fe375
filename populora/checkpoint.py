"""Atomic checkpoints of a run, and finding the newest good one.

A checkpoint is a directory ``checkpoints/step_<N>/`` holding:

- ``adapters/<name>/``: every live adapter as a PEFT directory (vLLM- and peft-loadable);
- ``optimizer/<name>.safetensors`` + ``optimizer/<name>.json``: each adapter's AdamW state, tensors
  and the rest apart (``populora.optimizer_state``; no pickle, so loading cannot run code);
- ``state.json``: everything else (step, members, ratings, lineage, buffers, counters);
- ``manifest.json``: sha256 and size of every other file, written last.

It is written into a temporary directory and renamed into place, so a crash mid-write leaves either
the previous checkpoint or a ``.tmp-*`` directory that is ignored and cleaned up. On load, every
file is checked against the manifest; a checkpoint that fails the check is reported and skipped in
favour of the previous good one (``find_latest`` says why each newer one was skipped).

Checkpoints written before this layout hold one ``optimizer.pt`` (a ``torch.save`` pickle). It is
read with ``torch.load(weights_only=True)``, torch's restricted unpickler that builds tensors and
plain containers only; a file that needs anything else is refused with a message naming it.

Public functions, each on one checkpoint directory or one root of them: ``save_checkpoint``,
``list_checkpoints``, ``verify``, ``load_checkpoint``, ``find_latest`` / ``load_latest`` and
``set_aside``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import pickle
import re
import shutil
from dataclasses import dataclass
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


@dataclass
class Checkpoint:
    step: int
    path: Path
    adapters: dict[str, AdapterWeights]
    optimizer_states: dict[str, dict]
    state: dict


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


def save_checkpoint(
    root: str | os.PathLike,
    step: int,
    adapters: dict[str, AdapterWeights],
    optimizer_states: dict[str, dict],
    state: dict,
    *,
    keep: int = 2,
    base_model: str | None = None,
) -> Path:
    """Write checkpoint ``step`` atomically under ``root``; keep the newest ``keep`` ones up to ``step``.

    Adapter names become file names: letters, digits, ``_``, ``.``, ``-``, not starting with ``.``.
    """
    root = Path(root)
    for name in adapters.keys() | optimizer_states.keys():
        if not _SAFE_NAME.match(name):
            raise CheckpointError(f"adapter name {name!r} cannot be a file name in a checkpoint")
    root.mkdir(parents=True, exist_ok=True)
    final = root / step_dir_name(step)
    tmp = root / f".tmp-{step_dir_name(step)}-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        for name, weights in adapters.items():
            weights.save_peft(tmp / ADAPTERS / name, base_model_name_or_path=base_model)
        for name, opt_state in optimizer_states.items():
            save_state(tmp / OPTIMIZER / name, opt_state)
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
        if not stale.name.endswith(f"-{os.getpid()}"):
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


def load_optimizer_states(path: Path) -> dict[str, dict]:
    """Every adapter's optimizer state in checkpoint ``path`` (either layout); never unpickles code."""
    opt_dir = path / OPTIMIZER
    if opt_dir.is_dir():
        try:
            return {f.stem: load_state(f.with_suffix("")) for f in sorted(opt_dir.glob("*.json"))}
        except OptimizerStateError as e:
            raise CheckpointError(str(e)) from e
    legacy = path / LEGACY_OPTIMIZER
    if not legacy.is_file():
        raise CheckpointError(f"{opt_dir}: missing (and no {LEGACY_OPTIMIZER} of the older layout)")
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


def load_checkpoint(path: str | os.PathLike) -> Checkpoint:
    """Verify and read one checkpoint directory; CheckpointError naming the file when it is unusable."""
    path = Path(path)
    manifest = verify(path)
    try:
        state = json.loads((path / STATE).read_text(encoding="utf-8"))
        step = int(manifest["step"])
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError, KeyError, TypeError, ValueError) as e:
        raise CheckpointError(f"{path / STATE}: unreadable ({e})") from e
    if not isinstance(state, dict):
        raise CheckpointError(f"{path / STATE}: expected a JSON object, got {type(state).__name__}")
    try:
        adapters = {p.name: AdapterWeights.load_peft(p) for p in sorted((path / ADAPTERS).iterdir()) if p.is_dir()}
    except (AdapterFormatError, OSError) as e:
        raise CheckpointError(str(e)) from e
    return Checkpoint(step, path, adapters, load_optimizer_states(path), state)


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

"""Atomic checkpoints of a run, and finding the newest good one.

A checkpoint is a directory ``checkpoints/step_<N>/`` holding:

- ``adapters/<name>/``: every live adapter as a PEFT directory (vLLM- and peft-loadable);
- ``optimizer.pt``: each adapter's AdamW state;
- ``state.json``: everything else (step, members, ratings, lineage, buffers, counters);
- ``manifest.json``: sha256 and size of every other file, written last.

It is written into a temporary directory and renamed into place, so a crash mid-write leaves either
the previous checkpoint or a ``.tmp-*`` directory that is ignored and cleaned up. On load, every
file is checked against the manifest; a checkpoint that fails the check is reported and skipped in
favour of the previous good one.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import torch

from populora.policy.adapters import AdapterWeights

log = logging.getLogger(__name__)

MANIFEST = "manifest.json"
STATE = "state.json"
OPTIMIZER = "optimizer.pt"
ADAPTERS = "adapters"


class CheckpointError(RuntimeError):
    """No usable checkpoint, or a checkpoint that fails verification (message says which file)."""


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
    """Write checkpoint ``step`` atomically under ``root``; keep the newest ``keep`` ones."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    final = root / step_dir_name(step)
    tmp = root / f".tmp-{step_dir_name(step)}-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        for name, weights in adapters.items():
            weights.save_peft(tmp / ADAPTERS / name, base_model_name_or_path=base_model)
        torch.save(optimizer_states, tmp / OPTIMIZER)
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
    _prune(root, keep)
    return final


def _prune(root: Path, keep: int) -> None:
    steps = sorted(list_checkpoints(root), reverse=True)
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
        manifest = json.loads(mf.read_text())
    except json.JSONDecodeError as e:
        raise CheckpointError(f"{mf}: invalid JSON ({e})") from e
    for rel, meta in manifest.get("files", {}).items():
        f = path / rel
        if not f.is_file():
            raise CheckpointError(f"{f}: listed in the manifest but missing")
        if f.stat().st_size != meta["bytes"] or _sha256(f) != meta["sha256"]:
            raise CheckpointError(f"{f}: content does not match the manifest (corrupt)")
    return manifest


def load_checkpoint(path: str | os.PathLike) -> Checkpoint:
    path = Path(path)
    manifest = verify(path)
    state = json.loads((path / STATE).read_text())
    adapters = {p.name: AdapterWeights.load_peft(p) for p in sorted((path / ADAPTERS).iterdir()) if p.is_dir()}
    optimizer_states = torch.load(path / OPTIMIZER, map_location="cpu", weights_only=False)
    return Checkpoint(int(manifest["step"]), path, adapters, optimizer_states, state)


def load_latest(root: str | os.PathLike) -> Checkpoint | None:
    """The newest checkpoint that verifies; corrupt ones are logged and skipped. None if there is none."""
    for step, path in reversed(list_checkpoints(root)):
        try:
            return load_checkpoint(path)
        except (CheckpointError, OSError, ValueError, RuntimeError) as e:
            log.warning("checkpoint %s (step %d) is unusable, trying the previous one: %s", path, step, e)
    return None

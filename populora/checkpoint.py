"""Atomic, member-keyed checkpoints of a run, and finding the newest good one.

A checkpoint is a directory ``checkpoints/step_<N>/`` holding:

- ``adapters/<name>/``: every live adapter as a PEFT directory (vLLM- and peft-loadable);
- ``optimizer/<name>.safetensors`` + ``optimizer/<name>.json``: each adapter's AdamW state (tensors
  and the rest; no pickle anywhere, so a crafted run directory cannot run code when it is loaded);
- ``state.json``: everything else (step, members, ratings, lineage, buffers, counters);
- ``manifest.json``: sha256 and size of every other file, written last.

Writing is in three parts so that the ranks of a distributed run each write their own members:
``begin`` (one process: an empty staging directory ``.tmp-step_<N>``), ``write_member`` (every rank,
for the members it leads), ``commit`` (one process, after all ranks are done: state, manifest, fsync,
rename into place, prune old checkpoints). A crash at any point leaves either the previous checkpoint
or a ``.tmp-*`` directory that is ignored and cleaned up. ``save_checkpoint`` does all three in one
process.

On load, every file is checked against the manifest; a checkpoint that fails the check is reported
and skipped in favour of the previous good one. Adapters and optimizer states are read lazily, one
member at a time, so a rank reads only what it needs.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from populora.policy.adapters import AdapterWeights

log = logging.getLogger(__name__)

MANIFEST = "manifest.json"
STATE = "state.json"
ADAPTERS = "adapters"
OPTIMIZER = "optimizer"


class CheckpointError(RuntimeError):
    """No usable checkpoint, or a checkpoint that fails verification (message says which file)."""


class _LazyMembers(Mapping):
    """``{adapter name: value}`` read from the checkpoint on first access (and kept)."""

    def __init__(self, names: list[str], read) -> None:
        self._names, self._read, self._cache = names, read, {}

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
    state: dict
    adapters: Mapping[str, AdapterWeights] = field(default_factory=dict)
    optimizer_states: Mapping[str, dict] = field(default_factory=dict)


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


# -- optimizer state without pickle ------------------------------------------------------------------
def _split_state(state: Any, prefix: str, tensors: dict[str, torch.Tensor]) -> Any:
    """The JSON skeleton of a (nested) optimizer state, its tensors moved to ``tensors`` by key."""
    if isinstance(state, torch.Tensor):
        tensors[prefix] = state.detach().cpu().contiguous()
        return {"__tensor__": prefix}
    if isinstance(state, Mapping):
        return {"__dict__": [[_split_state(k, f"{prefix}.k{i}", tensors), _split_state(v, f"{prefix}.{i}", tensors)]
                             for i, (k, v) in enumerate(state.items())]}
    if isinstance(state, (list, tuple)):
        return {"__list__" if isinstance(state, list) else "__tuple__":
                [_split_state(v, f"{prefix}.{i}", tensors) for i, v in enumerate(state)]}
    if state is None or isinstance(state, (bool, int, float, str)):
        return state
    raise CheckpointError(f"optimizer state: cannot store a value of type {type(state).__name__} at {prefix}")


def _join_state(node: Any, tensors: Mapping[str, torch.Tensor], where: str) -> Any:
    if isinstance(node, dict):
        if "__tensor__" in node:
            key = node["__tensor__"]
            if key not in tensors:
                raise CheckpointError(f"{where}: tensor {key!r} missing")
            return tensors[key]
        if "__dict__" in node:
            return {_join_state(k, tensors, where): _join_state(v, tensors, where) for k, v in node["__dict__"]}
        if "__list__" in node:
            return [_join_state(v, tensors, where) for v in node["__list__"]]
        if "__tuple__" in node:
            return tuple(_join_state(v, tensors, where) for v in node["__tuple__"])
        raise CheckpointError(f"{where}: unexpected entry {sorted(node)[:3]}")
    return node


def save_optimizer_state(state: dict, directory: Path, name: str) -> None:
    tensors: dict[str, torch.Tensor] = {}
    skeleton = _split_state(state, "s", tensors)
    directory.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(directory / f"{name}.safetensors"))
    (directory / f"{name}.json").write_text(json.dumps(skeleton))


def load_optimizer_state(directory: Path, name: str) -> dict:
    where = str(directory / f"{name}.json")
    try:
        skeleton = json.loads((directory / f"{name}.json").read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise CheckpointError(f"{where}: unreadable ({e})") from e
    return _join_state(skeleton, load_file(str(directory / f"{name}.safetensors")), where)


# -- writing -----------------------------------------------------------------------------------------
def begin(root: str | os.PathLike, step: int) -> Path:
    """A fresh, empty staging directory for checkpoint ``step`` (call from one process)."""
    Path(root).mkdir(parents=True, exist_ok=True)
    tmp = staging_dir(root, step)
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    return tmp


def write_member(staging: Path, name: str, weights: AdapterWeights, optimizer_state: dict,
                 base_model: str | None = None) -> None:
    """One adapter's weights and optimizer state into the staging directory (any rank)."""
    weights.save_peft(staging / ADAPTERS / name, base_model_name_or_path=base_model)
    save_optimizer_state(optimizer_state, staging / OPTIMIZER, name)


def commit(root: str | os.PathLike, step: int, state: dict, keep: int = 2) -> Path:
    """Write the state and the manifest, fsync and rename the staging directory into place; keep the
    newest ``keep`` checkpoints. Call from one process after every rank's ``write_member``."""
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
    _prune(root, keep, step)
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
    """Write checkpoint ``step`` atomically under ``root`` from one process; keep the newest ``keep``."""
    staging = begin(root, step)
    for name, weights in adapters.items():
        write_member(staging, name, weights, optimizer_states[name], base_model)
    return commit(root, step, state, keep)


def _prune(root: Path, keep: int, current: int) -> None:
    steps = sorted(list_checkpoints(root), reverse=True)
    for _, path in steps[keep:]:
        shutil.rmtree(path, ignore_errors=True)
    for stale in root.glob(".tmp-*"):
        if stale != staging_dir(root, current):
            shutil.rmtree(stale, ignore_errors=True)


# -- reading -----------------------------------------------------------------------------------------
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
    if not isinstance(manifest, dict) or not isinstance(manifest.get("files"), dict):
        raise CheckpointError(f"{mf}: not a checkpoint manifest")
    for rel, meta in manifest["files"].items():
        f = path / rel
        if not f.is_file():
            raise CheckpointError(f"{f}: listed in the manifest but missing")
        if f.stat().st_size != meta["bytes"] or _sha256(f) != meta["sha256"]:
            raise CheckpointError(f"{f}: content does not match the manifest (corrupt)")
    return manifest


def load_checkpoint(path: str | os.PathLike, *, verified: bool = False) -> Checkpoint:
    """A verified checkpoint (``verified=True``: the caller already verified it); adapters and optimizer
    states are read on first access."""
    path = Path(path)
    manifest = json.loads((path / MANIFEST).read_text()) if verified else verify(path)
    state = json.loads((path / STATE).read_text())
    names = sorted(p.name for p in (path / ADAPTERS).iterdir() if p.is_dir()) if (path / ADAPTERS).is_dir() else []
    return Checkpoint(
        int(manifest["step"]), path, state,
        adapters=_LazyMembers(names, lambda n: AdapterWeights.load_peft(path / ADAPTERS / n)),
        optimizer_states=_LazyMembers(names, lambda n: load_optimizer_state(path / OPTIMIZER, n)),
    )


def latest_good(root: str | os.PathLike) -> Path | None:
    """The newest checkpoint directory that verifies; corrupt ones are logged and skipped."""
    for step, path in reversed(list_checkpoints(root)):
        try:
            verify(path)
            return path
        except (CheckpointError, OSError, ValueError, KeyError) as e:
            log.warning("checkpoint %s (step %d) is unusable, trying the previous one: %s", path, step, e)
    return None


def load_latest(root: str | os.PathLike) -> Checkpoint | None:
    """The newest checkpoint that verifies, or None if there is none."""
    path = latest_good(root)
    return None if path is None else load_checkpoint(path, verified=True)

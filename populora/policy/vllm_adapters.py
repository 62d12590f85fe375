"""The vLLM engine's adapters: naming, versioning and routing (pure code, no vLLM needed).

vLLM caches a LoRA adapter by its integer id AND by its name: loading new weights under an id or a
name it has seen before silently serves the old weights. So every time a member's weights change
(an RL update, an evolved child replacing a member) we publish a NEW version: a new directory, a
new name ``<member>@v<k>`` and a new integer id from a counter that never goes back; the previous
version is retired (its id is removed from the engine and its files deleted).
"""

from __future__ import annotations

import os
import re
import shutil
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from populora.policy.adapters import AdapterWeights

_SAFE = re.compile(r"[^A-Za-z0-9_.-]")
SHM_MIN_FREE_GIB = 4.0  # ours: 8 members of a 7B at rank 32 in bf16 take 1.3 GB per version


def default_adapter_root(need_bytes: int = 0) -> str | None:
    """``/dev/shm`` when it exists and has ``SHM_MIN_FREE_GIB`` free and at least ``need_bytes`` (a
    container's default 64 MiB does not), else ``None`` (``$TMPDIR``): published versions are written and
    read back at once, and a memory-backed directory keeps them off a possibly networked or slow disk."""
    try:
        need = max(SHM_MIN_FREE_GIB * 2**30, need_bytes)
        if os.access("/dev/shm", os.W_OK) and shutil.disk_usage("/dev/shm").free >= need:
            return "/dev/shm"
    except OSError:
        pass
    return None


@dataclass(frozen=True)
class PublishedAdapter:
    """One immutable version of a member's adapter, as vLLM sees it."""

    member: str
    version: int
    lora_name: str
    lora_int_id: int
    path: Path


class LoraRegistry:
    """Current published version of every member; ids and names are never reused."""

    def __init__(self, root: str | Path, base_model_name: str | None = None) -> None:
        self.root = Path(root)
        self.base_model_name = base_model_name
        self._current: dict[str, PublishedAdapter] = {}
        self._versions: dict[str, int] = {}  # survives retirement: a re-added member gets a fresh name
        self._next_id = 1  # vLLM requires lora_int_id > 0
        self._lock = threading.Lock()  # publish may run on several threads (VLLMEngine.publish_many)

    def __contains__(self, member: str) -> bool:
        return member in self._current

    def members(self) -> list[str]:
        return list(self._current)

    def current(self, member: str) -> PublishedAdapter:
        try:
            return self._current[member]
        except KeyError:
            raise KeyError(f"adapter {member!r} is not published; published: {sorted(self._current)}") from None

    def publish(self, member: str, weights: AdapterWeights) -> tuple[PublishedAdapter, PublishedAdapter | None]:
        """Write ``weights`` as a new version of ``member``; return ``(new, retired or None)``.

        The caller removes the retired version from the engine and then calls ``delete_files``.
        """
        with self._lock:
            version = self._versions.get(member, 0) + 1
            self._versions[member] = version
            lora_name = f"{member}@v{version}"
            path = self.root / _SAFE.sub("_", lora_name)
            lora_int_id = self._next_id
            self._next_id += 1
        weights.save_peft(path, base_model_name_or_path=self.base_model_name)  # outside the lock: in parallel
        new = PublishedAdapter(member, version, lora_name, lora_int_id, path)
        with self._lock:
            old = self._current.get(member)
            self._current[member] = new
        return new, old

    def retire(self, member: str) -> PublishedAdapter:
        """Forget ``member``'s current version (the caller removes it from the engine)."""
        adapter = self.current(member)
        del self._current[member]
        return adapter

    @staticmethod
    def delete_files(adapter: PublishedAdapter) -> None:
        shutil.rmtree(adapter.path, ignore_errors=True)

    def route(self, adapters: Sequence[str | None]) -> list[PublishedAdapter | None]:
        """The published version serving each request (``None`` = base model)."""
        return [None if a is None else self.current(a) for a in adapters]


def sampling_seeds(seed: int | None, indices: list[int]) -> list[int | None]:
    """Per-request seeds for vLLM: the request with index ``i`` gets its own seed derived from ``seed``."""
    from populora.policy.sampling import row_seed

    if seed is None:
        return [None] * len(indices)
    return [row_seed(seed, i, 0) & 0x7FFFFFFF for i in indices]

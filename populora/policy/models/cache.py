"""Where built and converted base models live, and how they are written (atomically).

The cache directory is ``$POPULORA_CACHE`` or ``~/.cache/populora``. A model directory is first
written to a hidden temporary sibling and then renamed into place, so a crash or a concurrent
builder never leaves a half-written model that a later run would load.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path


def cache_dir() -> Path:
    """``$POPULORA_CACHE`` if set, else ``~/.cache/populora``."""
    env = os.environ.get("POPULORA_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "populora"


def is_model_dir(path: Path) -> bool:
    """A complete model directory: config, weights and tokenizer are all there."""
    return (
        (path / "config.json").is_file()
        and any(path.glob("*.safetensors"))
        and (path / "tokenizer.json").is_file()
    )


def build_atomically(target: Path, build: Callable[[Path], None]) -> Path:
    """Run ``build(tmp_dir)`` and rename ``tmp_dir`` to ``target``; return ``target``.

    If another process finished the same target first, its directory is kept and ours is
    discarded (both are built from the same inputs).
    """
    target = Path(target)
    if is_model_dir(target):
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        build(tmp)
        tmp.chmod(0o755)  # mkdtemp makes it private; the cache is meant to be shared
        if not is_model_dir(tmp):
            raise RuntimeError(f"building {target.name} left an incomplete model directory {tmp}")
        try:
            os.replace(tmp, target)
        except OSError:
            if not is_model_dir(target):  # not a benign race: a stale partial directory is in the way
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target

"""Where a run's base model comes from, checked before anything loads: one line per problem.

``model_problem(name)`` answers, in one line naming the file and the fix, why ``name`` (a run's
``policy.model``, ``populora eval --model``) would not load, or ``None``. It runs in seconds and
loads nothing; ``populora train`` calls it before it creates a run, and ``populora sweep`` (its
preflight, ``jobs/preflight.py``) calls it for every run's model as the job will see it.

- An embedded name (``tiny``, ``smollm2-135m``, the random ``*-shape`` bases): nothing to check.
- A local directory: first the very check training and evaluation run when they load a model
  (``populora.policy.models.resolve_model``: a directory with ``config.json``), then what
  transformers will open next: the weights (every shard an index names, or at least one
  ``*.safetensors`` / ``pytorch_model*.bin``) and a tokenizer (``tokenizer.json``,
  ``tokenizer.model`` or ``vocab.json``).
- A Hugging Face Hub id: its snapshot in the Hugging Face cache (``HF_HOME``) is checked as a
  local directory. An id that is not cached needs the Hub: with ``HF_HUB_OFFLINE=1`` that is an
  error at once; otherwise the Hub's address is tried once with a short timeout (no retries), and
  an unreachable Hub is an error, instead of the libraries' retries (tens of seconds) and their
  traceback. ``prefer_cache`` tells the caller to set ``HF_HUB_OFFLINE=1`` when the model is cached
  and the Hub cannot be reached, so loading does not wait on it either.
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

WEIGHT_GLOBS = ("*.safetensors", "pytorch_model*.bin")  # what transformers and vLLM load
WEIGHT_INDEXES = ("model.safetensors.index.json", "pytorch_model.bin.index.json")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json")
HUB_ENDPOINT = "https://huggingface.co"  # huggingface_hub's default (HF_ENDPOINT overrides it)
PROBE_TIMEOUT_S = 5.0  # ours: one try; a reachable Hub answers a TCP connect in well under a second


@dataclass(frozen=True)
class ModelCheck:
    """The answer for one model: ``problem`` (one line) or None; ``cached_dir`` when a Hub id was found
    in the cache; ``hub_unreachable`` when the Hub was tried and did not answer."""

    problem: str | None = None
    cached_dir: Path | None = None
    hub_unreachable: bool = False


def is_embedded(name: str) -> bool:
    """Models built into the package (nothing on disk to check)."""
    from populora.policy.models import EMBEDDED
    from populora.policy.models.shapes import SHAPES

    return name in EMBEDDED or name in SHAPES or name.startswith("tiny:")


def looks_local(name: str) -> bool:
    """A path rather than a Hub id (``resolve_model``'s rule: a path prefix, or an existing path)."""
    return name.startswith(("/", ".", "~")) or Path(name).expanduser().exists()


def directory_problem(path: Path, shown: str | None = None) -> str | None:
    """Why the model directory ``path`` would not load (config, weights, tokenizer), or None. ``shown``
    names it in the message when the user wrote another path (a path inside a container)."""
    from populora.policy.models import ModelNotFound, resolve_model

    where = f"{shown} (on this machine {path})" if shown and shown != str(path) else str(path)
    if not path.exists():
        return (f"model path {where} does not exist; give a model directory (config.json, weights, tokenizer), "
                "a Hugging Face id, or an embedded model: tiny, smollm2-135m")
    try:
        resolve_model(str(path))  # the check `populora train` and `populora eval` run when they load it
    except ModelNotFound as e:
        return f"{e}" if not shown or shown == str(path) else f"{where}: {e}"
    for index in WEIGHT_INDEXES:
        if (path / index).is_file():
            try:
                shards = sorted(set(json.loads((path / index).read_text())["weight_map"].values()))
            except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
                return f"model directory {where}: {index} cannot be read ({type(e).__name__}: {e}); download it again"
            missing = [s for s in shards if not (path / s).is_file()]
            if missing:
                return (f"model directory {where}: {index} names {len(shards)} weight file(s), {len(missing)} missing "
                        f"({', '.join(missing[:3])}{' ...' if len(missing) > 3 else ''}): the download is incomplete; "
                        "download the model again")
            break
    else:
        if not any(any(path.glob(g)) for g in WEIGHT_GLOBS):
            return (f"model directory {where}: config.json but no weights ({' or '.join(WEIGHT_GLOBS)}): copy the "
                    "model's weight files there (a complete `huggingface-cli download ORG/NAME --local-dir DIR`)")
    if not any((path / t).is_file() for t in TOKENIZER_FILES):
        return (f"model directory {where}: no tokenizer ({', '.join(TOKENIZER_FILES)}): copy the tokenizer files "
                "of the model's repository there")
    return None


def hub_endpoint() -> str:
    return os.environ.get("HF_ENDPOINT") or HUB_ENDPOINT


def hub_reachable(endpoint: str | None = None, timeout: float = PROBE_TIMEOUT_S) -> str | None:
    """``None`` when a TCP connection to the Hub's address opens within ``timeout`` (one try), else why not."""
    url = urlparse(endpoint or hub_endpoint())
    host, port = url.hostname or "", url.port or (443 if url.scheme == "https" else 80)
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return None
    except OSError as e:
        return f"{type(e).__name__}: {e}"


def hub_cache_dir(hf_home: str | os.PathLike | None = None) -> Path:
    """The Hub cache huggingface_hub reads: ``HF_HUB_CACHE``, else ``HF_HOME/hub`` (``hf_home`` given, or
    the environment's, or ``~/.cache/huggingface``)."""
    if hf_home is not None:
        return Path(hf_home).expanduser() / "hub"
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    home = os.environ.get("HF_HOME") or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "huggingface"
    return Path(home).expanduser() / "hub"


def cached_snapshot(repo_id: str, cache: Path) -> Path | None:
    """The snapshot directory of ``repo_id`` in the Hub cache ``cache`` (the one its ``config.json`` is in)."""
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return None
    try:
        found = try_to_load_from_cache(repo_id, "config.json", cache_dir=str(cache))
    except Exception:  # an id that is not a valid repo name: not in the cache
        return None
    return Path(found).parent if isinstance(found, str) else None


def _offline(env: dict[str, str] | None) -> bool:
    env = os.environ if env is None else env
    return any(str(env.get(k, "")).lower() in ("1", "true", "yes", "on") for k in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))


def check_model(name: str, *, hf_home: str | os.PathLike | None = None, env: dict[str, str] | None = None,
                probe: Callable[[], str | None] | None = hub_reachable, shown: str | None = None) -> ModelCheck:
    """The check of module docstring for ``name``. ``hf_home``/``env``: the Hugging Face home and the
    environment the model will be loaded in (default: this process's); ``probe``: how the Hub is tried
    (``None``: not tried, an uncached id is then only a warning for the caller to give)."""
    name = str(name)
    if is_embedded(name):
        return ModelCheck()
    if looks_local(name):
        return ModelCheck(directory_problem(Path(name).expanduser(), shown))
    cache = hub_cache_dir(hf_home)
    snapshot = cached_snapshot(name, cache)
    if snapshot is not None:
        problem = directory_problem(snapshot)
        if problem is not None:
            return ModelCheck(f"model {name!r} in the Hugging Face cache: {problem}", snapshot)
        unreachable = False if _offline(env) or probe is None else probe() is not None
        return ModelCheck(None, snapshot, unreachable)
    fix = (f"download it once where there is network (`huggingface-cli download {name}`) into that cache "
           "(HF_HOME), or pass a local model directory")
    if _offline(env):
        return ModelCheck(f"model {name!r} is a Hugging Face Hub id, not in the Hugging Face cache ({cache}), and "
                          f"HF_HUB_OFFLINE=1 forbids downloading it: {fix}")
    if probe is None:
        return ModelCheck()
    why = probe()
    if why is not None:
        return ModelCheck(f"model {name!r} is a Hugging Face Hub id, not in the Hugging Face cache ({cache}), and "
                          f"{hub_endpoint()} cannot be reached from this machine ({why}): {fix}", None, True)
    return ModelCheck()


def model_problem(name: str, **kwargs) -> str | None:
    """``check_model(name, **kwargs).problem``."""
    return check_model(name, **kwargs).problem


def prepare_model_source(name: str) -> str | None:
    """What ``populora train`` runs before it creates a run: the check, and ``HF_HUB_OFFLINE=1`` in this
    process when a Hub id is cached but the Hub does not answer (loading then reads the cache at once
    instead of retrying the Hub). Returns the problem (one line) or None."""
    check = check_model(name)
    if check.problem is None and check.cached_dir is not None and check.hub_unreachable:
        os.environ["HF_HUB_OFFLINE"] = "1"
        import sys

        constants = sys.modules.get("huggingface_hub.constants")  # read once at its import
        if constants is not None:
            constants.HF_HUB_OFFLINE = True
    return check.problem

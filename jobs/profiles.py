"""Cluster profiles: where and how jobs run, read from ``slurm/profiles/<name>.yaml``.

A profile names the executor (``slurm`` for a real cluster, ``local`` for subprocesses on this
machine, ``debug`` for in-process runs in tests), the Slurm resources of one job (partition,
account, qos, GPUs, CPUs, memory, time), how jobs are wrapped (container image and binds,
environment variables, setup lines) and the retry policy (requeues on time limit, retries of a
failed evaluation shard), the Slurm ``wckey`` (none unless the profile names one) and the ``cache``
directory of the jobs' downloads and compiled kernels (see :data:`CACHE_DIRS`). Every key of a
profile file must be a field of :class:`ClusterProfile`
(or of :class:`ContainerSpec` under ``container:``); a misspelled key is an error that names the
file and lists the valid keys, so a typo never silently falls back to a default.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

EXECUTORS = ("slurm", "local", "debug")
CONTAINER_RUNTIMES = ("apptainer", "charliecloud")
REPO_ROOT = Path(__file__).resolve().parent.parent
PROFILES_ENV = "POPULORA_PROFILES_DIR"
# A profile's ``cache: DIR`` (a host directory) holds every cache a job writes, one subdirectory per
# variable, instead of the defaults under $HOME (often small, and the container's $HOME): the Hugging
# Face hub and datasets, vLLM's compiled graphs, torch hub and inductor, Triton kernels, the embedded
# models, and anything that follows XDG. A container sees DIR at CACHE_MOUNT (bound); without a
# container the variables point at DIR itself. An ``env:`` entry of the profile wins over these.
CACHE_DIRS = {"HF_HOME": "huggingface", "VLLM_CACHE_ROOT": "vllm", "TORCH_HOME": "torch",
              "TORCHINDUCTOR_CACHE_DIR": "torchinductor", "TRITON_CACHE_DIR": "triton",
              "POPULORA_CACHE": "populora", "XDG_CACHE_HOME": "xdg"}
CACHE_MOUNT = "/cache"  # created in the image (containers/populora.def)


class ProfileError(ValueError):
    """A profile that does not exist or does not validate; the message names file, key and value."""


@dataclass(frozen=True)
class ContainerSpec:
    """How a job's Python runs inside a container image (submitit's interpreter override).

    ``runtime`` is ``apptainer`` (clusters) or ``charliecloud`` (``ch-run``, used where Apptainer
    cannot be installed, e.g. CI); ``binds`` are ``SRC[:DST]`` paths visible inside the image;
    ``python`` is the interpreter inside the image; ``options`` are extra runtime flags.
    """

    image: str
    runtime: str = "apptainer"
    binds: tuple[str, ...] = ()
    python: str = "python"
    options: tuple[str, ...] = ()


@dataclass(frozen=True)
class ClusterProfile:
    """Resources and wrapping of one job. ``time_min`` is the wall-clock limit of one job;
    ``signal_delay_s`` is how long before that limit Slurm sends USR2 (checkpoint and requeue);
    ``max_num_timeout`` bounds the requeues after time limits; ``max_retries`` is how many
    times a failed evaluation shard is retried before it is reported as failed.
    ``tasks_per_node`` is the number of ranks a training job starts on each node (one per GPU on a
    GPU node: ``gpus_per_node``); evaluation jobs always run one task.

    The profile's ``cpus_per_task`` and ``mem_gb`` are per task and per job as Slurm reads them;
    ``with_gpus(k)`` gives the profile of a job that uses only k GPUs of a node (see docs/hpc.md)."""

    name: str
    executor: str = "slurm"
    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    nodes: int = 1
    gpus_per_node: int = 0
    tasks_per_node: int = 1  # ranks per node: a training job runs nodes x tasks_per_node ranks (one per GPU)
    cpus_per_task: int = 1
    mem_gb: float | None = None
    time_min: int = 60
    signal_delay_s: int = 90
    max_num_timeout: int = 3
    max_retries: int = 2
    array_parallelism: int = 64
    exclusive: bool = False
    constraint: str | None = None
    container: ContainerSpec | None = None
    env: dict[str, str] = field(default_factory=dict)
    setup: tuple[str, ...] = ()
    sbatch_extra: dict[str, str] = field(default_factory=dict)
    wckey: str | None = None  # sbatch --wckey (None: no --wckey line; submitit's own default is "submitit")
    cache: str | None = None  # host directory of the jobs' caches (CACHE_DIRS); None: the libraries' defaults
    source: str = "<built in code>"

    def replace(self, **changes: Any) -> ClusterProfile:
        """A copy with some fields changed (profiles are frozen)."""
        return dataclasses.replace(self, **changes)

    @property
    def ranks(self) -> int:
        """Ranks of a training job on this profile."""
        return self.nodes * self.tasks_per_node

    @property
    def gpus(self) -> int:
        """GPUs one job of this profile asks for (all its nodes)."""
        return self.nodes * self.gpus_per_node

    def for_evaluation(self) -> ClusterProfile:
        """The evaluation shape derived from a training profile, for a sweep that names no evaluation
        profile: one node, one task, one GPU (when the profile has GPUs), the CPUs and memory of one
        training rank; partition, account, container, environment and setup stay."""
        mem = self.mem_gb / self.ranks if self.mem_gb else None
        return self.replace(nodes=1, gpus_per_node=min(1, self.gpus_per_node), tasks_per_node=1, exclusive=False,
                            mem_gb=mem, name=f"{self.name}[eval]")

    def without_gpus(self) -> ClusterProfile:
        """The same job without GPUs (the leaderboard job: merging, scoring and tables run on CPUs)."""
        if not self.gpus_per_node:
            return self
        return self.replace(gpus_per_node=0, name=f"{self.name}[cpu]")

    def with_gpus(self, gpus: int) -> ClusterProfile:
        """The profile of a training job that uses ``gpus`` GPUs (one rank each) of one node.

        A job that uses a whole node keeps the profile; a smaller one asks for just its GPUs
        (``--gres=gpu:k``, k ranks, not exclusive, the memory of k of the profile's ranks) so that
        Slurm packs several such jobs on one node.
        """
        if gpus < 1:
            raise ProfileError(f"profile '{self.name}': a run needs at least one GPU, got {gpus}")
        if self.gpus_per_node and gpus == self.gpus_per_node * self.nodes:
            return self
        if self.gpus_per_node and gpus > self.gpus_per_node:
            raise ProfileError(f"profile '{self.name}' ({self.source}): {gpus} GPUs do not fit one node of "
                               f"{self.gpus_per_node} GPUs")
        mem = self.mem_gb * gpus / (self.nodes * self.tasks_per_node) if self.mem_gb else None
        return self.replace(nodes=1, gpus_per_node=gpus if self.gpus_per_node else 0, tasks_per_node=gpus,
                            exclusive=False, mem_gb=mem, name=f"{self.name}[{gpus} GPU]")


_PROFILE_KEYS = tuple(f.name for f in dataclasses.fields(ClusterProfile) if f.name not in ("name", "source"))
_CONTAINER_KEYS = tuple(f.name for f in dataclasses.fields(ContainerSpec))
_INT_KEYS = ("nodes", "gpus_per_node", "tasks_per_node", "cpus_per_task", "time_min", "signal_delay_s", "max_num_timeout",
             "max_retries", "array_parallelism")


def profile_dirs() -> list[Path]:
    """Directories searched for ``<name>.yaml``: ``$POPULORA_PROFILES_DIR`` (``:``-separated) first,
    then the project's ``slurm/profiles``."""
    extra = [Path(p) for p in os.environ.get(PROFILES_ENV, "").split(os.pathsep) if p]
    return [*extra, REPO_ROOT / "slurm" / "profiles"]


def available_profiles() -> list[str]:
    names: set[str] = set()
    for d in profile_dirs():
        if d.is_dir():
            names.update(p.stem for p in d.glob("*.yaml"))
    return sorted(names)


def _unknown_key_error(where: str, key: str, valid: tuple[str, ...]) -> ProfileError:
    close = difflib.get_close_matches(key, valid, n=1)
    hint = f" (did you mean '{close[0]}'?)" if close else ""
    return ProfileError(f"{where}: unknown key '{key}'{hint}; valid keys: {', '.join(sorted(valid))}")


def _check_int(where: str, key: str, value: Any, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ProfileError(f"{where}: key '{key}' must be an integer >= {minimum}, got {value!r}")
    return value


def _string_tuple(where: str, key: str, value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        raise ProfileError(f"{where}: key '{key}' must be a list of strings, got {value!r}")
    return tuple(value)


def _string_dict(where: str, key: str, value: Any) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ProfileError(f"{where}: key '{key}' must be a mapping, got {value!r}")
    return {str(k): str(v) for k, v in value.items()}


def _container_from_dict(where: str, data: Any) -> ContainerSpec | None:
    if data is None:
        return None
    if not isinstance(data, dict):
        raise ProfileError(f"{where}: key 'container' must be a mapping, got {data!r}")
    for key in data:
        if key not in _CONTAINER_KEYS:
            raise _unknown_key_error(f"{where}: container", str(key), _CONTAINER_KEYS)
    if not data.get("image"):
        raise ProfileError(f"{where}: container.image is required (path of the image file)")
    runtime = data.get("runtime", "apptainer")
    if runtime not in CONTAINER_RUNTIMES:
        raise ProfileError(f"{where}: container.runtime '{runtime}' unknown; one of {', '.join(CONTAINER_RUNTIMES)}")
    return ContainerSpec(
        image=str(data["image"]),
        runtime=runtime,
        binds=_string_tuple(where, "container.binds", data.get("binds")),
        python=str(data.get("python", "python")),
        options=_string_tuple(where, "container.options", data.get("options")),
    )


def profile_from_dict(name: str, data: dict[str, Any], source: str = "<dict>") -> ClusterProfile:
    """Validate a profile mapping (as read from YAML) and build the dataclass."""
    where = f"profile '{name}' ({source})"
    if not isinstance(data, dict):
        raise ProfileError(f"{where}: expected a mapping of keys, got {type(data).__name__}")
    for key in data:
        if key not in _PROFILE_KEYS:
            raise _unknown_key_error(where, str(key), _PROFILE_KEYS)
    kwargs: dict[str, Any] = {"name": name, "source": source}
    for key, value in data.items():
        if value is None and key not in ("container", "env", "setup", "sbatch_extra"):
            continue
        if key in _INT_KEYS:
            kwargs[key] = _check_int(where, key, value, 0 if key in ("gpus_per_node", "max_retries",
                                                                     "max_num_timeout", "signal_delay_s") else 1)
        elif key == "executor":
            if value not in EXECUTORS:
                raise ProfileError(f"{where}: executor '{value}' unknown; one of {', '.join(EXECUTORS)}")
            kwargs[key] = value
        elif key == "mem_gb":
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
                raise ProfileError(f"{where}: key 'mem_gb' must be a positive number, got {value!r}")
            kwargs[key] = float(value)
        elif key == "exclusive":
            if not isinstance(value, bool):
                raise ProfileError(f"{where}: key 'exclusive' must be true or false, got {value!r}")
            kwargs[key] = value
        elif key == "container":
            kwargs[key] = _container_from_dict(where, value)
        elif key in ("env", "sbatch_extra"):
            kwargs[key] = _string_dict(where, key, value)
        elif key == "setup":
            kwargs[key] = _string_tuple(where, key, value)
        else:  # partition, account, qos, constraint, wckey, cache
            kwargs[key] = str(value)
    if kwargs.get("cache"):
        kwargs["cache"] = str(Path(os.path.expandvars(kwargs["cache"])).expanduser().absolute())
        kwargs["env"], container = with_cache(kwargs["cache"], kwargs.get("env", {}), kwargs.get("container"))
        if container is not None:
            kwargs["container"] = container
    profile = ClusterProfile(**kwargs)
    if profile.executor == "slurm" and not profile.partition:
        raise ProfileError(f"{where}: a slurm profile needs 'partition'")
    return profile


def with_cache(cache: str, env: dict[str, str], container: ContainerSpec | None
               ) -> tuple[dict[str, str], ContainerSpec | None]:
    """The environment and container of a profile whose caches live in host directory ``cache``: each
    variable of CACHE_DIRS set (unless ``env`` sets it), and ``cache`` bound at CACHE_MOUNT."""
    inside = CACHE_MOUNT if container is not None else cache
    merged = {**{k: f"{inside}/{sub}" for k, sub in CACHE_DIRS.items()}, **env}
    if container is not None:
        container = dataclasses.replace(container, binds=(*container.binds, f"{cache}:{CACHE_MOUNT}"))
    return merged, container


def load_profile(name_or_path: str | os.PathLike[str]) -> ClusterProfile:
    """Load a profile by name (``slurm/profiles/<name>.yaml`` or ``$POPULORA_PROFILES_DIR``) or by
    the path of a YAML file."""
    text = str(name_or_path)
    path = Path(text)
    if not (text.endswith((".yaml", ".yml")) and path.is_file()):
        candidates = [d / f"{text}.yaml" for d in profile_dirs()]
        found = [p for p in candidates if p.is_file()]
        if not found:
            raise ProfileError(f"unknown profile '{text}'; available: {', '.join(available_profiles()) or 'none'}"
                               f" (searched {', '.join(str(d) for d in profile_dirs())})")
        path = found[0]
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise ProfileError(f"profile file {path}: not valid YAML: {exc}") from exc
    return profile_from_dict(path.stem, data, source=str(path))

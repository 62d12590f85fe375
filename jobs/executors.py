"""submitit executors built from cluster profiles, and the sbatch scripts they submit.

* ``make_executor(profile, folder, name=...)`` returns a ``submitit`` executor: ``SlurmExecutor``
  for ``slurm`` profiles, ``LocalExecutor`` (subprocesses) for ``local``, ``DebugExecutor``
  (in-process) for ``debug``.
* Containers use submitit's interpreter override: the job's ``python`` becomes
  ``apptainer exec --nv --bind ... IMAGE python`` (or ``ch-run -b ... IMAGE -- python3`` for
  Charliecloud), so the pickled callable is unpickled and run by the image's Python. A missing
  image is an error before anything is submitted.
* ``sbatch_script(...)`` renders, without submitting and without a Slurm client, the exact
  script ``SlurmExecutor`` writes for the same profile (it calls the same submitit function);
  ``--dry-run`` prints it and the Slurm tests compare it with what was really submitted.
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from jobs.profiles import ClusterProfile, ProfileError

_WARNED: set[Path] = set()  # images a dry run has warned about (once each)


class ContainerImageError(FileNotFoundError):
    """The profile's container image does not exist on the submitting machine."""


class SlurmUnavailableError(RuntimeError):
    """A ``slurm`` profile was used where no Slurm client answers."""


def image_path(profile: ClusterProfile, check: bool = True) -> Path:
    """The container image as an absolute path (relative paths are taken from the current
    directory), checked to exist: a missing image fails here, not in a queued job. ``check=False``
    (a dry run, which submits nothing) only warns."""
    assert profile.container is not None
    path = Path(profile.container.image).expanduser().absolute()
    if not path.exists() and not check:
        if path not in _WARNED:
            _WARNED.add(path)
            print(f"warning: container image {path} does not exist yet (build it with `make container` "
                  "before submitting)", file=sys.stderr)
    elif not path.exists():
        raise ContainerImageError(
            f"profile '{profile.name}' ({profile.source}): container.image {path} does not exist; "
            "build it first (`make container`) or point container.image at an existing image"
        )
    return path


def container_python(profile: ClusterProfile, check_image: bool = True) -> str:
    """The shell command that replaces ``python`` in the job script, for the profile's container."""
    spec = profile.container
    if spec is None:
        raise ProfileError(f"profile '{profile.name}' ({profile.source}) has no container")
    image = str(image_path(profile, check_image))
    if spec.runtime == "apptainer":
        parts = ["apptainer", "exec", "--nv"]
        if spec.binds:
            parts += ["--bind", ",".join(spec.binds)]
        parts += [*spec.options, image, spec.python]
        return shlex.join(parts)
    if spec.runtime == "charliecloud":
        parts = ["ch-run"]
        for bind in spec.binds:
            parts += ["-b", bind]
        parts += [*spec.options, image, "--", spec.python]
        # ch-run refuses to start without $USER, which batch jobs may lack; the job's shell fills it.
        return 'env USER="${USER:-$(id -un)}" ' + shlex.join(parts)
    raise ProfileError(f"profile '{profile.name}': container.runtime '{spec.runtime}' unknown")


def job_python(profile: ClusterProfile, check_image: bool = True) -> str:
    """The interpreter command of a job: the container's, or this process's Python."""
    return container_python(profile, check_image) if profile.container else shlex.quote(sys.executable)


def _export_line(key: str, value: str) -> str:
    if not key.isidentifier():
        raise ProfileError(f"env: '{key}' is not a valid environment variable name")
    # Double quotes on purpose: "$VAR" in a value is expanded by the job's shell.
    escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("`", "\\`")
    return f'export {key}="{escaped}"'


def job_setup(profile: ClusterProfile) -> list[str]:
    """The shell lines before a job's command: which copy of the code runs (docs/hpc.md, "Which code runs
    in jobs"), then the profile's ``env`` and ``setup``.

    A job imports ``populora``, ``eval`` and ``jobs`` from its Python's installed packages (the image's
    ``/opt/populora`` in a container), never from the directory it was submitted from: Slurm starts a
    job there, and ``python -m submitit.core._submit`` would put it first on ``sys.path``
    (``PYTHONSAFEPATH=1`` stops that, Python >= 3.11), and the submitting shell's ``PYTHONPATH`` is
    dropped (a profile that needs one sets it in ``env``). Each run records the commit it ran
    (``run.json``, ``populora.code_version``)."""
    lines = ["export PYTHONSAFEPATH=1"]
    if "PYTHONPATH" not in profile.env:
        lines.append("unset PYTHONPATH")
    return lines + [_export_line(k, v) for k, v in profile.env.items()] + list(profile.setup)


def _mem(mem_gb: float) -> str:
    return f"{int(mem_gb)}GB" if mem_gb == int(mem_gb) else f"{int(mem_gb * 1024)}MB"


def slurm_parameters(profile: ClusterProfile, name: str, dependency: str | None = None,
                     tasks: bool = True) -> dict[str, Any]:
    """The profile as ``SlurmExecutor.update_parameters`` keywords (Slurm's own names).

    GPUs are asked as ``--gres=gpu:N`` per node; ``tasks`` (training jobs) starts the profile's
    ``tasks_per_node`` ranks on each node (evaluation jobs run one task)."""
    params: dict[str, Any] = {
        "job_name": name,
        "partition": profile.partition,
        "time": profile.time_min,
        "nodes": profile.nodes,
        "cpus_per_task": profile.cpus_per_task,
        "signal_delay_s": profile.signal_delay_s,
        "array_parallelism": profile.array_parallelism,
    }
    for key in ("account", "qos", "constraint"):
        if getattr(profile, key):
            params[key] = getattr(profile, key)
    params["wckey"] = profile.wckey or None  # None: no --wckey line (submitit writes "submitit" otherwise)
    if profile.gpus_per_node:
        params["gres"] = f"gpu:{profile.gpus_per_node}"
    if tasks and profile.tasks_per_node > 1:
        params["ntasks_per_node"] = profile.tasks_per_node
    if profile.mem_gb:
        params["mem"] = _mem(profile.mem_gb)
    if profile.exclusive:
        params["exclusive"] = True
    params["setup"] = job_setup(profile)
    if dependency:
        params["dependency"] = dependency
    if profile.sbatch_extra:
        params["additional_parameters"] = dict(profile.sbatch_extra)
    return params


def require_slurm(profile: ClusterProfile) -> None:
    """Fail early when a slurm profile is used without a Slurm client on this machine."""
    if shutil.which("sbatch") is None or shutil.which("srun") is None:
        raise SlurmUnavailableError(
            f"profile '{profile.name}' submits to Slurm, but no sbatch/srun was found on PATH; "
            "use --profile local (subprocesses) or --profile debug (in-process) on a machine without Slurm"
        )


def check_partition(profile: ClusterProfile) -> None:
    """Ask the cluster whether the profile's partition exists (before anything is submitted)."""
    require_slurm(profile)
    proc = subprocess.run(["sinfo", "-h", "-o", "%R"], capture_output=True, text=True, timeout=60)
    if proc.returncode != 0:
        raise SlurmUnavailableError(f"sinfo failed (exit {proc.returncode}): {proc.stderr.strip()}")
    partitions = sorted(set(proc.stdout.split()))
    if profile.partition not in partitions:
        raise ProfileError(
            f"profile '{profile.name}' ({profile.source}): partition '{profile.partition}' does not exist "
            f"on this cluster; partitions: {', '.join(partitions)}"
        )


def preflight(profile: ClusterProfile) -> None:
    """Every check that can fail before submission: Slurm client and partition (slurm profiles),
    container image. Call it for each profile before submitting the first job of a plan."""
    if profile.executor == "slurm":
        check_partition(profile)
    if profile.container is not None:
        image_path(profile)


def make_executor(profile: ClusterProfile, folder: str | Path, name: str = "populora",
                  dependency: str | None = None, tasks: bool = True):
    """A submitit executor that runs jobs as the profile says. ``folder`` holds submitit's pickles
    and logs (it may contain ``%j``); ``dependency`` is a Slurm dependency such as
    ``afterok:123_0`` (only for ``slurm`` profiles: local executors have no scheduler)."""
    import submitit

    if profile.executor == "debug":
        if dependency:
            raise ProfileError(f"profile '{profile.name}': the debug executor cannot express dependencies")
        return submitit.DebugExecutor(folder)
    python = job_python(profile)
    if profile.executor == "local":
        if dependency:
            raise ProfileError(f"profile '{profile.name}': the local executor cannot express dependencies")
        executor = submitit.LocalExecutor(folder, max_num_timeout=profile.max_num_timeout, python=python)
        executor.update_parameters(timeout_min=profile.time_min, gpus_per_node=profile.gpus_per_node,
                                   signal_delay_s=profile.signal_delay_s, setup=job_setup(profile),
                                   tasks_per_node=profile.tasks_per_node if tasks else 1)
        return executor
    require_slurm(profile)
    executor = submitit.SlurmExecutor(folder, max_num_timeout=profile.max_num_timeout, python=python)
    executor.update_parameters(**slurm_parameters(profile, name, dependency, tasks))
    return executor


def sbatch_script(profile: ClusterProfile, folder: str | Path, name: str = "populora",
                  array_size: int | None = None, dependency: str | None = None, tasks: bool = True) -> str:
    """The sbatch script a ``SlurmExecutor`` from this profile would submit (an array of
    ``array_size`` tasks when given). Works without a Slurm client; used by ``--dry-run``."""
    # submitit's private script renderer is the very function SlurmExecutor calls to write the
    # file it submits; reusing it keeps the dry run identical to the real submission.
    from submitit.slurm.slurm import _make_sbatch_string

    if profile.executor != "slurm":
        raise ProfileError(f"profile '{profile.name}' uses the {profile.executor} executor: no sbatch script")
    folder = Path(folder).expanduser().absolute()
    command = " ".join([job_python(profile, check_image=False), "-u -m submitit.core._submit",
                        shlex.quote(str(folder))])
    params = slurm_parameters(profile, name, dependency, tasks)
    if array_size is not None and array_size > 1:
        params["map_count"] = array_size
    return _make_sbatch_string(command=command, folder=folder, **params)

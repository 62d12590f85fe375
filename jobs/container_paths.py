"""What a job must see inside its container: the benchmark data and the base model, checked on the
submitting machine before anything is submitted.

A job sees a host path inside the image when a bind of the profile (``SRC[:DST]``) covers it, or
when the runtime binds it by default (Apptainer: ``$HOME``, the current directory, ``/tmp``). The
benchmark directory of an evaluation job is its ``--data-dir``, else the profile's
``POPULORA_BENCHMARKS_DIR``, else a copy bound at ``/opt/populora/benchmarks`` (``eval.benchmarks
.IMAGE_DIR``), else the test sets shipped inside the image (``eval/data``: nothing to bind); a model
given as a path must be visible the same way. A model given as a Hub id needs
internet on the compute node (or a filled ``HF_HOME`` with ``HF_HUB_OFFLINE=1``): a warning, not an error.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path, PurePosixPath

from jobs.profiles import ClusterProfile

EMBEDDED_MODELS = ("tiny", "smollm2-135m")  # built into the package: nothing to bind
BENCHMARKS_ENV = "POPULORA_BENCHMARKS_DIR"


def parse_bind(text: str) -> tuple[str, str]:
    """``SRC[:DST[:OPTS]]`` -> (SRC, DST); DST defaults to SRC."""
    parts = text.split(":")
    return parts[0], parts[1] if len(parts) > 1 and parts[1] else parts[0]


def default_binds() -> list[str]:
    """Paths Apptainer binds without being asked (its defaults: home, current directory, /tmp)."""
    return [str(Path.home()), os.getcwd(), "/tmp"]


def host_path(profile: ClusterProfile, inside: str) -> Path | None:
    """The host path that appears at ``inside`` in the profile's jobs; ``None`` when nothing makes
    it visible. Without a container a job sees the host's paths as they are."""
    if profile.container is None:
        return Path(inside).expanduser()
    target = PurePosixPath(inside)
    best: tuple[int, Path] | None = None
    for bind in profile.container.binds:
        src, dst = parse_bind(bind)
        dst_path = PurePosixPath(dst)
        if target == dst_path or dst_path in target.parents:
            depth = len(dst_path.parts)
            if best is None or depth > best[0]:
                best = (depth, Path(src).expanduser() / target.relative_to(dst_path))
    if best is not None:
        return best[1]
    if profile.container.runtime == "apptainer":
        for default in default_binds():
            if target == PurePosixPath(default) or PurePosixPath(default) in target.parents:
                return Path(inside)
    return None


def _flag(args: Sequence[str], name: str) -> list[str]:
    """Every value of ``name`` in an argument list (``--x V`` and ``--x=V``)."""
    values = []
    for i, a in enumerate(args):
        if a == name and i + 1 < len(args):
            values.append(args[i + 1])
        elif a.startswith(name + "="):
            values.append(a.split("=", 1)[1])
    return values


def benchmarks_inside(profile: ClusterProfile, eval_args: Sequence[str]) -> str | None:
    """The directory of a user's benchmark copy that an evaluation job of this profile reads; None when
    it reads the test sets shipped inside the image (a container job with no copy given or bound)."""
    from eval.benchmarks import IMAGE_DIR, benchmarks_dir

    given = _flag(eval_args, "--data-dir")
    if given:
        return given[-1]
    if profile.env.get(BENCHMARKS_ENV):
        return profile.env[BENCHMARKS_ENV]
    if profile.container is None:
        return str(benchmarks_dir())
    image = PurePosixPath(str(IMAGE_DIR))
    bound = any(PurePosixPath(parse_bind(b)[1]) in (image, *image.parents[:-1]) for b in profile.container.binds)
    return str(IMAGE_DIR) if bound else None


def is_local_path(model: str) -> bool:
    return model.startswith(("/", "./", "../", "~"))


def _visible(profile: ClusterProfile, inside: str, what: str, fix: str) -> str | None:
    host = host_path(profile, inside)
    if host is None:
        return (f"{what} {inside}: not visible in the jobs of profile '{profile.name}' ({profile.source}); "
                f"add a bind {fix} to container.binds")
    if not host.exists():
        shown = inside if str(host) == inside else f"{inside} (bound from {host})"
        return f"{what} {shown}: does not exist on this machine; profile '{profile.name}' ({profile.source})"
    return None


def path_problems(train: ClusterProfile, evaluation: ClusterProfile, models: Sequence[str],
                  eval_args: Sequence[str]) -> tuple[list[str], list[str]]:
    """(errors, warnings) for a sweep: every bind's source exists, the evaluation jobs see the
    benchmark data, and every model given as a path is visible to the jobs that load it."""
    errors: list[str] = []
    warnings: list[str] = []
    for prof in {train.name: train, evaluation.name: evaluation}.values():
        for bind in prof.container.binds if prof.container else ():
            src, _ = parse_bind(bind)
            if src == prof.cache:  # the profile's cache directory: created when the sweep is submitted
                continue
            if not Path(src).expanduser().exists():
                errors.append(f"profile '{prof.name}' ({prof.source}): container.binds: {src} does not exist")
    data = benchmarks_inside(evaluation, eval_args)
    problem = data and _visible(evaluation, data, "benchmark data", f"/path/to/benchmarks:{data}")
    if problem:
        errors.append(problem)
    for bench_path in _flag(eval_args, "--data"):
        path = bench_path.split("=", 1)[-1]
        problem = _visible(evaluation, path, "benchmark file", f"covering {path}")
        if problem:
            errors.append(problem)
    eval_models = _flag(eval_args, "--model")
    for model, profiles in [*((m, (train,)) for m in models), *((m, (evaluation,)) for m in eval_models)]:
        if model in EMBEDDED_MODELS:
            continue
        if is_local_path(model):
            for prof in profiles:
                problem = _visible(prof, model, "model", f"/path/to/model:{model}")
                if problem:
                    errors.append(problem)
        elif not any(p.env.get("HF_HUB_OFFLINE") for p in profiles):
            warnings.append(f"model {model} is a Hugging Face Hub id: compute nodes without internet need a local "
                            "path (bind it and pass it as policy.model= and --model) or HF_HOME with the model "
                            "cached and HF_HUB_OFFLINE=1 in the profile's env")
    return list(dict.fromkeys(errors)), list(dict.fromkeys(warnings))

"""`populora wheelhouse`: the wheels a target environment lacks, for an install with no network.

    populora wheelhouse --env gpu-node --python-version 3.12 --platform manylinux_2_28_x86_64 --out wheelhouse/
    populora wheelhouse --python /path/to/node/python --out wheelhouse/
    populora wheelhouse --have node-freeze.txt --extras eval --out wheelhouse/

then, on the target: ``pip install --no-index --find-links wheelhouse/ .`` (see populora/wheelhouse.py
and docs/doctor.md). Exit status 0, or 2 with one line naming what cannot be provided.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

LINUX_X86_64 = ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64", "linux_x86_64")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("wheelhouse", help="write the wheels an environment lacks, for an offline "
                                          "`pip install --no-index --find-links DIR .` there")
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--env", metavar="NAME", help="a built-in environment (populora/wheelhouse_envs/NAME.txt), e.g. gpu-node")
    which.add_argument("--python", metavar="PY", help="the target's interpreter on this machine: its installed "
                                                      "packages, Python version and platform")
    which.add_argument("--have", metavar="FILE", help="a `pip freeze` of the target (name==version lines)")
    p.add_argument("--out", default="wheelhouse", help="directory to write the wheels to (default wheelhouse/)")
    p.add_argument("--python-version", metavar="X.Y", default=None,
                   help="the target's Python (default: --python's, else this one's)")
    p.add_argument("--platform", action="append", default=None, metavar="TAG",
                   help="the target's platform tag, repeatable (default: this machine's); 'linux-x86_64' "
                        "expands to the manylinux tags of x86-64 Linux")
    p.add_argument("--extras", default="", help="comma-separated extras of the project to include (default: the core)")
    p.add_argument("--no-build", action="store_true", help="refuse to build wheels from source archives")
    p.add_argument("--project", default=None, metavar="DIR",
                   help="the project's checkout (pyproject.toml; default: the one this populora was installed from)")
    p.set_defaults(func=cmd_wheelhouse)


def cmd_wheelhouse(args: argparse.Namespace) -> int:
    from populora.wheelhouse import (
        PROJECT,
        Environment,
        Target,
        WheelhouseError,
        build_project_wheel,
        builtin_environment,
        interpreter_environment,
        parse_have,
        pip_fetcher,
        project_requirements,
        walk,
        write_manifest,
    )

    extras = tuple(e for e in args.extras.split(",") if e)
    out = Path(args.out)
    try:
        if args.env:
            env = builtin_environment(args.env)
        elif args.python:
            env = interpreter_environment(args.python)
        else:
            path = Path(args.have)
            try:
                env = parse_have(path.read_text(), str(path))
            except OSError as e:
                raise WheelhouseError(f"--have {path}: {e.strerror}") from e
        platforms = tuple(t for p in (args.platform or ()) for t in (LINUX_X86_64 if p == "linux-x86_64" else (p,)))
        version = args.python_version or (env.target.python_version if env.target else ".".join(map(str, sys.version_info[:3])))
        target = Target(version, platforms, env.target.implementation if env.target else "cp")
        project = Path(args.project) if args.project else PROJECT
        reqs, build, project_version = project_requirements(extras, project)
        out.mkdir(parents=True, exist_ok=True)
        fetch = pip_fetcher(target, out, allow_build=not args.no_build)
        plan = walk(reqs, env, target, fetch, wanted_by="populora" + (f"[{','.join(extras)}]" if extras else ""))
        # pip builds `.` in an isolated environment: its build requirements are needed whatever the target has
        build_plan = walk(build, Environment("build isolation", {}), target, fetch,
                          wanted_by="pyproject.toml [build-system]")
        for key, wheel in build_plan.wheels.items():
            plan.wheels.setdefault(key, wheel)
        own = build_project_wheel(out, project)
    except WheelhouseError as e:
        print(f"populora wheelhouse: {e}", file=sys.stderr)
        return 2
    manifest = write_manifest(out, plan, env, target, extras)
    print(f"environment: {env.name}; target: Python {target.short}, "
          f"{', '.join(target.platforms) or 'this machine'}; extras: {', '.join(extras) or 'none (the core)'}")
    print(f"{'wheel':<60} {'MiB':>7}  wanted by")
    for w in sorted(plan.wheels.values(), key=lambda w: w.file.lower()):
        print(f"{w.file:<60} {w.size / 2**20:>7.2f}  {w.wanted_by}{' (built here: pure Python)' if w.built else ''}")
    own_size = own.stat().st_size
    print(f"{own.name:<60} {own_size / 2**20:>7.2f}  the project {project_version}")
    print(f"{len(plan.wheels) + 1} wheels, {(plan.total_bytes + own_size) / 2**20:.1f} MiB in {out}/ "
          f"({len(plan.satisfied)} requirements the environment satisfies; manifest {manifest.name})")
    print(f"on the target: pip install --no-index --find-links {out}/ .   (or: ... {out}/ populora)")
    return 0

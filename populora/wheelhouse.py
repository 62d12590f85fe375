"""The wheels an environment lacks, for an install with no network: ``populora wheelhouse``.

A GPU node often has a Python that someone else built (a site's PyTorch module, a container) and no
network. This module computes what the project needs there and the node does not have, and writes it
as wheels for the node's Python and platform, so that on the node

    pip install --no-index --find-links wheelhouse/ .        # from the checkout
    pip install --no-index --find-links wheelhouse/ populora  # or from the project's own wheel in it

installs the project without reaching any index. What it writes:

- every distribution in the closure of the project's requirements (and the extras asked for) that the
  environment does not have at a version the requirement accepts; a requirement the environment
  satisfies is not descended into (its dependencies are the environment's business);
- the build requirements of ``pyproject.toml`` (pip builds ``.`` in an isolated environment that
  needs them);
- the project's own wheel.

Wheels come from the package index through ``pip download --no-deps --only-binary=:all:`` for the
target's Python and platform tags. A distribution published only as a source archive (``trueskill``,
``cognitive-complexity``) is built here with ``pip wheel --no-binary=:all:``; that is refused unless
the result is pure Python (``py3-none-any``), the only kind that runs on another Python or platform.

Why not ``pip download`` of the whole closure: pip resolves every requirement again, the environment's
``torch`` included (a multi-GB CUDA build for the target), and has no notion of "already on the node".
The walk below is a small resolver that trusts the environment: it picks, for each missing name, the
newest version the index offers for the target that satisfies every specifier seen so far, and fetches
it again if a later requirement narrows the specifier past it. It does not backtrack; a conflict is
an error naming both requirements.

The environment is named one of three ways: a Python interpreter (``--python``: its installed
distributions and its own Python version and platform), a pip freeze file (``--have``), or a built-in
name (``--env gpu-node``: ``populora/wheelhouse_envs/*.txt``). In those files ``name==version`` is a
known version, a bare ``name`` is "present, version not recorded" and taken to satisfy any specifier.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from email.parser import Parser
from pathlib import Path

ENVS_DIR = Path(__file__).resolve().parent / "wheelhouse_envs"
PROJECT = Path(__file__).resolve().parents[1]  # the checkout (pyproject.toml) when run from one
PIP_QUIET = ("--disable-pip-version-check", "--no-input", "-q")


def canonical(name: str) -> str:
    """PEP 503 normalised name: ``Cognitive_Complexity`` -> ``cognitive-complexity``."""
    return re.sub(r"[-_.]+", "-", name).lower()


class WheelhouseError(RuntimeError):
    """A distribution cannot be provided for the target; the message names it and why."""


@dataclass(frozen=True)
class Target:
    """The Python and platform the wheels are for. ``platforms`` empty: this machine's tags."""

    python_version: str  # "3.12" or "3.12.3"
    platforms: tuple[str, ...] = ()
    implementation: str = "cp"

    @property
    def short(self) -> str:
        return ".".join(self.python_version.split(".")[:2])

    def pip_args(self) -> list[str]:
        args = ["--python-version", self.short, "--implementation", self.implementation,
                "--abi", f"{self.implementation}{self.short.replace('.', '')}", "--abi", "abi3", "--abi", "none"]
        for p in self.platforms:
            args += ["--platform", p]
        return args

    def markers(self) -> dict[str, str]:
        """PEP 508 marker variables of the target (this machine's, with the target's Python)."""
        from packaging.markers import default_environment

        env = dict(default_environment())
        full = self.python_version if self.python_version.count(".") == 2 else self.python_version + ".0"
        env.update(python_version=self.short, python_full_version=full, implementation_version=full)
        if any("x86_64" in p for p in self.platforms):
            env["platform_machine"] = "x86_64"
        elif any("aarch64" in p for p in self.platforms):
            env["platform_machine"] = "aarch64"
        if any(p.startswith(("manylinux", "musllinux", "linux")) for p in self.platforms):
            env.update(sys_platform="linux", platform_system="Linux", os_name="posix")
        return env


@dataclass(frozen=True)
class Environment:
    """What a target already has: canonical name -> version (None: present, version not recorded)."""

    name: str
    installed: dict[str, str | None]
    target: Target | None = None  # known when read from an interpreter

    def satisfies(self, req) -> bool:
        key = canonical(req.name)
        if key not in self.installed:
            return False
        version = self.installed[key]
        return version is None or req.specifier.contains(version, prereleases=True)


def parse_have(text: str, name: str) -> Environment:
    """An environment from pip-freeze-like lines: ``name==version``, or a bare ``name`` (version not
    recorded), ``#`` comments; ``name @ url`` lines count as present with no version."""
    installed: dict[str, str | None] = {}
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line or line.startswith("-"):
            continue
        m = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]]*\])?\s*(?:==\s*([^\s;]+))?\s*(?:@.*)?", line)
        if not m:
            raise WheelhouseError(f"{name}: line {n}: {raw.strip()!r} is not 'name' or 'name==version'")
        installed[canonical(m.group(1))] = m.group(2)
    return Environment(name, installed)


def builtin_environments() -> dict[str, Path]:
    return {p.stem: p for p in sorted(ENVS_DIR.glob("*.txt"))}


def builtin_environment(name: str) -> Environment:
    envs = builtin_environments()
    if name not in envs:
        raise WheelhouseError(f"--env {name}: no such built-in environment; known: {', '.join(envs)}")
    return parse_have(envs[name].read_text(), f"--env {name} ({envs[name].name})")


_PROBE = ("import importlib.metadata as m, json, sys, sysconfig; print(json.dumps({'python': '%d.%d.%d' % "
          "sys.version_info[:3], 'platform': sysconfig.get_platform(), 'impl': sys.implementation.name, "
          "'dists': {d.metadata['Name']: d.version for d in m.distributions() if d.metadata['Name']}}))")


def interpreter_environment(python: str) -> Environment:
    """The distributions installed for interpreter ``python``, and its Python version as the target."""
    try:
        out = subprocess.run([python, "-c", _PROBE], capture_output=True, text=True, timeout=120)
    except OSError as e:
        raise WheelhouseError(f"--python {python}: cannot run it ({e.strerror})") from e
    if out.returncode != 0:
        raise WheelhouseError(f"--python {python}: exited {out.returncode}: "
                              f"{(out.stderr.strip().splitlines() or ['no output'])[-1]}")
    info = json.loads(out.stdout)
    installed = {canonical(k): v for k, v in info["dists"].items()}
    impl = "cp" if info["impl"] == "cpython" else info["impl"][:2]
    return Environment(f"--python {python}", installed, Target(info["python"], (), impl))


@dataclass(frozen=True)
class Wheel:
    """One wheel written: its file, the requirement it satisfies, bytes, whether it was built here."""

    file: str
    name: str
    version: str
    requirement: str  # the specifier(s) it had to satisfy
    wanted_by: str  # which requirement brought it in ("populora", "populora[eval]", "omegaconf 2.4.0", ...)
    size: int
    built: bool = False  # built here from a source archive (pure Python)


@dataclass
class Plan:
    """The walk's result: wheels to write, and the requirements the environment already satisfies."""

    wheels: dict[str, Wheel] = field(default_factory=dict)
    satisfied: list[str] = field(default_factory=list)

    @property
    def total_bytes(self) -> int:
        return sum(w.size for w in self.wheels.values())


def wheel_name_version(filename: str) -> tuple[str, str]:
    parts = Path(filename).name.split("-")
    return canonical(parts[0]), parts[1]


def is_pure(filename: str) -> bool:
    """``name-ver(-build)?-py3-none-any.whl`` (or py2.py3): runs on any Python 3 and platform."""
    tags = Path(filename).name[:-4].split("-")[-3:]
    return tags[1] == "none" and tags[2] == "any" and all(t.startswith("py3") or t == "py2" for t in tags[0].split("."))


def wheel_requires(path: Path, extras: frozenset[str], markers: dict[str, str]) -> list:
    """The ``Requires-Dist`` of a wheel that apply on the target with ``extras``."""
    from packaging.requirements import Requirement

    with zipfile.ZipFile(path) as z:
        meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        msg = Parser().parsestr(z.read(meta).decode("utf-8", "replace"))
    out = []
    for line in msg.get_all("Requires-Dist") or []:
        req = Requirement(line)
        if req.marker is None or any(req.marker.evaluate({**markers, "extra": e}) for e in (extras or {""})):
            out.append(req)
    return out


def walk(roots: list, env: Environment, target: Target, fetch: Callable, wanted_by: str = "populora") -> Plan:
    """The closure of ``roots`` (``packaging`` Requirements) less what ``env`` satisfies.

    ``fetch(name, specifier, extras) -> (Path to a wheel, built: bool)`` provides a wheel (a side effect
    injected here so the walk is testable without an index). Pure otherwise.
    """
    from packaging.specifiers import SpecifierSet

    plan = Plan()
    markers = target.markers()
    specs: dict[str, SpecifierSet] = {}
    extras: dict[str, set[str]] = {}
    paths: dict[str, Path] = {}
    # roots' markers are evaluated here; a wheel's dependencies arrive already filtered for the target
    queue = [(r, wanted_by) for r in roots if r.marker is None or r.marker.evaluate({**markers, "extra": ""})]
    while queue:
        req, by = queue.pop(0)
        key = canonical(req.name)
        if env.satisfies(req):
            plan.satisfied.append(f"{req} (have {env.installed[key] or 'a version not recorded'})")
            continue
        spec = specs.get(key, SpecifierSet()) & req.specifier
        have = plan.wheels.get(key)
        fits = have is not None and spec.contains(have.version, prereleases=True)
        if fits and set(req.extras) <= extras.get(key, set()):
            specs[key] = spec
            continue
        specs[key] = spec
        extras[key] = extras.get(key, set()) | set(req.extras)
        if not fits:  # new, or a later requirement narrowed the specifier past the version fetched
            try:
                path, built = fetch(req.name, str(spec), frozenset(extras[key]))
            except WheelhouseError as e:
                raise WheelhouseError(f"{req.name}{spec} (wanted by {by}): {e}") from e
            if have is not None:
                paths[key].unlink(missing_ok=True)
            name, version = wheel_name_version(path.name)
            paths[key] = path
            plan.wheels[key] = Wheel(path.name, name, version, str(spec) or "any", by, path.stat().st_size, built)
        w = plan.wheels[key]
        for dep in wheel_requires(paths[key], frozenset(extras[key]), markers):
            queue.append((dep, f"{w.name} {w.version}"))
    return plan


# -- side effects: pip -----------------------------------------------------------------------------

def _pip(args: list[str], cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pip", *PIP_QUIET, *args], capture_output=True, text=True, cwd=cwd)


def _last_error(proc: subprocess.CompletedProcess) -> str:
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip() and not ln.startswith("WARNING: Location")]
    errors = [ln for ln in lines if ln.startswith("ERROR")]
    return (errors or lines or ["pip failed with no message"])[-1].removeprefix("ERROR: ")


def pip_fetcher(target: Target, out: Path, allow_build: bool = True) -> Callable:
    """``fetch`` for :func:`walk`: ``pip download`` of a wheel for ``target``, else a pure-Python wheel
    built here from the source archive."""

    def fetch(name: str, spec: str, extras: frozenset[str]) -> tuple[Path, bool]:
        with tempfile.TemporaryDirectory(prefix="populora-wheel-") as tmp:
            proc = _pip(["download", "--no-deps", "--only-binary=:all:", *target.pip_args(), "-d", tmp, name + spec])
            built = False
            if proc.returncode != 0:
                if not allow_build or "No matching distribution" not in proc.stderr:
                    raise WheelhouseError(_last_error(proc))
                built = True
                proc = _pip(["wheel", "--no-deps", "--no-binary=:all:", "-w", tmp, name + spec])
                if proc.returncode != 0:
                    raise WheelhouseError("no wheel for the target, and building one from the source archive "
                                          f"failed: {_last_error(proc)}")
            files = sorted(Path(tmp).glob("*.whl"))
            if len(files) != 1:
                raise WheelhouseError(f"expected one wheel, pip left {[f.name for f in files] or 'none'}")
            if built and not is_pure(files[0].name):
                raise WheelhouseError(f"built {files[0].name} from source, which is not pure Python: it only runs on "
                                      "this machine's Python and platform; build it on the target")
            dest = out / files[0].name
            shutil.copy2(files[0], dest)
            return dest, built

    return fetch


def project_requirements(extras: tuple[str, ...], project: Path = PROJECT) -> tuple[list, list, str]:
    """``(requirements, build requirements, version)`` of the project, from its ``pyproject.toml``."""
    from packaging.requirements import Requirement

    path = project / "pyproject.toml"
    if not path.is_file():
        raise WheelhouseError(f"{path}: not found; run populora wheelhouse from the project's checkout")
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        raise WheelhouseError("populora wheelhouse needs Python >= 3.11 (tomllib) to read pyproject.toml") from None
    data = tomllib.loads(path.read_text())
    proj = data["project"]
    optional = proj.get("optional-dependencies", {})
    unknown = [e for e in extras if e not in optional]
    if unknown:
        raise WheelhouseError(f"--extras {','.join(unknown)}: not an extra of the project; known: {', '.join(optional)}")
    reqs = [Requirement(r) for r in proj.get("dependencies", [])]
    for e in extras:
        reqs += [Requirement(r) for r in optional[e]]
    build = [Requirement(r) for r in data.get("build-system", {}).get("requires", [])]
    return reqs, build, proj["version"]


def build_project_wheel(out: Path, project: Path = PROJECT) -> Path:
    """The project's own wheel (pure Python), built with this environment's setuptools."""
    with tempfile.TemporaryDirectory(prefix="populora-wheel-") as tmp:
        proc = _pip(["wheel", "--no-deps", "--no-build-isolation", "-w", tmp, str(project)])
        if proc.returncode != 0:
            raise WheelhouseError(f"building the project's wheel failed: {_last_error(proc)}")
        (wheel,) = Path(tmp).glob("populora-*.whl")
        for old in out.glob("populora-*.whl"):
            old.unlink()
        dest = out / wheel.name
        shutil.copy2(wheel, dest)
        return dest


def write_manifest(out: Path, plan: Plan, env: Environment, target: Target, extras: tuple[str, ...]) -> Path:
    path = out / "wheelhouse.json"
    path.write_text(json.dumps({
        "environment": env.name, "target": {"python": target.python_version, "platforms": list(target.platforms) or
                                            ["this machine's"], "implementation": target.implementation},
        "extras": list(extras), "total_bytes": plan.total_bytes, "satisfied_by_environment": plan.satisfied,
        "wheels": [w.__dict__ for w in plan.wheels.values()]}, indent=2) + "\n")
    return path

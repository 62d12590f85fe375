"""Lint an Apptainer definition file (and check the project's container pins).

spython parses .def files but does not validate them: a missing ``Bootstrap:`` or a misspelled
``%postt`` section pass silently (the section body is dropped). This linter checks what Apptainer's
own parser would reject or silently ignore, following the definition-file reference:

* the header: ``Bootstrap:`` present and first, a known bootstrap agent, the keys that agent needs
  (``From:`` for image sources; ``OSVersion``/``MirrorURL`` for debootstrap), only known header keys;
* sections: known names only (with a suggestion for typos), no duplicated section (apps: per app
  name), app sections with an app name, no non-comment text between header and first section
  other than header keys;
* ``%files``: every source exists in the build context (``--context``, default: the current
  directory), because ``apptainer build`` runs from there;
* project policy (``--require``): sections that must be present and non-empty;
* ``--pins FILE``: the ``From:`` image equals the ``# base-image:`` line of the pins file, which names
  it by digest (``IMAGE@sha256:...``: a tag can be moved, a digest cannot), and every ``pip install``
  in ``%post`` installs either from the lock with ``--require-hashes -r <lock>`` (pip then refuses
  anything not in the lock, or with another hash), or with ``-c <pins>``, or ``--no-deps`` (the
  project itself, on top of the lock); ``--dockerfile FILE`` applies the same to a Dockerfile
  (``FROM`` and ``RUN pip install``);
* ``--lock``: the lock files are up to date with the pins and pyproject.toml and every entry is
  pinned with a hash (``containers/lock.py check``), and the definition installs from them.

Usage: python containers/lint_def.py containers/populora.def --context . --pins containers/pins.txt
       --dockerfile containers/Dockerfile --require post environment runscript test
Exit status 0 when clean, 1 with one ``file:line: message`` per problem.
"""

from __future__ import annotations

import argparse
import difflib
import re
import sys
from pathlib import Path

AGENTS_WITH_FROM = ("library", "docker", "shub", "oras", "localimage", "docker-archive", "docker-daemon",
                    "oci", "oci-archive")
AGENTS = (*AGENTS_WITH_FROM, "debootstrap", "yum", "dnf", "zypper", "pacman", "busybox", "arch", "scratch")
AGENT_KEYS = {"debootstrap": ("OSVersion", "MirrorURL"), "yum": ("MirrorURL",), "dnf": ("MirrorURL",),
              "busybox": ("MirrorURL",)}
HEADER_KEYS = ("Bootstrap", "From", "Stage", "Registry", "Namespace", "Include", "IncludeCmd", "MirrorURL",
               "OSVersion", "UpdateURL", "Fingerprints", "Confurl", "Library", "Product", "User", "Regcode",
               "ProductPGP", "RegisterURL", "Modules", "SetOpt")
SECTIONS = ("setup", "files", "post", "environment", "runscript", "startscript", "test", "labels", "help",
            "arguments")
APP_SECTIONS = ("appinstall", "appfiles", "appenv", "apphelp", "applabels", "apprun", "apptest", "appstart")
SECTION_RE = re.compile(r"^%(\w+)(.*)$")
HEADER_RE = re.compile(r"^([A-Za-z][A-Za-z0-9]*)\s*:\s*(.*)$")


def read_base_image(pins: Path) -> str:
    """The image named on the pins file's ``# base-image: IMAGE`` line."""
    for line in pins.read_text().splitlines():
        m = re.match(r"#\s*base-image:\s*(\S+)", line)
        if m:
            return m.group(1)
    raise ValueError(f"{pins}: no '# base-image: IMAGE' line")


LOCK_RE = re.compile(r"(-r|--requirement)[ =]\S*\.lock\b")
DIGEST_RE = re.compile(r"@sha256:[0-9a-f]{64}$")


def _pip_lines_without_pins(lines: list[tuple[int, str]], pins_name: str) -> list[int]:
    bad = []
    for lineno, text in lines:
        if re.search(r"\bpip3?\s+install\b", text) and "--upgrade pip" not in text and "--no-deps" not in text:
            locked = "--require-hashes" in text and LOCK_RE.search(text)
            if not locked and not re.search(r"(-c|--constraint)[ =]\S*" + re.escape(pins_name), text):
                bad.append(lineno)
    return bad


def _installs_from_lock(lines: list[tuple[int, str]]) -> bool:
    return any(re.search(r"\bpip3?\s+install\b", t) and "--require-hashes" in t and LOCK_RE.search(t) for _, t in lines)


def _digest_problem(base: str, pins: Path) -> str | None:
    if DIGEST_RE.search(base):
        return None
    return (f"{pins}: base image {base} is not pinned by digest; name it IMAGE:TAG@sha256:DIGEST (a tag can be "
            "moved, a digest cannot)")


def lint_def(text: str, name: str = "<def>", context: Path | None = None, pins: Path | None = None,
             require: tuple[str, ...] = (), lock: bool = False) -> list[str]:
    """Problems of one definition file as ``name:line: message`` strings (empty when clean)."""
    problems: list[str] = []
    lines = text.splitlines()
    header: dict[str, tuple[int, str]] = {}
    sections: dict[str, tuple[int, list[tuple[int, str]]]] = {}
    current: str | None = None
    first_key_line = None
    for lineno, raw in enumerate(lines, 1):
        line = raw.rstrip()
        m = SECTION_RE.match(line)
        if m:
            sec, args = m.group(1), m.group(2).strip()
            if sec in APP_SECTIONS:
                if not args:
                    problems.append(f"{name}:{lineno}: %{sec} needs an app name")
                key = f"{sec} {args.split()[0] if args else ''}"
            elif sec in SECTIONS:
                key = sec
            else:
                close = difflib.get_close_matches(sec, SECTIONS + APP_SECTIONS, n=1)
                hint = f" (did you mean %{close[0]}?)" if close else ""
                problems.append(f"{name}:{lineno}: unknown section %{sec}{hint}; known: "
                                + ", ".join("%" + s for s in SECTIONS + APP_SECTIONS))
                key = f"?{sec}"
            if key in sections:
                problems.append(f"{name}:{lineno}: section %{key} repeated (first at line {sections[key][0]})")
            sections.setdefault(key, (lineno, []))
            current = key
            continue
        if current is not None:
            sections[current][1].append((lineno, line))
            continue
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        h = HEADER_RE.match(stripped)
        if not h:
            problems.append(f"{name}:{lineno}: not a header 'Key: value' line before the first section: {stripped!r}")
            continue
        key, value = h.group(1), h.group(2).strip()
        canonical = {k.lower(): k for k in HEADER_KEYS}.get(key.lower())
        if canonical is None:
            close = difflib.get_close_matches(key, HEADER_KEYS, n=1)
            hint = f" (did you mean {close[0]}?)" if close else ""
            problems.append(f"{name}:{lineno}: unknown header key {key}{hint}")
            continue
        if first_key_line is None:
            first_key_line = (lineno, canonical)
        if not value:
            problems.append(f"{name}:{lineno}: header key {canonical} has no value")
        header[canonical] = (lineno, value)

    if "Bootstrap" not in header:
        problems.append(f"{name}:1: missing 'Bootstrap:' header (e.g. 'Bootstrap: docker')")
    else:
        if first_key_line and first_key_line[1] != "Bootstrap":
            problems.append(f"{name}:{first_key_line[0]}: 'Bootstrap:' must be the first header key")
        lineno, agent = header["Bootstrap"]
        if agent not in AGENTS:
            problems.append(f"{name}:{lineno}: unknown bootstrap agent {agent!r}; known: {', '.join(AGENTS)}")
        if agent in AGENTS_WITH_FROM and "From" not in header:
            problems.append(f"{name}:{lineno}: 'Bootstrap: {agent}' needs a 'From:' header")
        for needed in AGENT_KEYS.get(agent, ()):
            if needed not in header:
                problems.append(f"{name}:{lineno}: 'Bootstrap: {agent}' needs a '{needed}:' header")

    for sec in require:
        body = [t for _, t in sections.get(sec, (0, []))[1] if t.strip() and not t.strip().startswith("#")]
        if sec not in sections:
            problems.append(f"{name}:1: required section %{sec} is missing")
        elif not body:
            problems.append(f"{name}:{sections[sec][0]}: required section %{sec} is empty")

    if context is not None and "files" in sections:
        for lineno, t in sections["files"][1]:
            parts = t.split()
            if parts and not parts[0].startswith("#") and not (context / parts[0]).exists():
                problems.append(f"{name}:{lineno}: %files source {parts[0]} not found in build context {context}")

    if pins is not None:
        base = read_base_image(pins)
        if "From" in header and header["From"][1] != base:
            problems.append(f"{name}:{header['From'][0]}: From: {header['From'][1]} differs from the pinned "
                            f"base image {base} ({pins})")
        post = sections.get("post", (0, []))[1]
        for lineno in _pip_lines_without_pins(post, pins.name):
            problems.append(f"{name}:{lineno}: pip install without '-c .../{pins.name}' or "
                            "'--require-hashes -r .../*.lock' (unpinned)")
        if (digest := _digest_problem(base, pins)) is not None:
            problems.append(digest)
        if lock and not _installs_from_lock(post):
            problems.append(f"{name}:{sections.get('post', (1,))[0]}: %post does not install from the lock "
                            "(pip install --require-hashes -r .../image.lock)")
    return problems


def lint_dockerfile_pins(text: str, pins: Path, name: str = "Dockerfile", lock: bool = False) -> list[str]:
    """The Dockerfile starts from the pinned base image and installs with ``-c pins`` or from the lock."""
    problems = []
    base = read_base_image(pins)
    froms = [(i, line.split()[1]) for i, line in enumerate(text.splitlines(), 1)
             if line.strip().upper().startswith("FROM ") and len(line.split()) > 1]
    if not froms:
        problems.append(f"{name}:1: no FROM line")
    for lineno, image in froms:
        if image != base:
            problems.append(f"{name}:{lineno}: FROM {image} differs from the pinned base image {base} ({pins})")
    # Join continuation lines so one RUN is one logical line.
    logical, start, buf = [], 0, []
    for i, line in enumerate(text.splitlines(), 1):
        if not buf:
            start = i
        buf.append(line.rstrip("\\").strip())
        if not line.rstrip().endswith("\\"):
            logical.append((start, " ".join(buf)))
            buf = []
    parts = [(cmd_line, part) for cmd_line, cmd in logical for part in re.split(r"&&|;", cmd)]
    for cmd_line in _pip_lines_without_pins(parts, pins.name):
        problems.append(f"{name}:{cmd_line}: pip install without '-c .../{pins.name}' or "
                        "'--require-hashes -r .../*.lock' (unpinned)")
    if lock and not _installs_from_lock(parts):
        problems.append(f"{name}:1: does not install from the lock (pip install --require-hashes -r .../image.lock)")
    return problems


def lock_problems() -> list[str]:
    """``containers/lock.py check``: the lock files are complete, hashed and up to date."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("image_lock", Path(__file__).with_name("lock.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.check()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("deffile")
    p.add_argument("--context", default=".", help="build context for %%files sources (default: .)")
    p.add_argument("--pins", help="pins file with a '# base-image:' line")
    p.add_argument("--dockerfile", help="also check this Dockerfile against --pins")
    p.add_argument("--require", nargs="*", default=[], help="sections that must be present and non-empty")
    p.add_argument("--lock", action="store_true", help="check the lock files (containers/lock.py check) and that "
                   "the definitions install from them")
    args = p.parse_args(argv)
    path = Path(args.deffile)
    pins = Path(args.pins) if args.pins else None
    problems = lint_def(path.read_text(), str(path), Path(args.context), pins, tuple(args.require), args.lock)
    if args.dockerfile:
        if pins is None:
            p.error("--dockerfile needs --pins")
        problems += lint_dockerfile_pins(Path(args.dockerfile).read_text(), pins, args.dockerfile, args.lock)
    if args.lock:
        problems += lock_problems()
    for problem in problems:
        print(problem)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())

"""Which copy of the code is running: its version, its commit and where it was imported from.

Every run records this in ``run.json`` (``"code"``), so a run says which code trained it. The commit
is, in order: ``$POPULORA_COMMIT`` (the container image sets it from the ``COMMIT`` file that
``make container`` writes at build time: the image holds no ``.git``), a ``COMMIT`` file beside the
package, or ``git rev-parse HEAD`` of the checkout the package was imported from (``+dirty`` with
uncommitted changes); ``"unknown"`` otherwise. ``source`` is the directory ``populora`` was imported
from: in a job it is the image's (``/opt/populora``), never the submitting checkout (docs/hpc.md,
"Which code runs in jobs").
"""

from __future__ import annotations

import os
import subprocess
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

COMMIT_ENV = "POPULORA_COMMIT"
COMMIT_FILE = "COMMIT"


def package_root() -> Path:
    """The directory that holds the imported ``populora`` package (a checkout or an install)."""
    return Path(__file__).resolve().parent.parent


def git_commit(root: Path) -> str | None:
    """``HEAD`` of the git checkout at ``root`` (``+dirty`` when it has changes), or None."""
    if not (root / ".git").exists():
        return None
    try:
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
        if head.returncode != 0:
            return None
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return head.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")


def code_commit() -> str:
    """The commit of the running code (see the module docstring)."""
    if os.environ.get(COMMIT_ENV):
        return os.environ[COMMIT_ENV].strip()
    root = package_root()
    try:
        text = (root / COMMIT_FILE).read_text().strip()
    except OSError:
        text = ""
    return text or git_commit(root) or "unknown"


def code_version() -> dict[str, str]:
    """``{"version", "commit", "source"}`` of the running code."""
    try:
        installed = version("populora")
    except PackageNotFoundError:  # imported from a checkout that is not installed
        installed = "unknown"
    return {"version": installed, "commit": code_commit(), "source": str(package_root())}

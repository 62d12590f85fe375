"""Optional parts of the project (pyproject's extras) and the one line a missing one prints.

The core (``populora train``, ``plan``, ``doctor`` and the library they use) imports only the
packages in pyproject's ``dependencies``. Everything else belongs to an extra and is imported where
it is used, through :func:`require`, so that a node with the core alone runs the core and a command
that needs an extra says, in one line, which extra to install:

    populora eval: needs the 'eval' extra (module evalplus is not installed): pip install 'populora[eval]'

``MissingExtra`` is an ``ImportError``; ``populora.cli.main`` prints its message and exits 2.
``tests/test_core_imports.py`` checks that the core modules import with every extra blocked.
"""

from __future__ import annotations

import importlib
import importlib.util
from types import ModuleType

# extra -> the top-level modules it provides (pyproject.toml's [project.optional-dependencies])
EXTRAS: dict[str, tuple[str, ...]] = {
    "eval": ("evalplus", "lm_eval", "math_verify", "matplotlib", "scipy"),
    "diagnostics": ("matplotlib", "ribs"),
    "hpc": ("submitit",),
    "vllm": ("vllm",),
    "wandb": ("wandb",),
}


class MissingExtra(ImportError):
    """An optional package is not installed; the message names the extra that provides it."""

    def __init__(self, module: str, extra: str, what: str = ""):
        self.module, self.extra, self.what = module, extra, what
        who = f"{what}: " if what else ""
        super().__init__(f"{who}needs the '{extra}' extra (module {module} is not installed): "
                         f"pip install 'populora[{extra}]'")


def available(module: str) -> bool:
    """Whether ``module`` can be imported here (without importing it)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def require(module: str, extra: str, what: str = "") -> ModuleType:
    """``import module``, or :class:`MissingExtra` naming ``extra`` when it is not installed.

    ``what`` names the feature that needs it (``"populora eval"``). An import error *inside* an
    installed package (a broken install) is not hidden: it propagates as it is.
    """
    if extra not in EXTRAS:
        raise ValueError(f"unknown extra {extra!r}; known: {', '.join(EXTRAS)}")
    if not available(module):
        raise MissingExtra(module, extra, what)
    return importlib.import_module(module)

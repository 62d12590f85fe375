"""Installed versions of the packages the trainer stands on, against a table of known-bad pairs.

Read from the installed distributions' metadata (``importlib.metadata``), without importing them:
the point is to say which package to change *before* an import fails deep inside a stage. Each row of
``KNOWN_BAD`` is a pair that is known not to work, with where that is known from and the fix; a row
with one condition is a floor of the project's own (pyproject.toml) that a hand-built environment can
still miss (``PYTHONPATH`` installs skip pip's checks).
"""

from __future__ import annotations

import importlib.metadata
from dataclasses import dataclass

PACKAGES = ("torch", "transformers", "peft", "accelerate", "safetensors", "tokenizers", "numpy")


@dataclass(frozen=True)
class BadPair:
    """``when`` holds: every ``{package: specifier}`` matches the installed versions."""

    when: dict[str, str]
    problem: str
    fix: str
    source: str


KNOWN_BAD: tuple[BadPair, ...] = (
    BadPair({"transformers": ">=5.0", "peft": "<0.18"},
            "peft imports transformers' HybridCache, which transformers 5 removed: `import peft` fails",
            "install peft >= 0.18", "peft 0.18.0 release notes (transformers v5 support); seen on GPU nodes"),
    BadPair({"transformers": "<4.56"},
            "from_pretrained ignores dtype= (loads float32: twice the plan's base weights)",
            "install transformers >= 4.56", "transformers 4.56.0 release notes (dtype replaces torch_dtype)"),
    BadPair({"torch": "<2.3"}, "older than the project's floor (pyproject.toml: torch>=2.3)",
            "install torch >= 2.3", "ours: the oldest torch the project is tested against"),
)


@dataclass(frozen=True)
class VersionReport:
    versions: dict[str, str | None]  # None: not installed
    problems: tuple[str, ...] = ()  # one line each: the pair, what fails, the fix

    @property
    def ok(self) -> bool:
        return not self.problems


def installed_versions(packages=PACKAGES) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for name in packages:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = None
    return out


def check_versions(versions: dict[str, str | None], table: tuple[BadPair, ...] = KNOWN_BAD) -> VersionReport:
    """The rows of ``table`` that ``versions`` match, as one line each (pure)."""
    from packaging.specifiers import SpecifierSet
    from packaging.version import InvalidVersion, Version

    problems = [f"{name} is not installed" for name in ("torch", "transformers", "peft") if not versions.get(name)]
    for row in table:
        matched = []
        for name, spec in row.when.items():
            v = versions.get(name)
            try:
                if v is None or Version(v) not in SpecifierSet(spec):
                    break
            except InvalidVersion:
                break
            matched.append(f"{name} {v}")
        else:
            problems.append(f"{' with '.join(matched)}: {row.problem}; {row.fix}")
    return VersionReport(dict(versions), tuple(problems))

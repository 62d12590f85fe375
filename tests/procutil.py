"""Process-tree helpers shared by the tests that check nothing is left running."""

from __future__ import annotations

from populora import processes
from populora.processes import running  # noqa: F401 - re-exported for the tests


def descendants(pid: int) -> set[int]:
    """Every live process below ``pid`` (children, grandchildren, ...), read from /proc."""
    return set(processes.descendants(pid))

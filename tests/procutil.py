"""Process-tree helpers shared by the tests that check nothing is left running."""

from __future__ import annotations

import os


def descendants(pid: int) -> set[int]:
    """Every live process below ``pid`` (children, grandchildren, ...), read from /proc."""
    parent_of = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as fh:
                    parent_of[int(name)] = int(fh.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
    found, frontier = set(), {pid}
    while frontier:
        frontier = {p for p, ppid in parent_of.items() if ppid in frontier} - found
        found |= frontier
    return found

"""Processes below this one, read from /proc (Linux): which are there, and which still run.

Used where a process starts others it does not manage itself (vLLM's engine starts its workers)
and must notice when one of them dies, and by the tests that check nothing is left behind.
"""

from __future__ import annotations

import os


def _stat(pid: int | str) -> tuple[str, list[str]] | None:
    """``(name, fields after the name)`` of /proc/PID/stat, or None when the process is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            head, tail = f.read().rsplit(")", 1)
    except OSError:
        return None
    return head.split("(", 1)[1], tail.split()


def descendants(pid: int) -> dict[int, str]:
    """Every process below ``pid`` (children, grandchildren, ...) and its name."""
    parent, names = {}, {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (stat := _stat(entry)) is not None:
            parent[int(entry)], names[int(entry)] = int(stat[1][1]), stat[0]
    found, frontier = set(), {pid}
    while frontier:
        frontier = {p for p, pp in parent.items() if pp in frontier} - found
        found |= frontier
    return {p: names[p] for p in found}


def running(pid: int) -> bool:
    """The process exists and is not a zombie (dead, not yet reaped by its parent)."""
    stat = _stat(pid)
    return stat is not None and stat[1][0] != "Z"

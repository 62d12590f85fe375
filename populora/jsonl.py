"""JSON-lines files of a run (metrics, lineage, examples, tasks): read and truncate.

The step loop appends one line per record and flushes, so a crash can leave at most a torn last
line; readers skip it, and anything malformed before it is an error that names file and line.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path


class JsonlError(ValueError):
    """A JSON-lines file has a malformed line that is not a torn last line (the message names it)."""


def read_jsonl(path: str | os.PathLike, *, strict: bool = False, what: str = "JSON") -> list[dict]:
    """Rows of a JSON-lines file ([] if absent). A torn last line is skipped; ``strict`` raises on it too.

    ``what`` names a row in the error message (``<path>:<line>: invalid <what> (...)``).
    """
    path = Path(path)
    if not path.exists():
        return []
    rows = []
    lines = path.read_text(encoding="utf-8").splitlines()
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError as e:
            if strict or i < len(lines):
                raise JsonlError(f"{path}:{i}: invalid {what} ({e})") from e
    return rows


def truncate_jsonl(path: str | os.PathLike, keep: Callable[[dict], bool]) -> None:
    """Rewrite a JSON-lines file keeping the rows for which ``keep(row)`` is true (atomically).

    Used on resume, to drop what was written after the checkpoint being resumed from. Unparsable
    lines (a torn last line) are dropped too.
    """
    path = Path(path)
    if not path.exists():
        return
    kept = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        if keep(row):
            kept.append(line)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text("".join(x + "\n" for x in kept), encoding="utf-8")
    os.replace(tmp, path)

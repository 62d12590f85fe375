"""JSON-lines files of a run (metrics, lineage, examples, tasks): read and truncate; one-object files too.

The step loop appends one JSON object per line and flushes, so a crash can leave at most a torn
last line; readers skip it, and anything malformed before it (bad JSON, bytes that are not UTF-8,
a line that is not an object) is an error that names file and line. Truncation (on resume) never
deletes such a line: it refuses, naming it, before any file is rewritten.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable
from pathlib import Path


class JsonlError(ValueError):
    """A JSON-lines file has a malformed line that is not a torn last line (the message names it)."""


def _parse_lines(path: Path, *, strict: bool, what: str) -> list[tuple[int, str, dict]]:
    """(line number, line text, row) per non-blank line; a torn last line is left out unless ``strict``."""
    data = path.read_bytes()
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    out = []
    for i, raw in enumerate(lines, 1):
        if not raw.strip():
            continue
        last = i == len(lines)
        try:
            text = raw.decode("utf-8")
            row = json.loads(text)
        except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
            if strict or not last:
                kind = "UTF-8" if isinstance(e, UnicodeDecodeError) else what
                why = "nested too deeply" if isinstance(e, RecursionError) else str(e)[:200]
                raise JsonlError(f"{path}:{i}: invalid {kind} ({why})") from None
            continue  # a torn last line: the write a crash interrupted
        if not isinstance(row, dict):
            raise JsonlError(f"{path}:{i}: invalid {what} (a JSON {json_kind(row)} where an object is expected)")
        out.append((i, text, row))
    return out


def json_kind(value) -> str:
    """The JSON name of a parsed value's type (for messages)."""
    if isinstance(value, bool) or value is None:
        return "boolean" if value is not None else "null"
    return {dict: "object", list: "array", str: "string", int: "number", float: "number"}.get(type(value), "value")


def read_jsonl(path: str | os.PathLike, *, strict: bool = False, what: str = "JSON") -> list[dict]:
    """Rows of a JSON-lines file ([] if absent). A torn last line is skipped; ``strict`` raises on it too.

    Every row is a JSON object. ``what`` names a row in the error message
    (``<path>:<line>: invalid <what> (...)``).
    """
    return [row for _, row in read_jsonl_numbered(path, strict=strict, what=what)]


def read_jsonl_numbered(path: str | os.PathLike, *, strict: bool = False, what: str = "JSON") -> list[tuple[int, dict]]:
    """:func:`read_jsonl` with each row's line number, for messages about a row's content."""
    path = Path(path)
    if not path.exists():
        return []
    return [(i, row) for i, _, row in _parse_lines(path, strict=strict, what=what)]


def step_of(row: dict) -> int:
    """A row's ``step`` (0 when absent); ValueError when it is not an integer."""
    step = row.get("step", 0)
    if not isinstance(step, int) or isinstance(step, bool):
        raise ValueError(f"'step' must be an integer, got {step!r}")
    return step


def truncate_jsonl_files(paths: Iterable[str | os.PathLike], keep: Callable[[dict], bool]) -> None:
    """Rewrite each JSON-lines file keeping the rows for which ``keep(row)`` is true.

    Every file is read and checked before any is rewritten, so a malformed line anywhere (named
    with file and line) leaves all of them untouched. Only a torn last line is dropped. Each file is
    replaced atomically; absent files are skipped.
    """
    plans = []
    for p in map(Path, paths):
        if not p.exists():
            continue
        kept = []
        for i, text, row in _parse_lines(p, strict=False, what="JSON"):
            try:
                if keep(row):
                    kept.append(text)
            except ValueError as e:
                raise JsonlError(f"{p}:{i}: {e}") from None
        plans.append((p, kept))
    for p, kept in plans:
        tmp = p.with_suffix(p.suffix + ".tmp")
        tmp.write_text("".join(x + "\n" for x in kept), encoding="utf-8")
        os.replace(tmp, p)


def truncate_jsonl(path: str | os.PathLike, keep: Callable[[dict], bool]) -> None:
    """One file's :func:`truncate_jsonl_files`."""
    truncate_jsonl_files([path], keep)


def read_json_object(path: str | os.PathLike, what: str = "JSON object") -> dict | None:
    """A file holding one JSON object (``summary.json``); None when absent; JsonlError naming the file."""
    path = Path(path)
    if not path.exists():
        return None
    try:
        obj = json.loads(path.read_bytes().decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
        why = "nested too deeply" if isinstance(e, RecursionError) else str(e)[:200]
        raise JsonlError(f"{path}: invalid {what} ({why})") from None
    if not isinstance(obj, dict):
        raise JsonlError(f"{path}: invalid {what} (a JSON {json_kind(obj)} where an object is expected)")
    return obj

"""Line-by-line JSONL corpora in, result lines out: the file side of ``populora tasks``.

Input is read as bytes, one line at a time, so a line that is not UTF-8, nested too deeply or
longer than ``MAX_LINE_BYTES`` becomes that line's ``bad_line`` result and never costs the others
(nor is a byte ever replaced: a program is run exactly as written or not at all). Results go to
standard output or to ``--out`` through a temporary file opened before any work and renamed into
place at the end. The option types refuse limits that are not finite and positive.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from pathlib import Path
from typing import IO, Any

# Longest input line read (ours): AZR programs are a few KB; a line this long is a bad_line and is
# skipped without holding it in memory.
MAX_LINE_BYTES = 1 << 20


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1 (argparse names the option in its one-line error)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}")
    return value


def positive_seconds(text: str) -> float:
    """argparse type: a finite number of seconds > 0 (0, negatives, nan and inf are refused)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, got {text!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"must be a finite positive number of seconds, got {text!r}")
    return value


def _strings_encode(obj: Any) -> bool:
    """True when every string in a parsed line is valid Unicode (JSON escapes can spell lone surrogates)."""
    try:
        json.dumps(obj, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


class _BadNumber:
    """A JSON number no record can hold (``NaN``, ``Infinity``, ``1e400``, an integer beyond 64
    bits), kept as its text so that the line's error can name where it is."""

    def __init__(self, text: str):
        digits = len(text.lstrip("-"))
        self.text = text if len(text) <= 24 else f"{text[:12]}... ({digits} digits)"


def _float(text: str) -> float | _BadNumber:
    value = float(text)
    return value if math.isfinite(value) else _BadNumber(text)


def _int(text: str) -> int | _BadNumber:
    if len(text.lstrip("-")) > 19:  # beyond 64 bits for sure, and never handed to int() (4,300-digit cap)
        return _BadNumber(text)
    value = int(text)
    return value if -(1 << 63) <= value < (1 << 63) else _BadNumber(text)


def _key(key: str) -> str:
    """A key as an error names it: at most 40 characters, control characters escaped (one line)."""
    text = key[:40] + ("..." if len(key) > 40 else "")
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)


def bad_number(obj: Any) -> str | None:
    """Where the first ``_BadNumber`` of a parsed line is (``'n_shown'``, ``'task.inputs[2]'``) and
    what it was, or None. Iterative: the parser already bounded the depth."""
    stack: list[tuple[str, Any]] = [("", obj)]
    while stack:
        path, value = stack.pop()
        if isinstance(value, _BadNumber):
            return f"'{path}' is not a finite number that fits 64 bits ({value.text})"
        if isinstance(value, dict):
            stack += [(f"{path}.{_key(k)}" if path else _key(k), v) for k, v in reversed(list(value.items()))]
        elif isinstance(value, list):
            stack += [(f"{path}[{i}]", v) for i, v in reversed(list(enumerate(value)))]
    return None


def parse_input_line(raw: bytes) -> dict[str, Any] | str | None:
    """One input line: its object, an error text starting with ``bad_line``, or None when blank.

    Numbers no record holds (``NaN``, ``Infinity``, ``1e400``, integers beyond 64 bits) make the
    line a ``bad_line`` naming the key (``'n_shown' is not a finite number ...``); they never reach
    a record (``int(1e400)`` raised an ``OverflowError`` that lost the whole file's results)."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return f"bad_line: not UTF-8 (byte 0x{raw[exc.start]:02x} at byte {exc.start + 1} of the line)"
    if not text.strip():
        return None
    try:
        obj = json.loads(text, parse_float=_float, parse_int=_int, parse_constant=_BadNumber)
    except json.JSONDecodeError as exc:
        return f"bad_line: invalid JSON ({exc.msg} at column {exc.colno})"
    except RecursionError:
        return "bad_line: JSON nested too deeply"
    if not isinstance(obj, dict):
        return "bad_line: not a JSON object"
    where = bad_number(obj)
    if where is not None:
        return f"bad_line: {where}"
    if not _strings_encode(obj):
        return "bad_line: a string holds a lone surrogate escape (not valid Unicode)"
    return obj


def read_input_lines(path: str) -> list[tuple[int, dict[str, Any] | str]]:
    """(line number, object) per non-blank line; the object is an error text when the line is malformed.

    A line longer than ``MAX_LINE_BYTES`` is skipped in chunks (never held whole) and reported.
    """
    rows: list[tuple[int, dict[str, Any] | str]] = []
    with open(path, "rb") as fh:
        n = 0
        while True:
            raw = fh.readline(MAX_LINE_BYTES + 1)
            if not raw:
                break
            n += 1
            if len(raw) > MAX_LINE_BYTES and not raw.endswith(b"\n"):
                while raw and not raw.endswith(b"\n"):  # the rest of the over-long line
                    raw = fh.readline(MAX_LINE_BYTES)
                rows.append((n, f"bad_line: longer than {MAX_LINE_BYTES} bytes"))
                continue
            obj = parse_input_line(raw)
            if obj is not None:
                rows.append((n, obj))
    return rows


class Output:
    """Where results go: standard output, or ``--out`` via a temporary file beside it.

    ``open`` runs before any work, so an unwritable ``--out`` is an error at once; ``commit``
    renames the finished file into place, so a failed run never leaves half a file or clobbers an
    earlier one.
    """

    def __init__(self, out: str | None) -> None:
        self.out = Path(out) if out else None
        self._tmp: Path | None = None
        self._fh: IO[str] | None = None

    def open(self) -> None:
        if self.out is None:
            return
        if self.out.is_dir():
            raise OSError(f"{self.out} is a directory")
        if self.out.exists() and not os.access(self.out, os.W_OK):
            raise OSError(f"{self.out} is not writable")
        self._tmp = self.out.with_name(f".{self.out.name}.tmp-{os.getpid()}")
        self._fh = open(self._tmp, "w", encoding="utf-8")

    def commit(self, results: list[dict[str, Any]]) -> None:
        fh = self._fh if self._fh is not None else sys.stdout
        for r in results:
            fh.write(json.dumps(r) + "\n")
        if self._fh is not None and self._tmp is not None and self.out is not None:
            self._fh.close()
            os.replace(self._tmp, self.out)
            self._fh = None

    def discard(self) -> None:
        if self._fh is not None and self._tmp is not None:
            self._fh.close()
            self._tmp.unlink(missing_ok=True)
            self._fh = None

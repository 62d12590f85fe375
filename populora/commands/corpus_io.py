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


def parse_input_line(raw: bytes) -> dict[str, Any] | str | None:
    """One input line: its object, an error text starting with ``bad_line``, or None when blank."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return f"bad_line: not UTF-8 (byte 0x{raw[exc.start]:02x} at byte {exc.start + 1} of the line)"
    if not text.strip():
        return None
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        return f"bad_line: invalid JSON ({exc.msg} at column {exc.colno})"
    except RecursionError:
        return "bad_line: JSON nested too deeply"
    if not isinstance(obj, dict):
        return "bad_line: not a JSON object"
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

"""Framing of the two pipes of the sandbox.

* caller -> fork server (both trusted): a length-prefixed JSON chunk header (job ids, numbers of
  calls, body sizes) followed by the jobs' bodies, raw (each the UTF-8 JSON of one job); the
  server moves each body into a memfd unread (see ``server.py``).
* fork server -> caller: per job a length-prefixed JSON header (exit status, timings, sizes)
  followed by the child's raw result frame and its raw output.
* child -> fork server (the child ran untrusted code): a length-prefixed list of UTF-8 fields,
  parsed strictly by the server. The first field is a per-child random token; a frame with a
  wrong token, a malformed frame or more than one frame is rejected (see ``server.py``). Building
  it needs only ``struct.pack`` and ``str.encode`` (captured before the untrusted code runs), not
  a JSON encoder whose module globals a program could monkeypatch.

Standard library only: the fork server imports this module as a top-level module.
"""

from __future__ import annotations

import json
import os
import select
import struct
import time

HEADER = struct.Struct(">I")
MAX_CONTROL_FRAME = 64 * 1024 * 1024  # caller <-> server; a program and its limits fit easily


class FrameError(Exception):
    """A frame that is too large, truncated or not what the protocol says."""


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def writev_all(fd: int, parts: list) -> None:
    """Write every buffer of ``parts`` in order with ``writev`` (no joined copy in memory)."""
    views = [memoryview(p).cast("B") for p in parts if len(p)]
    while views:
        n = os.writev(fd, views)
        while views and n >= len(views[0]):
            n -= len(views[0])
            views.pop(0)
        if n:
            views[0] = views[0][n:]


def read_exact(fd: int, n: int, deadline: float | None) -> bytes:
    """Exactly ``n`` bytes from ``fd`` (FrameError on end of file, TimeoutError past ``deadline``)."""
    if n == 0:
        return b""
    data = _read_exact(fd, n, deadline)
    if data is None:
        raise FrameError(f"pipe closed before {n} expected bytes")
    return data


def write_json(fd: int, obj: object) -> None:
    payload = json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode("utf-8", "surrogatepass")
    write_all(fd, HEADER.pack(len(payload)) + payload)


def _read_exact(fd: int, n: int, deadline: float | None) -> bytes | None:
    """``n`` bytes from ``fd``; None on EOF before the first byte; FrameError on EOF mid-way.

    ``deadline`` (a ``time.monotonic()`` value) raises TimeoutError when passed.
    """
    chunks: list[bytes] = []
    got = 0
    while got < n:
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise TimeoutError(f"no frame on fd {fd} before the deadline")
        chunk = os.read(fd, min(n - got, 1 << 20))
        if not chunk:
            if got == 0:
                return None
            raise FrameError(f"pipe closed after {got} of {n} bytes")
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def read_json(fd: int, deadline: float | None = None) -> object | None:
    """The next JSON frame on ``fd``, or None on a clean EOF."""
    head = _read_exact(fd, HEADER.size, deadline)
    if head is None:
        return None
    (size,) = HEADER.unpack(head)
    if size > MAX_CONTROL_FRAME:
        raise FrameError(f"frame of {size} bytes is over the {MAX_CONTROL_FRAME} byte limit")
    body = _read_exact(fd, size, deadline)
    if body is None:
        raise FrameError("pipe closed after a frame header")
    return json.loads(body.decode("utf-8", "surrogatepass"))


def pack_fields(fields: list[str], _pack=HEADER.pack) -> bytes:
    """One child result frame: header(total) + for each field header(len) + UTF-8 bytes."""
    parts = []
    for field in fields:
        data = field.encode("utf-8", "backslashreplace")
        parts.append(_pack(len(data)))
        parts.append(data)
    body = b"".join(parts)
    return _pack(len(body)) + body


def unpack_fields(buf: bytes) -> list[str]:
    """Inverse of ``pack_fields`` for a buffer that must hold exactly one frame (else FrameError)."""
    if len(buf) < HEADER.size:
        raise FrameError(f"result frame truncated: {len(buf)} bytes")
    (total,) = HEADER.unpack_from(buf, 0)
    if total != len(buf) - HEADER.size:
        raise FrameError(f"result frame says {total} bytes, channel held {len(buf) - HEADER.size}")
    fields: list[str] = []
    pos = HEADER.size
    while pos < len(buf):
        if pos + HEADER.size > len(buf):
            raise FrameError("result field header truncated")
        (size,) = HEADER.unpack_from(buf, pos)
        pos += HEADER.size
        if pos + size > len(buf):
            raise FrameError("result field truncated")
        try:
            fields.append(buf[pos : pos + size].decode("utf-8"))
        except UnicodeDecodeError as exc:
            raise FrameError(f"result field is not UTF-8: {exc}") from None
        pos += size
    return fields

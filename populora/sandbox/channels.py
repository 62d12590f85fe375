"""The fork server's side of its pipes: job bodies into memfds, child output into bounded buffers.

Nothing here decodes a program's text, input or output: bodies go from the request pipe into a
memfd of their own by ``splice`` (kernel to kernel) and are read only by the forked child; what a
child writes is read into reusable buffers with ``readv`` and zeroed once passed on. So the fork
server's memory, which every later child inherits, holds no job's data.

Standard library only: the fork server imports this module as a top-level module.
"""

from __future__ import annotations

import fcntl
import os

import protocol


class CallerGone(Exception):
    """The caller's end of the request pipe closed (the caller died) while a chunk was served."""


class Capture:
    """A bounded buffer filled straight from a pipe (``readv``: no intermediate bytes objects, so
    nothing of the program's output is left in freed memory once ``wipe`` has run). One per server
    and channel, reused from program to program."""

    _sink = bytearray(1 << 16)  # what arrives past the cap is read here and zeroed

    def __init__(self) -> None:
        self.buf = bytearray(0)
        self.size = 0
        self.cap = 0
        self.overflow = False

    def reset(self, cap: int) -> Capture:
        if len(self.buf) < cap:
            self.buf = bytearray(cap)
        self.cap, self.size, self.overflow = cap, 0, False
        return self

    def read_from(self, fd: int) -> bool:
        """Read what ``fd`` holds; False at end of file. Bytes past the cap are dropped (overflow)."""
        if self.size < self.cap:
            n = os.readv(fd, [memoryview(self.buf)[self.size : self.cap]])
            self.size += n
            return n > 0
        n = os.readv(fd, [self._sink])
        if n:
            self.overflow = True
            self._sink[:n] = bytes(n)
        return n > 0

    def view(self) -> memoryview:
        return memoryview(self.buf)[: self.size]

    def wipe(self) -> None:
        """Zero what the last program sent and forget its size, cap and overflow: nothing of one
        job is left here when the next child is forked."""
        self.buf[: self.size] = bytes(self.size)
        self.size, self.cap, self.overflow = 0, 0, False


def read_memfd(fd: int) -> bytes:
    size = os.fstat(fd).st_size
    data = os.pread(fd, size, 0)
    if len(data) != size:
        raise OSError(f"job body: read {len(data)} of {size} bytes")
    return data


def take_body(req: int, size: int) -> int:
    """Move the next ``size`` bytes of the request pipe into a new memfd (kernel to kernel)."""
    fd = os.memfd_create("job", os.MFD_CLOEXEC)
    left = size
    try:
        while left:
            try:
                n = os.splice(req, fd, left)
            except OSError:  # a kernel without splice into memfd: through a buffer we zero after
                buf = bytearray(left)
                got = os.readv(req, [buf])
                protocol.write_all(fd, memoryview(buf)[:got])
                buf[:] = bytes(len(buf))
                n = got
            if n == 0:
                raise CallerGone
            left -= n
    except BaseException:
        os.close(fd)
        raise
    return fd


def pipe_capacity(fd: int, wanted: int) -> int:
    """Grow a pipe's buffer towards ``wanted`` bytes (Linux F_SETPIPE_SZ); its capacity after."""
    try:
        return fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, min(max(wanted, 4096), 1 << 20))
    except (OSError, AttributeError):
        return 0

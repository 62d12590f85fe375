"""Scratch file systems of sandbox children, and their removal without recursion.

In ``full`` mode each program gets a fresh tmpfs (``mount_scratch``), mounted by the fork server
on its work directory before the fork and detached after the program (``unmount_scratch``): the
kernel frees every file and inode the program made, however deep or many, when the last process
holding it is gone; nothing is walked. Where mounts are not available (``uid`` and ``rlimits``
modes) the work directory is an ordinary directory removed by ``remove_tree``.

``remove_tree`` is hand-written instead of ``shutil.rmtree`` because ``rmtree`` recurses once per
directory level (Python 3.11): a program that builds a tree deeper than the recursion limit made it
raise ``RecursionError`` (not an ``OSError``, so not even ``ignore_errors=True`` caught it), left the
tree behind and broke every later program of its fork server. This version keeps its own stack of
open directory descriptors, so its depth is bounded by memory, not by the interpreter's stack, and
it works through ``dir_fd`` so that a program's symlinks are unlinked, never followed.

Standard library only: the fork server imports this module as a top-level module.
"""

from __future__ import annotations

import os
import stat

MAX_ENTRIES = 10_000_000  # a bound on the work of one removal (a tree is never this large in practice)


def remove_tree(path: str) -> bool:
    """Remove ``path`` and everything under it; True when it is gone. Never raises, never recurses.

    Directories whose permissions a program took away are given back first (the sandbox's own
    user owns the tree in the weak modes; root ignores permissions anyway).
    """
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return True
    except OSError:
        return False
    try:
        if not stat.S_ISDIR(st.st_mode):
            os.unlink(path)
            return True
        _empty_directory(path)
        os.rmdir(path)
        return True
    except (OSError, ValueError, MemoryError):
        return not os.path.lexists(path)


def _open_dir(name: str, dir_fd: int | None) -> int:
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        return os.open(name, flags, dir_fd=dir_fd)
    except PermissionError:  # a mode the program set: give the owner its rights back, try again
        os.chmod(name, 0o700, dir_fd=dir_fd)  # a directory (checked by the caller), not a link
        return os.open(name, flags, dir_fd=dir_fd)


def _empty_directory(path: str) -> None:
    """Unlink everything below ``path`` (kept), depth first, with an explicit stack of fds."""
    stack: list[tuple[int, str | None]] = [(_open_dir(path, None), None)]  # (fd, name in parent)
    budget = MAX_ENTRIES
    try:
        while stack:
            fd, _ = stack[-1]
            descended = False
            with os.scandir(fd) as entries:
                for entry in entries:
                    budget -= 1
                    if budget < 0:
                        raise OSError(f"more than {MAX_ENTRIES} entries under {path}")
                    if entry.is_dir(follow_symlinks=False):
                        try:
                            os.rmdir(entry.name, dir_fd=fd)  # empty already: no descent needed
                            continue
                        except OSError:
                            pass
                        try:
                            stack.append((_open_dir(entry.name, fd), entry.name))
                        except OSError:
                            os.chmod(fd, 0o700)  # search/write on the parent itself was taken away
                            stack.append((_open_dir(entry.name, fd), entry.name))
                        descended = True
                        break
                    try:
                        os.unlink(entry.name, dir_fd=fd)
                    except PermissionError:
                        os.chmod(fd, 0o700)
                        os.unlink(entry.name, dir_fd=fd)
            if descended:
                continue
            fd, name = stack.pop()
            os.close(fd)
            if name is not None:
                os.rmdir(name, dir_fd=stack[-1][0])
    finally:
        for fd, _ in stack:
            os.close(fd)

"""The error every configuration problem raises: ``ConfigError``, a ``ValueError`` whose message names
the file and/or the key and the value. The run config (``populora.config``) and the sections that
validate themselves (population, policy, tasks) raise it or a subclass, so a caller catches one type.

``os_error_line`` turns an ``OSError`` of the environment (disk full, permissions, a missing or
read-only path) into the one line a command prints: what happened, to which file, and the fix.
"""

from __future__ import annotations

import errno
import os


class ConfigError(ValueError):
    """A configuration problem; the message names the file and/or key (and the value)."""


def os_error_line(e: OSError, run_dir: str | os.PathLike | None = None) -> str:
    """One line for an ``OSError`` (no traceback): the file (``e.filename``, else the run directory, which
    is where a run writes) and what to do. Writes are atomic, so a run's last checkpoint is intact."""
    path = e.filename or run_dir
    on = f" ({path})" if path else ""
    resume = f"; then `populora train --resume {run_dir}` continues from the last checkpoint" if run_dir else ""
    code = e.errno
    if code in (errno.ENOSPC, errno.EDQUOT):
        what = "no space left on the device" if code == errno.ENOSPC else "disk quota exceeded"
        return f"{what}{on}: free space there (`df -h {path or '.'}`) or move the run to another disk{resume}"
    if code in (errno.EACCES, errno.EPERM):
        return f"permission denied{on}: make it readable/writable for this user or choose another path"
    if code == errno.EROFS:
        return f"read-only file system{on}: write the run, caches and outputs to a writable path"
    if code == errno.ENOENT:
        return f"no such file or directory{on}"
    if code == errno.EISDIR:
        return f"a directory where a file was expected{on}"
    return f"{e.strerror or type(e).__name__}{on} (errno {code})" if code else f"{type(e).__name__}: {e}"

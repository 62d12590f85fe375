"""Operating-system confinement used by the fork server and its children (Linux).

Three modes, strongest first (``docs/sandbox.md`` says what each one does and does not stop):

* ``full`` (needs root): the fork server lives in fresh network, PID, mount, IPC and UTS
  namespaces. In its mount namespace every inherited mount is read-only; ``/tmp``, ``/var/tmp``,
  ``/dev/shm``, ``/run``, ``/root``, ``/home`` and ``/sys`` are covered by empty read-only tmpfs
  (with the Python installation bound back where it lives under one of them); ``/proc`` is a new
  procfs of the PID namespace mounted ``hidepid=invisible``; children work in a size-limited tmpfs.
  Children run as an unprivileged uid of their own, so they cannot signal, trace or read the memory
  of the server, and ``kill(-1, 9)`` reaches nothing outside the namespace.
* ``uid`` (root without namespaces): children still drop to their own unprivileged uid.
* ``rlimits`` (not root): resource limits, a process group of its own, a scrubbed environment only.

Standard library only (the fork server imports it as a top-level module); ``os.unshare`` is not in
Python 3.11, hence the ctypes calls into libc.
"""

from __future__ import annotations

import ctypes
import errno
import os
import resource
import signal
import sys

CLONE_NEWNS = 0x00020000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18

PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_SET_CHILD_SUBREAPER, PR_SET_NO_NEW_PRIVS = 1, 4, 36, 38

HIDDEN_DIRS = ("/tmp", "/var/tmp", "/dev/shm", "/run", "/root", "/home", "/sys")
WORK_ROOT = "/tmp/populora-sandbox"  # inside the mount namespace only (full mode)

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]


def _check(ret: int, what: str) -> None:
    if ret != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def unshare(flags: int) -> None:
    _check(_libc.unshare(flags), f"unshare({flags:#x})")


def _enc(text: str | None) -> bytes | None:
    return None if text is None else text.encode()


def mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    _check(_libc.mount(_enc(source), _enc(target), _enc(fstype), flags, _enc(data)), f"mount {target}")


def prctl(option: int, arg: int) -> None:
    _check(_libc.prctl(option, ctypes.c_ulong(arg), 0, 0, 0), f"prctl({option})")


def _mount_points() -> list[tuple[str, int]]:
    """(mount point, the nosuid/nodev/noexec flags it has) for every mount of this namespace."""
    points = []
    with open("/proc/self/mountinfo") as fh:
        for line in fh:
            fields = line.split()
            # mountinfo escapes space, tab, newline and backslash as \ooo
            point = fields[4].encode().decode("unicode_escape").encode("latin-1").decode()
            options = set(fields[5].split(","))
            flags = sum(
                f
                for name, f in (("nosuid", MS_NOSUID), ("nodev", MS_NODEV), ("noexec", MS_NOEXEC))
                if name in options
            )
            points.append((point, flags))
    return points


class NamespacesUnavailable(OSError):
    """``unshare`` refused (no CAP_SYS_ADMIN, a restrictive container): weaker modes remain."""


def _under(path: str, parent: str) -> bool:
    return path == parent or path.startswith(parent.rstrip("/") + "/")


def enter_namespaces(network: bool, needed_paths: list[str], work_bytes: int) -> dict:
    """Move the calling (single-threaded, root) process into new namespaces and build its view.

    Returns a report of what was done. The PID namespace applies to the caller's *children*: the
    next forked process is its init. Raises ``NamespacesUnavailable`` if the namespaces cannot be
    created (nothing has changed then); any other OSError leaves the process half set up, and the
    caller must not go on serving in it.
    """
    flags = CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWUTS | (0 if network else CLONE_NEWNET)
    try:
        unshare(flags)
    except OSError as exc:
        raise NamespacesUnavailable(exc.errno, str(exc)) from None
    report: dict = {"netns": not network, "pidns": True, "mountns": True, "readonly": [], "hidden": []}
    mount(None, "/", None, MS_REC | MS_PRIVATE)
    # Paths the children need (the Python installation) are opened before being covered, then
    # bound back on top of the empty tmpfs; O_PATH fds work as bind sources via /proc/self/fd.
    keep = {p: os.open(p, os.O_PATH | os.O_DIRECTORY) for p in needed_paths if os.path.isdir(p)}
    for point, kept in sorted(set(_mount_points()), key=lambda pf: len(pf[0])):
        try:  # MS_BIND|MS_REMOUNT changes this mount only, never the shared superblock
            mount(None, point, None, MS_BIND | MS_REMOUNT | MS_RDONLY | kept)
            report["readonly"].append(point)
        except OSError:
            pass  # e.g. a mount point shadowed by another; it stays as it was (reported)
    for hidden in HIDDEN_DIRS:
        if not os.path.isdir(hidden) or os.path.islink(hidden):
            continue
        mount("tmpfs", hidden, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=755")
        for path, fd in keep.items():
            if _under(path, hidden):
                os.makedirs(path, exist_ok=True)
                mount(f"/proc/self/fd/{fd}", path, None, MS_BIND | MS_REC)
                mount(None, path, None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)
        if hidden == "/tmp":
            os.makedirs(WORK_ROOT, mode=0o755)
            mount(
                "tmpfs",
                WORK_ROOT,
                "tmpfs",
                MS_NOSUID | MS_NODEV,
                f"size={work_bytes},nr_inodes=4096,mode=711",
            )
        mount(None, hidden, None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)
        report["hidden"].append(hidden)
    for fd in keep.values():
        os.close(fd)
    if "/tmp" not in report["hidden"]:
        raise OSError(errno.ENOTDIR, "no /tmp to build the work directory in")
    return report


def mount_private_proc() -> str:
    """In the init of the new PID namespace: a procfs that shows only this namespace's processes."""
    for options in ("hidepid=invisible,subset=pid", "hidepid=invisible", "hidepid=2", ""):
        try:
            mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, options or None)
            return options or "plain"
        except OSError:
            continue
    return "unchanged"


def set_parent_death_signal(sig: int = signal.SIGKILL) -> None:
    prctl(PR_SET_PDEATHSIG, int(sig))


def confine_child(limits: dict, uid: int | None) -> None:
    """In a freshly forked child, before any untrusted code: rlimits, then drop to ``uid``.

    ``limits`` holds the ``SandboxLimits`` fields. Raises OSError if a step fails (the caller
    then exits without running the program).
    """
    nproc = 1 + int(limits["max_processes"])
    if uid is None and limits["max_processes"] > 0:
        nproc = _processes_of(os.getuid()) + int(limits["max_processes"])
    cpu = max(1, int(limits["cpu_seconds"]))
    memory = int(limits["memory_mb"]) * 1024 * 1024
    for what, value in (
        (resource.RLIMIT_CPU, (cpu, cpu + 1)),  # SIGXCPU at the soft limit, SIGKILL one second later
        (resource.RLIMIT_AS, (memory, memory)),
        (resource.RLIMIT_FSIZE, (int(limits["max_file_bytes"]),) * 2),
        (resource.RLIMIT_NPROC, (nproc, nproc)),  # counts threads too: 1 means no fork, no thread
        (resource.RLIMIT_NOFILE, (64, 64)),
        (resource.RLIMIT_CORE, (0, 0)),
        (resource.RLIMIT_MEMLOCK, (0, 0)),
        (resource.RLIMIT_MSGQUEUE, (0, 0)),
    ):
        resource.setrlimit(what, value)
    if uid is not None:
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)  # from root to non-root: every capability is dropped
        if os.getuid() != uid or os.geteuid() != uid:
            raise OSError(errno.EPERM, f"could not drop to uid {uid}")
    prctl(PR_SET_NO_NEW_PRIVS, 1)  # no setuid binaries, no new privileges through exec
    prctl(PR_SET_DUMPABLE, 0)  # /proc/<pid>/mem and ptrace of this process need root


def _processes_of(uid: int) -> int:
    """Tasks (threads included, as RLIMIT_NPROC counts them) owned by ``uid``, from /proc."""
    count = 0
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                st = os.stat(f"/proc/{name}")
                if st.st_uid == uid:
                    count += len(os.listdir(f"/proc/{name}/task"))
            except OSError:
                continue
    return count


def kill_descendants() -> None:
    """Kill and reap every descendant of the calling process (a child subreaper, see ``server``).

    Orphaned grandchildren are re-parented to a subreaper, so repeating "kill my children, reap
    them" until none is left also catches processes that left their process group or session.
    """
    while True:
        pids = set()
        for tid in os.listdir("/proc/self/task"):
            try:
                with open(f"/proc/self/task/{tid}/children") as fh:
                    pids.update(int(p) for p in fh.read().split())
            except OSError:
                continue
        if not pids:
            return
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for pid in pids:
            try:
                os.waitpid(pid, 0)
            except ChildProcessError:
                pass


def is_root() -> bool:
    return os.geteuid() == 0 and sys.platform.startswith("linux")

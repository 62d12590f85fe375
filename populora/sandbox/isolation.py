"""Operating-system confinement used by the fork server and its children (Linux).

Three modes, strongest first (``docs/sandbox.md`` says what each one does and does not stop):

* ``full`` (needs root): the fork server lives in fresh network, PID, mount, IPC and UTS
  namespaces, with a new root: an empty read-only tmpfs holding only the Python runtime (the
  standard library and the shared libraries the interpreter maps), a few devices and a new
  ``/proc`` of the PID namespace (``hidepid=invisible``). Each child gets its own IPC namespace
  and a fresh tmpfs as its work directory, runs as an unprivileged uid of its own, and loads the
  seccomp filter (``seccomp.py``) before the program runs.
* ``uid`` (root without namespaces): children still drop to their own unprivileged uid and load
  the seccomp filter.
* ``rlimits`` (not root): resource limits, a process group of its own, a scrubbed environment and
  the seccomp filter only.

Standard library only (the fork server imports it as a top-level module); ``os.unshare`` is not in
Python 3.11, hence the ctypes calls into libc.
"""

from __future__ import annotations

import ctypes
import errno
import math
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
MS_REMOUNT, MS_BIND, MS_MOVE, MS_REC, MS_PRIVATE = 32, 4096, 8192, 16384, 1 << 18

PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_SET_CHILD_SUBREAPER, PR_SET_NO_NEW_PRIVS = 1, 4, 36, 38

MNT_DETACH = 2
PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 22, 2
SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41, "ppc64le": 203, "s390x": 217, "riscv64": 41}

# ours: queued signals a program may have pending (and POSIX timers it may create); programs need
# none, CPython's own handlers use standard (non-queued) signals; 16 leaves room for a library's
SIGPENDING = 16
WORK_DIR = "/work"  # full mode: where each program's fresh tmpfs is mounted (in the server's root)
# no random device in a deterministic sandbox: a child has no entropy (getrandom is refused too,
# seccomp.py); a sandbox with ``deterministic=False`` binds ``RANDOM_DEVICES`` as well
DEVICES = ("/dev/null", "/dev/zero", "/dev/full")
RANDOM_DEVICES = ("/dev/random", "/dev/urandom")

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
_libc.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]


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


def umount(target: str, flags: int = MNT_DETACH) -> None:
    _check(_libc.umount2(_enc(target), flags), f"umount {target}")


def prctl(option: int, arg: int) -> None:
    _check(_libc.prctl(option, ctypes.c_ulong(arg), 0, 0, 0), f"prctl({option})")


class NamespacesUnavailable(OSError):
    """``unshare`` refused (no CAP_SYS_ADMIN, a restrictive container): weaker modes remain."""


def runtime_paths() -> list[str]:
    """What a child's Python needs to see: the standard library and the directories of the shared
    objects the interpreter has mapped (``libpython``, libc and the system library directory that
    extension modules load their dependencies from). Resolved paths, outermost first."""
    paths = {os.path.realpath(os.path.dirname(os.__file__))}
    with open("/proc/self/maps") as fh:
        for line in fh:
            fields = line.split(maxsplit=5)
            if len(fields) == 6 and fields[5].startswith("/") and ".so" in fields[5]:
                path = fields[5].rstrip("\n")
                if os.path.isfile(path):
                    paths.add(os.path.dirname(os.path.realpath(path)))
    kept: list[str] = []
    for path in sorted(paths, key=len):  # a directory inside one already bound needs no bind
        if not any(path == k or path.startswith(k.rstrip("/") + "/") for k in kept):
            kept.append(path)
    return kept


def enter_namespaces(network: bool, needed_paths: list[str], devices: tuple[str, ...] = DEVICES) -> dict:
    """Move the calling (single-threaded, root) process into new namespaces and a new root.

    The new root is an empty read-only tmpfs holding only ``needed_paths`` (bound read-only), the
    ``devices``, ``/etc/ld.so.cache``, ``/proc`` (mounted later by the namespace's
    init) and ``WORK_DIR``; the host's files (``/etc``, ``/root``, ``/home``, ``/var``, the
    project, the caller's files) are not in it. Returns a report of what was done. The PID
    namespace applies to the caller's *children*: the next forked process is its init. Raises
    ``NamespacesUnavailable`` if the namespaces cannot be created (nothing has changed then); any
    other OSError leaves the process half set up, and the caller must not go on serving in it.
    """
    flags = CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWUTS | (0 if network else CLONE_NEWNET)
    try:
        unshare(flags)
    except OSError as exc:
        raise NamespacesUnavailable(exc.errno, str(exc)) from None
    mount(None, "/", None, MS_REC | MS_PRIVATE)
    sources = [p for p in needed_paths if os.path.isdir(p)]
    sources += [p for p in (*devices, "/etc/ld.so.cache") if os.path.exists(p)]
    # opened before the new root covers anything; O_PATH fds work as bind sources via /proc/self/fd
    keep = {p: os.open(p, os.O_PATH | os.O_CLOEXEC) for p in sources}
    new = "/tmp"
    try:
        mount("tmpfs", new, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,nr_inodes=1024,mode=755")
        for path, fd in keep.items():
            target = new + path
            os.makedirs(os.path.dirname(target), exist_ok=True)
            if os.path.isdir(path):
                os.makedirs(target, exist_ok=True)
            else:
                os.close(os.open(target, os.O_CREAT | os.O_WRONLY, 0o644))
            mount(f"/proc/self/fd/{fd}", target, None, MS_BIND)
            device = path.startswith("/dev/")
            mount(
                None, target, None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | (0 if device else MS_NODEV)
            )
        for link in ("/lib", "/lib64", "/usr/lib64"):  # merged-/usr systems: the loader's paths
            if os.path.islink(link) and not os.path.lexists(new + link):
                os.makedirs(os.path.dirname(new + link), exist_ok=True)
                os.symlink(os.readlink(link), new + link)
        for directory in ("/proc", WORK_DIR, "/.old"):
            os.makedirs(new + directory, mode=0o755, exist_ok=True)
    finally:
        for fd in keep.values():
            os.close(fd)
    how = _switch_root(new)
    mount(None, "/", None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)
    return {
        "netns": not network,
        "pidns": True,
        "mountns": True,
        "root": how,
        "visible": sorted(keep),
        "ipcns": "per program",
        "scratch": "a fresh tmpfs per program",
    }


def _switch_root(new: str) -> str:
    """Make ``new`` the root of this mount namespace and drop the old root from it."""
    number = SYS_PIVOT_ROOT.get(os.uname().machine)
    os.chdir(new)
    if number is not None and _libc.syscall(number, b".", b".old") == 0:
        os.chdir("/")
        umount("/.old")  # detached: the host's file system is no longer reachable from here
        os.rmdir("/.old")
        return "pivot_root"
    # no pivot_root (unknown architecture, or a root that cannot be pivoted): move and chroot
    os.rmdir(".old")
    mount(".", "/", None, MS_MOVE)
    os.chroot(".")
    os.chdir("/")
    return "move+chroot"


def mount_private_proc() -> str:
    """In the init of the new PID namespace: a procfs that shows only this namespace's processes."""
    for options in ("hidepid=invisible,subset=pid", "hidepid=invisible", "hidepid=2", ""):
        try:
            mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, options or None)
            return options or "plain"
        except OSError:
            continue
    return "unchanged"


def mount_scratch(uid: int, size_bytes: int, inodes: int = 4096) -> None:
    """A fresh, empty tmpfs on ``WORK_DIR`` for the next program, owned by its ``uid``, mode 0700."""
    options = f"size={size_bytes},nr_inodes={inodes},mode=700,uid={uid},gid={uid}"
    mount("tmpfs", WORK_DIR, "tmpfs", MS_NOSUID | MS_NODEV, options)


def unmount_scratch() -> bool:
    """Detach the program's tmpfs (the kernel frees it); True when ``WORK_DIR`` is bare again."""
    try:
        umount(WORK_DIR)
    except OSError:
        return False
    return not os.path.ismount(WORK_DIR)


def load_seccomp(program) -> None:
    """Install a compiled seccomp filter (a ``FilterProgram``) on the calling thread."""
    _check(
        _libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(program.fprog), 0, 0),
        "prctl(PR_SET_SECCOMP)",
    )


class FilterProgram:
    """A raw BPF program in memory, ready for ``load_seccomp`` (built once, before any fork)."""

    class _SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    def __init__(self, bpf: bytes):
        if not bpf or len(bpf) % 8:
            raise ValueError(f"a BPF program is a multiple of 8 bytes, not {len(bpf)}")
        self._buffer = ctypes.create_string_buffer(bpf, len(bpf))
        self.fprog = self._SockFprog(len(bpf) // 8, ctypes.cast(self._buffer, ctypes.c_void_p))


def set_parent_death_signal(sig: int = signal.SIGKILL) -> None:
    prctl(PR_SET_PDEATHSIG, int(sig))


# CPU seconds past the CPU-time limit (SIGXCPU) at which the kernel sends SIGKILL, to a program that
# blocked SIGXCPU. Ours: the kernel enforces RLIMIT_CPU on CPU time sampled at each tick, while the
# time a child's rusage reports is its exact run time; the two differ by a few per cent under load
# (2 s limits reported as 1.96-2.01 s here, and below 1.95 s once), so a kill at the limit itself could not be told from
# any other SIGKILL by the time it reports. A second apart, it can (results.classify).
CPU_KILL_AFTER = 1


def confine_child(limits: dict, uid: int | None, own_ipc: bool = False, seccomp=None) -> None:
    """In a freshly forked child, before any untrusted code: its own IPC namespace (``own_ipc``,
    needs root), rlimits, drop to ``uid``, ``no_new_privs``, then the seccomp filter (a
    ``FilterProgram``, or None where it is unavailable).

    ``limits`` holds the ``SandboxLimits`` fields. Raises OSError if a step fails (the caller
    then exits without running the program).
    """
    if own_ipc:  # System V objects and POSIX queues of this program die with it
        unshare(CLONE_NEWIPC)
    nproc = 1 + int(limits["max_processes"])
    if uid is None and limits["max_processes"] > 0:
        nproc = _processes_of(os.getuid()) + int(limits["max_processes"])
    cpu = max(1, math.ceil(limits["cpu_seconds"]))
    memory = int(limits["memory_mb"] * 1024 * 1024)
    for what, value in (
        # SIGXCPU at the limit, which the program can neither catch, ignore, send nor see pending
        # (seccomp.ARGUMENT_RULES): a death by SIGXCPU is the CPU-time limit and nothing else. One
        # that blocks it is killed CPU_KILL_AFTER seconds later (results.classify).
        (resource.RLIMIT_CPU, (cpu, cpu + CPU_KILL_AFTER)),
        (resource.RLIMIT_AS, (memory, memory)),
        (resource.RLIMIT_FSIZE, (int(limits["max_file_bytes"]),) * 2),
        (resource.RLIMIT_NPROC, (nproc, nproc)),  # counts threads too: 1 means no fork, no thread
        (resource.RLIMIT_NOFILE, (64, 64)),
        (resource.RLIMIT_CORE, (0, 0)),
        (resource.RLIMIT_MEMLOCK, (0, 0)),
        (resource.RLIMIT_MSGQUEUE, (0, 0)),
        # queued signals and POSIX timers (each preallocates one) are kernel memory outside
        # RLIMIT_AS; the inherited limit is in the tens of thousands
        (resource.RLIMIT_SIGPENDING, (SIGPENDING, SIGPENDING)),
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
    if seccomp is not None:
        load_seccomp(seccomp)  # last: the steps above use calls it denies (unshare)


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


def kill_descendants(spare: int | None = None) -> None:
    """Kill and reap every descendant of the calling process (a child subreaper, see ``server``)
    but the child ``spare`` (the template) and what it has started.

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
        pids.discard(spare)
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

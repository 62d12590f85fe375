"""The seccomp filter of sandbox children: which system calls a program may not make.

The filter is compiled once, in the caller, by libseccomp (through ``pyseccomp``, a small ctypes
binding to the system's ``libseccomp.so.2`` with the API of libseccomp's own Python bindings).
libseccomp is used rather than hand-written BPF because it knows each architecture's system-call
numbers, rejects calls made through a foreign ABI (x32, i386 ``int 0x80``) and lays the
argument comparisons out correctly; that is exactly the part that is easy to get wrong by hand.
The Debian package ``python3-seccomp`` would bind only the system Python, not a virtual
environment; ``pyseccomp`` is pure Python and installs anywhere ``libseccomp.so.2`` exists
(on Debian it comes with the base system: ``apt`` depends on it).

The compiled program (raw BPF, a few hundred bytes) is handed to the fork servers, which stay
standard-library only; each child loads it with one ``prctl`` after ``no_new_privs`` and before the
program runs (``isolation.load_seccomp``). Where libseccomp or the kernel's seccomp is missing the
sandbox runs without the filter and says so in ``Sandbox.report["seccomp"]``.

The policy is a deny list on top of "allow": an allow list of the system calls CPython may make
would break with each Python and libc release. Every entry says what it stops. Denied calls fail
with ``EPERM`` (``clone3`` with ``ENOSYS``, so that libc falls back to ``clone``, whose flags a
filter can inspect); calls of another architecture's ABI kill the process.

Determinism by construction (issue 37): the calls that read a clock, wait on one or time other
processes (``CLOCK``) fail with ``ETIME`` and those that read entropy (``ENTROPY``) with
``ENODATA``, errors no other call of a child gives, so that a program that lets one escape is
reported as ``refused:clock`` or ``refused:entropy`` (``runner.py``). The clock reads that need
no system call (``rdtsc``, the vDSO) are removed in ``clock.py``.
"""

from __future__ import annotations

import errno
import functools
import signal
import tempfile

# name -> what allowing it would give a program
DENIED = {
    # kernel keyrings outlive the process and are shared per uid (and readable by "possession")
    "add_key": "keys that outlive the program, readable by the next one",
    "keyctl": "reading or linking keyrings (the session keyring is inherited)",
    "request_key": "keys that outlive the program",
    # other processes' memory and state
    "ptrace": "tracing another process",
    "process_vm_readv": "reading another process's memory",
    "process_vm_writev": "writing another process's memory",
    "pidfd_getfd": "stealing another process's file descriptors",
    "kcmp": "probing other processes' kernel objects",
    # mounts and namespaces (the view of the file system and the kernel objects it names)
    "mount": "mounting file systems",
    "umount2": "unmounting the sandbox's mounts",
    "pivot_root": "changing the root",
    "chroot": "changing the root",
    "move_mount": "the new mount API",
    "open_tree": "the new mount API",
    "fsopen": "the new mount API",
    "fsconfig": "the new mount API",
    "fsmount": "the new mount API",
    "fspick": "the new mount API",
    "mount_setattr": "the new mount API",
    "unshare": "new namespaces, user namespaces above all (kernel attack surface)",
    "setns": "entering other namespaces",
    # kernel attack surface that no task needs
    "bpf": "loading BPF programs",
    "perf_event_open": "performance counters (side channels, kernel attack surface)",
    "userfaultfd": "stalling the kernel on page faults (exploit primitive)",
    "io_uring_setup": "io_uring, which performs I/O that seccomp never sees",
    "io_uring_enter": "io_uring",
    "io_uring_register": "io_uring",
    "kexec_load": "replacing the kernel",
    "kexec_file_load": "replacing the kernel",
    "init_module": "loading kernel modules",
    "finit_module": "loading kernel modules",
    "delete_module": "unloading kernel modules",
    "syslog": "reading the kernel log",
    "acct": "process accounting",
    "swapon": "swap",
    "swapoff": "swap",
    "reboot": "reboot",
    "quotactl": "quotas",
    "name_to_handle_at": "file handles (escape a mount by handle)",
    "open_by_handle_at": "file handles (escape a mount by handle)",
    "fanotify_init": "watching the file system",
    "modify_ldt": "segment descriptors (exploit primitive)",
    "uselib": "an obsolete loader",
    "personality": "legacy personalities (READ_IMPLIES_EXEC...)",
    # System V IPC and POSIX message queues: objects that outlive the program and its memory limit
    "shmget": "shared memory that outlives the program and its address-space limit",
    "shmat": "System V shared memory",
    "shmdt": "System V shared memory",
    "shmctl": "System V shared memory",
    "msgget": "message queues that outlive the program",
    "msgsnd": "System V message queues",
    "msgrcv": "System V message queues",
    "msgctl": "System V message queues",
    "semget": "semaphores that outlive the program",
    "semop": "System V semaphores",
    "semtimedop": "System V semaphores",
    "semctl": "System V semaphores",
    "mq_open": "POSIX message queues",
    # the host's shared tables and inodes: the runtime directories are bind mounts of host inodes,
    # and some kernel limits are host-wide; what a program could hold or watch there reaches the
    # host and lets two executions that are compared (determinism replicas) talk to each other
    "io_setup": "AIO contexts count against the host-wide fs.aio-max-nr: the host's own AIO fails",
    "io_destroy": "AIO",
    "io_submit": "AIO",
    "io_cancel": "AIO",
    "io_getevents": "AIO",
    "io_pgetevents": "AIO",
    "inotify_init": "watching host directories (which files the caller opens; a channel between programs)",
    "inotify_init1": "inotify",
    "inotify_add_watch": "inotify",
    "inotify_rm_watch": "inotify",
    "fanotify_mark": "watching the file system",
    "flock": "locks on host inodes of the runtime: blocks host processes, a channel between programs",
    # memory a program could hold outside RLIMIT_AS (measured: python -m populora.sandbox.kmem)
    "vmsplice": "pipe slots that pin user pages after munmap: 4 KiB of a huge page pins 2 MiB (960 MiB held)",
    "memfd_create": "files in memory outside RLIMIT_AS and the scratch tmpfs (one RLIMIT_FSIZE per descriptor)",
    "memfd_secret": "memory outside RLIMIT_AS",
    # sockets of every family: no task needs one (the AST check bans the modules that use them);
    # AF_UNIX buffers (up to net.core.wmem_max each) and descriptors in flight (SCM_RIGHTS) held
    # about 1 GiB of kernel memory with memory_mb=64
    "socket": "IP, vsock, netlink... and AF_UNIX socket buffers of kernel memory",
    "socketpair": "AF_UNIX socket buffers, and descriptors in flight beyond RLIMIT_NOFILE",
    # host-global counters that two executions compared by the determinism check could both move
    # and read (issue 32): a pipe's inode number comes from a host-wide counter kept per CPU, so a
    # program that picks its CPU and makes pipes moves what the next execution reads; a pidfd's
    # inode number counts every process the host starts; sysinfo and statfs read host-wide memory,
    # process and disk figures (the programs' /proc is empty for the same reason: server.py)
    "sched_setaffinity": "choosing a CPU (whose counters the next execution on it reads)",
    "pipe": "pipes: inode numbers from the host-wide per-CPU counter (no task needs one)",
    "pipe2": "pipes, as pipe",
    "pidfd_open": "pidfds: inode numbers that count the host's processes",
    "pidfd_send_signal": "signalling by pidfd",
    "sysinfo": "host-wide memory, swap, load and process counts",
    "statfs": "free blocks and inodes of the host's file systems (the runtime is a bind mount)",
    "fstatfs": "as statfs",
}

# Calls that read a clock, or time something a program does not control (ETIME, ``refused:clock``).
# The vDSO's clock functions are the sandbox's own (clock.py); these are the system calls behind
# them and around them.
CLOCK = {
    "clock_gettime": "the clocks (the vDSO's fallback, and any clock id through syscall())",
    "clock_getres": "the clocks' resolution (no use without them)",
    "gettimeofday": "the wall clock",
    "time": "the wall clock (also the legacy vsyscall page, which the kernel emulates through here)",
    "times": "CPU times and ticks since boot",
    "getrusage": "CPU time, page faults and context switches: a clock and the host's load",
    "adjtimex": "adjtimex(0) reads the time with the kernel's clock discipline",
    "clock_adjtime": "as adjtimex",
    "clock_settime": "setting a clock",
    "settimeofday": "setting the wall clock",
    "timer_create": "POSIX timers: an asynchronous event at a time",
    "timer_settime": "POSIX timers",
    "timer_gettime": "the time left on a timer",
    "timer_getoverrun": "POSIX timers",
    "timer_delete": "POSIX timers",
    "timerfd_create": "timers as descriptors",
    "timerfd_settime": "timers as descriptors",
    "timerfd_gettime": "the time left on a timer",
    "setitimer": "interval timers (SIGALRM/SIGVTALRM/SIGPROF at a time)",
    "getitimer": "the time left on an interval timer",
    "alarm": "SIGALRM at a time, and the seconds left on the last alarm",
    "nanosleep": "sleeping (it writes back the time left when interrupted)",
    "clock_nanosleep": "sleeping, to an absolute time too",
    "select": "waiting with a timeout (Linux writes back the time left); readiness of the output pipes",
    "pselect6": "as select",
    "poll": "waiting with a timeout; readiness of the output pipes (how far the server has read)",
    "ppoll": "as poll (writes back the time left)",
    "epoll_wait": "as poll",
    "epoll_pwait": "as poll",
    "epoll_pwait2": "as poll",
    "rt_sigtimedwait": "waiting for a signal with a timeout",
    "rt_sigpending": "whether SIGXCPU is pending: the CPU-time limit passing, blocked (an event to time)",
    "signalfd": "signals as a descriptor: SIGXCPU, blocked, read as an event",
    "signalfd4": "as signalfd",
}
# A file's or a pipe's timestamps move with every write (fstat(1) after a print reads the clock)
# and a pipe's inode number counts the host's pipes: the stat family is refused, with EPERM, the
# error CPython and libc already treat as "not accessible" (an import of a module the server did
# not preload finds nothing; os.listdir fails, as glibc's opendir calls fstat).
TIMESTAMPS = {
    "stat": "file timestamps (a file written now carries the time)",
    "lstat": "file timestamps",
    "fstat": "file timestamps (a pipe's mtime moves with every write to it) and inode numbers",
    "newfstatat": "file timestamps (glibc's fstat is newfstatat with AT_EMPTY_PATH)",
    "statx": "file timestamps",
}
# Calls that read entropy or which CPU the program runs on (ENODATA, ``refused:entropy``).
ENTROPY = {
    "getrandom": "the kernel's random numbers (no random device exists in a child's root either)",
    "getcpu": "which CPU the scheduler chose",
}
# Calls that read the host's memory state as it is now (EPERM): which pages are in the page cache
# or in memory, on which node. What the host did before a program ran must not change its output.
HOST_STATE = {
    "mincore": "which pages of a file are in the host's page cache (what other processes read)",
    "cachestat": "page-cache statistics of a host file",
    "move_pages": "the NUMA node of each page",
    "get_mempolicy": "the NUMA node of a page",
    "migrate_pages": "moving pages between nodes",
    "rseq": "restartable sequences: the CPU number, and an abort on every preemption",
}
SIGXCPU = int(signal.SIGXCPU)  # 24 on x86-64 and arm64
# Calls refused only with some arguments: (call, conditions, errno name, what it stops); each
# condition is (argument index, mask, value), true when ``argument & mask == value``, or
# (argument index, None, None), true when the argument is not 0. O_NONBLOCK, O_ASYNC, F_SETOWN,
# F_SETSIG, FIONBIO, FIOASYNC, FIONREAD and RWF_NOWAIT would let a program watch the fork server
# drain its output pipe (an event it does not control: a measure of time); PR_SET_TSC would turn
# rdtsc back on and ARCH_MAP_VDSO_* map the real vDSO again (clock.py); wait4 and waitid with a
# rusage pointer read CPU time; CLONE_THREAD is a second thread of control (one thread: the
# program is a sequential computation, with no race to read).
ARGUMENT_RULES = (
    ("fcntl", ((1, 0xFFFFFFFF, 4), (2, 0o4000, 0o4000)), "ETIME", "F_SETFL with O_NONBLOCK"),
    ("fcntl", ((1, 0xFFFFFFFF, 4), (2, 0o20000, 0o20000)), "ETIME", "F_SETFL with O_ASYNC (SIGIO)"),
    ("fcntl", ((1, 0xFFFFFFFF, 8),), "ETIME", "F_SETOWN"),
    ("fcntl", ((1, 0xFFFFFFFF, 10),), "ETIME", "F_SETSIG"),
    ("fcntl", ((1, 0xFFFFFFFF, 15),), "ETIME", "F_SETOWN_EX"),
    ("ioctl", ((1, 0xFFFFFFFF, 0x5421),), "ETIME", "FIONBIO"),
    ("ioctl", ((1, 0xFFFFFFFF, 0x5452),), "ETIME", "FIOASYNC"),
    ("ioctl", ((1, 0xFFFFFFFF, 0x541B),), "ETIME", "FIONREAD (what the server has not read yet)"),
    ("preadv2", ((5, 0x8, 0x8),), "ETIME", "RWF_NOWAIT"),
    ("pwritev2", ((5, 0x8, 0x8),), "ETIME", "RWF_NOWAIT"),
    ("wait4", ((3, None, None),), "ETIME", "a rusage pointer (the children's CPU time)"),
    ("waitid", ((4, None, None),), "ETIME", "a rusage pointer (the children's CPU time)"),
    ("prctl", ((0, 0xFFFFFFFF, 26),), "EPERM", "PR_SET_TSC (rdtsc back on)"),
    ("arch_prctl", ((0, 0xFFFFFFFF, 0x2001),), "EPERM", "ARCH_MAP_VDSO_X32 (the real vDSO back)"),
    ("arch_prctl", ((0, 0xFFFFFFFF, 0x2002),), "EPERM", "ARCH_MAP_VDSO_32"),
    ("arch_prctl", ((0, 0xFFFFFFFF, 0x2003),), "EPERM", "ARCH_MAP_VDSO_64"),
    ("clone", ((0, 0x00010000, 0x00010000),), "EPERM", "CLONE_THREAD (a second thread)"),
    # a CPU-time limit of the program's own choosing: SIGXCPU when it is reached, an event to time
    ("setrlimit", ((0, 0xFFFFFFFF, 0),), "ETIME", "RLIMIT_CPU"),
    ("prlimit64", ((1, 0xFFFFFFFF, 0), (2, None, None)), "ETIME", "setting RLIMIT_CPU"),
    # SIGXCPU is the CPU-time limit's own death (isolation.confine_child): no handler (an event to
    # time) and no SIG_IGN, and no program sends it, so a child killed by it reached the limit
    ("rt_sigaction", ((0, 0xFFFFFFFF, SIGXCPU),), "ETIME", "a SIGXCPU handler or SIG_IGN"),
    ("kill", ((1, 0xFFFFFFFF, SIGXCPU),), "EPERM", "sending SIGXCPU (a CPU-limit death it did not reach)"),
    ("tkill", ((1, 0xFFFFFFFF, SIGXCPU),), "EPERM", "sending SIGXCPU"),
    ("tgkill", ((2, 0xFFFFFFFF, SIGXCPU),), "EPERM", "sending SIGXCPU (raise())"),
    ("rt_sigqueueinfo", ((1, 0xFFFFFFFF, SIGXCPU),), "EPERM", "sending SIGXCPU"),
    ("rt_tgsigqueueinfo", ((2, 0xFFFFFFFF, SIGXCPU),), "EPERM", "sending SIGXCPU"),
)

# fcntl commands denied (fcntl's second argument): record locks, leases and directory notification
# on host inodes, for the reasons of flock and inotify above. Linux values (include/uapi/.../fcntl.h).
FCNTL_DENIED = {
    "F_GETLK": 5,
    "F_SETLK": 6,
    "F_SETLKW": 7,
    "F_OFD_GETLK": 36,
    "F_OFD_SETLK": 37,
    "F_OFD_SETLKW": 38,
    "F_SETLEASE": 1024,
    "F_GETLEASE": 1025,
    "F_NOTIFY": 1026,
    "F_SETPIPE_SZ": 1031,  # pipes stay at the default 64 KiB: 64 descriptors hold at most 2 MiB
}

# clone() flags that create namespaces or a pidfd (the filter checks clone's first argument, flags,
# on x86-64 and arm64 alike); clone3 passes its flags in memory, out of a filter's reach, so it is
# refused with ENOSYS and libc falls back to clone.
CLONE_NAMESPACE_FLAGS = {
    "CLONE_PIDFD": 0x00001000,  # not a namespace: a pidfd, refused as pidfd_open is
    "CLONE_NEWNS": 0x00020000,
    "CLONE_NEWCGROUP": 0x02000000,
    "CLONE_NEWUTS": 0x04000000,
    "CLONE_NEWIPC": 0x08000000,
    "CLONE_NEWUSER": 0x10000000,
    "CLONE_NEWPID": 0x20000000,
    "CLONE_NEWNET": 0x40000000,
    "CLONE_NEWTIME": 0x00000080,
}


class SeccompUnavailable(RuntimeError):
    """libseccomp (or its binding) is missing, or it could not compile the filter."""


@functools.lru_cache(maxsize=1)
def compile_filter(deterministic: bool = True) -> tuple[bytes, tuple[str, ...]]:
    """(raw BPF program of the children's filter, names libseccomp did not know and skipped).

    ``deterministic`` adds the rules of determinism by construction (``TIMESTAMPS``, ``CLOCK``,
    ``ENTROPY``, ``ARGUMENT_RULES``); without them a child keeps its clocks, timers and ``stat``
    (``Sandbox(deterministic=False)``, for evaluation harnesses that time their tests).

    Raises ``SeccompUnavailable`` when the filter cannot be built on this machine.
    """
    try:
        import pyseccomp as sc
    except (ImportError, OSError) as exc:  # OSError: libseccomp.so.2 not found by the binding
        raise SeccompUnavailable(f"pyseccomp/libseccomp not available: {exc}") from None
    try:
        filt = sc.SyscallFilter(sc.ALLOW)  # bad architecture -> KILL (libseccomp's default)
        try:  # a binary tree of the call numbers instead of a chain: the kernel runs the filter over
            filt.set_attr(sc.Attr.CTL_OPTIMIZE, 2)  # every call number when it is loaded (its cache)
        except (OSError, ValueError, RuntimeError):
            pass  # libseccomp older than 2.5: the chain works the same, a little slower to load
        eperm = sc.ERRNO(errno.EPERM)
        unknown = []

        def deny(name: str, *args, action=eperm) -> None:
            try:
                sc.resolve_syscall(sc.Arch.NATIVE, name)
            except (ValueError, OSError, RuntimeError):
                unknown.append(name)  # not a system call of this architecture
                return
            filt.add_rule(action, name, *args)

        for name in DENIED:
            deny(name)
        for name in HOST_STATE:
            deny(name)
        for name in TIMESTAMPS if deterministic else ():
            deny(name)
        for name in CLOCK if deterministic else ():
            deny(name, action=sc.ERRNO(errno.ETIME))
        for name in ENTROPY if deterministic else ():
            deny(name, action=sc.ERRNO(errno.ENODATA))
        for name, conditions, errno_name, _ in ARGUMENT_RULES if deterministic else ():
            args = [sc.Arg(i, sc.NE, 0) if mask is None else sc.Arg(i, sc.MASKED_EQ, mask, value)
                    for i, mask, value in conditions]  # 32-bit arguments are masked to 32 bits
            deny(name, *args, action=sc.ERRNO(getattr(errno, errno_name)))
        for command in FCNTL_DENIED.values():  # the kernel reads cmd as 32 bits: so does the rule
            deny("fcntl", sc.Arg(1, sc.MASKED_EQ, 0xFFFFFFFF, command))
        for flag in CLONE_NAMESPACE_FLAGS.values():
            deny("clone", sc.Arg(0, sc.MASKED_EQ, flag, flag))
        deny("clone3", action=sc.ERRNO(errno.ENOSYS))
        with tempfile.TemporaryFile() as fh:
            filt.export_bpf(fh)
            fh.seek(0)
            bpf = fh.read()
    except (OSError, ValueError, RuntimeError, AttributeError) as exc:
        raise SeccompUnavailable(f"libseccomp could not build the filter: {exc}") from None
    if not bpf or len(bpf) % 8:
        raise SeccompUnavailable(f"libseccomp exported {len(bpf)} bytes, not a BPF program")
    return bpf, tuple(unknown)


def filter_for_servers(deterministic: bool = True) -> dict:
    """What the fork servers need: ``{"bpf": hex, "unknown": [...]}``, or ``{"unavailable": why}``."""
    try:
        bpf, unknown = compile_filter(deterministic)
    except SeccompUnavailable as exc:
        return {"unavailable": str(exc)}
    return {"bpf": bpf.hex(), "unknown": list(unknown)}

"""The template: every child is a copy of one process that never saw a job.

A fork server serves jobs one after the other: it reads chunk headers (ids, sizes), splices bodies,
times children, reads their output, counts garbage collections. If children were forked from it,
each would start with that history in its memory (the server's frames, its free lists, ``gc``'s
counters, timestamps in its locals) and a program could read it: output that depends on how many
jobs, and which, the server ran before, or on when. So right after its start-up (preloads, layout
perturbation, no clock) the server forks the **template**, which from then on does nothing but fork
one child per job, reap it and report its exit status and resource usage, in a loop that leaves
the template exactly as it was (each iteration allocates and frees the same objects in the same
order; nothing is stored). A child's memory at fork is therefore the template's, a function of the
server's configuration and hash seed; the job reaches it afterwards, from the server, over a unix
socket (the body's memfd and the pipes, passed as descriptors; the uid and work directory as a
small JSON payload), and the child tells the server its pid by saying hello on that socket (the
kernel attaches the sender's pid as the server sees it).

Where the server may create PID namespaces (``full`` mode), the template is the init of a PID
namespace of its own, and before each fork it resets the namespace's last pid: every child is pid
2, whose parent is pid 1, so a pid tells nothing of the jobs before it. When a child exits the
template kills whatever else is in its namespace (what the child started) and reaps it before
reporting. Elsewhere the child's pid counts the server's children (``Sandbox.report["pid"]``).

``Sandbox(without=("template",))`` forks each child from the server itself, through the same
hand-over, to measure what the template costs.

Standard library only: the fork server imports it as a top-level module.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import socket
import struct

import isolation

CLONE_NEWPID = 0x20000000
CHILD_PID = 2  # a child's pid inside the template's PID namespace
# the report: wait status (int, 4 bytes padding) then struct rusage (x86-64 and arm64: 144 bytes)
RUSAGE = struct.Struct("<qq qq 14q")  # ru_utime, ru_stime (timeval: sec, usec), then 14 longs
REPORT_SIZE = 8 + RUSAGE.size
# the template's descriptors, at fixed numbers (a child inherits them, then closes them)
GO_FD, SOCKET_FD, REPORT_FD, LAST_PID_FD = 3, 4, 5, 6
P_PID, WEXITED, WNOWAIT = 1, 4, 0x01000000


class TemplateDied(OSError):
    """The template process is gone (its report pipe closed): the server must retire."""


class Template:
    """The server's side: start the template, hand each job to a new child, read its report."""

    def __init__(self, enter, scrub, pid_namespace: bool, forked: bool = True):
        """``enter(sock)`` is what a child runs (it never returns); ``scrub()`` drops, in the
        template, what the server knows that children must not (called once); ``forked`` False
        forks children from the server itself (to measure the template's cost)."""
        self.enter = enter
        self.forked = forked
        self.sock, child_sock = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
        self.report: dict = {"template": "forked from a template" if forked else "forked from the server"}
        self.pid = None
        self.namespace = False  # children live in the template's PID namespace (it sweeps them)
        if not forked:
            self._child_sock = child_sock
            self.report["pid"] = "the server's count of children"
            return
        namespace = pid_namespace and _unshare_pid()
        if pid_namespace and not namespace:  # full mode, whose server sweeps by kill(-1), needs it
            self.forked = False
            self._child_sock = child_sock
            self.report.update(template="forked from the server (no PID namespace for a template)",
                               pid="the server's count of children")
            return
        go_r, self.go = os.pipe()
        self.reports, report_w = os.pipe()
        self.report["pid"] = f"{CHILD_PID} in a PID namespace per server" if namespace else "the server's count of children"
        pid = os.fork()
        if pid == 0:  # the template
            try:
                _become_template(go_r, child_sock.detach(), report_w, namespace, enter, scrub)
            except BaseException as exc:
                os.write(2, f"the template could not start: {exc!r}\n".encode())
            finally:
                os._exit(1)
        self.pid, self.namespace = pid, namespace
        os.close(go_r)
        os.close(report_w)
        child_sock.close()
        ready = self.sock.recv(1 << 10)  # the template says it is ready, or its end closes
        if not ready.startswith(b"ready"):
            raise OSError("the template could not start (see the server's log)")
        if namespace and ready != b"ready pid":
            self.report["pid"] = "counts the children in the template's PID namespace (ns_last_pid refused)"

    def spawn(self, payload: dict, fds: list[int], deadline: float) -> int:
        """Start a child with this job; its pid (as the server sees it) once it has said hello."""
        if self.forked:
            os.write(self.go, b"g")
        else:
            if os.fork() == 0:
                try:
                    self.sock.close()
                    self.enter(self._child_sock.detach())
                finally:
                    os._exit(1)
        socket.send_fds(self.sock, [json.dumps(payload).encode()], fds)
        return self._hello(deadline)

    def _hello(self, deadline: float) -> int:
        import select
        import time

        poller = select.poll()
        poller.register(self.sock, select.POLLIN)
        if self.forked:
            poller.register(self.reports, select.POLLIN)
        left = deadline - time.monotonic()
        ready = [fd for fd, _ in poller.poll(max(left, 0) * 1000)]
        if self.sock.fileno() not in ready:
            raise TemplateDied(0, "the child died before its hello" if ready else "no child said hello")
        _, ancillary, _, _ = self.sock.recvmsg(16, socket.CMSG_SPACE(12))
        for level, kind, data in ancillary:
            if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS:
                return struct.unpack("iII", data[:12])[0]
        raise TemplateDied(0, "the child's hello carried no credentials")

    def held(self, pid: int) -> int | None:
        """A pidfd of the forked child ``pid``, or None when it is gone already (reaped by the
        template: its number may be another process's by now). The pidfd names one process for good,
        so the server can kill the child at its deadline without a number that may have been reused.

        In the template's own PID namespace nothing else can take the number: only this server's
        descendants live in its namespace, and the template forks again only when told to. Without
        that namespace the parent is checked after the pidfd is opened (where ``/proc`` shows it): a
        process shown as the template's child is this one, any other is not."""
        try:
            fd = os.pidfd_open(pid)
        except ProcessLookupError:
            return None
        if self.namespace:
            return fd
        try:
            with open(f"/proc/{pid}/stat") as f:
                parent = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            return fd  # no /proc to ask: the child said hello an instant ago, and is held until it exits
        if parent != self.pid:
            os.close(fd)
            return None
        return fd

    def reaped(self, pid: int) -> tuple[int, tuple]:
        """After the child exited (``exit_fd`` readable): (wait status, rusage fields)."""
        if not self.forked:
            _, status, usage = os.wait4(pid, 0)
            return status, (usage.ru_utime, usage.ru_stime, usage.ru_nvcsw)
        data = b""
        while len(data) < REPORT_SIZE:
            chunk = os.read(self.reports, REPORT_SIZE - len(data))
            if not chunk:
                raise TemplateDied(0, "the template died")
            data += chunk
        status = struct.unpack_from("<i", data, 0)[0]
        fields = RUSAGE.unpack_from(data, 8)
        utime = fields[0] + fields[1] / 1e6
        stime = fields[2] + fields[3] / 1e6
        nvcsw = fields[4 + 12]  # after maxrss, ixrss, idrss, isrss, minflt, majflt, nswap, inblock, oublock, msgsnd, msgrcv, nsignals
        return status, (utime, stime, nvcsw)

    def exit_fd(self, pidfd: int | None) -> int:
        """What becomes readable when the child has exited (and, with a template, been reaped)."""
        return self.reports if self.forked else pidfd

    def close(self) -> None:
        if self.forked:
            os.close(self.go)  # the template reads end of file and exits


def _unshare_pid() -> bool:
    """A new PID namespace for this process's next child (root only); False where refused. The
    server forks nothing after the template, so it never needs its own namespace back."""
    try:
        isolation.unshare(CLONE_NEWPID)
    except OSError:
        return False
    return True


def _last_pid_fd() -> int | None:
    """In the template (PID 1 of its namespace): a descriptor on the namespace's
    ``/proc/sys/kernel/ns_last_pid``, through a procfs mounted for a moment on ``/proc``; None where
    that is refused (a read-only ``/proc/sys``, no capability)."""
    try:
        isolation.mount("proc", "/proc", "proc", isolation.MS_NOSUID | isolation.MS_NODEV | isolation.MS_NOEXEC)
    except OSError:
        return None
    try:
        return os.open("/proc/sys/kernel/ns_last_pid", os.O_WRONLY | os.O_CLOEXEC)
    except OSError:
        return None
    finally:
        isolation.umount("/proc")


def _place(fds: dict[int, int | None]) -> None:
    """Move descriptors to fixed numbers (``{target: current}``) and close every other one above 2."""
    high = {target: fcntl_dup(fd) for target, fd in fds.items() if fd is not None}
    for fd in fds.values():
        if fd is not None:
            os.close(fd)
    for target, fd in high.items():
        os.dup2(fd, target, inheritable=True)
        os.close(fd)
    os.closerange(max(fds) + 1, 1 << 20)


def fcntl_dup(fd: int) -> int:
    import fcntl

    return fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 100)


def _become_template(go: int, sock: int, report: int, namespace: bool, enter, scrub) -> None:
    """The template's life: drop what the server knew, lose the clock, then fork children forever."""
    import sys

    import clock

    scrub()  # the server's configuration (its lane, the scratch path): not a child's business
    sys.argv[:] = []
    sys.orig_argv[:] = []
    last_pid = _last_pid_fd() if namespace else None
    _place({GO_FD: go, SOCKET_FD: sock, REPORT_FD: report, LAST_PID_FD: last_pid})
    clock.remove()
    os.write(SOCKET_FD, b"ready pid" if last_pid is not None else b"ready")
    _loop(namespace, last_pid is not None, enter)


def _loop(namespace: bool, reset_pid: bool, enter) -> None:
    """Fork one child per byte on ``GO_FD`` and report it. Every iteration allocates and frees the
    same objects in the same order and stores nothing, so the template's state (its memory, its
    free lists, ``gc``'s counters) is the same at every fork: children start alike whatever ran
    before them. The report buffer is zeroed once sent."""
    read, write, pwrite, fork = os.read, os.write, os.pwrite, os.fork
    libc = ctypes.CDLL(None)  # no argument types: ints and pointers pass without new objects, and
    wait4, waitid, kill = libc.wait4, libc.waitid, libc.kill  # a failure is a return value
    buf = ctypes.create_string_buffer(REPORT_SIZE)
    status, usage = ctypes.byref(buf), ctypes.byref(buf, 8)
    info = ctypes.byref(ctypes.create_string_buffer(128))  # a siginfo_t, never read
    view, zero, one = memoryview(buf).cast("B"), bytes(REPORT_SIZE), b"1"
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # the server gone: the template goes too
    while read(GO_FD, 1):
        if reset_pid:
            pwrite(LAST_PID_FD, one, 0)  # the next pid is 2
        pid = fork() or enter(SOCKET_FD)  # a child never comes back from enter
        waitid(P_PID, pid, info, WEXITED | WNOWAIT)  # gone, its pid (and group) still held
        # whatever it started: its namespace, or its process group (the server sweeps the rest)
        kill(-1 if namespace else -pid, signal.SIGKILL)
        wait4(pid, status, 0, usage)
        while namespace and wait4(-1, None, 0, None) > 0:  # reaped before the report
            pass
        write(REPORT_FD, view)
        view[:] = zero
        del pid  # freed in the order it was made: the free lists are as they were
    os._exit(0)

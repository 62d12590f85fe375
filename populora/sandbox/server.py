"""The fork server: a clean Python process that forks one confined child per program.

Started by ``executor.Sandbox`` as ``python -B -s -S server.py CONFIG_JSON`` (never forked from
the caller, which may have torch loaded), with a scrubbed environment whose ``PYTHONHASHSEED`` is
the replica's. It pre-imports the modules programs commonly use, then serves requests: a chunk
header (JSON frame: ids and body sizes) followed by the jobs' bodies, run back to back, one forked
child each, one answer per program as soon as it is done (JSON header frame, then the child's raw
result frame and output).

The server never holds a program's text, input or output in its own memory, so nothing of one
job is in the memory of another job's child: each body is moved from the request pipe into a
memfd of its own by ``splice`` (kernel to kernel) and read only by the forked child; the child's
result and output are read into buffers that are passed on by ``writev`` and zeroed right after.
The caller (``results.py``) checks the result frame (token, limits) and builds the outcome.

Supervision of one child: wall-clock deadline (then SIGKILL to every process the child made),
bounded capture of its stdout+stderr and of its result channel, then kill/reap whatever is left
and remove the child's scratch file system (full mode: detach its tmpfs; other modes: remove the
work directory without recursion). A server that cannot clean up after a program (a scratch that
stays mounted or undeletable) says so in that program's answer (``retire``) and exits; the
caller starts a fresh one.

Children are not forked from the server itself but from its template (``template.py``), a
process forked right after the server's start-up that has no clock (``clock.py``), a layout drawn
from the hash seed (``layout.py``) and never sees a job: a child's memory at fork is the same
whatever the server ran before, and the job reaches it over a unix socket.

In ``full`` mode the process started by the caller ("outer") only creates the namespaces, forks the
real server ("inner", PID 1 of the new PID namespace) and waits for it; if the outer process is
killed the inner one gets SIGKILL (parent-death signal) and the kernel kills its whole namespace.
"""

from __future__ import annotations

import sys

sys.path.insert(0, __file__.rsplit("/", 1)[0])  # sibling modules, imported as top-level modules

import gc  # noqa: E402
import io  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import select  # noqa: E402
import signal  # noqa: E402
import time  # noqa: E402

import channels  # noqa: E402
import child  # noqa: E402
import clock  # noqa: E402
import isolation  # noqa: E402
import layout  # noqa: E402
import protocol  # noqa: E402
import runner  # noqa: E402
import scratch  # noqa: E402
import template  # noqa: E402

# What AZR-style programs import (the task environment's allow-list); imported once here so that a
# child's import is a dictionary lookup. Each extra module makes every fork a little dearer.
PRELOAD = (
    "abc array bisect cmath collections collections.abc copy dataclasses decimal enum fractions "
    "functools heapq itertools json keyword math numbers operator re statistics string textwrap "
    "typing unicodedata"
).split()

SETUP_FAILED = child.SETUP_FAILED  # exit code of a child whose confinement failed (the program never ran)
HELLO_SECONDS = 10.0  # ours: a forked child says hello at once; longer means the template is broken
GRACE_SECONDS = 5.0  # ours: how long the template may take to reap a killed child and report
# ours: a result frame and the output travel in one answer the caller reads up to
# protocol.MAX_CONTROL_FRAME bytes each; 1 MiB of room below it for the headers
MAX_RESULT_BYTES = protocol.MAX_CONTROL_FRAME - (1 << 20)


class Server:
    def __init__(self, config: dict, mode: str, report: dict, req: int):
        self.limits = config["limits"]
        self.mode = mode
        self.report = report
        # each program runs as a uid of its own, drawn per program from this range: nothing the
        # kernel counts per user (queued signals, descriptors in flight, pipe buffers) carries over
        self.uids = tuple(config["uids"]) if mode in ("full", "uid") else None
        self.req = req  # watched during each program: a hang-up means the caller is gone
        self.name = f"lane{config['lane']}-replica{config['replica']}"  # servers may share a scratch root
        self.scratch_root = config["scratch"]
        self.scratch_bytes = max(16 << 20, 8 * int(self.limits["max_file_bytes"]))
        self.own_ipc = mode == "full" and "ipc_namespace" not in config.get("without", ())
        self.tmpfs = mode == "full" and "scratch_tmpfs" not in config.get("without", ())
        if mode == "full" and not self.tmpfs:
            # only when measuring that layer's cost: one tmpfs per server, a directory per job
            flags = isolation.MS_NOSUID | isolation.MS_NODEV
            isolation.mount(
                "tmpfs", isolation.WORK_DIR, "tmpfs", flags, f"size={self.scratch_bytes},mode=711"
            )
            self.scratch_root = isolation.WORK_DIR
        self.res, self.out = channels.Capture(), channels.Capture()
        bpf = config.get("seccomp", {}).get("bpf")
        self.seccomp = isolation.FilterProgram(bytes.fromhex(bpf)) if bpf else None
        self.template: template.Template | None = None  # started by serve() once the server is ready
        self.namespaced = False  # children are PID 1's children in a PID namespace of the template's

    # --- one program -------------------------------------------------------------------
    def run(self, job: dict, body: int) -> tuple[dict, memoryview, memoryview, str | None]:
        """Run the job whose body is in the memfd ``body``: (answer header, result bytes, output
        bytes, why this server must retire or None). The two views are zeroed by the caller."""
        uid = None
        if self.uids is not None:  # drawn by the caller from the job and the seed (executor.job_uid)
            base, span = self.uids
            uid = int(job["uid"])
            if not base <= uid < base + span:
                raise ValueError(f"uid {uid} outside the children's range")
        if self.tmpfs:
            workdir = isolation.WORK_DIR
            isolation.mount_scratch(uid, self.scratch_bytes)
        else:  # a random name, not a counter: a program learns nothing of the jobs before it
            workdir = os.path.join(self.scratch_root, f"{self.name}-job-{os.urandom(8).hex()}")
            os.mkdir(workdir, 0o700)
            if uid is not None:
                os.chown(workdir, uid, uid)
        r_res, w_res = os.pipe()
        r_out, w_out = os.pipe()
        # one byte here, written by the child once its setup is over and before the program runs:
        # a child that exits with SETUP_FAILED without it never ran the program (results.classify)
        r_setup, w_setup = os.pipe2(os.O_NONBLOCK)
        start = time.monotonic()
        pid = pidfd = None
        reaped = False
        retire = None
        try:
            try:
                pid = self.template.spawn({"uid": uid, "workdir": workdir}, [body, w_res, w_out, w_setup],
                                          start + HELLO_SECONDS)
            finally:
                os.close(w_res)
                os.close(w_out)
                os.close(w_setup)
            # a pidfd: the child's exit (no template), or a handle to kill it by at the deadline
            pidfd = self.template.held(pid) if self.template.forked else os.pidfd_open(pid)
            answer, res, out = self._supervise(job, pid, pidfd, r_res, r_out, start)
            reaped = True  # the child's pid may be another process's from here on
            try:
                answer["setup_done"] = os.read(r_setup, 1) == b"1"
            except BlockingIOError:
                answer["setup_done"] = False
        finally:
            if pid is not None:
                self._kill_rest(pid, group=not reaped)
            if pidfd is not None:
                os.close(pidfd)
            os.close(r_res)
            os.close(r_out)
            os.close(r_setup)
            if self.tmpfs:
                if not isolation.unmount_scratch():
                    retire = "the program's scratch tmpfs could not be detached"
            elif not scratch.remove_tree(workdir):
                retire = f"the work directory {workdir} could not be removed"
        answer["id"] = job["id"]
        return answer, res, out, retire

    def forget(self, config: dict) -> None:
        """In the template: drop what differs between servers of one seed (the lane, the sandbox's
        scratch path, a random name): the server knows it, its children must not."""
        for key in ("scratch", "lane", "replica"):
            config.pop(key, None)
        self.name = self.scratch_root = None

    def enter(self, sock: int) -> None:
        """A new child (forked from the template): say hello, take the job, run it. Never returns."""
        try:
            import socket

            conn = socket.socket(fileno=sock)
            conn.send(b"h")  # the kernel attaches our pid as the server sees it
            payload, fds = socket.recv_fds(conn, 1 << 16, 4)[:2]  # not the sender's (autobound) address
            conn.detach()
            body, w_res, w_out, w_setup = fds
            job = json.loads(payload)
        except BaseException:
            os._exit(SETUP_FAILED)
        self._child(body, job["workdir"], w_res, w_out, w_setup, job["uid"])

    def _child(self, body: int, workdir: str, w_res: int, w_out: int, w_setup: int, uid: int | None) -> None:
        try:
            # Own process group, in the server's session (which has no controlling terminal). Not
            # setsid(): with scheduler autogroups it costs ~2 ms and gives each child its own CPU share.
            os.setpgid(0, 0)
            for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGCHLD, signal.SIGALRM, signal.SIGXCPU):
                signal.signal(sig, signal.SIG_DFL)
            # SIGXCPU kills at the CPU-time limit (isolation.confine_child), whatever mask was inherited
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGXCPU})
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # over RLIMIT_FSIZE: OSError, not a kill
            job = json.loads(channels.read_memfd(body).decode("utf-8", "surrogatepass"))
            stdin = job.get("stdin") or ""
            if stdin:
                fd = os.memfd_create("stdin")
                protocol.write_all(fd, stdin.encode("utf-8", "surrogatepass"))
                os.lseek(fd, 0, os.SEEK_SET)
            else:
                fd = os.open("/dev/null", os.O_RDONLY)
            os.dup2(fd, 0)
            os.dup2(w_out, 1)
            os.dup2(w_out, 2)
            os.dup2(w_res, 3)
            os.dup2(w_setup, 4)
            os.closerange(5, 1 << 20)  # the caller's pipes, the other jobs' memfds, everything else
            os.chdir(workdir)
            isolation.confine_child(self.limits, uid, self.own_ipc, self.seccomp)
            out = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), "utf-8", "backslashreplace")
            err = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), "utf-8", "backslashreplace")
            sys.stdin = sys.__stdin__ = io.TextIOWrapper(io.FileIO(0, "r", closefd=False), "utf-8", "replace")
            sys.stdout = sys.__stdout__ = out
            sys.stderr = sys.__stderr__ = err
            sys.argv = ["<program>"]
        except BaseException as exc:  # reported through the output pipe when it is in place
            try:
                os.write(2, f"sandbox setup failed: {exc!r}"[:300].encode())
            finally:
                os._exit(SETUP_FAILED)
        # Captured now: the program may rebind these names, not these objects.
        finish = child.make_finish(job["token"], out, err)
        source, entry, calls = job["source"], job.get("entry"), job.get("calls") or []
        del job  # the program's frame walk finds its own inputs only, and not twice
        finish(runner.execute(source, entry, calls, int(self.limits["max_output_chars"]),
                              child.make_before_run()))

    def _supervise(self, job: dict, pid: int, pidfd: int | None, r_res: int, r_out: int, start: float):
        limits = self.limits
        deadline = start + float(limits["wall_seconds"])
        # the largest frame the limits allow, but never more than the caller accepts in one answer:
        # a larger result is output_too_large (results.classify), not a broken pipe
        res_cap = min(4096 + int(job["calls"]) * (4 * int(limits["max_output_chars"]) + 8), MAX_RESULT_BYTES)
        out_cap = 4 * int(limits["max_stdout_chars"]) + 4
        res, out = self.res.reset(res_cap), self.out.reset(out_cap)
        exit_fd = self.template.exit_fd(pidfd)  # readable once the child is gone
        poller = select.poll()
        # The result frame is read once the child has exited, saving a wake-up per program, when
        # the pipe can hold the largest frame the limits allow (else it is read as it comes).
        watched = (
            (r_out, exit_fd) if channels.pipe_capacity(r_res, res_cap) >= res_cap else (r_res, r_out, exit_fd)
        )
        for fd in watched:
            poller.register(fd, select.POLLIN)
        # No request is pending while a chunk runs (the caller sends the next one after the last
        # answer), so any event here is the caller hanging up: stop at once, leave nothing behind.
        poller.register(self.req, 0)
        open_pipes = {r_res, r_out}
        exited = timed_out = False
        drain_until = 0.0
        while not (exited and not open_pipes):
            left = (drain_until if exited else deadline) - time.monotonic()
            if left <= 0:
                timed_out = not exited
                break  # a drain that outlives its second: whatever still writes is killed
            for fd, _ in poller.poll(left * 1000):
                if fd == self.req:
                    raise channels.CallerGone
                if fd == exit_fd:
                    exited = True
                    poller.unregister(exit_fd)
                    self._kill_rest(pid, reap_child=False)  # anything it left holding the pipes
                    drain_until = time.monotonic() + 1.0
                    if r_res not in watched:
                        poller.register(r_res, select.POLLIN)
                    continue
                if not (res if fd == r_res else out).read_from(fd):
                    poller.unregister(fd)
                    open_pipes.discard(fd)
        if timed_out and self.template.forked:  # by its pidfd: the template may have reaped it
            if pidfd is not None:  # by now; the template kills its group before reaping it
                try:
                    signal.pidfd_send_signal(pidfd, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        elif timed_out:  # this server's child, alive (unreaped): its pid and group are its own
            for target in (pid, -pid):
                try:
                    os.kill(target, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
        if self.template.forked and not exited:  # the template reports once it has reaped the child
            poller = select.poll()
            poller.register(exit_fd, select.POLLIN)
            if not poller.poll(1000 * GRACE_SECONDS):
                raise template.TemplateDied(0, "the template did not report a killed child")
        status, (utime, stime, nvcsw) = self.template.reaped(pid)
        too_large = res.overflow and res.cap == MAX_RESULT_BYTES
        if too_large:
            res.wipe()  # not sent: the caller reports output_too_large from the flag alone
        answer = {
            "seconds": time.monotonic() - start,
            "cpu": utime + stime,
            # voluntary context switches: 0 means the child never blocked (results.starved)
            "nvcsw": nvcsw,
            "timed_out": timed_out,
            "signal": os.WTERMSIG(status) if os.WIFSIGNALED(status) else None,
            "exit": os.WEXITSTATUS(status) if os.WIFEXITED(status) else None,
            "res_overflow": res.overflow,
            "res_too_large": too_large,
            "res": res.size,
            "out": out.size,
        }
        return answer, res, out

    def _kill_rest(self, pid: int, reap_child: bool = True, group: bool = True) -> None:
        """SIGKILL every process the program made, the child included.

        With ``reap_child`` also reap them all (after the child's own ``wait4``); without, only
        kill, so that the child's exit status is still there to be read. In a PID namespace of the
        template's, the template kills and reaps them before it reports.

        A process group is signalled by the child's pid only while that pid is held (``group``: the
        child is alive or a zombie): once it is reaped the number may belong to another program's
        child (pids are reused, soon on a host with pid_max 32768 under load), which a ``killpg``
        would kill. Its group was killed before it was reaped (on its exit, or at the deadline); what
        escaped the group comes to this server, a subreaper, and is found by walking its children.
        """
        if self.namespaced:
            return
        if self.template.forked:  # the template killed the child's group before reaping it (a pid
            # it reaped may be another process's now: no killpg here); what left the group comes,
            # orphaned, to this server (a subreaper)
            isolation.kill_descendants(spare=self.template.pid)
            return
        if self.mode == "full":  # PID 1: every other process is the program's
            try:
                os.kill(-1, signal.SIGKILL)
            except ProcessLookupError:
                pass
            if not reap_child:
                return
            while True:
                try:
                    os.waitpid(-1, 0)
                except ChildProcessError:
                    return
        if group:
            try:
                os.killpg(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        if reap_child:  # orphans come to this server (a subreaper), never to the template
            isolation.kill_descendants(spare=self.template.pid)


def answer_one(server: Server, job: dict, body: int, resp: int) -> bool:
    """Run one job and send its answer; False when the server must retire.

    Every per-job value (the answer header: sizes, CPU time, exit status; the views of the
    result and output) lives in this frame, which has returned before the next child is forked,
    and the two capture buffers are wiped: a program that walks up to the server's frames finds
    nothing of the job before it.
    """
    res = out = None
    try:
        answer, res, out, retire = server.run(job, body)
    except channels.CallerGone:
        raise
    except Exception as exc:  # a server-side failure: this program's crash, and we retire
        answer = {"id": job.get("id"), "error": repr(exc)[:300], "res": 0, "out": 0}
        retire = f"server error: {exc!r}"[:300]
    answer["retire"] = retire
    head = json.dumps(answer, separators=(",", ":")).encode()
    parts = [protocol.HEADER.pack(len(head)) + head]
    if res is not None:
        parts += [res.view(), out.view()]
    try:
        protocol.writev_all(resp, parts)
    finally:
        del parts
        server.res.wipe()
        server.out.wipe()
    return not retire


def serve(config: dict, mode: str, report: dict, req: int, resp: int, mappings) -> None:
    seed = int(os.environ.pop("PYTHONHASHSEED", "0") or 0)  # already drawn; children need no copy
    os.environ.pop(layout.PAD_VARIABLE, None)
    os.environ.pop("GLIBC_TUNABLES", None)
    without = config.get("without", ())
    deterministic = config.get("deterministic", True)
    if not deterministic:  # an evaluation harness's sandbox: clocks and entropy stay (executor.Sandbox)
        without = (*without, "clock")
    report["layout"] = layout.perturb_mappings(seed) if "layout" not in without else "left out"
    layout.fix_exec_random(seed)
    for name in PRELOAD:
        try:
            __import__(name)
        except ImportError:
            report.setdefault("not_preloaded", []).append(name)
    if "layout" not in without:
        report["layout"].update(layout.perturb_objects(seed))
    if deterministic:
        _seed_random(seed)
    report["clock"] = clock.prepare(mappings) if "clock" not in without else "left out"
    server = Server(config, mode, report, req)
    report["seccomp"] = (
        "loaded in every child"
        if server.seccomp
        else config.get("seccomp", {}).get("unavailable", "not requested")
    )
    gc.freeze()  # children's collections then skip the server's objects (fewer copy-on-write pages)
    server.template = template.Template(
        server.enter, lambda: server.forget(config),
        pid_namespace=mode == "full", forked="template" not in without)
    server.namespaced = server.template.namespace
    report.update(server.template.report)
    protocol.write_json(resp, {"ready": True, "mode": mode, "report": report, "pid": os.getpid()})
    while True:
        header = protocol.read_json(req)
        if header is None:  # the caller closed the pipe or died
            return
        bodies = []
        try:
            for job in header["jobs"]:  # every body into its own memfd before any program runs
                try:
                    bodies.append(channels.take_body(req, int(job["size"])))
                except channels.CallerGone:
                    return  # the caller died while sending: nothing runs
            for job, body in zip(header["jobs"], bodies):  # back to back, one answer each, in order
                try:
                    if not answer_one(server, job, body, resp):
                        return  # damaged: the caller starts a fresh server
                except channels.CallerGone:
                    return  # run() has killed the program; in full mode our exit ends the namespace
        finally:
            for fd in bodies:
                os.close(fd)


def _seed_random(seed: int) -> None:
    """``random``'s global generator from the hash seed, in the server and in every child: the
    module re-seeds it after each fork with ``Random.seed()``'s default argument, which is made the
    seed instead of ``None`` (entropy)."""
    import random

    random.Random.seed.__defaults__ = (seed, 2)
    random.seed()


def main(argv: list[str]) -> int:
    # Slurm's preemption signal reaches every process of a job step; it is the trainer's to handle
    # (populora/signals.py). Started with it blocked; ignored from here on, by programs too.
    signal.signal(signal.SIGUSR2, signal.SIG_IGN)
    config = json.loads(argv[1])
    req, resp = os.dup(0), os.dup(1)
    null = os.open("/dev/null", os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    os.close(null)
    wanted = config["isolation"]
    try:  # read while /proc is still the host's (the inner server's is empty)
        mappings = clock.special_mappings()
    except OSError:
        mappings = None
    report: dict = {}
    mode = "rlimits"
    if wanted in ("auto", "full") and isolation.is_root():
        try:
            needed = isolation.runtime_paths()
            devices = isolation.DEVICES + (() if config.get("deterministic", True) else isolation.RANDOM_DEVICES)
            report = isolation.enter_namespaces(bool(config["limits"]["network"]), needed, devices)
            mode = "full"
        except isolation.NamespacesUnavailable as exc:
            report = {"namespaces_failed": str(exc)}
        except OSError as exc:  # half set up: serving from here would be neither mode
            error = f"full isolation setup failed after creating the namespaces: {exc}; use isolation='uid'"
            protocol.write_json(resp, {"ready": False, "error": error})
            return 2
    if mode != "full" and wanted == "full":
        protocol.write_json(resp, {"ready": False, "error": f"full isolation unavailable: {report}"})
        return 2
    if mode != "full" and wanted in ("auto", "uid") and isolation.is_root():
        mode = "uid"
    if mode != "full":
        isolation.prctl(isolation.PR_SET_CHILD_SUBREAPER, 1)
        serve(config, mode, report, req, resp, mappings)
        return 0
    lifeline_r, lifeline_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # PID 1 of the new namespace
        os.close(lifeline_w)
        isolation.set_parent_death_signal()
        os.set_blocking(lifeline_r, False)
        try:
            if os.read(lifeline_r, 1) == b"":
                os._exit(0)  # the outer process died before the death signal was armed
        except BlockingIOError:
            pass
        if "hidden_proc" in config.get("without", ()):
            report["proc"] = isolation.mount_private_proc()
        else:  # programs see an empty /proc: no host-wide counters (stat, meminfo, inode numbers)
            report["proc"] = "hidden"
        serve(config, mode, report, req, resp, mappings)
        os._exit(0)
    os.close(lifeline_r)
    os.close(req)
    os.close(resp)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status) & 0xFF


if __name__ == "__main__":
    sys.exit(main(sys.argv))

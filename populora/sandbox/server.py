"""The fork server: a clean Python process that forks one confined child per program.

Started by ``executor.Sandbox`` as ``python -B -s -S server.py CONFIG_JSON`` (never forked from
the caller, which may have torch loaded), with a scrubbed environment whose ``PYTHONHASHSEED`` is
the replica's. It pre-imports the modules programs commonly use, then serves requests: each is a
chunk of programs (JSON frame on stdin) run back to back, one forked child each, one answer (JSON
frame on stdout) per program as soon as it is done.

Supervision of one child: wall-clock deadline (then SIGKILL to every process the child made),
bounded capture of its stdout+stderr, a result channel read as one strict frame carrying a random
per-child token, then kill/reap whatever is left and remove the child's work directory.

In ``full`` mode the process started by the caller ("outer") only creates the namespaces, forks the
real server ("inner", PID 1 of the new PID namespace) and waits for it; if the outer process is
killed the inner one gets SIGKILL (parent-death signal) and the kernel kills its whole namespace.
"""

from __future__ import annotations

import sys

sys.path.insert(0, __file__.rsplit("/", 1)[0])  # sibling modules, imported as top-level modules

import fcntl  # noqa: E402
import gc  # noqa: E402
import io  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import select  # noqa: E402
import shutil  # noqa: E402
import signal  # noqa: E402
import time  # noqa: E402

import isolation  # noqa: E402
import protocol  # noqa: E402
import runner  # noqa: E402

# What AZR-style programs import (the task environment's allow-list); imported once here so that a
# child's import is a dictionary lookup. Each extra module makes every fork a little dearer.
PRELOAD = (
    "abc array bisect cmath collections collections.abc copy dataclasses decimal enum fractions "
    "functools heapq itertools json keyword math numbers operator re statistics string textwrap "
    "typing unicodedata"
).split()

SETUP_FAILED = 121  # exit code of a child whose confinement failed (the program never ran)
STATUSES = {"ok", "error", "memory", "output_too_large", "crashed"}


class CallerGone(Exception):
    """The caller's end of the request pipe closed while a program ran (the caller died)."""


class Server:
    def __init__(self, config: dict, mode: str, report: dict, req: int):
        self.limits = config["limits"]
        self.mode = mode
        self.report = report
        self.uid = config.get("uid") if mode in ("full", "uid") else None
        self.work_root = isolation.WORK_ROOT if mode == "full" else config["scratch"]
        self.req = req  # watched during each program: a hang-up means the caller is gone
        self.seq = 0
        self.name = f"lane{config['lane']}-replica{config['replica']}"  # servers may share a scratch root

    # --- one program -------------------------------------------------------------------
    def run(self, job: dict) -> dict:
        self.seq += 1
        workdir = os.path.join(self.work_root, f"{self.name}-job{self.seq}")
        os.mkdir(workdir, 0o700)
        if self.uid is not None:
            os.chown(workdir, self.uid, self.uid)
        token = os.urandom(16).hex()
        r_res, w_res = os.pipe()
        r_out, w_out = os.pipe()
        start = time.monotonic()
        pid = os.fork()
        if pid == 0:
            try:
                self._child(job, workdir, token, w_res, w_out)  # ends in os._exit
            finally:
                os._exit(SETUP_FAILED + 2)
        os.close(w_res)
        os.close(w_out)
        try:
            outcome = self._supervise(job, pid, token, r_res, r_out, start)
        finally:
            self._kill_rest(pid)
            os.close(r_res)
            os.close(r_out)
            shutil.rmtree(workdir, ignore_errors=True)
        outcome["id"] = job["id"]
        return outcome

    def _child(self, job: dict, workdir: str, token: str, w_res: int, w_out: int) -> None:
        try:
            # Own process group, in the server's session (which has no controlling terminal). Not
            # setsid(): with scheduler autogroups it costs ~2 ms and gives each child its own CPU share.
            os.setpgid(0, 0)
            for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGCHLD, signal.SIGALRM):
                signal.signal(sig, signal.SIG_DFL)
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # over RLIMIT_FSIZE: OSError, not a kill
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
            os.closerange(4, 1 << 20)  # the caller's pipes, the other pipe ends, everything else
            os.chdir(workdir)
            isolation.confine_child(self.limits, self.uid)
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
        finish = _make_finish(token, out, err)
        result = runner.execute(
            job["source"], job.get("entry"), job.get("calls") or [], int(self.limits["max_output_chars"])
        )
        finish(result)

    def _supervise(self, job: dict, pid: int, token: str, r_res: int, r_out: int, start: float) -> dict:
        limits = self.limits
        deadline = start + float(limits["wall_seconds"])
        n_calls = len(job.get("calls") or [])
        res_cap = 4096 + n_calls * (4 * int(limits["max_output_chars"]) + 8)
        out_cap = 4 * int(limits["max_stdout_chars"]) + 4
        res, out = bytearray(), bytearray()
        res_overflow = False
        pidfd = os.pidfd_open(pid)
        poller = select.poll()
        # The result frame is read once the child has exited, saving a wake-up per program, when
        # the pipe can hold the largest frame the limits allow (else it is read as it comes).
        watched = (r_out, pidfd) if _pipe_capacity(r_res, res_cap) >= res_cap else (r_res, r_out, pidfd)
        for fd in watched:
            poller.register(fd, select.POLLIN)
        # No request is pending while a chunk runs (the caller sends the next one after the last
        # answer), so any event here is the caller hanging up: stop at once, leave nothing behind.
        poller.register(self.req, 0)
        open_pipes = {r_res, r_out}
        exited = timed_out = False
        drain_until = 0.0
        try:
            while not (exited and not open_pipes):
                left = (drain_until if exited else deadline) - time.monotonic()
                if left <= 0:
                    timed_out = not exited
                    break  # a drain that outlives its second: whatever still writes is killed
                for fd, _ in poller.poll(left * 1000):
                    if fd == self.req:
                        raise CallerGone
                    if fd == pidfd:
                        exited = True
                        poller.unregister(pidfd)
                        self._kill_rest(pid, reap_child=False)  # anything it left holding the pipes
                        drain_until = time.monotonic() + 1.0
                        if r_res not in watched:
                            poller.register(r_res, select.POLLIN)
                        continue
                    data = os.read(fd, 1 << 16)
                    if not data:
                        poller.unregister(fd)
                        open_pipes.discard(fd)
                    elif fd == r_res:
                        res_overflow |= len(res) + len(data) > res_cap
                        if not res_overflow:
                            res += data
                    elif len(out) < out_cap:
                        out += data[: out_cap - len(out)]
        finally:
            os.close(pidfd)
        if timed_out:
            os.kill(pid, signal.SIGKILL)
        _, status, usage = os.wait4(pid, 0)
        seconds = time.monotonic() - start
        stdout = out.decode("utf-8", "replace")[: int(limits["max_stdout_chars"])]
        outcome = {"stdout": stdout, "seconds": seconds, "values": [], "detail": ""}
        cpu = usage.ru_utime + usage.ru_stime
        if timed_out:
            return outcome | {
                "status": "timeout",
                "reason": "timeout",
                "detail": f"wall-clock limit of {limits['wall_seconds']} s",
            }
        if os.WIFSIGNALED(status):
            sig = os.WTERMSIG(status)
            if sig == signal.SIGXCPU or (sig == signal.SIGKILL and cpu >= int(limits["cpu_seconds"]) - 0.05):
                return outcome | {
                    "status": "timeout",
                    "reason": "timeout",
                    "detail": f"CPU-time limit of {limits['cpu_seconds']} s",
                }
            try:
                name = signal.Signals(sig).name
            except ValueError:
                name = f"signal{sig}"
            return outcome | {"status": "crashed", "reason": f"crashed:{name}", "detail": f"killed by {name}"}
        code = os.WEXITSTATUS(status)
        if code == SETUP_FAILED and not res:
            return outcome | {
                "status": "crashed",
                "reason": "crashed:setup_failed",
                "stdout": "",
                "detail": f"the child could not be confined; the program did not run: {stdout}",
            }
        if code != 0 or not res:
            detail = "exited without a result" + (f" (exit status {code})" if code else " (exit status 0)")
            return outcome | {"status": "crashed", "reason": f"crashed:exit_{code}", "detail": detail}
        checked = _check_result(bytes(res), res_overflow, token, job, limits)
        return outcome | checked

    def _kill_rest(self, pid: int, reap_child: bool = True) -> None:
        """SIGKILL every process the program made, the child included.

        With ``reap_child`` also reap them all (after the child's own ``wait4``); without, only
        kill, so that the child's exit status is still there to be read.
        """
        if self.mode == "full":
            try:
                os.kill(-1, signal.SIGKILL)  # PID 1 of the namespace: every other process in it
            except ProcessLookupError:
                pass
            if not reap_child:
                return
            while True:
                try:
                    os.waitpid(-1, 0)
                except ChildProcessError:
                    return
        else:
            try:
                os.killpg(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            if reap_child:
                isolation.kill_descendants()


def _pipe_capacity(fd: int, wanted: int) -> int:
    """Grow a pipe's buffer towards ``wanted`` bytes (Linux F_SETPIPE_SZ); its capacity after."""
    try:
        return fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, min(max(wanted, 4096), 1 << 20))
    except (OSError, AttributeError):
        return 0


def _make_finish(token: str, out, err):
    """The child's last act, built before the program runs: block signals, stop interval timers,
    flush the program's output, send the one result frame on fd 3, leave with ``os._exit`` (no
    ``atexit`` handler or finalizer of the program runs after it). A program that breaks any of
    this only spoils its own outcome (``crashed:``); the server checks the frame against the limits.
    """
    write, exit_, pack = os.write, os._exit, protocol.pack_fields
    setitimer, sigmask = signal.setitimer, signal.pthread_sigmask
    timers = (signal.ITIMER_REAL, signal.ITIMER_VIRTUAL, signal.ITIMER_PROF)
    everything = set(signal.Signals) - {signal.SIGKILL, signal.SIGSTOP}

    def finish(result) -> None:
        try:
            sigmask(signal.SIG_BLOCK, everything)
            for timer in timers:
                setitimer(timer, 0)
        except BaseException:
            pass
        for stream in (out, err):
            try:
                stream.flush()
            except BaseException:
                pass
        try:
            status, reason, values, detail = result
            frame = pack([token, status, reason, detail, *values])
            view = memoryview(frame)
            while view:
                view = view[write(3, view) :]
        except BaseException:
            exit_(SETUP_FAILED + 1)
        exit_(0)

    return finish


def _check_result(buf: bytes, overflow: bool, token: str, job: dict, limits: dict) -> dict:
    """The child's frame, trusted only if it is well formed, carries the token and makes sense."""
    bad = {"status": "crashed", "reason": "crashed:bad_result"}
    if overflow:
        return bad | {"detail": "result channel over its size limit"}
    try:
        fields = protocol.unpack_fields(buf)
    except protocol.FrameError as exc:
        return bad | {"detail": f"malformed result channel: {exc}"[:300]}
    if len(fields) < 4 or fields[0] != token:
        return bad | {"detail": "result frame without the child's token"}
    status, reason, detail, values = fields[1], fields[2], fields[3], fields[4:]
    expected = len(job.get("calls") or []) if job.get("entry") is not None else 0
    limit = int(limits["max_output_chars"])
    if status not in STATUSES or (status == "ok") != (reason == ""):
        return bad | {"detail": f"impossible status {status!r}/{reason!r}"[:300]}
    if status == "ok" and (len(values) != expected or any(len(v) > limit for v in values)):
        return bad | {"detail": "result values do not match the calls or the limits"}
    if status != "ok" and values:
        return bad | {"detail": "values with a failure"}
    return {"status": status, "reason": reason or None, "values": values, "detail": detail[:300]}


def serve(config: dict, mode: str, report: dict, req: int, resp: int) -> None:
    for name in PRELOAD:
        try:
            __import__(name)
        except ImportError:
            report.setdefault("not_preloaded", []).append(name)
    gc.freeze()  # children's collections then skip the server's objects (fewer copy-on-write pages)
    os.environ.pop("PYTHONHASHSEED", None)  # the hash secret is already drawn; children need no copy
    server = Server(config, mode, report, req)
    protocol.write_json(resp, {"ready": True, "mode": mode, "report": report, "pid": os.getpid()})
    while True:
        message = protocol.read_json(req)
        if message is None:  # the caller closed the pipe or died
            return
        for job in message["jobs"]:  # back to back, one answer each, in order
            try:
                answer = server.run(job)
            except CallerGone:
                return  # run() has killed the program; in full mode our exit ends the namespace
            except Exception as exc:  # a server-side failure is this program's crash, not the server's end
                answer = {
                    "id": job.get("id"),
                    "status": "crashed",
                    "reason": "crashed:server_error",
                    "values": [],
                    "stdout": "",
                    "seconds": 0.0,
                    "detail": repr(exc)[:300],
                }
            protocol.write_json(resp, answer)


def main(argv: list[str]) -> int:
    config = json.loads(argv[1])
    req, resp = os.dup(0), os.dup(1)
    null = os.open("/dev/null", os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    os.close(null)
    wanted = config["isolation"]
    report: dict = {}
    mode = "rlimits"
    if wanted in ("auto", "full") and isolation.is_root():
        needed = sorted({sys.base_prefix, sys.base_exec_prefix, os.path.dirname(os.path.abspath(__file__))})
        work_bytes = max(16 << 20, 8 * int(config["limits"]["max_file_bytes"]))
        try:
            report = isolation.enter_namespaces(bool(config["limits"]["network"]), needed, work_bytes)
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
        serve(config, mode, report, req, resp)
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
        report["proc"] = isolation.mount_private_proc()
        serve(config, mode, report, req, resp)
        os._exit(0)
    os.close(lifeline_r)
    os.close(req)
    os.close(resp)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status) & 0xFF


if __name__ == "__main__":
    sys.exit(main(sys.argv))

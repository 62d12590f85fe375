"""``Sandbox``: parallel, confined execution of untrusted programs through fork servers.

The caller side holds ``workers`` lanes; each lane owns one fork server per hash seed in use,
started on first use as a separate ``python -B -s -S server.py`` process, without address-space
randomisation, with a scrubbed environment holding that ``PYTHONHASHSEED`` (not ``-I``: it implies
``-E``, which would ignore the seed) and the layout padding drawn from it (``layout.py``), so
servers of different seeds differ in hash seed and address layout, and servers of one seed agree.
A program's seed is its ``hash_seed`` or, without one, its replica's fixed seed; the servers of a
replica's fixed seed live as long as the sandbox, those of an explicit seed only until a batch
that does not use it (the determinism check draws fresh seeds each step: ``tasks/determinism.py``).
Everything a job carries to its child (its uid, its result token) is a function of the job and the
seed. ``run_many`` hands the lanes chunks of one server's programs from a shared queue, so at most ``workers`` programs run at once, and
returns outcomes in input order. A fork server that dies, hangs or answers nonsense is killed and
restarted; the program it was running gets a ``crashed:`` outcome, never an exception in the
caller. A server that reports damage it cannot repair (``retire``) is replaced the same way.
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import itertools
import os
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from pathlib import Path

import populora.sandbox.layout as layout
import populora.sandbox.protocol as protocol
import populora.sandbox.results as results
import populora.sandbox.scratch as scratch
import populora.sandbox.seccomp as seccomp
from populora.sandbox.api import Outcome, Program, SandboxLimits
from populora.signals import children_immune

SERVER_SCRIPT = Path(__file__).with_name("server.py")
ISOLATION_MODES = ("auto", "full", "uid", "rlimits")
# isolation layers that ``Sandbox(without=...)`` can leave out, to measure what each one costs:
# the seccomp filter, a child's IPC namespace, its scratch tmpfs, the empty /proc; and those of
# determinism by construction: no clock (clock.py), children forked from the template and its PID
# namespace (template.py), the layout perturbations (layout.py)
LAYERS = ("seccomp", "ipc_namespace", "scratch_tmpfs", "hidden_proc", "clock", "template", "layout")
STARTUP_SECONDS = 30.0  # generous: two cores shared with a trainer can be slow to start Python
GRACE_SECONDS = 5.0  # past the wall limit, the server itself is presumed hung
UID_BASE, UID_SPAN = 2_000_000, 1_000_000  # unprivileged uids for children (no /etc/passwd entry needed)


class SandboxError(RuntimeError):
    """The sandbox could not be set up (never raised for a program's behaviour)."""


def replica_hash_seed(base: int, replica: int) -> int:
    """``PYTHONHASHSEED`` of a replica's fork servers: distinct per replica, never 0 (0 = no randomisation)."""
    return 1 + (base + replica) % 4_294_967_295


class _Server:
    """One fork server process, driven through its stdin/stdout pipes."""

    def __init__(self, config: dict, hash_seed: int, log_path: Path):
        env = {
            "PATH": "/usr/bin:/bin",
            "LC_ALL": "C.UTF-8",
            "PYTHONHASHSEED": str(hash_seed),
            "PYTHONDONTWRITEBYTECODE": "1",
            "GLIBC_TUNABLES": "glibc.pthread.rseq=0",  # no rseq area: the CPU number, preemptions (seccomp.py)
            **layout.environment(hash_seed),
        }
        try:
            log = open(log_path, "ab")  # the server's own stderr (start-up failures, tracebacks)
        except OSError:
            log = open(os.devnull, "ab")  # the scratch directory was removed under us
        with log, children_immune(), layout.no_randomization() as fixed:  # SIGUSR2: populora/signals.py
            try:
                self.proc = subprocess.Popen(
                    [sys.executable, "-B", "-s", "-S", str(SERVER_SCRIPT), _json(config)],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=log,
                    env=env,
                    cwd="/",
                    start_new_session=True,
                    close_fds=True,
                )
            except OSError as exc:
                raise SandboxError(f"cannot start the fork server {SERVER_SCRIPT}: {exc}") from None
        try:
            hello = protocol.read_json(self.proc.stdout.fileno(), time.monotonic() + STARTUP_SECONDS)
        except (OSError, TimeoutError, protocol.FrameError, ValueError) as exc:
            hello = f"no greeting ({exc})"
        if not isinstance(hello, dict) or not hello.get("ready"):
            self.kill()
            try:
                log = log_path.read_text(errors="replace")[-2000:]
            except OSError:
                log = ""
            raise SandboxError(f"fork server {SERVER_SCRIPT} did not start: {hello!r}\n{log}".rstrip())
        self.mode: str = hello["mode"]
        self.report: dict = hello["report"]
        self.report["aslr"] = "off (layout perturbed from the hash seed)" if fixed else "on (personality refused)"
        self.pid = self.proc.pid

    def send(self, jobs: list[tuple[dict, bytes]]) -> None:
        """Queue ``(header, body)`` jobs on the server; it runs them one after the other and
        answers each in turn."""
        header = _frame({"jobs": [{k: h[k] for k in ("id", "calls", "size", "uid")} for h, _ in jobs]})
        protocol.writev_all(self.proc.stdin.fileno(), [header, *(body for _, body in jobs)])

    def receive(self, job: dict, timeout: float) -> tuple[dict, bytes, bytes]:
        """The answer to ``job`` (the oldest unanswered): (header, result bytes, output bytes);
        raises OSError/TimeoutError/FrameError."""
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + timeout
        answer = protocol.read_json(fd, deadline)
        if not isinstance(answer, dict) or answer.get("id") != job["id"]:
            raise protocol.FrameError(f"fork server answered {str(answer)[:200]!r} to job {job['id']}")
        res_n, out_n = int(answer.get("res") or 0), int(answer.get("out") or 0)
        if not (0 <= res_n <= protocol.MAX_CONTROL_FRAME and 0 <= out_n <= protocol.MAX_CONTROL_FRAME):
            raise protocol.FrameError(f"fork server announced {res_n} + {out_n} bytes")
        return answer, protocol.read_exact(fd, res_n, deadline), protocol.read_exact(fd, out_n, deadline)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def close(self, timeout: float = 5.0) -> None:
        try:
            self.proc.stdin.close()  # EOF: the server returns; its namespace dies with it
            self.proc.wait(timeout)
        except (OSError, subprocess.TimeoutExpired):
            self.kill()
        self.proc.stdout.close()

    def kill(self) -> None:
        try:
            self.proc.kill()  # full mode: the inner server follows by its parent-death signal
            self.proc.wait(10)
        except (OSError, subprocess.TimeoutExpired):
            pass


def _json(obj: object) -> str:
    import json

    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


def _frame(obj: object) -> bytes:
    payload = _json(obj).encode("utf-8", "surrogatepass")
    return protocol.HEADER.pack(len(payload)) + payload


class Sandbox:
    """Runs ``Program``s in confined child processes, ``workers`` at a time.

    ``isolation``: ``"auto"`` (the strongest the platform allows), ``"full"``, ``"uid"`` or
    ``"rlimits"`` (see ``isolation.py``); ``hash_seed`` fixes the replicas' hash seeds (replica r
    uses ``replica_hash_seed(hash_seed, r)``), so validation is reproducible run to run.
    ``workers`` (else ``limits.workers``, else one per CPU core) programs run at once.
    ``without`` leaves isolation layers out (names in ``LAYERS``): for benchmarks of each layer's
    cost only. ``deterministic`` (the default) gives every child no clock, no timer, no entropy and
    no ``stat``, so a program's outputs are a function of its code, its inputs and its hash seed;
    ``False`` keeps them, with every other layer, for evaluation harnesses that time their tests
    (LiveCodeBench's per-test alarms: ``eval/livecodebench.py``).
    """

    def __init__(
        self,
        limits: SandboxLimits | None = None,
        workers: int | None = None,
        isolation: str = "auto",
        hash_seed: int = 0,
        scratch_dir: str | None = None,
        without: tuple[str, ...] = (),
        deterministic: bool = True,
    ):
        if isolation not in ISOLATION_MODES:
            raise ValueError(f"Sandbox isolation={isolation!r}: expected one of {ISOLATION_MODES}")
        unknown = set(without) - set(LAYERS)
        if unknown:
            raise ValueError(f"Sandbox without={sorted(unknown)}: expected layers among {LAYERS}")
        self.limits = (limits or SandboxLimits()).validate()
        self.without = tuple(without)  # only for measuring a layer's cost: every layer is on by default
        self.deterministic = bool(deterministic)
        self._seccomp = (
            {"unavailable": "left out (without=)"}
            if "seccomp" in without
            else seccomp.filter_for_servers(self.deterministic)
        )
        self.workers = max(1, int(workers or self.limits.workers or len(os.sched_getaffinity(0))))  # the job's cores
        self.isolation = isolation
        self.hash_seed = int(hash_seed)
        self.scratch = Path(tempfile.mkdtemp(prefix="populora-sandbox-", dir=scratch_dir))
        os.chmod(self.scratch, 0o711)  # children (other uids) may enter their own directory only
        self._lanes: list[dict[int, _Server]] = [{} for _ in range(self.workers)]
        self._lock = threading.Lock()
        self._ids = itertools.count(1)  # next() on a count is atomic under the GIL
        self._closed = False
        self._ephemeral: set = set()  # server keys of explicit seeds (closed once a batch leaves them out)
        self._finalizer = weakref.finalize(self, _shutdown, self._lanes, self.scratch)
        first = self._server(0, replica_hash_seed(self.hash_seed, 0))  # fail early, clearly
        self.mode: str = first.mode  # the isolation the fork servers run in: full, uid or rlimits
        self.report: dict = first.report  # what the first server set up (namespaces, mounts, ...)

    # --- public API ------------------------------------------------------------------------
    def run(self, program: Program) -> Outcome:
        return self.run_many([program])[0]

    def run_many(self, programs: list[Program]) -> list[Outcome]:
        """One ``Outcome`` per program, in input order; programs run concurrently, each confined."""
        programs = list(programs)
        if self._closed:
            raise SandboxError("run_many on a closed Sandbox")
        for p in programs:
            if not isinstance(p, Program):
                raise TypeError(f"run_many expects Program records, got {type(p).__name__}")
        outcomes: list[Outcome | None] = [None] * len(programs)
        keys = [self._key(p) for p in programs]
        with self._lock:
            self._retire_unused({k for k, p in zip(keys, programs) if p.hash_seed is not None}, set(keys))
            todo = _Queue(keys)
            lanes = min(self.workers, len(programs))
            threads = [
                threading.Thread(
                    target=self._lane_loop,
                    args=(k, programs, keys, todo, outcomes),
                    name=f"sandbox-lane-{k}",
                    daemon=True,
                )
                for k in range(lanes)
            ]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        return [
            o if o is not None else results.crashed("lane_failed", "no outcome recorded") for o in outcomes
        ]

    def server_count(self) -> int:
        """Fork servers running now (over all lanes)."""
        return len(self.server_pids())

    def server_pids(self) -> list[int]:
        """Process ids of the running fork servers (for tests of restart after a server's death)."""
        return [s.pid for lane in self._lanes for s in lane.values() if s.alive()]

    def close(self) -> None:
        self._closed = True
        self._finalizer()

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # --- internals -------------------------------------------------------------------------
    def _key(self, program: Program) -> int:
        """The hash seed of the fork servers that run ``program``."""
        seed = program.hash_seed if program.hash_seed is not None else replica_hash_seed(self.hash_seed, program.replica)
        if not 1 <= int(seed) <= 4_294_967_295:
            raise ValueError(f"Program.hash_seed must be in [1, 2**32 - 1], got {seed}")
        return int(seed)

    def _retire_unused(self, ephemeral: set, wanted: set) -> None:
        """Close the servers of explicit seeds (``Program.hash_seed``) that this batch does not use:
        such a seed belongs to one step of the determinism check and never comes back. Servers of the
        replicas' fixed seeds stay; so do the ones this batch needs."""
        self._ephemeral |= ephemeral
        for lane in self._lanes:
            for key in [k for k in lane if k in self._ephemeral and k not in wanted]:
                lane.pop(key).close()
        self._ephemeral &= wanted

    def _config(self, lane: int, seed: int) -> dict:
        return {
            "limits": dataclasses.asdict(self.limits),
            "isolation": self.isolation,
            "scratch": str(self.scratch),
            "uids": [UID_BASE, UID_SPAN],  # each program gets a uid of its own from this range
            "lane": lane,
            "replica": str(seed),
            "seccomp": self._seccomp,
            "without": list(self.without),
            "deterministic": self.deterministic,
        }

    def _server(self, lane: int, seed: int) -> _Server:
        server = self._lanes[lane].get(seed)
        if server is None or not server.alive():
            if server is not None:
                server.kill()
            log = self.scratch / f"server-{lane}-{seed}.log"
            server = self._lanes[lane][seed] = _Server(self._config(lane, seed), seed, log)
        return server

    def _lane_loop(self, lane: int, programs: list[Program], keys: list, todo: _Queue, outcomes: list) -> None:
        timeout = float(self.limits.wall_seconds) + GRACE_SECONDS
        while not self._closed:  # closed from another thread (e.g. after an interrupt): stop feeding
            chunk = todo.take(self.workers)
            if not chunk:
                return
            try:
                server = self._server(lane, keys[chunk[0]])
            except SandboxError as exc:
                for i in chunk:
                    outcomes[i] = results.crashed("server_unavailable", str(exc))
                continue
            jobs = [_job(next(self._ids), programs[i], keys[i]) for i in chunk]
            done = 0
            try:
                server.send(jobs)
                for i, (job, _) in zip(chunk, jobs):
                    answer, res, out = server.receive(job, timeout)
                    outcomes[i] = results.classify(answer, res, out, job["token"], job["values"], self.limits)
                    done += 1
                    if answer.get("retire"):  # the server found damage it cannot repair: replace it
                        server.close()
                        todo.put_back(chunk[done:])
                        break
            except (OSError, TimeoutError, protocol.FrameError, ValueError) as exc:
                server.kill()  # restarted on next use; the program it was running is reported,
                outcomes[chunk[done]] = results.crashed(
                    "server_died", f"fork server failed during the program: {exc!r}"
                )
                todo.put_back(chunk[done + 1 :])  # the ones queued behind it run again elsewhere


class _Queue:
    """Indices of a batch, per fork server (hash seed), handed out in chunks to the lanes.

    A chunk goes to one fork server in one message, so the server runs it back to back without
    waiting for the caller between programs; chunks shrink towards the end of the batch so the
    lanes finish together.
    """

    MAX_CHUNK = 8

    def __init__(self, keys: list):
        self._lock = threading.Lock()
        self._replica = list(keys)
        self._by_replica: dict[object, collections.deque[int]] = {}
        for i, key in enumerate(self._replica):
            self._by_replica.setdefault(key, collections.deque()).append(i)

    def take(self, lanes: int) -> list[int]:
        with self._lock:
            left = sum(len(q) for q in self._by_replica.values())
            if not left:
                return []
            queue_ = max(self._by_replica.values(), key=len)
            size = max(1, min(self.MAX_CHUNK, left // (4 * lanes), len(queue_)))
            return [queue_.popleft() for _ in range(size)]

    def put_back(self, indices: list[int]) -> None:
        with self._lock:
            for i in reversed(indices):
                self._by_replica[self._replica[i]].appendleft(i)


def job_uid(seed: int, digest: bytes) -> int:
    """The uid a job's child runs as: a function of the job and the seed (``digest`` of its body
    without the token), so nothing of it varies between executions of the same program, input and
    seed; distinct jobs get distinct uids but for a one-in-``UID_SPAN`` coincidence."""
    return UID_BASE + int.from_bytes(hashlib.sha256(b"uid:%d:" % seed + digest).digest()[:8], "big") % UID_SPAN


def _job(job_id: int, program: Program, seed: int) -> tuple[dict, bytes]:
    """(header the server reads, body only the child reads). The header carries no program text;
    the token, in the body, is what the child's result frame must start with. A program can read
    its token (it only decides its own outcome with it), so it is a function of the job and the
    seed, never a random draw the program could use as entropy."""
    content = _json([program.source, program.entry, list(program.calls), program.stdin]).encode("utf-8", "surrogatepass")
    digest = hashlib.sha256(content).digest()
    token = hashlib.sha256(b"token:%d:" % seed + digest).hexdigest()[:32]
    body = _json(
        {
            "source": program.source,
            "entry": program.entry,
            "calls": list(program.calls),
            "stdin": program.stdin,
            "token": token,
        }
    ).encode("utf-8", "surrogatepass")
    header = {
        "id": job_id,
        "calls": len(program.calls),
        "size": len(body),
        "uid": job_uid(seed, digest),
        # caller side only (not sent to the server): what the result must hold
        "token": token,
        "values": len(program.calls) if program.entry is not None else 0,
    }
    return header, body


def _shutdown(lanes: list[dict[int, _Server]], scratch_dir: Path) -> None:
    for lane in lanes:
        for server in lane.values():
            try:
                server.close()
            except Exception:  # closing must never raise into the caller
                server.kill()
        lane.clear()
    scratch.remove_tree(str(scratch_dir))  # our logs and, in weak modes, leftover work dirs

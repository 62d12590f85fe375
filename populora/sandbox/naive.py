"""``execute_naive``: the obvious alternative to the fork server, kept as a benchmark baseline.

One fresh ``python -I -S -c ...`` interpreter per execution, with the same resource limits
(applied inside the new interpreter before the program runs), the same wall-clock timeout (the
whole process group is killed), and the same program semantics (``runner.execute``). It has none
of the namespace/uid isolation of ``Sandbox``: use it to measure start-up cost, not to run
hostile code. ``-I -S`` skips ``site`` and is the fastest start of a plain ``python -c`` on this
interpreter, which makes the fork server's measured advantage a conservative figure.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from populora.sandbox.api import CRASHED, TIMEOUT, Outcome, Program, SandboxLimits

_HERE = Path(__file__).parent

_DRIVER = """
import json, os, resource, sys
job = json.loads(sys.stdin.read())
lim = job["limits"]
cpu = max(1, int(lim["cpu_seconds"]))
mem = int(lim["memory_mb"]) * 1024 * 1024
resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
resource.setrlimit(resource.RLIMIT_FSIZE, (int(lim["max_file_bytes"]),) * 2)
resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
sys.stdin = open(os.devnull)
status, reason, values, detail = execute(job["source"], job["entry"], job["calls"], int(lim["max_output_chars"]))
sys.stdout.flush()
os.write(job["fd"], json.dumps([status, reason, values, detail]).encode())
"""


def _script() -> str:
    return (_HERE / "runner.py").read_text() + "\n" + _DRIVER


def execute_naive(program: Program, limits: SandboxLimits | None = None) -> Outcome:
    """Run one program in a new ``python -c`` process (stdin programs are not supported here)."""
    limits = limits or SandboxLimits()
    if program.stdin:
        raise ValueError("execute_naive runs entry-function programs only (Program.stdin must be empty)")
    r, w = os.pipe()
    job = {
        "source": program.source,
        "entry": program.entry,
        "calls": list(program.calls),
        "limits": dataclasses.asdict(limits),
        "fd": w,
    }
    env = {"PATH": "/usr/bin:/bin", "LC_ALL": "C.UTF-8"}
    start = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-I", "-S", "-c", _script()],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        pass_fds=(w,),
        env=env,
        start_new_session=True,
    )
    os.close(w)
    try:
        out, _ = proc.communicate(json.dumps(job).encode(), timeout=float(limits.wall_seconds))
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        os.close(r)
        return Outcome(
            status=TIMEOUT,
            reason="timeout",
            seconds=time.monotonic() - start,
            detail=f"wall-clock limit of {limits.wall_seconds} s",
        )
    with os.fdopen(r, "rb") as fh:
        raw = fh.read()
    seconds = time.monotonic() - start
    stdout = out.decode("utf-8", "replace")[: limits.max_stdout_chars]
    if proc.returncode != 0 or not raw:
        code = proc.returncode
        reason = f"crashed:{signal.Signals(-code).name}" if code < 0 else f"crashed:exit_{code}"
        return Outcome(status=CRASHED, reason=reason, stdout=stdout, seconds=seconds)
    status, reason, values, detail = json.loads(raw)
    return Outcome(
        status=status, reason=reason or None, values=values, stdout=stdout, seconds=seconds, detail=detail
    )

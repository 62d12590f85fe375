"""From what a fork server saw of one child to the program's ``Outcome`` (caller side, pure).

The child ran untrusted code, so nothing it wrote is taken on trust: its result frame must carry
the per-job token, be well formed and fit the limits, and its status and reason must belong to
the fixed grammar below; anything else is ``crashed:bad_result``. Every ``reason`` an ``Outcome``
can carry is therefore one of a bounded set of short ASCII words (metric names are built from
them), and every ``detail`` is cut to ``MAX_DETAIL`` characters with control characters escaped.
"""

from __future__ import annotations

import math
import re
import signal

import populora.sandbox.protocol as protocol
from populora.sandbox.api import CRASHED, ERROR, MEMORY, OK, OUTPUT_TOO_LARGE, TIMEOUT, Outcome
from populora.sandbox.clock import CLOCK_EXIT, ENTROPY_EXIT

MAX_DETAIL = 300
SETUP_FAILED = 121  # the server's exit code for a child whose confinement failed (see server.py)

# what the sandbox took away, by what a program tried (issue 37): a clock or timer, entropy or
# its CPU number. From an error the filter gives (runner.py) or from the exit status the
# sandbox's vDSO and fault handler end a child with (clock.py: CLOCK_EXIT, ENTROPY_EXIT).
REFUSED_CLOCK, REFUSED_ENTROPY = "refused:clock", "refused:entropy"
REFUSED_EXITS = {CLOCK_EXIT: REFUSED_CLOCK, ENTROPY_EXIT: REFUSED_ENTROPY}
# reasons a child may report itself, by status (runtime_error:<Name> is checked by pattern)
CHILD_REASONS = {
    ERROR: {"syntax_error", "no_entry_function", "bad_input", REFUSED_CLOCK, REFUSED_ENTROPY},
    MEMORY: {"memory"},
    OUTPUT_TOO_LARGE: {"output_too_large"},
    CRASHED: {"crashed:SystemExit"},
}
RUNTIME_ERROR = re.compile(r"runtime_error:[A-Za-z_][A-Za-z0-9_]{0,79}")
# what follows "crashed:" in a reason the sandbox gives (besides exit_<0-255> and signal names)
CRASH_CAUSES = frozenset(
    {
        "SystemExit",  # the program called sys.exit / raised SystemExit
        "bad_result",  # the result channel was malformed, forged or over its limits
        "setup_failed",  # the child could not be confined; the program did not run
        "server_died",  # the fork server died or hung during the program
        "server_error",  # the fork server failed on this program (and was replaced)
        "server_unavailable",  # no fork server could be started
        "lane_failed",  # no outcome was recorded (an internal error of the caller)
        "signal",  # killed by a signal that has no name (real-time signals)
    }
)


def clean_text(text: str, limit: int = MAX_DETAIL) -> str:
    """``text`` cut to ``limit`` characters with every non-printable character escaped."""
    out = []
    size = 0
    for ch in text:
        piece = ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii")
        size += len(piece)
        if size > limit:
            break
        out.append(piece)
    return "".join(out)


def is_sandbox_reason(reason: str | None) -> bool:
    """Whether ``reason`` is one the sandbox can give (None for ok)."""
    if reason is None:
        return True
    if reason in ("timeout", "memory", "output_too_large", "syntax_error", "no_entry_function", "bad_input",
                  REFUSED_CLOCK, REFUSED_ENTROPY):
        return True
    if RUNTIME_ERROR.fullmatch(reason):
        return True
    if reason.startswith("crashed:"):
        cause = reason[len("crashed:") :]
        if cause in CRASH_CAUSES or cause in _SIGNAL_NAMES:
            return True
        return cause.startswith("exit_") and cause[5:].isdigit() and int(cause[5:]) < 256
    return False


_SIGNAL_NAMES = frozenset(s.name for s in signal.Signals)


# causes that only the sandbox's own failures produce: a program cannot bring them about (its fork
# server is PID 1 of its namespace under another uid; setup_failed is given only when the server
# saw that the child never finished its confinement, see ``classify``)
INFRASTRUCTURE_CAUSES = frozenset({"setup_failed", "server_died", "server_error", "server_unavailable", "lane_failed"})
# ours: a program killed at the wall-clock limit that never blocked (no voluntary context switch)
# and ran on a CPU for less than this fraction of the limit was starved by the host, not stalled
STARVED_CPU_FRACTION = 0.5


def crashed(cause: str, detail: str) -> Outcome:
    if cause not in CRASH_CAUSES:
        raise ValueError(f"unknown crash cause {cause!r}")
    return Outcome(
        status=CRASHED,
        reason=f"crashed:{cause}",
        detail=clean_text(detail),
        infrastructure=cause in INFRASTRUCTURE_CAUSES,
    )


def starved(answer: dict, wall_seconds: float) -> bool:
    """Whether a child killed at the wall-clock limit was starved by the host: it never blocked
    (``nvcsw``, its voluntary context switches, is 0: no sleep, no wait on a pipe, a lock or a
    page read) and got less than ``STARVED_CPU_FRACTION`` of the limit on a CPU. A program that
    stalls (sleeps, blocks on its result pipe) blocks; one that computes past the limit gets the
    CPU; neither passes for starved."""
    try:
        return int(answer["nvcsw"]) == 0 and float(answer["cpu"]) < STARVED_CPU_FRACTION * float(wall_seconds)
    except (KeyError, TypeError, ValueError):
        return False


def check_result(buf: bytes, overflow: bool, token: str, expected_values: int, limit: int) -> Outcome:
    """The child's result frame, trusted only if it is well formed, carries the token and makes sense."""
    if overflow:
        return crashed("bad_result", "result channel over its size limit")
    try:
        fields = protocol.unpack_fields(buf)
    except protocol.FrameError as exc:
        return crashed("bad_result", f"malformed result channel: {exc}")
    if len(fields) < 4 or fields[0] != token:
        return crashed("bad_result", "result frame without the child's token")
    status, reason, detail, values = fields[1], fields[2], fields[3], fields[4:]
    if status == OK:
        if reason != "":
            return crashed("bad_result", "ok with a reason")
        if len(values) != expected_values or any(len(v) > limit for v in values):
            return crashed("bad_result", "result values do not match the calls or the limits")
        return Outcome(status=OK, values=values)
    allowed = CHILD_REASONS.get(status)
    if allowed is None or not (reason in allowed or (status == ERROR and RUNTIME_ERROR.fullmatch(reason))):
        return crashed(
            "bad_result", f"impossible status/reason {clean_text(status, 40)!r}/{clean_text(reason, 80)!r}"
        )
    if values:
        return crashed("bad_result", "values with a failure")
    return Outcome(status=status, reason=reason, detail=clean_text(detail))


def classify(answer: dict, res: bytes, out: bytes, token: str, expected_values: int, limits) -> Outcome:
    """The ``Outcome`` of one program from the server's answer header and the child's raw bytes."""
    stdout = out.decode("utf-8", "replace")[: int(limits.max_stdout_chars)]
    seconds = float(answer.get("seconds") or 0.0)
    if answer.get("error"):
        outcome = crashed("server_error", f"fork server failed on this program: {answer['error']}")
    elif answer.get("timed_out"):
        host = starved(answer, limits.wall_seconds)
        detail = f"wall-clock limit of {limits.wall_seconds} s" + (" (starved by the host)" if host else "")
        outcome = Outcome(TIMEOUT, "timeout", detail=detail, infrastructure=host)
    elif answer.get("signal") is not None:
        sig = int(answer["signal"])
        # SIGXCPU is the CPU-time limit: the program can neither catch, ignore, send nor see it
        # (seccomp.ARGUMENT_RULES). A program that blocked it is killed a second of CPU later
        # (isolation.CPU_KILL_AFTER), so a SIGKILL after the limit's worth of CPU is that limit too;
        # the second is the margin for the tick-sampled time the kernel enforces the limit on.
        cpu_limit = max(1, math.ceil(limits.cpu_seconds))
        if sig == signal.SIGXCPU or (sig == signal.SIGKILL and float(answer.get("cpu", 0)) >= cpu_limit):
            outcome = Outcome(TIMEOUT, "timeout", detail=f"CPU-time limit of {limits.cpu_seconds} s")
        else:
            try:
                name = signal.Signals(sig).name
                outcome = Outcome(CRASHED, f"crashed:{name}", detail=f"killed by {name}")
            except ValueError:  # a real-time signal without a name of its own
                outcome = crashed("signal", f"killed by signal {sig}")
    else:
        code = int(answer.get("exit") or 0) & 0xFF
        if code == SETUP_FAILED and not res and not answer.get("setup_done"):
            outcome = crashed(
                "setup_failed", f"the child could not be confined; the program did not run: {stdout}"
            )
            stdout = ""
        elif code in REFUSED_EXITS and not res:
            what = "a clock" if code == CLOCK_EXIT else "entropy or its CPU number"
            outcome = Outcome(ERROR, REFUSED_EXITS[code], detail=f"the program read {what}, which a child does not have")
        elif code == 0 and answer.get("res_too_large"):
            outcome = Outcome(
                OUTPUT_TOO_LARGE, "output_too_large", detail="the result is larger than one answer may be"
            )
        elif code != 0 or not res:
            outcome = Outcome(
                CRASHED, f"crashed:exit_{code}", detail=f"exited without a result (exit status {code})"
            )
        else:
            outcome = check_result(
                res, bool(answer.get("res_overflow")), token, expected_values, int(limits.max_output_chars)
            )
    outcome.stdout = stdout
    outcome.seconds = seconds
    return outcome

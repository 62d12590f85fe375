"""The CPU-time limit is told from every other death by construction, not by a margin on a measure.

The kernel enforces RLIMIT_CPU on CPU time sampled at each scheduler tick; a child's rusage reports
its exact run time. Under load the two differ by a few per cent, so a SIGKILL at the limit could
pass for any other SIGKILL (a CI run saw `crashed:SIGKILL` for two busy loops). Now the limit kills
with SIGXCPU, which a program can neither catch, ignore, send nor see pending (seccomp), and a
program that blocks it dies by SIGKILL a whole CPU second later (isolation.CPU_KILL_AFTER).
"""

from __future__ import annotations

import multiprocessing
import signal

import pytest

from populora.sandbox import Program, Sandbox, SandboxLimits, results
from populora.sandbox.isolation import CPU_KILL_AFTER

SPIN = "def f(x):\n    while True:\n        pass"
BLOCKED = "import signal\ndef f(x):\n    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGXCPU})\n    while True:\n        pass"


def answer(**fields) -> dict:
    return {"seconds": 1.0, "nvcsw": 1, "timed_out": False, "signal": None, "exit": None, **fields}


@pytest.mark.parametrize("cpu_seconds", [1, 2, 2.5, 10])
def test_classify_tells_the_cpu_limit_from_other_kills_over_the_whole_noise_band(cpu_seconds):
    """Generated reports: every CPU time a SIGXCPU or a late SIGKILL can report, under any load."""
    limits = SandboxLimits(wall_seconds=100, cpu_seconds=cpu_seconds)
    limit = max(1, -(-cpu_seconds // 1))
    steps = [i / 100 for i in range(0, int(100 * (limit + CPU_KILL_AFTER + 0.5)))]
    for cpu in steps:  # the limit's own death, whatever the sampled and the exact times say
        out = results.classify(answer(signal=int(signal.SIGXCPU), cpu=cpu), b"", b"", "t", 1, limits)
        assert (out.status, out.reason) == ("timeout", "timeout"), cpu
    for cpu in steps:  # SIGKILL: the hard limit (SIGXCPU blocked) from the limit on, else another kill
        out = results.classify(answer(signal=int(signal.SIGKILL), cpu=cpu), b"", b"", "t", 1, limits)
        expected = ("timeout", "timeout") if cpu >= limit else ("crashed", "crashed:SIGKILL")
        assert (out.status, out.reason) == expected, cpu


def _spin() -> None:
    while True:
        pass


@pytest.mark.slow
def test_busy_loops_under_load_always_die_of_the_cpu_limit(monkeypatch):
    """Instances of the CI failure: busy loops, plain and with SIGXCPU blocked, while two spinners
    compete for the two cores. Every one is `timeout` for the CPU-time limit, never crashed."""
    seen = []
    classify = results.classify

    def spy(answer, *rest):
        seen.append(dict(answer))
        return classify(answer, *rest)

    monkeypatch.setattr("populora.sandbox.executor.results.classify", spy)
    spinners = [multiprocessing.get_context("fork").Process(target=_spin, daemon=True) for _ in range(2)]
    for p in spinners:
        p.start()
    try:
        limits = SandboxLimits(wall_seconds=30, cpu_seconds=1)
        with Sandbox(limits=limits, workers=2) as sb:
            programs = [Program(SPIN, calls=("0",)), Program(BLOCKED, calls=("0",))] * 4
            outcomes = sb.run_many(programs)
    finally:
        for p in spinners:
            p.kill()
            p.join()
    assert [(o.status, o.reason) for o in outcomes] == [("timeout", "timeout")] * len(programs)
    assert all("CPU-time limit" in o.detail for o in outcomes), [o.detail for o in outcomes]
    by_program = {}
    for a in seen:
        assert not a["timed_out"], a
        by_program.setdefault(a["signal"], []).append(a["cpu"])
    if sb.report.get("seccomp") == "loaded in every child":
        # the plain loops die of SIGXCPU; the blocked ones of the SIGKILL a second later
        assert sorted(by_program) == sorted([int(signal.SIGXCPU), int(signal.SIGKILL)]), seen
        assert len(by_program[int(signal.SIGXCPU)]) == len(by_program[int(signal.SIGKILL)]) == 4
        assert min(by_program[int(signal.SIGKILL)]) >= 1 + CPU_KILL_AFTER * 0.5, seen

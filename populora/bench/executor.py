"""`populora bench executor`: proposal validation throughput, our sandbox against the naive approach.

The same fixed corpus of AZR-style proposals (``populora/tasks/data/bench_corpus.jsonl``: string,
list, dict, recursion, class and helper programs, and invalid ones: banned imports and names,
exceptions, hash-order nondeterminism, non-literal and oversized outputs, time and memory limits,
syntax errors, bad inputs) is validated three ways in one run, with the same limits and the same
validator (static checks, two executions per proposal compared for determinism):

1. ``Sandbox.run_many``: fork servers that fork one confined child per execution, all workers busy;
2. naive, serial: one fresh ``python -c`` process per execution, one at a time (what a single
   executor worker does, as in the AZR reference);
3. naive, parallel: the same ``python -c`` processes, ``workers`` at a time;

and, for the cost of running the determinism replicas one after the other (``run_replicas``),
the sandbox again with both replicas in one batch at the same time (the layout before issue 22).

``--repeat N`` runs N rounds that alternate the approaches and keeps each one's best time, so that
a change of machine load does not favour one of them. It prints validations per second and the
ratios, the floor that executions stopped by the wall-clock limit put under every approach, and checks that every proposal gets the same
verdict from every approach (mismatches are printed and make the exit status 1).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time
from collections import Counter
from importlib import resources

CORPUS = "bench_corpus.jsonl"
TOGETHER = "sandbox, replicas together"  # both replicas in one run_many (the layout before issue 22)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--corpus", default=None, help="JSONL corpus (default: the packaged corpus)")
    parser.add_argument("--workers", type=int, default=None, help="parallel executions (default: CPU count)")
    parser.add_argument("--wall-seconds", type=float, default=1.0, help="wall-clock limit per program")
    parser.add_argument("--memory-mb", type=int, default=512, help="address-space limit per program")
    parser.add_argument("--no-serial", action="store_true", help="skip the (slowest) naive serial run")
    parser.add_argument("--repeat", type=int, default=1, help="rounds; each approach keeps its best time")


def load_corpus(path: str | None = None) -> list[dict]:
    """Corpus rows: type, program, input or inputs (+ message), expect (the expected reason or null)."""
    if path is None:
        text = resources.files("populora.tasks").joinpath("data", CORPUS).read_text(encoding="utf-8")
    else:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def corpus_proposals(rows: list[dict]):
    from populora.tasks.records import Proposal

    return [
        Proposal(
            type=r["type"],
            program=r["program"],
            inputs=tuple(r["inputs"]) if "inputs" in r else (r["input"],),
            message=r.get("message", ""),
        )
        for r in rows
    ]


class NaiveExecutor:
    """``run_many`` through ``execute_naive``: a fresh ``python -c`` process per execution.

    ``workers`` executions run at a time (threads that each wait on one subprocess).
    """

    def __init__(self, limits, workers: int = 1) -> None:
        self.limits = limits
        self.workers = workers

    def run_many(self, programs):
        from populora.sandbox.naive import execute_naive

        if self.workers <= 1:
            return [execute_naive(p, self.limits) for p in programs]
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(self.workers) as pool:
            return list(pool.map(lambda p: execute_naive(p, self.limits), programs))


def _timed(fn):
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


def run(args: argparse.Namespace) -> int:
    import sys

    from populora.sandbox import Sandbox, SandboxLimits, SandboxLimitsError
    from populora.tasks.config import TaskEnv
    from populora.tasks.validation import static_reason, validate_many

    try:
        limits = SandboxLimits(
            wall_seconds=args.wall_seconds,
            cpu_seconds=max(1, math.ceil(args.wall_seconds))
            if math.isfinite(args.wall_seconds)
            else args.wall_seconds,
            memory_mb=args.memory_mb,
            workers=args.workers or 0,
        )
    except SandboxLimitsError as exc:
        option = {
            "wall_seconds": "--wall-seconds",
            "cpu_seconds": "--wall-seconds",
            "memory_mb": "--memory-mb",
        }
        field = exc.key.split(".", 1)[1]
        print(
            f"populora bench executor: {option.get(field, '--' + field.replace('_', '-'))}: {exc}",
            file=sys.stderr,
        )
        return 2
    rows = load_corpus(args.corpus)
    proposals = corpus_proposals(rows)
    workers = args.workers or os.cpu_count() or 1
    cfg = TaskEnv(max_output_chars=limits.max_output_chars)
    together = cfg.replace(replicas_in_turn=False)
    n_exec = sum(len(cfg.replicas) for p in proposals if static_reason(p, cfg)[0] is None)
    types = Counter(p.type for p in proposals)
    print(
        f"corpus: {len(proposals)} proposals ({', '.join(f'{t} {c}' for t, c in sorted(types.items()))}); "
        f"{n_exec} executions after the static checks"
    )
    print(
        f"limits: wall {limits.wall_seconds} s, cpu {limits.cpu_seconds} s, memory {limits.memory_mb} MB, "
        f"output {limits.max_output_chars} chars, no forking; workers {workers}; cores {os.cpu_count()}"
    )

    approaches = {}
    if not args.no_serial:
        approaches["naive python -c, serial"] = NaiveExecutor(limits, 1)
    approaches[f"naive python -c, {workers} at a time"] = NaiveExecutor(limits, workers)
    results: dict[str, tuple[list, float]] = {}

    def keep_best(name: str, run) -> None:
        verdicts, seconds = _timed(run)
        if name not in results or seconds < results[name][1]:
            results[name] = (verdicts, seconds)

    start = time.perf_counter()
    with Sandbox(limits=limits, workers=workers) as sandbox:
        startup = time.perf_counter() - start
        mode = getattr(sandbox, "mode", "")
        # rounds alternate the approaches so that a change of machine load hits all of them
        for _ in range(max(1, args.repeat)):
            keep_best("sandbox", lambda: validate_many(proposals, sandbox, cfg))
            # the replicas' layout before issue 22 (both in one batch, at the same time), for the cost
            keep_best(TOGETHER, lambda: validate_many(proposals, sandbox, together))
            for name, executor in approaches.items():
                keep_best(name, lambda executor=executor: validate_many(proposals, executor, cfg))

    base = results["sandbox"][1]
    print(f"best of {max(1, args.repeat)} round(s)")
    print(f"{'approach':<32}{'seconds':>9}{'validations/s':>15}{'sandbox speed-up':>18}")
    for name, (_, seconds) in results.items():
        label = f"sandbox run_many ({mode})" if name == "sandbox" and mode else name
        print(f"{label:<32}{seconds:>9.2f}{len(proposals) / seconds:>15.1f}{seconds / base:>17.1f}x")
    print(
        f"sandbox start-up (once, not in the figure above): {startup:.2f} s; "
        f"with it the speed-up over the slowest naive run is "
        f"{max(s for _, s in results.values()) / (base + startup):.1f}x"
    )

    verdicts = results["sandbox"][0]
    n_limit = len(cfg.replicas) * sum(v.reason == "timeout" for v in verdicts)
    print(
        f"executions that hit the {limits.wall_seconds} s wall limit: {n_limit}, a floor of "
        f"{n_limit * limits.wall_seconds / workers:.1f} s for {workers} at a time and "
        f"{n_limit * limits.wall_seconds:.1f} s serial, whatever the executor"
    )
    if n_limit:
        floor_parallel = n_limit * limits.wall_seconds / workers
        above = base - floor_parallel
        parts = []
        for name, (_, seconds) in results.items():
            if name != "sandbox" and above > 0:
                floor = n_limit * limits.wall_seconds / (1 if name.endswith("serial") else workers)
                parts.append(f"{(seconds - floor) / above:.1f}x over {name}")
        print("speed-up on the time above that floor: " + ", ".join(parts))
    kinds = Counter((v.reason or "valid").split(":")[0] for v in verdicts)
    print("verdicts: " + ", ".join(f"{k} {c}" for k, c in sorted(kinds.items())))
    status = 0
    for name, (other, _) in results.items():
        if name == "sandbox":
            continue
        diff = [
            (i, a.reason, b.reason) for i, (a, b) in enumerate(zip(verdicts, other)) if a.reason != b.reason
        ]
        print(f"same verdicts as {name}: {len(proposals) - len(diff)}/{len(proposals)}")
        for i, a, b in diff:
            print(f"  mismatch on corpus line {i + 1}: sandbox {a!r}, {name} {b!r}")
        status |= 1 if diff else 0
    expected = [
        (i, r.get("expect"), v.reason) for i, (r, v) in enumerate(zip(rows, verdicts)) if "expect" in r
    ]
    off = [(i, e, g) for i, e, g in expected if e != g]
    print(f"verdicts as labelled in the corpus: {len(expected) - len(off)}/{len(expected)}")
    for i, e, g in off:
        print(f"  corpus line {i + 1}: labelled {e!r}, got {g!r}")
    return status

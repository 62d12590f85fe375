"""Micro-benchmark: executions per second of ``Sandbox.run_many`` vs ``execute_naive``.

    python -m populora.sandbox.microbench [--programs 200] [--workers N] [--cpu] [--layers]

Both sides run the same batch of small AZR-style programs with the same limits and the same
number of concurrent executions (the naive side uses a thread pool of ``workers`` threads, each
starting one ``python -I -S -c`` process per execution). Sandbox start-up (fork servers of both
replicas) is timed separately and excluded from the throughput, then reported. The official
validation benchmark is ``populora bench executor``; this one isolates the executor itself.

``--layers`` measures what each isolation layer costs per execution: one lane runs the same small
program with every layer, then with each layer left out (``Sandbox(without=...)``), in alternating
rounds, best round kept (wall time, and CPU time of the fork server and its children, the steadier
figure on a shared machine); the difference is that layer's cost. Issue 37's layers are among
them: ``clock`` (no clock in the template and its children), ``template`` (children forked from the
template, in its PID namespace, rather than from the server) and ``layout`` (the perturbation drawn
from the seed, made once per server).
"""

from __future__ import annotations

import argparse
import os
import time
from concurrent.futures import ThreadPoolExecutor

from populora.sandbox.api import Program, SandboxLimits
from populora.sandbox.executor import LAYERS, Sandbox
from populora.sandbox.naive import execute_naive

TEMPLATES = [
    ("def f(xs):\n    return sorted(xs, reverse=True)[:3]", ("[5, 3, 9, 1, {k}]",)),
    (
        "def f(s):\n    from collections import Counter\n    return Counter(s).most_common(2)",
        ("'abracadabra{k}'",),
    ),
    (
        "def f(n):\n    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n    return a",
        ("{k}", "{k} + 10"),
    ),
    ("def f(a, b):\n    return {{i: a * i + b for i in range(5)}}", ("{k}, 3",)),
    (
        "import itertools\ndef f(xs):\n    return [p for p in itertools.permutations(xs, 2) if sum(p) % 2]",
        ("[1, 2, 3, {k}]",),
    ),
    (
        "def f(s):\n    return ''.join(c.upper() if i % 2 else c for i, c in enumerate(s))",
        ("'hello world {k}'",),
    ),
    ("def f(m):\n    return [list(r) for r in zip(*m)]", ("[[1, 2], [3, {k}]]",)),
    ("def f(x):\n    return 1 / (x - {k})", ("{k}",)),  # a runtime error, as real batches have some
]


def corpus(n: int) -> list[Program]:
    programs = []
    for i in range(n):
        source, calls = TEMPLATES[i % len(TEMPLATES)]
        k = i // len(TEMPLATES)
        programs.append(Program(source.format(k=k), calls=tuple(c.format(k=k) for c in calls), replica=i % 2))
    return programs


def _cpu_seconds(pid: int) -> tuple[float, float]:
    """(own, reaped children's) CPU seconds of ``pid`` from ``/proc/<pid>/stat``."""
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / tick, (int(fields[13]) + int(fields[14])) / tick


def cpu_breakdown(n: int) -> dict[str, float]:
    """Milliseconds of CPU per program for the fork server, its children and the caller (one lane)."""
    programs = [Program("def f(a):\n    return sorted(a)", calls=("[3, 1, 2]",)) for _ in range(n)]
    with Sandbox(workers=1) as sb:
        sb.run_many(programs[:5])
        pids = _server_pids(sb)
        own0, kids0 = (sum(x) for x in zip(*map(_cpu_seconds, pids)))
        me0 = time.process_time()
        start = time.perf_counter()
        outcomes = sb.run_many(programs)
        wall = time.perf_counter() - start
        own1, kids1 = (sum(x) for x in zip(*map(_cpu_seconds, pids)))
        me1 = time.process_time()
    per = 1000.0 / n
    return {
        "wall": wall * per,
        "server": (own1 - own0) * per,
        "children": (kids1 - kids0) * per,
        "caller": (me1 - me0) * per,
        "child_wall": sum(o.seconds for o in outcomes) * per,
    }


def _children(pid: int) -> list[int]:
    with open(f"/proc/{pid}/task/{pid}/children") as fh:
        return [int(p) for p in fh.read().split()]


def _server_pids(box: Sandbox) -> list[int]:
    """The fork servers and their templates (which reap the children: their CPU time is there)."""
    out = []
    for pid in box.server_pids():
        if box.mode == "full":  # the process we started only waits; the server is its one child
            pid = _children(pid)[0]
        out += [pid, *_children(pid)]
    return out


def layer_costs(n: int = 400, rounds: int = 7) -> dict[str, tuple[float, float]]:
    """Per execution on one lane, best of ``rounds`` alternating rounds: (wall ms, CPU ms of the
    fork server and its children), with every layer (``"all"``) and with each of ``LAYERS`` left
    out (``"without <layer>"``). CPU time is the steadier figure on a shared machine."""
    plain = [Program("def f(a):\n    return sorted(a)", calls=("[3, 1, 2]",)) for _ in range(n)]
    configs = {"all": ()} | {f"without {layer}": (layer,) for layer in LAYERS}
    boxes = {name: Sandbox(workers=1, without=without) for name, without in configs.items()}
    best = {name: (float("inf"), float("inf")) for name in configs}

    def cpu_of(pids: list[int]) -> float:
        return sum(sum(_cpu_seconds(pid)) for pid in pids)

    try:
        pids = {}
        for name, box in boxes.items():
            box.run_many(plain[:20])  # warm
            pids[name] = _server_pids(box)
        for _ in range(rounds):
            for name, box in boxes.items():
                programs = plain
                cpu0 = cpu_of(pids[name])
                start = time.perf_counter()
                outs = box.run_many(programs)
                wall = 1000 * (time.perf_counter() - start) / n
                cpu = 1000 * (cpu_of(pids[name]) - cpu0) / n
                best[name] = (min(best[name][0], wall), min(best[name][1], cpu))
                if not all(o.ok for o in outs):
                    raise RuntimeError(f"{name}: {[o.reason for o in outs if not o.ok][:3]}")
    finally:
        for box in boxes.values():
            box.close()
    return best


def _cpu_per_call(fn, n: int) -> float:
    """Median CPU microseconds of the calling thread for one ``fn()`` (``n`` calls)."""
    costs = []
    for _ in range(n):
        t0 = time.thread_time_ns()
        fn()
        costs.append((time.thread_time_ns() - t0) / 1000)
    costs.sort()
    return costs[len(costs) // 2]


def _child_cpu_us(fn) -> float:
    """CPU microseconds a forked child spends running ``fn`` and exiting (from ``wait4``)."""
    pid = os.fork()
    if pid == 0:
        try:
            fn()
        finally:
            os._exit(0)
    _, _, usage = os.wait4(pid, 0)
    return 1e6 * (usage.ru_utime + usage.ru_stime)


def layer_syscall_costs(n: int = 200) -> dict[str, float]:
    """CPU microseconds of each layer's own step, median of ``n`` (root only), measured with the
    sandbox's functions in a throw-away process with a mount namespace of its own: the child's
    ``unshare(CLONE_NEWIPC)``, the child's seccomp load, the server's mount and detach of a
    program's tmpfs, and a fork server's start-up with and without its namespaces and new root.
    Kernel work deferred to other threads (freeing a namespace or a tmpfs after RCU) is not in these
    figures; the differential run is."""
    import json

    import populora.sandbox.isolation as isolation
    import populora.sandbox.seccomp as seccomp

    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            isolation.unshare(isolation.CLONE_NEWNS)
            isolation.mount(None, "/", None, isolation.MS_REC | isolation.MS_PRIVATE)
            isolation.WORK_DIR = "/tmp"  # only in this throw-away mount namespace
            program = isolation.FilterProgram(seccomp.compile_filter()[0])
            out = {
                "scratch tmpfs (mount + detach)": _cpu_per_call(
                    lambda: (isolation.mount_scratch(os.getuid(), 16 << 20), isolation.unmount_scratch()), n
                ),
                "IPC namespace (unshare)": _cpu_per_call(
                    lambda: isolation.unshare(isolation.CLONE_NEWIPC), n
                ),
            }
            isolation.prctl(isolation.PR_SET_NO_NEW_PRIVS, 1)
            # filters stack: at most 100 (the kernel caps a stack's total instructions); the filter
            # refuses the clocks, so the loads are timed from outside, by the CPU time of a child
            loads = min(n, 100)
            out["seccomp load"] = (_child_cpu_us(lambda: [isolation.load_seccomp(program) for _ in range(loads)])
                                   - _child_cpu_us(lambda: None)) / loads
            os.write(w, json.dumps(out).encode())
        finally:
            os._exit(0)
    os.close(w)
    with os.fdopen(r) as fh:
        data = fh.read()
    os.waitpid(pid, 0)
    out = json.loads(data) if data else {}
    for mode, without in (("full", ()), ("full", ("clock", "template", "layout")), ("uid", ())):
        best = float("inf")
        for _ in range(5):
            start = time.perf_counter()
            Sandbox(workers=1, isolation=mode, without=without).close()
            best = min(best, time.perf_counter() - start)
        label = f"{mode}, without issue 37's layers" if without else mode
        out[f"fork server start-up, {label} (ms, best of 5)"] = 1000 * best
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--programs", type=int, default=200)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument(
        "--cpu", action="store_true", help="also print CPU per program, by process (Linux /proc)"
    )
    parser.add_argument("--layers", action="store_true", help="also print each isolation layer's cost")
    args = parser.parse_args(argv)
    limits = SandboxLimits()
    programs = corpus(args.programs)

    t0 = time.perf_counter()
    with Sandbox(limits=limits, workers=args.workers) as sb:
        sb.run_many(
            [Program("def f():\n    return 0", calls=("",), replica=r) for r in (0, 1)] * args.workers
        )
        startup = time.perf_counter() - t0
        t1 = time.perf_counter()
        fast = sb.run_many(programs)
        fast_s = time.perf_counter() - t1
        mode = sb.mode
    t2 = time.perf_counter()
    with ThreadPoolExecutor(args.workers) as pool:
        slow = list(pool.map(lambda p: execute_naive(p, limits), programs))
    slow_s = time.perf_counter() - t2

    agree = sum((a.status, a.values) == (b.status, b.values) for a, b in zip(fast, slow))
    n = len(programs)
    print(f"programs: {n}  workers: {args.workers}  cores: {os.cpu_count()}  sandbox isolation: {mode}")
    print(
        f"sandbox run_many : {n / fast_s:8.1f} executions/s  ({1000 * fast_s / n:.2f} ms each, "
        f"start-up {startup:.2f} s excluded)"
    )
    print(f"naive python -c  : {n / slow_s:8.1f} executions/s  ({1000 * slow_s / n:.2f} ms each)")
    print(f"ratio            : {slow_s / fast_s:8.1f}x   (outcomes agree on {agree}/{n})")
    if args.cpu:
        c = cpu_breakdown(300)
        print(
            f"CPU per program (one lane, 300 x sorted): fork server {c['server']:.2f} ms, children "
            f"{c['children']:.2f} ms, caller {c['caller']:.2f} ms; wall {c['wall']:.2f} ms "
            f"(child {c['child_wall']:.2f} ms)"
        )
    if args.layers:
        costs = layer_costs()
        wall, cpu = costs["all"]
        print(f"per execution, one lane, best of 7 x 400: all layers {wall:.3f} ms wall, {cpu:.3f} ms CPU")
        for layer in LAYERS:
            w, c = costs[f"without {layer}"]
            print(
                f"  {layer:<14} costs {wall - w:+.3f} ms wall, {cpu - c:+.3f} ms CPU (without it: {w:.3f} / {c:.3f})"
            )
        if os.geteuid() == 0:
            print("each layer's own step, CPU of the calling thread, median of 200 (100 for seccomp):")
            for name, value in layer_syscall_costs().items():
                unit = "" if "ms" in name else " us"
                print(f"  {name:<46} {value:8.1f}{unit}")
    return 0 if agree == n else 1


if __name__ == "__main__":
    raise SystemExit(main())

"""How many bits one execution can pass to the next through the host's inode counter.

``python -m populora.sandbox.covert [--pairs N] [--without seccomp]`` runs N pairs of programs on
one lane, one after the other, as two executions compared by the determinism check run (turns):
a writer, given a random bit, spends its time creating every kind of kernel object it can (pipes,
eventfds, epolls, memfds, sockets, pidfds, tmpfiles) when the bit is 1 and nothing when it is 0;
then a reader reads the inode number of its own output pipe, which the fork server took from the
host-wide counter (``get_next_ino``, kept per CPU) right before the reader started. The writer
reports the inode number of its own output pipe too, so the counter's advance between the two
programs is known. The script prints the advance for each bit and the information one
reader gets about the bit: the mutual information between the bit and "the advance is above the
threshold that best separates the two" (in bits per pair; 1.0 is a perfect channel; the best of
all thresholds overstates it a little on few pairs). ``--writer spin`` is the control: a writer
that only spends the same kind of time. These are the figures ``docs/sandbox.md`` quotes for what
remains readable of host-global counters. Since issue 37 the stat family is refused in a child, so
the reader cannot read any inode number and the script says so (``--without seccomp`` measures the
channel the filter closes).
"""

from __future__ import annotations

import argparse
import math
import random
import statistics

from populora.sandbox.api import Program, SandboxLimits
from populora.sandbox.executor import Sandbox

WRITER = """
import os
def f(bit):
    made = 0
    if bit:
        makers = [lambda: os.pipe(), lambda: (os.eventfd(0),), lambda: (os.memfd_create('x'),),
                  lambda: (os.pidfd_open(os.getpid()),), lambda: (os.open('.', os.O_TMPFILE | os.O_RDWR),)]
        try:
            import select, socket
            makers += [lambda: (os.dup(select.epoll().fileno()),), lambda: tuple(s.detach() for s in socket.socketpair())]
        except ImportError:
            pass
        for _ in range(3000):
            for make in makers:
                try:
                    fds = make()
                except Exception:
                    continue
                made += 1
                for fd in fds:
                    os.close(fd)
    try:
        return [os.fstat(1).st_ino, made]
    except PermissionError:  # the stat family is refused (issue 37)
        return [None, made]
"""
# the control: a writer that only spends the time (a timing channel through the CPU the fork
# server runs on next, not through any object)
SPINNER = """
import os
def f(bit):
    x = 0
    for i in range(3_000_000 if bit else 0):
        x += i
    try:
        return [os.fstat(1).st_ino, 0]
    except PermissionError:
        return [None, 0]
"""
READER = "import os\ndef f():\n    try:\n        return os.fstat(1).st_ino\n    except PermissionError:\n        return None\n"


def measure(pairs: int, without: tuple[str, ...] = (), seed: int = 0, writer: str = WRITER) -> dict:
    """Run ``pairs`` writer/reader pairs; returns the advances per bit, the objects the writer
    could make, and the mutual information of the best threshold (bits per pair)."""
    rng = random.Random(seed)
    advances: dict[int, list[int]] = {0: [], 1: []}
    made = 0
    limits = SandboxLimits(wall_seconds=10.0, cpu_seconds=8)
    with Sandbox(limits=limits, workers=1, without=without) as box:
        for _ in range(pairs):
            bit = rng.randrange(2)
            (w,) = box.run_many([Program(writer, calls=(str(bit),))])
            (r,) = box.run_many([Program(READER, calls=("",))])
            if not (w.ok and r.ok):
                raise RuntimeError(f"writer {w.reason} {w.detail!r}, reader {r.reason} {r.detail!r}")
            ino, n = eval(w.values[0])  # a list of two ints (or None), written by the writer
            made += n
            if ino is None or r.values[0] == "None":
                return {"advances": {0: [], 1: []}, "made": made, "bits": 0.0, "unreadable": True}
            advances[bit].append(int(r.values[0]) - ino)
    return {"advances": advances, "made": made, "bits": best_threshold_information(advances)}


def best_threshold_information(advances: dict[int, list[int]]) -> float:
    """The largest mutual information (bits) between the bit and ``advance > t`` over thresholds t."""
    total = sum(len(v) for v in advances.values())
    if not total or not all(advances.values()):
        return 0.0
    best = 0.0
    for t in sorted({a for v in advances.values() for a in v}):
        counts = {(b, above): 0 for b in (0, 1) for above in (False, True)}
        for b, values in advances.items():
            for a in values:
                counts[(b, a > t)] += 1
        info = 0.0
        for (b, above), c in counts.items():
            if c:
                p_joint = c / total
                p_bit = len(advances[b]) / total
                p_obs = sum(counts[(x, above)] for x in (0, 1)) / total
                info += p_joint * math.log2(p_joint / (p_bit * p_obs))
        best = max(best, info)
    return best


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m populora.sandbox.covert", description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=60)
    parser.add_argument("--without", action="append", default=[], help="a layer to leave out (seccomp...)")
    parser.add_argument("--writer", choices=("objects", "spin"), default="objects",
                        help="objects: make kernel objects for a 1; spin: only spend the time (the control)")
    args = parser.parse_args(argv)
    got = measure(args.pairs, tuple(args.without), writer=WRITER if args.writer == "objects" else SPINNER)
    if got.get("unreadable"):
        print("no inode number is readable in a child (the stat family is refused): no channel to measure")
        return 0
    for bit in (0, 1):
        values = got["advances"][bit]
        if values:
            print(f"bit {bit}: {len(values)} pairs, counter advance median {statistics.median(values):.0f} "
                  f"(min {min(values)}, max {max(values)})")
    print(f"kernel objects the writers made: {got['made']}")
    print(f"information per pair (best threshold): {got['bits']:.3f} bits")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Measure the memory one sandboxed program holds beyond an idle one, kernel memory included.

``python -m populora.sandbox.kmem [--memory-mb 64] [--repeat 3] [PROGRAM.py ...]`` runs each
program (by default the ``kmem_*.py`` attacks of ``tests/hostile/``) through a fresh ``Sandbox``
with its entry called as ``f(hold)``: the attack builds what it can, holds it while it spins for
about ``hold`` seconds of CPU (a child has no clock to sleep by) and returns. Meanwhile the caller samples, every few milliseconds,

* the memory cgroup it moved itself into before starting the sandbox (so the fork servers and every
  child are charged there): ``memory.usage_in_bytes`` / ``memory.kmem.usage_in_bytes`` (cgroup v1)
  or ``memory.current`` and the ``kernel`` field of ``memory.stat`` (cgroup v2); these count the
  program's own pages and what the kernel allocates for it with accounting (slab objects, page
  tables, pipe buffers, kernel stacks);
* the machine's ``MemTotal - MemAvailable`` (``/proc/meminfo``), which also sees what no cgroup
  is charged for (unix socket buffers), and the noise of everything else that runs.

Each column is the peak over the run minus the median before it, minus the same figure for an idle
program (one that only spins) measured in the same round; ``after`` is what stays charged once the
program is gone. The table printed is the median over ``--repeat`` rounds, in MiB. Needs root for
the cgroup (without it only the ``/proc/meminfo`` column is measured). ``docs/sandbox.md`` has the
figures and what they mean.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from populora.sandbox.api import Program, SandboxLimits
from populora.sandbox.executor import Sandbox

MIB = 1 << 20
IDLE = "def f(hold):\n    sum(range(int(hold * 20_000_000)))  # a child has no clock: it spins\n    return 0\n"
DEFAULT_DIR = Path(__file__).resolve().parents[2] / "tests" / "hostile"


class MemoryCgroup:
    """A child memory cgroup of the caller's own, which the caller moves itself into (and back out
    of on ``close``); ``None`` from ``create`` where there is no writable memory controller."""

    def __init__(self, path: Path, parent: Path, version: int):
        self.path, self.parent, self.version = path, parent, version

    @classmethod
    def create(cls) -> MemoryCgroup | None:
        mounts = {}
        with open("/proc/self/mounts") as fh:
            for line in fh:
                _, where, fstype, options = line.split()[:4]
                if fstype == "cgroup" and "memory" in options.split(","):
                    mounts[1] = Path(where)
                elif fstype == "cgroup2":
                    mounts.setdefault(2, Path(where))
        own = {}
        with open("/proc/self/cgroup") as fh:
            for line in fh:
                number, controllers, path = line.rstrip("\n").split(":", 2)
                if number == "0" and not controllers:
                    own[2] = path
                elif "memory" in controllers.split(","):
                    own[1] = path
        for version in (1, 2):
            if version not in mounts or version not in own:
                continue
            parent = mounts[version] / own[version].lstrip("/")
            if version == 2 and "memory" not in _read(parent / "cgroup.subtree_control").split():
                continue
            path = parent / f"populora-kmem-{os.getpid()}"
            try:
                path.mkdir()
            except OSError:
                continue
            try:
                (path / "cgroup.procs").write_text(str(os.getpid()))
            except OSError:
                path.rmdir()
                continue
            return cls(path, parent, version)
        return None

    def read(self) -> tuple[int, int]:
        """(bytes charged, of which kernel memory) now."""
        if self.version == 1:
            usage = int(_read(self.path / "memory.usage_in_bytes") or 0)
            kmem = int(_read(self.path / "memory.kmem.usage_in_bytes") or 0)
            return usage, kmem
        usage = int(_read(self.path / "memory.current") or 0)
        stat = dict(line.split() for line in _read(self.path / "memory.stat").splitlines() if " " in line)
        return usage, int(stat.get("kernel", 0))

    def close(self) -> None:
        (self.parent / "cgroup.procs").write_text(str(os.getpid()))
        for _ in range(50):  # the last children's charges take a moment to go
            try:
                self.path.rmdir()
                return
            except OSError:
                time.sleep(0.1)


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def host_used() -> int:
    """``MemTotal - MemAvailable`` in bytes."""
    fields = {}
    with open("/proc/meminfo") as fh:
        for line in fh:
            name, value = line.split(":", 1)
            fields[name] = int(value.split()[0]) * 1024
    return fields["MemTotal"] - fields["MemAvailable"]


@dataclass
class Sample:
    cgroup: float = 0.0  # MiB, peak minus baseline
    kernel: float = 0.0
    host: float = 0.0
    after: float = 0.0  # charged to the cgroup once the program has gone
    outcome: str = ""
    extra: dict = field(default_factory=dict)


def measure_one(sb: Sandbox, cg: MemoryCgroup | None, program: Program, interval: float = 0.005) -> Sample:
    def now() -> tuple[int, int, int]:
        usage, kmem = cg.read() if cg else (0, 0)
        return usage, kmem, host_used()

    before = []
    for _ in range(20):
        before.append(now())
        time.sleep(interval)
    base = [statistics.median(column) for column in zip(*before)]
    done: list = []
    worker = threading.Thread(target=lambda: done.append(sb.run(program)))
    worker.start()
    peak = list(base)
    while worker.is_alive():
        for i, value in enumerate(now()):
            peak[i] = max(peak[i], value)
        time.sleep(interval)
    worker.join()
    time.sleep(0.2)
    after = now()
    outcome = done[0]
    reason = "/" + outcome.reason if outcome.reason else ""
    return Sample(
        cgroup=(peak[0] - base[0]) / MIB,
        kernel=(peak[1] - base[1]) / MIB,
        host=(peak[2] - base[2]) / MIB,
        after=(after[0] - base[0]) / MIB,
        outcome=f"{outcome.status}{reason} {','.join(outcome.values)}"[:60],
    )


def measure(
    paths: list[Path], memory_mb: int = 64, repeat: int = 3, hold: float = 1.0, cpu_seconds: int = 5
) -> tuple[dict[str, Sample], str]:
    """{program name: median Sample over ``repeat`` rounds, idle subtracted}, and how it was measured."""
    limits = SandboxLimits(wall_seconds=hold + 8.0, cpu_seconds=cpu_seconds, memory_mb=memory_mb, workers=1)
    programs = {"idle": Program(IDLE, calls=(repr(hold),))}
    for path in paths:
        programs[path.stem] = Program(path.read_text(), calls=(repr(hold),))
    cg = MemoryCgroup.create()
    how = f"cgroup v{cg.version}" if cg else "no cgroup: /proc/meminfo only"
    rounds: dict[str, list[Sample]] = {name: [] for name in programs}
    try:
        with Sandbox(limits=limits, workers=1) as sb:
            how += f", isolation {sb.mode}, seccomp {sb.report.get('seccomp')}"
            for _ in range(repeat):
                # a fresh hash seed each round: fresh uids, so fresh names for the dentry attack
                # (a child has no entropy of its own); its servers start before the baseline
                seed = 1 + int.from_bytes(os.urandom(4), "big") % 4_294_967_295
                sb.run(dataclasses.replace(programs["idle"], hash_seed=seed))
                idle = measure_one(sb, cg, dataclasses.replace(programs["idle"], hash_seed=seed))
                rounds["idle"].append(idle)
                for name, program in programs.items():
                    if name == "idle":
                        continue
                    s = measure_one(sb, cg, dataclasses.replace(program, hash_seed=seed))
                    s.cgroup -= idle.cgroup
                    s.kernel -= idle.kernel
                    s.host -= idle.host
                    rounds[name].append(s)
    finally:
        if cg:
            cg.close()
    table = {}
    for name, samples in rounds.items():
        table[name] = Sample(
            cgroup=statistics.median(s.cgroup for s in samples),
            kernel=statistics.median(s.kernel for s in samples),
            host=statistics.median(s.host for s in samples),
            after=statistics.median(s.after for s in samples),
            outcome=samples[-1].outcome,
        )
    return table, how


def main(argv: list[str] | None = None) -> int:
    summary = __doc__.split("\n")[0]
    parser = argparse.ArgumentParser(prog="python -m populora.sandbox.kmem", description=summary)
    parser.add_argument("programs", nargs="*", type=Path)
    parser.add_argument("--memory-mb", type=int, default=64)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--hold", type=float, default=1.0, help="seconds each attack holds what it built")
    args = parser.parse_args(argv)
    paths = args.programs or sorted(DEFAULT_DIR.glob("kmem_*.py"))
    table, how = measure(paths, args.memory_mb, args.repeat, args.hold)
    print(f"memory_mb={args.memory_mb}, median of {args.repeat}, MiB beyond an idle program ({how})")
    print("| program | cgroup peak | of which kernel | host used | charged after exit | outcome |")
    print("| --- | ---: | ---: | ---: | ---: | --- |")
    for name, s in table.items():
        print(f"| {name} | {s.cgroup:.1f} | {s.kernel:.1f} | {s.host:.1f} | {s.after:.1f} | {s.outcome} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

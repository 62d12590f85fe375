"""Measure how often a coin flipped on an address passes the determinism check, bit by bit.

    python -m populora.sandbox.coin [--steps 40] [--bits 4,5,6,8,10,12,14,16,20,24,32] [--workers 1]

For each bit position ``b`` the program ``def f(x): return id(object()) >> b & 1`` runs as the
determinism check runs a code_o proposal with the AST filter off (which would reject ``id``): at
each of ``--steps`` steps, under four fresh hash seeds (the replicas of ``tasks.replicas``, whose
seeds ``tasks/determinism.py`` draws from the run seed and the step: new fork servers, new layouts
each step) and under a fifth (the check stage's re-run).
Printed per bit: how often the four executions agreed (validation accepts the coin), how often the
re-run then gave another answer (the forgery: a task whose gold changes), and the fraction of ones
over every execution. A fair coin is accepted 1/8 of the time and changed on half of those; a bit
no perturbation reaches is the same everywhere: accepted every time, never changed.

Issue 37 asked for it: a biased coin on address bits passed about 59% of the time when every fork
server had a random layout of its own.
"""

from __future__ import annotations

import argparse
import os

from populora.sandbox.api import Program, SandboxLimits
from populora.sandbox.executor import Sandbox

COIN = "def f(x):\n    return id(object()) >> {bit} & 1"


REPLICAS = 4  # tasks.replicas' default


def _seed() -> int:
    return 1 + int.from_bytes(os.urandom(4), "big") % 4_294_967_295


def measure(bits: list[int], steps: int, workers: int = 1) -> dict[int, dict]:
    """{bit: {"accepted", "changed", "ones", "n"}}: counts over ``steps`` steps (``ones`` over
    every execution)."""
    stats = {b: {"accepted": 0, "changed": 0, "ones": 0, "n": 0} for b in bits}
    with Sandbox(limits=SandboxLimits(wall_seconds=5.0), workers=workers) as sb:
        for _ in range(steps):
            seeds = [_seed() for _ in range(REPLICAS + 1)]  # the replicas, then the re-run
            programs = [Program(COIN.format(bit=b), calls=("0",), hash_seed=s) for s in seeds for b in bits]
            outcomes = sb.run_many(programs)
            for i, b in enumerate(bits):
                values = [outcomes[k * len(bits) + i].values for k in range(len(seeds))]
                if any(len(v) != 1 for v in values):
                    raise RuntimeError(f"bit {b}: {[o.reason for o in outcomes if not o.ok][:3]}")
                *replicas, rerun = [int(v[0]) for v in values]
                s = stats[b]
                s["n"] += 1
                s["ones"] += sum(replicas) + rerun
                if len(set(replicas)) == 1:
                    s["accepted"] += 1
                    s["changed"] += rerun != replicas[0]
    return stats


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--bits", default="4,5,6,8,10,12,14,16,20,24,32")
    parser.add_argument("--workers", type=int, default=1)
    args = parser.parse_args(argv)
    bits = [int(b) for b in args.bits.split(",")]
    stats = measure(bits, args.steps, args.workers)
    print(f"{args.steps} steps: {REPLICAS} replica seeds and the re-run's seed each")
    print(f"{'bit':>4}{'accepted':>10}{'changed':>9}{'ones':>7}")
    for b, s in stats.items():
        print(f"{b:>4}{s['accepted'] / s['n']:>10.2f}{s['changed'] / s['n']:>9.2f}{s['ones'] / (5 * s['n']):>7.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

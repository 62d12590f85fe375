"""`populora bench distributed`: seconds per self-play step on one rank vs W ranks, side by side.

The same run (``tiny`` 4T+4S by default: 8 members, one torch thread per rank) is trained once on one
rank and once on W local ranks started by torch's launcher (gloo), alternating, ``--repeats`` times
each; the first step of every run is a warm-up and is not timed. Per-step figures come from the
runs' own ``metrics.jsonl`` (``time/step_s``; ``time/collectives_s``: rank 0's time inside
collectives, which includes waiting for slower ranks; and the loop's per-phase ``time/*_s``, so that
the speed-up can be read phase by phase). Both runs must end with the same adapters;
the benchmark checks it and says so.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from populora.run_dir import RunDir


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", default=str(Path(__file__).resolve().parents[2] / "configs" / "tiny.yaml"))
    p.add_argument("--world", type=int, default=2, help="ranks of the distributed run (default 2)")
    p.add_argument("--steps", type=int, default=4, help="timed steps after one warm-up step")
    p.add_argument("--repeats", type=int, default=2, help="runs of each kind, alternated")
    p.add_argument("--teachers", type=int, default=4)
    p.add_argument("--students", type=int, default=4)
    p.add_argument("overrides", nargs="*", metavar="key=value")


def _run(config: str, overrides: list[str], world: int, run_dir: Path) -> list[dict]:
    train = ["-m", "populora.cli", "train", "--quiet", "--config", config, "--run-dir", str(run_dir), *overrides]
    cmd = [sys.executable, *train] if world == 1 else [
        sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={world}", *train]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"W={world} run failed:\n{out.stderr[-2000:]}")
    return RunDir(run_dir).read_metrics()


def _same_adapters(a: Path, b: Path) -> float:
    from populora.policy.adapters import AdapterWeights

    worst = 0.0
    for d in sorted(RunDir(a).adapters.iterdir()):
        wa, wb = AdapterWeights.load_peft(d), AdapterWeights.load_peft(RunDir(b).adapter_dir(d.name))
        for mod, (x, y) in wa.tensors.items():
            x2, y2 = wb.tensors[mod]
            worst = max(worst, float((x - x2).abs().max()), float((y - y2).abs().max()))
    return worst


# The step's phases as the loop times them (rank 0's wall clock; a phase that ends in a gather
# includes the wait for the slowest rank).
PHASES = ("generate", "validate", "solve", "check", "train", "evolve")


def run(args: argparse.Namespace) -> int:
    overrides = [*args.overrides, f"population.teachers={args.teachers}", f"population.students={args.students}",
                 f"selfplay.steps={args.steps + 1}", "run.tensorboard=false", "policy.cpu_threads=1"]
    keys = ("step", "collectives", *PHASES)
    times: dict[int, dict[str, list[float]]] = {w: {k: [] for k in keys} for w in (1, args.world)}
    worst = 0.0
    with tempfile.TemporaryDirectory() as tmp:
        for rep in range(args.repeats):
            dirs = {}
            for world in (1, args.world):
                rd = Path(tmp) / f"r{rep}-w{world}"
                rows = _run(args.config, overrides, world, rd)[1:]  # step 1 is the warm-up
                for k in keys:
                    times[world][k] += [r.get(f"time/{k}_s", 0.0) for r in rows]
                dirs[world] = rd
            worst = max(worst, _same_adapters(dirs[1], dirs[args.world]))
    med = {w: {k: statistics.median(v) for k, v in t.items()} for w, t in times.items()}
    one, many = med[1]["step"], med[args.world]["step"]
    shown = os.path.relpath(args.config) if Path(args.config).resolve().is_relative_to(Path.cwd()) else args.config
    print(f"config {shown}, {args.teachers}T+{args.students}S, {args.steps} timed steps x {args.repeats} runs "
          f"each, one torch thread per rank; median seconds per step")
    print(f"{'ranks':<6} {'step_s':>8} {'collectives_s':>14} {'in collectives':>15}")
    for world in (1, args.world):
        m = med[world]
        print(f"{world:<6} {m['step']:>8.2f} {m['collectives']:>14.3f} {m['collectives'] / m['step']:>14.1%}")
    print(f"speed-up of {args.world} ranks over 1: {one / many:.2f}x per step")
    print(f"median seconds per phase (rank 0):  {'':<4}" + "".join(f"{p:>10}" for p in PHASES))
    for world in (1, args.world):
        print(f"  {world} rank(s){'':<26}" + "".join(f"{med[world][p]:>10.2f}" for p in PHASES))
    print(f"  speed-up{'':<27}" + "".join(
        f"{med[1][p] / med[args.world][p]:>9.2f}x" if min(med[1][p], med[args.world][p]) >= 0.01 else f"{'-':>10}"
        for p in PHASES))
    print("  (phases under 10 ms at either size show '-')")
    print(f"final adapters, {args.world} ranks vs 1: max |difference| = {worst:.3g}")
    return 0

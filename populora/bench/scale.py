"""`populora bench scale`: how each part of the self-play step grows with the population.

The step runs at tiny shapes (``configs/tiny.yaml``: the random-init tiny Qwen2, HF engine, CPU,
one torch thread) with 2, 4, 8, 16, 32 and 64 members (half teachers, half students), each size in
a process of its own (so its peak RSS is its own). In every step evolution runs (``interval 1``,
``min_age 0``), a checkpoint is saved, read back and restored into the live run (what a resume
does), and the metrics row is written to ``metrics.jsonl``; the first step is a warm-up and is not
counted. Completions are short (``--new-tokens``, default 8) so that the bookkeeping around the
model, where a cost that grows faster than the population would hide, is not drowned by decoding.

Each stage's cost is the **CPU time of the process tree** (this process's ``process_time``, all its
threads, plus the sandbox's fork servers and their reaped children, read from ``/proc``), not wall
time: on a shared machine wall time moves with the other jobs' load, CPU time much less. Wall time
is printed beside it. Every size runs ``--repeats`` blocks of at least ``--block`` member-steps (default
half the largest size: a block is 1 step of 64 members, 4 steps of 8, 16 of 2), so that a stage whose
cost varies from step to step (evolution draws its operators at random) is averaged over comparable
numbers of members at every size; a stage's cost is the median over the blocks of its mean per step
within a block, and its per-member cost that divided by the members. The growth of a stage is its per-member cost at 64
members over its per-member cost at 8: 1.00x is linear, 8.00x quadratic.

Stages (the loop's phases, ``selfplay/loop.py``): matchmaking; ratings; generation (propose +
solve); verification (validate + check: the sandbox); training; evolution; publishing (publish +
check_served); logs and metrics (task buffers, the tasks/examples logs, the metrics row and its line
in ``metrics.jsonl``); checkpoint save; checkpoint load (verify, read, restore every member). Beside
them: checkpoint bytes per member, the resume time (a new run object, its founders, then the
checkpoint loaded and restored: ``populora train --resume`` without the interpreter's start) and the
peak RSS of the size's process.

A stage is judged when it costs at least ``JUDGED_SHARE`` of the 64-member step (the step's total
CPU time over the stages); a smaller one is shown with its growth but cannot cost the population a
percent of its step, whatever its growth. The last line is ``per-member growth 8->64 members: <worst
judged stage> N.NNx``. ``--write`` puts the table and a figure in ``docs/benchmarks/scale.md`` and
``docs/benchmarks/scale.png``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SIZES = (2, 4, 8, 16, 32, 64)
# stage -> the loop's phases it is made of (``Stopwatch`` names); the last four are timed here
STAGES: dict[str, tuple[str, ...]] = {
    "matchmaking": ("matchmaking",),
    "ratings": ("ratings",),
    "generation": ("propose", "solve"),
    "verification": ("validate", "check"),
    "training": ("train",),
    "evolution": ("evolve",),
    "publishing": ("publish", "check_served"),
    "logs & metrics": ("buffers", "metrics_log"),
    "checkpoint save": ("checkpoint_save",),
    "checkpoint load": ("checkpoint_load",),
}
JUDGED_SHARE = 0.01  # ours: a stage under 1% of the 64-member step is shown, not judged
GROWTH_LIMIT = 1.5  # the bound on per-member growth from 8 to 64 members
FROM, TO = 8, 64
CLK_TCK = os.sysconf("SC_CLK_TCK")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", default=str(ROOT / "configs" / "tiny.yaml"))
    p.add_argument("--sizes", default=",".join(map(str, SIZES)), help="population sizes (members, even)")
    p.add_argument("--repeats", type=int, default=2, help="timed blocks per size, after a warm-up step")
    p.add_argument("--block", type=int, default=0, metavar="MEMBER_STEPS",
                   help="member-steps of a block (default half the largest size: 32 for 64 members, so a block is "
                        "1 step of 64 members, 4 steps of 8); a size runs at least one step a block")
    p.add_argument("--new-tokens", type=int, default=8, help="max_new_tokens of teachers and students")
    p.add_argument("--sequences", type=int, default=3, help="selfplay.sequences_per_adapter (tiny: 6)")
    p.add_argument("--write", action="store_true",
                   help="write the table to docs/benchmarks/scale.md and the figure to docs/benchmarks/scale.png")
    p.add_argument("overrides", nargs="*", metavar="key=value")


# -- CPU time of the process tree ----------------------------------------------------------------
def _children_cpu() -> float:
    """CPU seconds of this process's children (the sandbox's fork servers) and of the children they
    reaped: utime + stime + cutime + cstime of each, from ``/proc`` (10 ms ticks)."""
    total = 0
    for task in os.listdir("/proc/self/task"):
        try:
            pids = Path(f"/proc/self/task/{task}/children").read_text().split()
        except OSError:
            continue
        for pid in pids:
            try:
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            total += sum(int(x) for x in fields[11:15])
    return total / CLK_TCK


def tree_cpu() -> tuple[float, float]:
    """CPU seconds of this process (every thread) and its children so far, as ``(before, after)`` the
    reading of ``/proc``: a stage ends at the first, the next begins at the second, so the reading's own
    cost falls in no stage."""
    before = time.process_time()
    children = _children_cpu()
    return before + children, time.process_time() + children


class StageClock:
    """Splits a step into the loop's phases: ``on_stage(name)`` (the loop's progress hook) closes the
    running phase and opens ``name``; ``close()`` ends the last. CPU and wall seconds per phase."""

    def __init__(self) -> None:
        self.cpu: dict[str, float] = {}
        self.wall: dict[str, float] = {}
        self._open: tuple[str, float, float] | None = None

    def on_stage(self, name: str) -> None:
        now_wall = time.perf_counter()
        end_cpu, start_cpu = tree_cpu()
        if self._open is not None:
            prev, c0, w0 = self._open
            self.cpu[prev] = self.cpu.get(prev, 0.0) + end_cpu - c0
            self.wall[prev] = self.wall.get(prev, 0.0) + now_wall - w0
        self._open = (name, start_cpu, time.perf_counter())

    def close(self) -> None:
        self.on_stage("")
        self._open = None


# -- one population size (in a process of its own) ----------------------------------------------
def block_steps(members: int, member_steps: int) -> int:
    """Steps of one timed block of ``member_steps`` member-steps (at least one step)."""
    return max(1, -(-member_steps // members))


def _size_overrides(members: int, steps: int, new_tokens: int, sequences: int) -> list[str]:
    return [f"population.teachers={members // 2}", f"population.students={members // 2}",
            f"selfplay.sequences_per_adapter={sequences}",
            f"selfplay.steps={steps + 2}", "evolution.interval=1", "evolution.min_age=0",
            f"selfplay.teacher_sampling.max_new_tokens={new_tokens}",
            f"selfplay.student_sampling.max_new_tokens={new_tokens}",
            "policy.cpu_threads=1", "run.tensorboard=false", "run.keep_checkpoints=1"]


def measure_size(config: str, overrides: list[str], members: int, steps: int, new_tokens: int,
                 sequences: int = 3) -> dict:
    """Run ``steps + 1`` steps of a ``members``-member population; per timed step, each stage's CPU and
    wall seconds (the first step is a warm-up); checkpoint bytes, resume seconds, peak RSS."""
    from populora import checkpoint
    from populora.config import load_config
    from populora.distributed.comm import LocalComm
    from populora.selfplay import state
    from populora.selfplay.loop import SelfPlay
    from populora.selfplay.metrics import MetricsLog
    from populora.selfplay.runner import _save

    cfg = load_config(config, list(overrides) + _size_overrides(members, steps, new_tokens, sequences))
    out: dict = {"members": members, "cpu": [], "wall": []}
    with tempfile.TemporaryDirectory(prefix="populora-scale-") as tmp:
        rd = Path(tmp)
        sp = SelfPlay(cfg, rd)
        log = MetricsLog(rd, tensorboard=False)
        clock = StageClock()
        sp.on_stage = clock.on_stage
        try:
            for step in range(1, steps + 2):
                clock.cpu, clock.wall = {}, {}
                row = sp.step(step)  # the loop's last phase ("buffers") stays open: the row is built in it
                clock.on_stage("metrics_log")
                log.log(step, row)
                clock.on_stage("checkpoint_save")
                _save(sp, rd, step, cfg, LocalComm())
                clock.on_stage("checkpoint_load")
                ckpt = checkpoint.load_checkpoint(checkpoint.list_checkpoints(rd / "checkpoints")[-1][1])
                state.restore(sp, ckpt)
                clock.close()
                if step > 1:  # step 1 is the warm-up (and seeds the buffers)
                    out["cpu"].append(dict(clock.cpu))
                    out["wall"].append(dict(clock.wall))
            path = checkpoint.list_checkpoints(rd / "checkpoints")[-1][1]
            out["checkpoint_bytes"] = sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
        finally:
            log.close()
            sp.close()
        t0, c0 = time.perf_counter(), tree_cpu()[1]  # resume: what `populora train --resume` does first
        again = SelfPlay(cfg, rd)
        try:
            state.restore(again, checkpoint.load_checkpoint(path))
            out["resume_s"] = time.perf_counter() - t0
            out["resume_cpu_s"] = tree_cpu()[0] - c0
        finally:
            again.close()
    out["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return out


def _measure_in_process(args: argparse.Namespace, members: int, block: int) -> dict:
    code = ("import json, sys; from populora.bench.scale import measure_size; "
            f"print('SCALE ' + json.dumps(measure_size({args.config!r}, {list(args.overrides)!r}, {members}, "
            f"{args.repeats * block_steps(members, block)}, {args.new_tokens}, {args.sequences})))")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT)
    lines = [x for x in done.stdout.splitlines() if x.startswith("SCALE ")]
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"bench scale: the {members}-member run failed:\n{done.stderr[-3000:]}")
    return json.loads(lines[-1][len("SCALE "):])


# -- the table --------------------------------------------------------------------------------------
def stage_costs(run: dict, kind: str = "cpu") -> dict[str, float]:
    """Each stage's seconds per step (``kind``: cpu or wall): the median over the run's blocks of the mean
    over a block's steps (a block: ``run["block"]`` consecutive timed steps)."""
    steps, block = run[kind], run.get("block", 1)
    blocks = [steps[i:i + block] for i in range(0, len(steps), block)]
    return {stage: statistics.median(statistics.fmean(sum(s.get(p, 0.0) for p in phases) for s in b) for b in blocks)
            for stage, phases in STAGES.items()}


def growth(runs: dict[int, dict], stage: str, lo: int = FROM, hi: int = TO) -> float:
    """Per-member CPU cost of ``stage`` at ``hi`` members over its per-member cost at ``lo``."""
    a, b = stage_costs(runs[lo])[stage] / lo, stage_costs(runs[hi])[stage] / hi
    return b / a if a > 0 else float("inf")


def judged(runs: dict[int, dict], hi: int = TO) -> list[str]:
    """The stages that cost at least ``JUDGED_SHARE`` of the ``hi``-member step."""
    costs = stage_costs(runs[hi])
    total = sum(costs.values())
    return [s for s, c in costs.items() if c >= JUDGED_SHARE * total]


def worst_line(runs: dict[int, dict]) -> str:
    stages = judged(runs)
    worst = max(stages, key=lambda s: growth(runs, s))
    return f"per-member growth {FROM}->{TO} members: {worst} {growth(runs, worst):.2f}x"


def table(runs: dict[int, dict]) -> list[str]:
    """The table as lines: per stage, per-member CPU milliseconds at each size, and the growth."""
    sizes = sorted(runs)
    have = FROM in runs and TO in runs
    marked = set(judged(runs)) if have else set()
    head = f"{'stage (CPU ms per member per step)':<36}" + "".join(f"{n:>9}" for n in sizes)
    head += f"{f'{FROM}->{TO}':>9}  judged" if have else ""
    lines = [head]
    costs = {n: stage_costs(runs[n]) for n in sizes}
    for stage in STAGES:
        line = f"{stage:<36}" + "".join(f"{1000 * costs[n][stage] / n:>9.2f}" for n in sizes)
        if have:
            line += f"{growth(runs, stage):>8.2f}x  {'yes' if stage in marked else 'no (<1% of the step)'}"
        lines.append(line)
    total = {n: sum(costs[n].values()) for n in sizes}
    wall = {n: sum(stage_costs(runs[n], 'wall').values()) for n in sizes}
    lines.append(f"{'step, CPU (ms per member)':<36}" + "".join(f"{1000 * total[n] / n:>9.1f}" for n in sizes))
    lines.append(f"{'step, wall (ms per member)':<36}" + "".join(f"{1000 * wall[n] / n:>9.1f}" for n in sizes))
    lines.append(f"{'checkpoint (KB per member)':<36}" + "".join(f"{runs[n]['checkpoint_bytes'] / 1e3 / n:>9.1f}" for n in sizes))
    lines.append(f"{'resume, CPU (ms per member)':<36}" + "".join(f"{1000 * runs[n]['resume_cpu_s'] / n:>9.1f}" for n in sizes))
    lines.append(f"{'resume, wall (ms per member)':<36}" + "".join(f"{1000 * runs[n]['resume_s'] / n:>9.1f}" for n in sizes))
    lines.append(f"{'peak RSS (MB)':<36}" + "".join(f"{runs[n]['peak_rss_mb']:>9.0f}" for n in sizes))
    return lines


def figure(runs: dict[int, dict], path: Path) -> None:
    """Per-member CPU cost of each stage against the population size (log-log): flat is linear."""
    from populora.extras import require

    matplotlib = require("matplotlib", "eval", "populora bench scale --write")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = sorted(runs)
    fig, ax = plt.subplots(figsize=(8.5, 4.8))
    for k, stage in enumerate(STAGES):
        ys = [1000 * stage_costs(runs[n])[stage] / n for n in sizes]
        ax.plot(sizes, [max(y, 1e-3) for y in ys], marker="o", ms=4, color=f"C{k % 10}",
                ls="-" if k < 10 else "--", label=stage)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks(sizes, [str(n) for n in sizes])
    ax.set_xlabel("members (half teachers, half students)")
    ax.set_ylabel("CPU ms per member per step")
    ax.set_title("per-member cost of each stage (flat = grows with the population, no faster)", fontsize=10)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def run(args: argparse.Namespace) -> int:
    sizes = [int(x) for x in args.sizes.split(",") if x.strip()]
    if not sizes or any(n < 2 or n % 2 for n in sizes) or args.repeats < 1:
        print(f"populora bench scale: --sizes must be even numbers >= 2 and --repeats >= 1, got {args.sizes!r}, "
              f"{args.repeats}", file=sys.stderr)
        return 2
    runs: dict[int, dict] = {}
    t0 = time.perf_counter()
    block = args.block or max(1, max(sizes) // 2)
    for n in sizes:
        runs[n] = _measure_in_process(args, n, block)
        runs[n]["block"] = block_steps(n, block)
        print(f"  {n} members: step {sum(stage_costs(runs[n]).values()):.2f} s CPU", file=sys.stderr, flush=True)
    shown = os.path.relpath(args.config, ROOT) if Path(args.config).resolve().is_relative_to(ROOT) else args.config
    header = (f"config {shown} {' '.join(args.overrides)}".rstrip() + f"; {args.sequences} sequences per member, "
              f"max_new_tokens {args.new_tokens}; evolution, checkpoint save and load every step; per size the median "
              f"of {args.repeats} blocks of >= {block} member-steps after a warm-up step; CPU time of the process "
              f"tree ({time.perf_counter() - t0:.0f} s in all)")
    lines = [header, *table(runs)]
    if FROM in runs and TO in runs:
        lines.append(worst_line(runs))
    print("\n".join(lines))
    if args.write:
        write_docs(args, runs, lines)
    return 0


def write_docs(args: argparse.Namespace, runs: dict[int, dict], lines: list[str]) -> None:
    """``docs/benchmarks/scale.md``'s measured block and ``scale.png`` (the prose around them is kept)."""
    bench = ROOT / "docs" / "benchmarks"
    figure(runs, bench / "scale.png")
    doc = bench / "scale.md"
    start, end = "<!-- measured: populora bench scale --write -->", "<!-- end measured -->"
    block = f"{start}\n```\n$ populora bench scale --write {' '.join(args.overrides)}".rstrip() + "\n" + "\n".join(lines) + f"\n```\n{end}"
    text = doc.read_text() if doc.is_file() else f"# `populora bench scale`\n\n{start}\n{end}\n"
    if start in text and end in text:
        text = text[: text.index(start)] + block + text[text.index(end) + len(end):]
    else:
        text += "\n" + block + "\n"
    doc.write_text(text)
    print(f"wrote {doc.relative_to(ROOT)} and {(bench / 'scale.png').relative_to(ROOT)}", file=sys.stderr)

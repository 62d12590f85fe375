"""`populora bench step`: wall-clock of one self-play step, 4T+4S population vs the baseline.

Both run side by side in one process on the same preset (``tiny`` by default), with per-stage
breakdown (generate, validate, solve, check, train, evolve, checkpoint). The population has 8
adapters that each train on the same per-adapter budget as the single baseline agent, so the
ratio population/baseline is what one pays for 8 compute-matched members instead of one (the
paper reports 1.31x on GPU with vLLM multi-LoRA batching).

Publishing is a stage of its own (``publish``: every changed adapter to the engine, loaded there;
``check_served``: the check that the engine scores fixed sequences as the trainer does), and the run
ends with each arm's publish share of the step for the engine the config names (``policy.engine=vllm``
among the overrides measures vLLM's). ``time_publish`` is the same measurement for one publish of N
members, for callers that hold a policy (the doctor).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

STAGES = ("matchmaking", "generate", "validate", "solve", "check", "train", "evolve", "publish", "check_served",
          "checkpoint")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", default=str(Path(__file__).resolve().parents[2] / "configs" / "tiny.yaml"))
    p.add_argument("--steps", type=int, default=3, help="timed steps after one warm-up step")
    p.add_argument("--teachers", type=int, default=4)
    p.add_argument("--students", type=int, default=4)
    p.add_argument("overrides", nargs="*", metavar="key=value")


def _time_run(config: str, overrides: list[str], steps: int) -> dict[str, float]:
    from populora.checkpoint import save_checkpoint
    from populora.config import load_config
    from populora.selfplay.loop import SelfPlay
    from populora.selfplay.state import checkpoint_payload

    cfg = load_config(config, overrides + [f"selfplay.steps={steps + 1}", "evolution.interval=1",
                                           "evolution.min_age=0"])
    with tempfile.TemporaryDirectory() as tmp:
        sp = SelfPlay(cfg, tmp)
        totals = {s: 0.0 for s in STAGES}
        totals["step"] = 0.0
        try:
            for step in range(1, steps + 2):
                t0 = time.perf_counter()
                row = sp.step(step)
                tc = time.perf_counter()
                adapters, opt, state = checkpoint_payload(sp)
                save_checkpoint(Path(tmp) / "checkpoints", step, adapters, opt, state, keep=1)
                row["time/checkpoint_s"] = time.perf_counter() - tc
                if step == 1:
                    continue  # warm-up: first-call costs (allocations, sandbox fork servers)
                totals["step"] += time.perf_counter() - t0
                for s in STAGES:
                    totals[s] += row.get(f"time/{s}_s", 0.0) or 0.0
        finally:
            sp.close()
    return {k: v / steps for k, v in totals.items()}


def time_publish(policy, names) -> float:
    """Seconds of one publish of ``names`` (each marked changed, then ``policy.publish()``: written and
    loaded by the engine; 0 work for an engine that serves the trainer's own weights)."""
    for name in names:
        policy.set_weights(name, policy.get_weights(name))
    t0 = time.perf_counter()
    policy.publish()
    return time.perf_counter() - t0


def _engine(config: str, overrides: list[str]) -> str:
    from populora.config import load_config

    return load_config(config, overrides).policy.engine


def run(args: argparse.Namespace) -> int:
    pop = _time_run(args.config, list(args.overrides) + [f"population.teachers={args.teachers}",
                                                         f"population.students={args.students}"], args.steps)
    base = _time_run(args.config, list(args.overrides) + ["population.baseline=true", "population.teachers=1",
                                                          "population.students=1"], args.steps)
    n = args.teachers + args.students
    print(f"config {args.config}; mean over {args.steps} steps after one warm-up step (seconds per step)")
    print(f"{'stage':<12} {f'{args.teachers}T+{args.students}S':>10} {'baseline':>10} {'ratio':>7}")
    for s in (*STAGES, "step"):
        ratio = f"{pop[s] / base[s]:>7.2f}" if base[s] >= 1e-3 else f"{'-':>7}"  # no ratio of near-zero times
        print(f"{s:<12} {pop[s]:>10.3f} {base[s]:>10.3f} {ratio}")
    print(f"wall-clock ratio population/baseline: {pop['step'] / base['step']:.2f}x for {n} adapters "
          f"(vs {n}.00x for {n} independent single-agent runs)")
    engine = _engine(args.config, list(args.overrides))
    for arm, t in ((f"{args.teachers}T+{args.students}S", pop), ("baseline", base)):
        print(f"publish share of the step ({arm}, engine {engine}): publish {100 * t['publish'] / t['step']:.1f}%, "
              f"publish + check {100 * (t['publish'] + t['check_served']) / t['step']:.1f}%")
    return 0

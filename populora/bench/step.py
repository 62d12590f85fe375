"""`populora bench step`: wall-clock of one self-play step, 4T+4S population vs the baseline.

Both run side by side in one process on the same preset (``tiny`` by default), with per-stage
breakdown (generate, validate, solve, check, train, evolve, checkpoint). The population has 8
adapters that each train on the same per-adapter budget as the single baseline agent, so the
ratio population/baseline is what one pays for 8 compute-matched members instead of one (the
paper reports 1.31x on GPU with vLLM multi-LoRA batching).

Publishing is a stage of its own (``publish``: every changed adapter to the engine, loaded there;
``check_served``: the check that the engine scores fixed sequences as the trainer does), and the run
ends with each arm's publish share of the step for the engine the config names (``policy.engine=vllm``
among the overrides measures vLLM's). ``populora.policy.backend.time_publish`` is the same measurement
for one publish of N members, for callers that hold a policy (the doctor).
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
    p.add_argument("--publish-sizes", default="", metavar="PRESET",
                   help="also time one publish of the population at PRESET's adapter sizes (its base's shape, LoRA "
                        "rank and targets) through each route the vLLM engine could take, e.g. configs/4t4s-7b.yaml")
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


def preset_adapter(preset: str, seed: int, dtype):
    """Random ``AdapterWeights`` at ``preset``'s adapter sizes (its base's shape from the plan's table,
    its LoRA rank and targets), in ``dtype``: what one member publishes at that scale."""
    import torch

    from populora.config import load_config
    from populora.plan.shapes import model_shape
    from populora.policy.adapters import AdapterWeights

    cfg = load_config(preset)
    shape, lora = model_shape(cfg.policy.model), cfg.policy.lora
    blocks = {"q_proj": "self_attn", "k_proj": "self_attn", "v_proj": "self_attn", "o_proj": "self_attn",
              "gate_proj": "mlp", "up_proj": "mlp", "down_proj": "mlp"}
    g = torch.Generator().manual_seed(seed)
    tensors = {}
    for layer in range(shape.layers):
        for name, (d_in, d_out) in shape.projection_dims().items():
            if name in lora.target_modules:
                tensors[f"model.layers.{layer}.{blocks[name]}.{name}"] = (
                    torch.randn(lora.rank, d_in, generator=g).to(dtype), torch.randn(d_out, lora.rank, generator=g).to(dtype))
    return AdapterWeights(lora.rank, lora.alpha, list(lora.target_modules), tensors), cfg.policy.model


def _write(weights, root: Path, pool) -> None:
    """Every adapter as a PEFT directory under ``root``: one after another, or on ``pool``'s threads."""
    jobs = [(w, root / f"m{i}") for i, w in enumerate(weights)]
    if pool is None:
        for w, path in jobs:
            w.save_peft(path)
    else:
        list(pool.map(lambda job: job[0].save_peft(job[1]), jobs))


def publish_routes(preset: str, members: int) -> list[tuple[str, float, float]]:
    """``(route, seconds, MB)`` of one publish of ``members`` adapters at ``preset``'s sizes, per route:
    PEFT files (float32 as vLLM's CPU build computes, bf16 as CUDA does) on the disk of ``$TMPDIR`` and in
    ``/dev/shm``, written one after another or in parallel threads; then vLLM's own loader reading them
    (``LoRAModel.from_local_checkpoint``, what the engine process runs on ``add_lora``), and the in-memory
    route: the tensors serialised as they must be to reach the engine's process (pickle, one copy) and
    vLLM's ``LoRAModel.from_lora_tensors``. Seconds are the median of 3."""
    import pickle
    import shutil
    import statistics
    import tempfile
    from concurrent.futures import ThreadPoolExecutor
    from functools import partial

    import torch

    from populora.extras import require

    def median(fn) -> float:
        times = []
        for _ in range(3):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        return statistics.median(times)

    out = []
    roots = [("disk", Path(tempfile.gettempdir()))] + ([("/dev/shm", Path("/dev/shm"))] if Path("/dev/shm").is_dir() else [])
    for dtype, label in ((torch.float32, "float32"), (torch.bfloat16, "bf16")):
        weights = [preset_adapter(preset, i, dtype)[0] for i in range(members)]
        mb = sum(t.numel() * t.element_size() for w in weights for ab in w.tensors.values() for t in ab) / 1e6
        for where, root in roots:
            tmp = Path(tempfile.mkdtemp(prefix="populora-publish-", dir=root))
            try:
                out.append((f"files, {where}, {label}", median(partial(_write, weights, tmp, None)), mb))
                with ThreadPoolExecutor(members) as pool:
                    out.append((f"files, {where}, {label}, {members} threads",
                                median(partial(_write, weights, tmp, pool)), mb))
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
        del weights
    # what the engine does with them: vLLM's loader, from files or from tensors handed over in memory
    vllm_lora = require("vllm.lora.lora_model", "vllm", "populora bench step --publish-sizes")
    from vllm.lora.peft_helper import PEFTHelper

    weights, model = preset_adapter(preset, 0, torch.bfloat16)
    expected = set(weights.target_modules)
    tmp = Path(tempfile.mkdtemp(prefix="populora-publish-", dir="/dev/shm" if Path("/dev/shm").is_dir() else None))
    try:
        path = weights.save_peft(tmp / "m0", base_model_name_or_path=model)
        helper = PEFTHelper.from_local_dir(str(path), None)
        load = median(lambda: vllm_lora.LoRAModel.from_local_checkpoint(str(path), expected, helper, lora_model_id=1,
                                                                        device="cpu", dtype=torch.bfloat16))
        state = {f"base_model.model.{m}.lora_{x}.weight": t for m, ab in weights.tensors.items()
                 for x, t in zip("AB", ab)}
        handover = median(lambda: pickle.loads(pickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL)))
        build = median(lambda: vllm_lora.LoRAModel.from_lora_tensors(1, state, helper, device="cpu",
                                                                   dtype=torch.bfloat16))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    mb = sum(t.numel() * t.element_size() for t in state.values()) / 1e6
    out.append(("vLLM loads the files (from /dev/shm, bf16)", members * load, members * mb))
    out.append(("in memory: tensors to the engine's process + vLLM builds them", members * (handover + build),
                members * mb))
    return out


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
    if args.publish_sizes:
        print_publish_routes(args.publish_sizes, n, pop["step"] - pop["publish"])
    return 0


def print_publish_routes(preset: str, members: int, step_without_publish: float) -> None:
    """One publish of ``members`` adapters at ``preset``'s sizes, per route, and its share of a step that
    took ``step_without_publish`` seconds besides publishing (the step measured above)."""
    print()
    print(f"one publish of {members} adapters at the adapter sizes of {preset}; share = publish / (the step above "
          f"without its publish, {step_without_publish:.2f} s, + publish); median of 3")
    print(f"{'route':<62} {'MB':>8} {'seconds':>8} {'share':>6}")
    for route, seconds, mb in publish_routes(preset, members):
        print(f"{route:<62} {mb:>8.0f} {seconds:>8.2f} {100 * seconds / (step_without_publish + seconds):>5.1f}%")

"""The doctor's run: every stage for every preset, in order, and the dry run that only says what it would do.

Order per preset: training (the random model, every member's update) -> the HF engine's arms on that
trainer -> the trainer is freed -> vLLM's arms in a child process. The all-reduce runs once, first,
in spawned ranks. A stage that fails is a line in the report and the doctor goes on.
"""

from __future__ import annotations

import gc
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from populora.doctor.records import DoctorReport, PresetReport

REPO = Path(__file__).resolve().parents[2]
CPU_RANKS = 2  # gloo ranks of the CPU all-reduce


@dataclass(frozen=True)
class Options:
    configs: tuple[str, ...]
    device: str  # cuda | cpu
    overrides: tuple[str, ...] = ()
    min_headroom: float = 0.10
    tests: bool = False
    command: str = "populora doctor"


def default_configs(device: str) -> tuple[str, ...]:
    """Every 7B preset on CUDA, the tiny preset on CPU (from the source tree's configs/)."""
    found = sorted((REPO / "configs").glob("*-7b.yaml")) if device == "cuda" else [REPO / "configs" / "tiny.yaml"]
    return tuple(str(p) for p in found if p.is_file())


def preset_config(path: str, overrides: tuple[str, ...], device: str):
    """The preset with ``policy.device`` set to the doctor's device."""
    from populora.config import load_config

    return load_config(path, [*overrides, f"policy.device={device}"])


def allreduce_plan(device: str) -> tuple[str, int]:
    """``(backend, ranks)``: NCCL over every local GPU, or gloo over 2 local CPU ranks."""
    import torch

    if device == "cuda":
        return "nccl", max(1, torch.cuda.device_count())
    return "gloo", CPU_RANKS


def device_gib(device: str, fallback: float = 80.0) -> tuple[float, str]:
    """The memory the plan is checked against: GPU 0's, or host RAM on CPU; ``fallback`` when absent."""
    import torch

    from populora.doctor.devices import _read, meminfo_gib

    if device == "cuda":
        if torch.cuda.is_available():
            return torch.cuda.get_device_properties(0).total_memory / 2**30, "GPU 0"
        return fallback, f"no GPU here: the presets' {fallback:g} GiB GPU"
    ram = meminfo_gib(_read("/proc/meminfo"))
    return (ram, "host RAM") if ram else (fallback, "host RAM unknown")


def dry_run_text(opts: Options) -> str:
    """What ``populora doctor`` would run for ``opts``, from the configs alone (no GPU, no weights)."""
    from populora.doctor.allreduce import default_sizes
    from populora.doctor.generation import NEW_TOKENS, PROMPTS_PER_ADAPTER
    from populora.doctor.training import members, sequence_lengths
    from populora.plan import check_plan
    from populora.plan.shapes import model_shape

    backend, _ = allreduce_plan(opts.device)
    gib, where = device_gib(opts.device)
    ranks = "every local GPU" if opts.device == "cuda" else f"{CPU_RANKS} local CPU ranks"
    sizes = ", ".join(f"{s / 2**20:g} MiB" for s in default_sizes(backend))
    lines = [f"populora doctor --device {opts.device}: dry run (nothing is started)",
             f"all-reduce: {backend}, float32 sum over {ranks}, sizes {sizes}; algbw and busbw = algbw x 2(n-1)/n"]
    for path in opts.configs:
        cfg = preset_config(path, opts.overrides, opts.device)
        plan = check_plan(cfg, gib, min_headroom=opts.min_headroom)
        shape = model_shape(cfg.policy.model)
        prompt, completion = sequence_lengths(cfg)
        roster = members(cfg)
        lines += [
            "", f"preset {cfg.name} ({path})",
            f"  model: {cfg.policy.model}, random weights, shape from {shape.source}: hidden {shape.hidden}, "
            f"intermediate {shape.intermediate}, layers {shape.layers}, heads {shape.heads}/{shape.kv_heads} (kv), "
            f"head_dim {shape.head_dim}, vocab {shape.vocab}, {shape.n_params() / 1e9:.3f} B parameters",
            f"  training: {len(roster)} member(s), one update each through train_member: {cfg.policy.train_micro_batch} "
            f"sequences x ({prompt} + {completion}) tokens, LoRA rank {cfg.policy.lora.rank}, gradient checkpointing "
            f"{'on' if cfg.policy.gradient_checkpointing else 'off'}",
            f"  generation: hf engine, and vllm where importable: mixed / one_adapter / base arms, "
            f"{len(roster) * PROMPTS_PER_ADAPTER} requests, {NEW_TOKENS[opts.device]} new tokens"
            + ("; sleep/wake timed" if opts.device == "cuda" and cfg.policy.vllm.sleep_between_phases else ""),
            f"  plan on {gib:.1f} GiB ({where}): {'fits' if plan.fits else 'DOES NOT FIT'}, peak {plan.peak_gib:.2f} GiB; items (GiB):",
        ]
        lines += [f"    {k:<20} {v:>10.3f}" for k, v in plan.items.items()]
    if opts.tests:
        lines.append("\ntests: pytest -m gpu")
    return "\n".join(lines)


def run_preset(path: str, opts: Options, gib: float) -> PresetReport:
    import torch

    from populora.doctor.generation import hf_generation, vllm_generation
    from populora.doctor.training import run_training
    from populora.doctor.verdict import compare, verdict
    from populora.plan import check_plan, fix_overrides

    cfg = preset_config(path, opts.overrides, opts.device)
    plan = check_plan(cfg, gib, min_headroom=opts.min_headroom)
    training, backend = run_training(cfg, opts.device)
    generation = []
    if backend is not None:
        generation.append(hf_generation(cfg, backend, opts.device))
        backend.close()
    del backend
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    generation.append(vllm_generation(path, [*opts.overrides, f"policy.device={opts.device}"], opts.device))
    measures = list(training.memory) + [m for g in generation for m in g.memory]
    items = compare(plan, measures)
    oom = next((e for e in [training.error, *(g.error for g in generation)] if e and "OutOfMemory" in e), None)
    plan_json = plan.to_json()
    plan_json["fix_overrides"] = [fix_overrides(f) for f in plan.fixes]
    return PresetReport(cfg.name, path, training, tuple(generation), items, verdict(cfg.name, plan, items, oom), plan_json)


def run_tests() -> dict:
    """``pytest -m gpu`` from the source tree: exit status and its last line."""
    if not (REPO / "tests").is_dir():
        return {"exit_status": None, "summary": "no tests/ directory next to this package: not run"}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-m", "gpu", "-q", "tests"], cwd=REPO,
                          capture_output=True, text=True)
    lines = proc.stdout.strip().splitlines()
    return {"exit_status": proc.returncode, "summary": lines[-1] if lines else proc.stderr.strip()[-300:]}


def run_doctor(opts: Options) -> DoctorReport:
    import os

    from populora.distributed.env import allocator_conf
    from populora.doctor.allreduce import run_allreduce
    from populora.doctor.devices import probe_devices

    # the trainer's allocator settings as `populora train` gives them (before CUDA starts), so the
    # measured memory is the run's
    if (conf := allocator_conf(os.environ)) is not None:
        os.environ["PYTORCH_CUDA_ALLOC_CONF"] = conf
    t0 = time.perf_counter()
    device = probe_devices(opts.device)
    backend, ranks = allreduce_plan(opts.device)
    allreduce = run_allreduce(backend, ranks)
    gib, _ = device_gib(opts.device)
    presets = tuple(run_preset(path, opts, gib) for path in opts.configs)
    tests = run_tests() if opts.tests else None
    return DoctorReport(device, allreduce, presets, tests, time.perf_counter() - t0, opts.command)


def exit_status(report: DoctorReport) -> int:
    """0: every preset fits and every stage ran; 3: a preset does not fit; 1: a stage failed or the
    GPU tests failed (a preset that does not fit takes precedence)."""
    if any(not p.verdict.fits for p in report.presets):
        return 3
    failed = report.allreduce.error or any(
        p.training.error or any(g.error and "not importable" not in g.error for g in p.generation)
        for p in report.presets)
    tests_failed = report.tests is not None and report.tests.get("exit_status") not in (0, 5, None)
    return 1 if failed or tests_failed else 0

"""Mixed-adapter generation vs one adapter vs the base model, on the HF engine and on vLLM.

The same prompts go to every arm (``populora bench generate``'s prompts: ``prompts_per_adapter`` per
member), greedy, with ``new_tokens`` new tokens at most; one warm-up call first (every prompt for its
mixed member and one for the base, 2 tokens: every adapter runs, the prefill has the arms' size, and
it starts vLLM's engine), then the arms one after another:

- ``mixed``: one call, each request for its own member (every member of the preset);
- ``one_adapter``: the same prompts, all for the first member;
- ``base``: the same prompts for the bare base model.

The paper's 1.31x wall-clock figure for a population in one model rests on ``mixed`` costing about
what ``one_adapter`` costs; the report prints both ratios.

The HF engine runs in the doctor's process on the trainer of the training stage. vLLM runs in a
child process (``python -m populora.doctor.generation``), which builds its own trainer (random
weights, the preset's adapters) and the project's vLLM engine (``policy/vllm_engine.py``) beside it,
as a run does: on CUDA from a directory holding only the preset's ``config.json`` with vLLM's
``load_format="dummy"`` (random weights, nothing downloaded); on CPU (vLLM's CPU build) the tiny
model from its directory, in the child's own process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``). In a
child, vLLM's changes to the process (torch threads, environment) end with it, and a crash of the
engine is a line in the report, not the doctor's end. On CUDA the child also measures the engine's
device memory (``torch.cuda.mem_get_info`` before and after it starts, with the trainer resident)
and, where the preset sleeps the engine between phases, the sleep and wake times and the memory
left while it sleeps. vLLM's CPU platform has no sleep mode.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from populora.doctor.records import ArmTiming, GenerationResult, Measure

ARMS = ("mixed", "one_adapter", "base")
PROMPTS_PER_ADAPTER = 2  # as `populora bench generate`
NEW_TOKENS = {"cuda": 128, "cpu": 32}  # ours: long enough for decoding to dominate, short enough for minutes
VLLM_CPU_ENV = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0", "VLLM_LOGGING_LEVEL": "WARNING"}
CHILD_TIMEOUT_S = {"cuda": 1200, "cpu": 600}


RATIO_LABELS = {
    "mixed/one_adapter": "seconds of one call with every member's requests over the same requests all for one "
                         "member: what serving the population in one batch costs beyond serving one adapter",
    "mixed/base": "seconds of the mixed call over the same requests on the bare base: the LoRA cost of the engine",
}
HF_RATIO_NOTE = ("on the HF engine mixed/one_adapter measures the trainer's multi-adapter LoRA product "
                 "(policy/multi_lora.py: one grouped product over the batch's adapters per layer), not the "
                 "population's cost on vLLM's multi-LoRA kernels")


def arm_ratios(result: GenerationResult) -> dict[str, float | None]:
    """Wall-clock ratios of the arms (same prompts, same tokens budget): ``mixed/one_adapter`` and
    ``mixed/base`` are seconds over seconds (1.0: the population costs nothing extra)."""
    def seconds(arm):
        a = result.arm(arm)
        return a.seconds if a is not None and a.seconds > 0 else None

    mixed = seconds("mixed")
    out: dict[str, float | None] = {}
    for other in ("one_adapter", "base"):
        s = seconds(other)
        out[f"mixed/{other}"] = mixed / s if mixed is not None and s is not None else None
    return out


def time_arms(policy, names: list[str], new_tokens: int, fresh=lambda: None) -> tuple[tuple[ArmTiming, ...], float]:
    """``(arm timings, warm-up seconds)`` of the arms on ``policy`` (a ``Policy``: trainer + engine)."""
    from populora.bench.generate import _prompts
    from populora.policy.base import GenerationRequest, SamplingParams

    prompts = _prompts(policy.tokenizer, len(names) * PROMPTS_PER_ADAPTER)
    batches = {"mixed": [GenerationRequest(p, names[i % len(names)]) for i, p in enumerate(prompts)],
               "one_adapter": [GenerationRequest(p, names[0]) for p in prompts],
               "base": [GenerationRequest(p, None) for p in prompts]}
    greedy = SamplingParams(temperature=0, max_new_tokens=new_tokens)
    t0 = time.perf_counter()  # warm-up: every prompt for its mixed member and one for the base, 2 tokens
    policy.generate([*batches["mixed"], GenerationRequest(prompts[0], None)], SamplingParams(temperature=0, max_new_tokens=2))
    warmup = time.perf_counter() - t0
    out = []
    for arm in ARMS:
        fresh()
        t0 = time.perf_counter()
        results = policy.generate(batches[arm], greedy)
        fresh()
        seconds = time.perf_counter() - t0
        out.append(ArmTiming(arm, seconds, sum(len(c.token_ids) for r in results for c in r.completions)))
    return tuple(out), warmup


def _cuda_sync():
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()


def hf_generation(cfg, backend, device: str) -> GenerationResult:
    """The HF engine's arms on the training stage's trainer (its adapters are the preset's members)."""
    from populora.policy.backend import Policy
    from populora.policy.engine import engine_class

    config = backend.config.replace(engine="hf")
    policy = Policy(config, backend, engine_class("hf")(config, backend))
    names = backend.adapter_names()
    new_tokens = NEW_TOKENS["cuda" if device == "cuda" else "cpu"]
    from populora.policy.backend import time_publish

    try:
        arms, warmup = time_arms(policy, names, new_tokens, _cuda_sync)
        publish_s = time_publish(policy, names)
    except Exception as e:
        return GenerationResult("hf", device, len(names), len(names) * PROMPTS_PER_ADAPTER, new_tokens,
                                error=f"{type(e).__name__}: {_first_line(e)}")
    return GenerationResult("hf", device, len(names), len(names) * PROMPTS_PER_ADAPTER, new_tokens, arms,
                            start_s=warmup, publish_s=publish_s, notes=(HF_RATIO_NOTE, "warm-up (start_s) excluded from the arms' times",
                                                   "sleep/wake: the HF engine is the trainer; nothing sleeps"))


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else ""


def vllm_generation(config_path: str, overrides: list[str], device: str, seed: int = 0,
                    timeout_s: float | None = None) -> GenerationResult:
    """vLLM's arms in a child process (module docstring); an error or a timeout is the result's error.
    ``timeout_s`` (the doctor's budget left) caps the child's own limit."""
    import importlib.util

    if importlib.util.find_spec("vllm") is None:
        return GenerationResult("vllm", device, 0, 0, 0, error="vLLM is not importable here: no vLLM arms")
    env = dict(os.environ)
    if device != "cuda":
        for k, v in VLLM_CPU_ENV.items():
            env.setdefault(k, v)
    with tempfile.TemporaryDirectory(prefix="populora-doctor-vllm-") as tmp:
        out = Path(tmp) / "generation.json"
        cmd = [sys.executable, "-m", "populora.doctor.generation", "--config", config_path, "--device", device,
               "--out", str(out), "--workdir", tmp, *overrides]
        limit = CHILD_TIMEOUT_S[device] if timeout_s is None else max(1.0, min(CHILD_TIMEOUT_S[device], timeout_s))
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=limit)
        except subprocess.TimeoutExpired:
            return GenerationResult("vllm", device, 0, 0, 0, error=f"the vLLM child did not finish in {limit:.0f} s")
        if out.is_file():
            return GenerationResult.from_json(json.loads(out.read_text()))
        tail = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        return GenerationResult("vllm", device, 0, 0, 0, error=f"the vLLM child exited {proc.returncode}: {tail}")


def served_rank(rank: int) -> int:
    """The smallest LoRA rank every supported vLLM serves that is >= ``rank`` (the rank itself when served)."""
    from populora.policy.vllm_api import supported_lora_ranks

    ranks = supported_lora_ranks()
    return next((r for r in ranks if r >= rank), ranks[-1])


def _child(args: argparse.Namespace) -> int:
    """Runs in the child: the vLLM arms of one preset, written as JSON to ``args.out``."""
    import torch

    from populora.config import load_config
    from populora.doctor.model import is_tiny, random_model, write_model_dir
    from populora.doctor.training import members
    from populora.policy.backend import Policy, time_publish
    from populora.policy.engine import EngineContext
    from populora.policy.hf import HFBackend
    from populora.policy.vllm_engine import VLLMEngine

    cfg = load_config(args.config, args.overrides)
    on_cuda = args.device == "cuda"
    notes: list[str] = []
    rank = served_rank(cfg.policy.lora.rank)
    if rank != cfg.policy.lora.rank:
        notes.append(f"LoRA rank {rank} instead of the preset's {cfg.policy.lora.rank}: the smallest rank vLLM serves")
    lora = {"rank": rank, "alpha": 2 * rank, "target_modules": list(cfg.policy.lora.target_modules),
            "init": "random", "b_std": 0.02}  # b_std as bench generate: adapters that really differ
    vllm = {"enforce_eager": True} if not on_cuda else {}
    model_name = cfg.policy.model
    if not is_tiny(model_name):
        model_name = str(write_model_dir(cfg.policy.model, Path(args.workdir) / "model"))
        vllm["load_format"] = "dummy"
        notes.append("vLLM started from the preset's config.json with load_format=dummy (random weights)")
    policy_cfg = cfg.policy.from_mapping({**cfg.policy.to_dict(), "engine": "vllm", "device": args.device,
                                          "model": model_name, "lora": lora,
                                          "vllm": {**cfg.policy.to_dict()["vllm"], **vllm,
                                                   "sleep_between_phases": on_cuda and cfg.policy.vllm.sleep_between_phases}})
    dtype = policy_cfg.dtype if policy_cfg.dtype != "auto" else ("bfloat16" if on_cuda else "float32")
    model, tokenizer, _ = random_model(cfg.policy.model, args.device, dtype, seed=cfg.seed)
    trainer = HFBackend(policy_cfg, adamw=cfg.rl.adamw_kwargs(), model=model, tokenizer=tokenizer)
    names = [n for n, _ in members(cfg)]
    for i, n in enumerate(names):
        trainer.add_adapter(n, trainer.new_adapter_weights(seed=i))
    new_tokens = NEW_TOKENS["cuda" if on_cuda else "cpu"]
    engine = VLLMEngine(policy_cfg, trainer, max_new_tokens=new_tokens, context=EngineContext(seed=cfg.seed))
    policy = Policy(policy_cfg, trainer, engine)
    base = dict(engine="vllm", device=args.device, adapters=len(names), requests=len(names) * PROMPTS_PER_ADAPTER,
                new_tokens=new_tokens)
    memory: list[Measure] = []
    sleep_s = wake_s = None
    set_num_threads = torch.set_num_threads  # an in-process vLLM on CPU replaces it with a no-op
    try:
        free0 = torch.cuda.mem_get_info()[0] if on_cuda else None

        def fresh():
            if engine._llm is not None:
                engine.llm.reset_prefix_cache()
            _cuda_sync()

        arms, warmup = time_arms(policy, names, new_tokens, fresh)
        publish_s = time_publish(policy, names)  # every member's weights written and loaded by the engine
        if on_cuda:
            free1 = torch.cuda.mem_get_info()[0]
            awake = float(free0 - free1)
            memory.append(Measure("engine", awake, "torch.cuda.mem_get_info: device memory free before the engine "
                                  "started minus free after its warm-up and arms (trainer resident throughout)"))
            if policy_cfg.vllm.sleep_between_phases:
                t0 = time.perf_counter()
                engine.sleep()
                sleep_s = time.perf_counter() - t0
                asleep = float(free0 - torch.cuda.mem_get_info()[0])
                memory.append(Measure("engine_asleep", asleep, "as engine, while the engine sleeps (level 1)"))
                t0 = time.perf_counter()
                engine.wake()
                wake_s = time.perf_counter() - t0
            else:
                notes.append("sleep/wake: not timed, the preset keeps the engine awake "
                             "(policy.vllm.sleep_between_phases=false)")
        else:
            notes.append("sleep/wake: not available on CPU (vLLM's CPU platform has no sleep mode)")
            notes.append("engine memory: not measured on CPU (vLLM holds the KV cache it is given, "
                         f"policy.vllm.cpu_kv_cache_gib={policy_cfg.vllm.cpu_kv_cache_gib:g}, in host RAM)")
        result = GenerationResult(**base, arms=arms, start_s=warmup, sleep_s=sleep_s, wake_s=wake_s,
                                  memory=tuple(memory), notes=tuple(notes), publish_s=publish_s)
    except Exception as e:
        result = GenerationResult(**base, notes=tuple(notes), error=f"{type(e).__name__}: {_first_line(e)}")
    finally:
        policy.close()
        torch.set_num_threads = set_num_threads
    from populora.doctor.records import to_json

    Path(args.out).write_text(json.dumps(to_json(result)))
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m populora.doctor.generation",
                                description="the doctor's vLLM arms for one preset (a child process of populora doctor)")
    p.add_argument("--config", required=True)
    p.add_argument("--device", choices=("cuda", "cpu"), required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--workdir", required=True)
    p.add_argument("overrides", nargs="*")
    return _child(p.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())


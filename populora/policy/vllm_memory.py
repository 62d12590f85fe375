"""The vLLM engine's part of the memory plan (``VLLMEngine.plan_memory`` and ``plan_knobs``).

Awake, the engine holds its whole ``policy.vllm.gpu_memory_utilization`` share of the GPU: its own
copy of the base, the LoRA slots, a non-KV overhead (its profiling forward, sampler buffers, CUDA
graphs) and the KV cache, which gets what is left. While the trainer runs it keeps that share, or
only a residue when it sleeps between phases (``policy.vllm.sleep_between_phases``). It runs in a
process of its own (a second CUDA context, ``VLLMEngine.cuda_processes``). It cannot start when its
KV cache holds less than one sequence of ``max_model_len`` tokens. The plan's fix search may turn
sleep mode on and move the share.

``inputs`` is the plan's ``PlanInputs`` (``populora/plan/memory.py``): read through its attributes,
not imported, so this module stays below the plan.
"""

from __future__ import annotations

from populora.policy.engine_memory import EngineMemory, Knob
from populora.policy.vllm_launch import model_len

GIB = float(1 << 30)

# -- estimates (ours), not measured here: no GPU on the development machines ---------------------
VLLM_SLEEP_RESIDUE_GIB = 1.0  # what a level-1 sleeping engine keeps: CUDA graph pools, buffers
VLLM_CUDA_GRAPHS_GIB = 0.5  # captured CUDA graphs (none with enforce_eager)
VLLM_BATCHED_TOKENS = 16384  # tokens of vLLM's profiling forward (its max_num_batched_tokens)
VLLM_MAX_SEQS = 1024  # sequences whose sampler logits vLLM sizes for (its max_num_seqs)
SHARE_STEPS = [round(0.05 * k, 2) for k in range(1, 20)]  # shares the fix search tries (ours: 5% steps)


def max_model_len(inputs) -> int:
    """The tokens of one sequence the engine sizes its KV cache for (``vllm_launch.model_len``, as
    ``VLLMEngine`` computes it) for the plan's longest completion."""
    return model_len(inputs.policy, inputs.new_tokens)


def lora_slots(inputs) -> int:
    """LoRA slots of the engine: ``policy.vllm.max_loras``, or one per member (``VLLMEngine.llm``; on CPU one
    more for the all-zero base adapter, not counted here: the plan is a GPU's)."""
    return inputs.policy.vllm.max_loras or inputs.adapters


def swapping(inputs) -> str:
    """When the engine swaps adapters: every rank's engine serves every member (requests are dealt round
    robin), so with fewer slots than members a generate call loads adapters into slots as requests of
    other members are scheduled (from vLLM's host cache of ``max_cpu_loras``, else from the published
    files), and evicts others."""
    slots, members = lora_slots(inputs), inputs.adapters
    if slots >= members:
        return f"{slots} slots for {members} members: no swapping"
    cache = max(inputs.policy.vllm.max_cpu_loras or 2 * slots, slots)
    source = "its host cache" if cache >= members else f"its host cache of {cache} and the published files"
    return (f"{slots} slots for {members} members: a generate call that names more than {slots} members swaps "
            f"adapters in and out of the slots, loading them from {source}")


def vllm_parts(inputs, gpu_gib: float) -> dict[str, float]:
    """vLLM's share split into weights, LoRA slots, non-KV overhead and KV cache (bytes)."""
    p, v, s = inputs, inputs.policy.vllm, inputs.shape
    share = v.gpu_memory_utilization * gpu_gib * GIB
    slots = lora_slots(p) * p.adapter_params * p.d
    overhead = VLLM_BATCHED_TOKENS * (2 * s.intermediate + 4 * s.hidden) * p.d + VLLM_MAX_SEQS * s.vocab * 4 * 2
    overhead += 0 if v.enforce_eager else VLLM_CUDA_GRAPHS_GIB * GIB
    weights = p.base_weight_bytes
    return {"share": share, "weights": weights, "lora_slots": slots, "overhead": overhead,
            "kv_cache": share - weights - slots - overhead}


def vllm_memory(inputs, gpu_gib: float) -> EngineMemory:
    """The engine's share awake, its share or sleep residue while training, the KV cache's tokens."""
    p, v = inputs, inputs.policy.vllm
    parts = vllm_parts(p, gpu_gib)
    tokens = p.prompt_tokens + p.new_tokens
    kv_tokens = max(0.0, parts["kv_cache"]) / p.kv_bytes_per_token
    details = {f"engine_{k}_gib": value / GIB for k, value in parts.items()}
    details["kv_cache_tokens"] = kv_tokens
    details["kv_cache_sequences"] = kv_tokens / tokens
    details["lora_slots"] = lora_slots(p)
    problems = []
    if kv_tokens < max_model_len(p):
        problems.append(f"vLLM's KV cache holds {kv_tokens:.0f} tokens < max_model_len {max_model_len(p)}: "
                        "the engine cannot start")
    d = details
    what = (
        f"vLLM share {v.gpu_memory_utilization:g}: weights {d['engine_weights_gib']:.1f}, LoRA slots "
        f"{d['engine_lora_slots_gib']:.1f} ({swapping(p)}), other {d['engine_overhead_gib']:.1f}, "
        f"KV cache {d['engine_kv_cache_gib']:.1f} "
        f"({d['kv_cache_tokens'] / 1000:.0f}k tokens = {d['kv_cache_sequences']:.0f} sequences of {tokens})"
        + (", asleep while training" if v.sleep_between_phases else "")
    )
    awake = parts["share"]
    training = VLLM_SLEEP_RESIDUE_GIB * GIB if v.sleep_between_phases else awake
    return EngineMemory(awake=awake, training=training, sleeps=v.sleep_between_phases, details=details,
                        problems=problems, what=what)


def _sleep_values(inputs) -> list:
    return [] if inputs.policy.vllm.sleep_between_phases else [True]


def _share_values(inputs) -> list:
    """Every other share in 5% steps, nearest first."""
    now = inputs.policy.vllm.gpu_memory_utilization
    return sorted((s for s in SHARE_STEPS if abs(s - now) > 1e-9), key=lambda s: abs(s - now))


KNOBS = [Knob("policy.vllm.sleep_between_phases", _sleep_values, switch=True),
         Knob("policy.vllm.gpu_memory_utilization", _share_values)]

"""From a run config to the plan: the ONE place that reads config keys for the memory plan.

``plan_inputs(cfg)`` turns a run ``Config`` into a :class:`~populora.plan.memory.PlanInputs`;
``check_plan(cfg, gpu_gib)`` plans it; ``KNOB_KEYS`` names the config key of every knob that
``suggest_fixes`` may turn, so a fix prints as ``key=value`` overrides. Knobs that a run config
does not have yet are read with ``getattr`` and their default.
"""

from __future__ import annotations

from populora.plan.memory import DEFAULT_MIN_HEADROOM, DEFAULT_PROMPT_TOKENS, Plan, PlanInputs, plan
from populora.plan.shapes import model_shape
from populora.policy.chunked_logprobs import DEFAULT_CHUNK

# PlanInputs field -> the run-config key that sets it
KNOB_KEYS = {
    "gradient_checkpointing": "policy.gradient_checkpointing",
    "vllm_sleep": "policy.vllm.sleep_between_phases",
    "adapter_dtype": "policy.adapter_dtype",
    "micro_batch": "policy.train_micro_batch",
    "vllm_memory_share": "policy.vllm.gpu_memory_utilization",
    "logits_chunk": "policy.logits_chunk",
}


def plan_inputs(cfg, *, prompt_tokens: int | None = None) -> PlanInputs:
    """The plan's inputs from run config ``cfg`` (``prompt_tokens`` overrides the prompt budget)."""
    m, lora, pop, sp = cfg.model, cfg.lora, cfg.population, cfg.selfplay
    device = str(m.device)
    if device == "auto":  # vLLM runs on CUDA only; HF where the backend would put it
        import torch

        device = "cuda" if m.backend == "vllm" or torch.cuda.is_available() else "cpu"
    dtype = m.dtype if m.dtype != "auto" else ("bfloat16" if device.startswith("cuda") else "float32")
    adapter_dtype = getattr(m, "adapter_dtype", "auto")
    budget = prompt_tokens or getattr(cfg.tasks, "max_prompt_tokens", 0) or DEFAULT_PROMPT_TOKENS
    return PlanInputs(
        shape=model_shape(m.name),
        engine=m.backend,
        device=device,
        dtype=dtype,
        adapter_dtype=dtype if adapter_dtype in ("auto", "", None) else adapter_dtype,
        adapters=1 if pop.baseline else pop.teachers + pop.students,
        lora_rank=lora.rank,
        lora_targets=tuple(lora.target_modules),
        micro_batch=max(1, min(cfg.rl.micro_batch_size, m.max_batch_size)),
        prompt_tokens=int(budget),
        new_tokens=max(sp.teacher_sampling.max_new_tokens, sp.student_sampling.max_new_tokens),
        gradient_checkpointing=bool(getattr(m, "gradient_checkpointing", False)),
        logits_chunk=int(getattr(m, "logits_chunk", 0) or DEFAULT_CHUNK),
        gen_batch=m.max_batch_size,
        vllm_memory_share=m.gpu_memory_utilization,
        vllm_max_loras=int(getattr(m, "vllm_max_loras", 0)),
        vllm_sleep=bool(getattr(m, "vllm_sleep_between_phases", False)),
        vllm_max_model_len=int(getattr(m, "vllm_max_model_len", 0)),
        vllm_enforce_eager=bool(getattr(m, "vllm_enforce_eager", False)),
    )


def check_plan(cfg, gpu_gib: float = 80.0, *, min_headroom: float = DEFAULT_MIN_HEADROOM,
               prompt_tokens: int | None = None) -> Plan:
    """The memory plan of run config ``cfg`` on one ``gpu_gib`` GiB device; reads no weights."""
    return plan(plan_inputs(cfg, prompt_tokens=prompt_tokens), gpu_gib, min_headroom)


def fix_overrides(fix: dict) -> str:
    """``{"micro_batch": 4, ...}`` -> ``"policy.train_micro_batch=4 ..."``."""
    def text(v):
        return str(v).lower() if isinstance(v, bool) else str(v)

    return " ".join(f"{KNOB_KEYS[k]}={text(v)}" for k, v in fix.items())

"""From a run config to the plan: the ONE place that reads config keys for the memory plan.

``plan_inputs(cfg)`` turns a run ``Config`` into a :class:`~populora.plan.memory.PlanInputs`;
``check_plan(cfg, gpu_gib)`` plans it; ``KNOB_KEYS`` names the config key of every knob that
``suggest_fixes`` may turn, so a fix prints as ``key=value`` overrides.
"""

from __future__ import annotations

from populora.plan.memory import DEFAULT_MIN_HEADROOM, Plan, PlanInputs, plan
from populora.plan.shapes import model_shape
from populora.rl.packing import TokenBudget

# PlanInputs field -> the run-config key that sets it
KNOB_KEYS = {
    "gradient_checkpointing": "policy.gradient_checkpointing",
    "vllm_sleep": "policy.vllm.sleep_between_phases",
    "adapter_dtype": "policy.adapter_dtype",
    "micro_batch": "policy.train_micro_batch",
    "vllm_memory_share": "policy.vllm.gpu_memory_utilization",
    "logits_chunk": "policy.logits_chunk",
}


def longest_completion(cfg) -> int:
    """The longest completion the run samples (teacher or student)."""
    sp = cfg.selfplay
    return max(sp.teacher_sampling.max_new_tokens, sp.student_sampling.max_new_tokens)


def train_budget(cfg) -> TokenBudget:
    """What one training micro-batch may hold: the bound the plan sizes its activations and log-prob
    tail for (``policy.train_micro_batch`` rows of the longest prompt + the longest completion);
    the trainer packs its passes up to it (``selfplay/train.py``)."""
    return TokenBudget.of(cfg.policy.train_micro_batch, cfg.policy.max_prompt_tokens, longest_completion(cfg))


def plan_inputs(cfg, *, prompt_tokens: int | None = None) -> PlanInputs:
    """The plan's inputs from run config ``cfg``.

    Every sequence is planned at the longest prompt the run accepts, ``policy.max_prompt_tokens``
    (a longer one is refused, never truncated), and the longest completion, so the training figure
    bounds every micro-batch; ``prompt_tokens`` plans a typical prompt length instead.

    One rank's view with every member's AdamW state on it (``--nproc 1``); with several ranks each
    holds every adapter's weights but only the optimizer states of the members it trains, so the
    single-rank plan is the upper bound.
    """
    p, pop = cfg.policy, cfg.population
    device = str(p.device)
    if device == "auto":  # vLLM runs on CUDA only; HF where the backend would put it
        import torch

        device = "cuda" if p.engine == "vllm" or torch.cuda.is_available() else "cpu"
    dtype = p.dtype if p.dtype != "auto" else ("bfloat16" if device.startswith("cuda") else "float32")
    new_tokens = longest_completion(cfg)
    return PlanInputs(
        shape=model_shape(p.model),
        engine=p.engine,
        device=device,
        dtype=dtype,
        adapter_dtype=dtype if p.adapter_dtype == "auto" else p.adapter_dtype,
        adapters=1 if pop.baseline else pop.teachers + pop.students,
        lora_rank=p.lora.rank,
        lora_targets=tuple(p.lora.target_modules),
        micro_batch=p.train_micro_batch,
        prompt_tokens=int(prompt_tokens or p.max_prompt_tokens),
        new_tokens=new_tokens,
        gradient_checkpointing=p.gradient_checkpointing,
        logits_chunk=p.logits_chunk,
        gen_batch=p.max_batch_size,
        vllm_memory_share=p.vllm.gpu_memory_utilization,
        vllm_max_loras=p.vllm.max_loras,
        vllm_sleep=p.vllm.sleep_between_phases,
        # what the engine sizes its KV cache for (vllm_engine: 0 = longest prompt + longest completion)
        vllm_max_model_len=p.vllm.max_model_len or p.max_prompt_tokens + new_tokens,
        vllm_enforce_eager=p.vllm.enforce_eager,
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

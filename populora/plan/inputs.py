"""From a run config to the plan: the ONE place that reads the run config for the memory plan.

``plan_inputs(cfg)`` turns a run ``Config`` into a :class:`~populora.plan.memory.PlanInputs` (its
``policy:`` section as it is, and what the run derives from the rest); ``check_plan(cfg, gpu_gib)``
plans it; ``fix_overrides`` prints a fix (run-config keys, as ``suggest_fixes`` gives them) as
``key=value`` overrides.
"""

from __future__ import annotations

from populora.plan.memory import DEFAULT_MIN_HEADROOM, Plan, PlanInputs, plan
from populora.plan.shapes import model_shape
from populora.policy.engine import engine_class
from populora.rl.packing import TokenBudget


def longest_completion(cfg) -> int:
    """The longest completion the run samples (teacher or student)."""
    sp = cfg.selfplay
    return max(sp.teacher_sampling.max_new_tokens, sp.student_sampling.max_new_tokens)


def train_budget(cfg) -> TokenBudget:
    """What one training micro-batch may hold: the bound the plan sizes its activations and log-prob
    tail for (``policy.train_micro_batch`` rows of the longest prompt + the longest completion);
    the trainer packs its passes up to it (``selfplay/update.py``)."""
    return TokenBudget.of(cfg.policy.train_micro_batch, cfg.policy.max_prompt_tokens, longest_completion(cfg))


def trained_per_rank(members: int, ranks: int) -> int:
    """The most members one of ``ranks`` ranks trains (``populora.distributed.placement``: slot k on rank
    k mod W; with fewer members than ranks, each member trains on a group of ranks)."""
    return max(1, -(-members // max(1, ranks)))


def plan_inputs(cfg, *, prompt_tokens: int | None = None, ranks: int | None = None) -> PlanInputs:
    """The plan's inputs from run config ``cfg``: one rank of a run of ``ranks`` ranks (default
    ``run.ranks``, the ranks the run is made for).

    Every sequence is planned at the longest prompt the run accepts, ``policy.max_prompt_tokens``
    (a longer one is refused, never truncated), and the longest completion, so the training figure
    bounds every micro-batch; ``prompt_tokens`` plans a typical prompt length instead.

    Every rank holds every member's adapter weights (it generates for all of them and computes every
    evolved child) but only the optimizer states of the members it trains, and a fused pass holds only
    those members' gradients (``docs/distributed.md``).
    """
    p, pop = cfg.policy, cfg.population
    members = 1 if pop.baseline else pop.teachers + pop.students
    ranks = int(ranks or cfg.run.ranks)
    trained = trained_per_rank(members, ranks) if ranks > 1 else 0  # 0: every member (one rank)
    device = str(p.device)
    if device == "auto":  # a GPU engine is planned on its GPU; else where the trainer would go
        import torch

        device = "cuda" if engine_class(p.engine).assumes_gpu or torch.cuda.is_available() else "cpu"
    dtype = p.dtype if p.dtype != "auto" else ("bfloat16" if device.startswith("cuda") else "float32")
    return PlanInputs(
        shape=model_shape(p.model),
        policy=p,
        device=device,
        dtype=dtype,
        adapters=members,
        trained=trained,
        ranks=ranks,
        prompt_tokens=int(prompt_tokens or p.max_prompt_tokens),
        new_tokens=longest_completion(cfg),
        fused_members=(trained or members) if cfg.rl.update_strategy == "fused" else 1,
    )


def check_plan(cfg, gpu_gib: float = 80.0, *, min_headroom: float = DEFAULT_MIN_HEADROOM,
               prompt_tokens: int | None = None, ranks: int | None = None) -> Plan:
    """The memory plan of one rank of run config ``cfg`` (``ranks`` ranks, default ``run.ranks``) on one
    ``gpu_gib`` GiB device; reads no weights."""
    return plan(plan_inputs(cfg, prompt_tokens=prompt_tokens, ranks=ranks), gpu_gib, min_headroom)


def fix_overrides(fix: dict) -> str:
    """``{"policy.train_micro_batch": 4, ...}`` -> ``"policy.train_micro_batch=4 ..."``."""
    def text(v):
        return str(v).lower() if isinstance(v, bool) else str(v)

    return " ".join(f"{k}={text(v)}" for k, v in fix.items())

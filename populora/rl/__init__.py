"""RL for one adapter: advantage estimators and the policy-gradient loss (pure functions), and the
``RLConfig`` of a run. The optimizer itself (AdamW per adapter, gradient clipping) lives with the
backend (``PolicyBackend.optimizer_step``); these functions make the loss it minimises."""

from populora.rl.advantages import (
    ADVANTAGE_ESTIMATORS,
    compute_advantages,
    grpo,
    role_advantages,
    rpp_baseline,
    trr_pp,
)
from populora.rl.config import RLConfig
from populora.rl.losses import AGGREGATIONS, KL_ESTIMATORS, behaviour_logprobs, kl_penalty, policy_loss

__all__ = [
    "ADVANTAGE_ESTIMATORS",
    "AGGREGATIONS",
    "KL_ESTIMATORS",
    "RLConfig",
    "behaviour_logprobs",
    "compute_advantages",
    "grpo",
    "kl_penalty",
    "policy_loss",
    "role_advantages",
    "rpp_baseline",
    "trr_pp",
]

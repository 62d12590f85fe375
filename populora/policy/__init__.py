"""One frozen base model + many LoRA adapters: weights, backends, embedded models.

``make_backend(cfg)`` builds the policy (a trainer + the generation engine ``cfg.engine`` names) from
a ``PolicyConfig`` (the ``policy:`` section of a run config) or a mapping with the same keys.
Importing ``populora.policy`` loads neither transformers nor vLLM: the engine modules are imported (their
classes declare the ``policy.<engine>:`` sections of ``PolicyConfig``), the packages they drive are not.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from populora.policy.config import LoraSpec, PolicyConfig, PolicyConfigError

__all__ = ["LoraSpec", "PolicyConfig", "PolicyConfigError", "make_backend"]


def make_backend(cfg: PolicyConfig | Mapping[str, Any] | None = None, *, adamw: Mapping[str, Any] | None = None,
                 max_new_tokens: int | None = None, context=None, **overrides: Any):
    """The policy of ``cfg``: an ``HFBackend`` trainer composed with the generation engine
    ``cfg.engine`` names (``populora.policy.engine``).

    ``adamw``: keyword arguments of each adapter's ``torch.optim.AdamW`` (a run passes
    ``cfg.rl.adamw_kwargs()``; default: ``RLConfig``'s defaults). ``max_new_tokens``: the longest
    completion the caller will ask for (vLLM sizes its ``max_model_len`` for it). ``context``: the engine's
    ``EngineContext`` (rank and seed; default: one rank, seed 0). ``overrides`` replace
    top-level keys, e.g. ``make_backend(cfg, model="smollm2-135m")``.
    """
    from populora.policy.backend import Policy
    from populora.policy.engine import engine_class
    from populora.policy.hf import HFBackend

    config = PolicyConfig.from_mapping(cfg if cfg is not None else {})
    if overrides:
        config = config.replace(**overrides)
    engine_cls = engine_class(config.engine)  # an unknown engine fails before any weights load
    engine_cls.check_available()  # and a missing package of the engine's too
    trainer = HFBackend(config, adamw=adamw)
    try:
        engine = engine_cls(config, trainer, max_new_tokens=max_new_tokens, context=context)
    except BaseException:
        trainer.close()
        raise
    return Policy(config, trainer, engine)

"""One frozen base model + many LoRA adapters: weights, backends, embedded models.

``make_backend(cfg)`` builds the backend named by ``cfg.engine`` (``hf`` or ``vllm``) from a
``PolicyConfig`` (the ``policy:`` section of a run config) or a mapping with the same keys.
Backends are imported lazily: importing ``populora.policy`` loads neither transformers nor vLLM.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from populora.policy.config import LoraSpec, PolicyConfig, PolicyConfigError, VLLMConfig

__all__ = ["LoraSpec", "PolicyConfig", "PolicyConfigError", "VLLMConfig", "make_backend"]


def make_backend(cfg: PolicyConfig | Mapping[str, Any] | None = None, *, adamw: Mapping[str, Any] | None = None,
                 **overrides: Any):
    """The policy backend for ``cfg`` (``hf``: ``HFBackend``; ``vllm``: ``VLLMBackend``).

    ``adamw``: keyword arguments of each adapter's ``torch.optim.AdamW`` (a run passes
    ``cfg.rl.adamw_kwargs()``; default: ``RLConfig``'s defaults). ``overrides`` replace top-level
    keys, e.g. ``make_backend(cfg, model="smollm2-135m")``.
    """
    config = PolicyConfig.from_mapping(cfg if cfg is not None else {})
    if overrides:
        config = config.replace(**overrides)
    if config.engine == "hf":
        from populora.policy.hf import HFBackend

        return HFBackend(config, adamw=adamw)
    from populora.policy.vllm_backend import VLLMBackend

    return VLLMBackend(config, adamw=adamw)

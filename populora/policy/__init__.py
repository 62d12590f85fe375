"""One frozen base model + many LoRA adapters: weights, backends, embedded models.

``make_backend(cfg)`` builds the backend named by ``cfg.kind`` (``hf`` or ``vllm``) from a
``BackendConfig`` or a mapping with the same keys (the ``policy:`` section of a preset).
Backends are imported lazily: importing ``populora.policy`` loads neither transformers nor vLLM.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from populora.policy.config import BackendConfig, LoraSpec, OptimConfig, PolicyConfigError

__all__ = ["BackendConfig", "LoraSpec", "OptimConfig", "PolicyConfigError", "make_backend"]


def make_backend(cfg: BackendConfig | Mapping[str, Any] | None = None, **overrides: Any):
    """The policy backend for ``cfg`` (``hf``: ``HFBackend``; ``vllm``: ``VLLMBackend``).

    ``overrides`` replace top-level keys, e.g. ``make_backend(cfg, model="smollm2-135m")``.
    """
    config = BackendConfig.from_mapping(cfg if cfg is not None else {})
    if overrides:
        config = BackendConfig.from_mapping({**config.__dict__, **overrides})
    if config.kind == "hf":
        from populora.policy.hf import HFBackend

        return HFBackend(config)
    from populora.policy.vllm_backend import VLLMBackend

    return VLLMBackend(config)

"""The evaluation's generation engine: the one place that builds it from ``EvalSettings``.

One backend of the policy layer (vLLM multi-LoRA on GPU, HF/peft on CPU) with every adapter of the
evaluation registered next to the base. The LoRA rank the engine is sized for (vLLM's
``max_lora_rank``) is the largest rank among the adapters' own configs, not a preset's default.
A sampled evaluation turns on per-request seeds in engines whose section has a ``seeded_sampling``
switch (vLLM's ``policy.vllm.seeded_sampling``): without them a re-run would draw other samples.
"""

from __future__ import annotations

from collections.abc import Sequence

from eval.runner.runs import EvalAdapter
from eval.runner.settings import EvalSettings


def make_engine(s: EvalSettings, adapters: Sequence[EvalAdapter]):
    """One backend with every adapter loaded (PEFT directories) next to the base."""
    from dataclasses import replace

    from populora.policy import make_backend
    from populora.policy.adapters import AdapterWeights

    ranks = [adapter_rank(a) for a in adapters if a.adapter_dir is not None]
    cfg = seeded_policy(s.policy, s.decoding)
    cfg = cfg.replace(lora=replace(cfg.lora, rank=max(ranks))) if ranks else cfg
    backend = make_backend(cfg, max_new_tokens=max(s.budgets().values(), default=None))
    for a in adapters:
        if a.adapter_dir is not None:
            backend.add_adapter(a.key, AdapterWeights.load_peft(a.adapter_dir))
    return backend


def seeded_policy(policy, decoding):
    """``policy`` with its engine's ``seeded_sampling`` switch on when ``decoding`` samples (engines
    without the switch seed every request anyway, as the HF engine does)."""
    import dataclasses

    section = getattr(policy, policy.engine, None)
    if decoding.greedy or not dataclasses.is_dataclass(section) or getattr(section, "seeded_sampling", True):
        return policy
    return policy.replace(**{policy.engine: dataclasses.replace(section, seeded_sampling=True)})


def adapter_rank(a: EvalAdapter) -> int:
    """The LoRA rank ``r`` recorded in an adapter's ``adapter_config.json`` (error names the file)."""
    import json

    path = a.adapter_dir / "adapter_config.json"
    try:
        r = json.loads(path.read_text())["r"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ValueError(f"{path}: cannot read the LoRA rank 'r' ({e!r})") from e
    if not isinstance(r, int) or r < 1:
        raise ValueError(f"{path}: LoRA rank 'r' must be a positive integer, got {r!r}")
    return r

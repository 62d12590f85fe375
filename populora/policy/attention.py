"""Grouped-query attention on the CPU without a copy of the keys and values per query head.

transformers' SDPA integration (``integrations/sdpa_attention.py``) expands the key/value heads
to the query heads (``repeat_kv``: a copy of the whole KV cache, per layer, per decode step)
whenever an attention mask is passed, and passes ``enable_gqa`` to torch only without one: on
CUDA a mask with grouped heads sends SDPA to its math kernel. Our batches always carry a mask (left
padding, rows of different lengths), so on the CPU every step copied the cache: ``repeat_kv`` was
the largest single cost of a sampled evaluation's generation (docs/benchmarks/eval.md). torch's
CPU SDPA kernel takes grouped heads with a mask directly. So on the CPU, and only there, the HF
backend's model uses ``cpu_gqa_sdpa``: masked grouped-query attention goes to
``torch.nn.functional.scaled_dot_product_attention(..., enable_gqa=True)``, everything else to
transformers' own SDPA function unchanged. Same kernel, same inputs: the outputs are those of the
copying path (``tests/test_policy_attention.py`` compares logits and gradients).

Registered through transformers' ``AttentionInterface`` (its documented way to add an attention
function) under ``NAME``, with SDPA's mask function; where transformers or torch lack the pieces
(``AttentionMaskInterface``, ``set_attn_implementation``, ``enable_gqa``: torch 2.5), the model
keeps SDPA.
"""

from __future__ import annotations

import torch

NAME = "populora_cpu_gqa"


def cpu_gqa_sdpa(module, query, key, value, attention_mask, dropout: float = 0.0, scaling=None, is_causal=None,
                 **kwargs):
    """An ``AttentionInterface`` function: ``query [B, H, L, D]``, ``key``/``value [B, KV, S, D]``."""
    if (
        attention_mask is not None
        and query.device.type == "cpu"
        and key.shape[1] != query.shape[1]
        and kwargs.get("position_bias") is None
        and kwargs.get("cache") is None
        and not kwargs.get("output_attentions", False)
    ):
        out = torch.nn.functional.scaled_dot_product_attention(
            query, key, value, attn_mask=attention_mask, dropout_p=dropout, scale=scaling, enable_gqa=True
        )
        return out.transpose(1, 2).contiguous(), None
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                  is_causal=is_causal, **kwargs)


def use_cpu_gqa(model) -> bool:
    """Give ``model`` (a transformers causal LM) ``cpu_gqa_sdpa`` where it helps: on the CPU, with
    SDPA attention and fewer key/value heads than query heads. Returns whether it did."""
    config = model.config
    heads = getattr(config, "num_attention_heads", None)
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    if model.device.type != "cpu" or getattr(config, "_attn_implementation", None) != "sdpa" or kv_heads == heads:
        return False
    if not _torch_at_least(2, 5):  # SDPA's enable_gqa
        return False
    try:
        from transformers import AttentionInterface
        from transformers.masking_utils import AttentionMaskInterface, sdpa_mask
    except ImportError:
        return False
    if not hasattr(model, "set_attn_implementation"):
        return False
    AttentionInterface.register(NAME, cpu_gqa_sdpa)
    AttentionMaskInterface.register(NAME, sdpa_mask)
    model.set_attn_implementation(NAME)
    return config._attn_implementation == NAME


def _torch_at_least(major: int, minor: int) -> bool:
    from packaging.version import Version

    return Version(torch.__version__.split("+")[0]) >= Version(f"{major}.{minor}")

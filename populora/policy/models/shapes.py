"""``qwen2.5-7b-shape``: a random-init model with the exact shape of Qwen2.5(-Coder)-7B.

For speed and memory measurements on a GPU without downloading 15 GB of weights: throughput and
memory depend only on the shape. It is built in memory on the target device (never cached) and
paired with the ``tiny`` tokenizer, whose 4k ids all fall inside the 152k vocabulary. Its text
is meaningless; never use it for anything but benchmarks.
"""

from __future__ import annotations

# Qwen2.5-Coder-7B's config.json (architecture fields only).
QWEN25_7B = dict(
    vocab_size=152064,
    hidden_size=3584,
    intermediate_size=18944,
    num_hidden_layers=28,
    num_attention_heads=28,
    num_key_value_heads=4,
    max_position_embeddings=32768,
    rope_theta=1000000.0,
    rms_norm_eps=1e-6,
    tie_word_embeddings=False,
)

SHAPES = {"qwen2.5-7b-shape": QWEN25_7B}


def shape_config(name: str):
    """The ``Qwen2Config`` of a named shape."""
    from transformers import Qwen2Config

    return Qwen2Config(**SHAPES[name])


def build_random(name: str, device, dtype):
    """``(model, tokenizer)``: random-init model of shape ``name`` on ``device`` in ``dtype``."""
    import torch
    from transformers import AutoTokenizer, GenerationConfig, Qwen2ForCausalLM

    from populora.policy.models.tiny import prepare_tiny

    tokenizer = AutoTokenizer.from_pretrained(prepare_tiny(0))
    config = shape_config(name)
    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in ("<|endoftext|>", "<|im_end|>")}
    config.eos_token_id, config.pad_token_id = ids["<|im_end|>"], ids["<|endoftext|>"]
    torch.manual_seed(0)
    with torch.device(device):
        model = Qwen2ForCausalLM._from_config(config, dtype=dtype)
    model.generation_config = GenerationConfig(eos_token_id=[ids["<|im_end|>"]], pad_token_id=ids["<|endoftext|>"])
    return model, tokenizer

"""The preallocated KV cache layer against transformers' DynamicLayer (milliseconds): the same keys and
values after a prefill, decode steps, rows copied (samples), rows dropped, and growth past capacity."""

from __future__ import annotations

import torch
from transformers.cache_utils import DynamicLayer

from populora.policy.kv_cache import PreallocatedLayer, full_attention_layers


def test_preallocated_layer_holds_what_the_dynamic_layer_holds():
    g = torch.Generator().manual_seed(0)
    ours, theirs = PreallocatedLayer(capacity=6), DynamicLayer()

    def step(rows, tokens):
        k, v = torch.randn(rows, 2, tokens, 4, generator=g), torch.randn(rows, 2, tokens, 4, generator=g)
        a, b = ours.update(k, v), theirs.update(k, v)
        assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
        assert ours.get_seq_length() == theirs.get_seq_length()

    step(2, 3)  # prefill of 2 prompts
    buffer = ours.key_buf
    for select in ([0, 0, 1, 1], [0, 2, 3], [2]):  # samples copied after the prefill, then rows finish
        ours.batch_select_indices(torch.tensor(select))
        theirs.batch_select_indices(torch.tensor(select))
        step(len(select), 1)
    assert ours.key_buf is not buffer and ours.key_buf.shape[0] == 4  # more rows: new buffers, once
    buffer = ours.key_buf
    for _ in range(3):  # past the capacity of 6: the buffers grow
        step(1, 1)
    assert ours.get_seq_length() == 9 and ours.key_buf.shape[2] >= 9 and ours.key_buf is not buffer


def test_only_full_attention_models_get_the_preallocated_cache():
    from types import SimpleNamespace as Config

    assert full_attention_layers(Config(num_hidden_layers=3, layer_types=["full_attention"] * 3)) == 3
    # Qwen2.5: a sliding window is configured but not used
    assert full_attention_layers(Config(num_hidden_layers=3, sliding_window=131072, use_sliding_window=False)) == 3
    assert full_attention_layers(Config(num_hidden_layers=2, layer_types=["full_attention", "sliding_attention"])) is None
    assert full_attention_layers(Config(num_hidden_layers=2, sliding_window=4096)) is None  # Mistral-style

"""CPU grouped-query attention without the KV copy (populora/policy/attention.py): the same logits,
KV-cache decode steps and gradients as transformers' own SDPA path, on the embedded tiny model."""

from __future__ import annotations

import torch

from populora.policy.attention import NAME
from populora.policy.models import load_base


def _batch():
    ids = torch.tensor([[0, 0, 0, 5, 9, 13, 2], [4, 8, 15, 16, 23, 42, 7]])
    mask = torch.tensor([[0, 0, 0, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1, 1]])
    return ids, mask, (mask.cumsum(-1) - 1).clamp(min=0)


def _run(model):
    """Prefill a left-padded batch, decode three steps with the KV cache; and a gradient."""
    ids, mask, pos = _batch()
    out = model(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=True)
    logits, past = [out.logits], out.past_key_values
    nxt, p = out.logits[:, -1].argmax(-1, keepdim=True), pos[:, -1:] + 1
    for _ in range(3):
        mask = torch.cat([mask, torch.ones_like(nxt)], dim=1)
        out = model(input_ids=nxt, attention_mask=mask, position_ids=p, past_key_values=past, use_cache=True)
        logits.append(out.logits)
        past, nxt, p = out.past_key_values, out.logits[:, -1].argmax(-1, keepdim=True), p + 1
    weight = model.model.layers[0].self_attn.k_proj.weight
    weight.requires_grad_(True)
    ids, mask, pos = _batch()
    loss = model(input_ids=ids, attention_mask=mask, position_ids=pos).logits.logsumexp(-1).sum()
    (grad,) = torch.autograd.grad(loss, weight)
    weight.requires_grad_(False)
    return logits, grad


def test_cpu_gqa_matches_transformers_sdpa():
    model, _ = load_base("tiny", device="cpu", dtype="float32")
    assert model.config.num_key_value_heads < model.config.num_attention_heads  # tiny has grouped heads
    assert model.config._attn_implementation == NAME
    ours, our_grad = _run(model)
    model.set_attn_implementation("sdpa")
    theirs, their_grad = _run(model)
    for a, b in zip(ours, theirs):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(our_grad, their_grad, rtol=1e-5, atol=1e-5)


def test_the_copy_is_gone(monkeypatch):
    """The reason for the module: transformers' repeat_kv is not called on the masked CPU path."""
    import transformers.integrations.sdpa_attention as sdpa

    calls = []
    real = sdpa.repeat_kv
    monkeypatch.setattr(sdpa, "repeat_kv", lambda *a: calls.append(1) or real(*a))
    model, _ = load_base("tiny", device="cpu", dtype="float32")
    _run(model)
    assert calls == []
    model.set_attn_implementation("sdpa")
    _run(model)
    assert calls  # and the check can fail: transformers' own path copies

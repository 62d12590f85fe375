"""``token_logprobs``: the chunked projection + log-softmax + entropy equals plain autograd."""

from __future__ import annotations

import pytest
import torch
from memory_probe import peak_bytes, saved_bytes, storages

from populora.policy.chunked_logprobs import token_logprobs


def reference(hidden, weight, targets, bias=None):
    logits = torch.nn.functional.linear(hidden, weight, bias).float()
    logp_all = torch.log_softmax(logits, dim=-1)
    return logp_all.gather(-1, targets[:, None])[:, 0], -(logp_all.exp() * logp_all).sum(-1)


def data(n=37, h=16, v=50, seed=0, bias=False):
    g = torch.Generator().manual_seed(seed)
    hidden = torch.randn(n, h, generator=g, dtype=torch.float64).float()
    weight = torch.randn(v, h, generator=g) * 0.5
    b = torch.randn(v, generator=g) if bias else None
    return hidden, weight, torch.randint(0, v, (n,), generator=g), b


@pytest.mark.parametrize("chunk", [1, 5, 37, 512])
@pytest.mark.parametrize("use_entropy_grad", [False, True])
def test_values_and_gradients_equal_plain_autograd(chunk, use_entropy_grad):
    hidden, weight, targets, bias = data(bias=True)
    g = torch.Generator().manual_seed(1)
    coef_lp, coef_ent = torch.randn(len(targets), generator=g), torch.randn(len(targets), generator=g)
    grads = []
    for fn in (reference, lambda h, w, t, b: token_logprobs(h, w, t, bias=b, chunk=chunk, with_entropy=True)):
        h, w, b = (x.clone().requires_grad_(True) for x in (hidden, weight, bias))
        lp, ent = fn(h, w, targets, b)
        loss = (coef_lp * lp).sum() + ((coef_ent * ent).sum() if use_entropy_grad else 0.0)
        loss.backward()
        grads.append((lp.detach(), ent.detach(), h.grad, w.grad, b.grad))
    for ref, got in zip(*grads):
        assert torch.allclose(ref, got, atol=1e-5, rtol=1e-5), (ref - got).abs().max()


def test_without_entropy_returns_none_and_only_logprob_gradients():
    hidden, weight, targets, _ = data()
    h = hidden.clone().requires_grad_(True)
    lp, ent = token_logprobs(h, weight, targets, chunk=8)
    assert ent is None and lp.dtype == torch.float32
    lp.sum().backward()
    h_ref = hidden.clone().requires_grad_(True)
    reference(h_ref, weight, targets)[0].sum().backward()
    assert torch.allclose(h.grad, h_ref.grad, atol=1e-5)


def test_bfloat16_hidden_matches_the_model_head_in_bfloat16():
    """Projection in bf16 then float32 softmax: the same numbers as ``lm_head(h).float()``."""
    hidden, weight, targets, _ = data()
    hb, wb = hidden.bfloat16(), weight.bfloat16()
    lp, ent = token_logprobs(hb, wb, targets, chunk=6, with_entropy=True)
    ref_lp, ref_ent = reference(hb, wb, targets)
    assert torch.allclose(lp, ref_lp, atol=1e-5) and torch.allclose(ent, ref_ent, atol=1e-5)


def test_bad_shapes_are_refused():
    hidden, weight, targets, _ = data()
    with pytest.raises(ValueError, match="targets"):
        token_logprobs(hidden, weight, targets[:-1])
    with pytest.raises(ValueError, match="weight"):
        token_logprobs(hidden, weight[:, :-1], targets)
    with pytest.raises(ValueError, match="chunk"):
        token_logprobs(hidden, weight, targets, chunk=0)


def test_saved_bytes_per_token_do_not_depend_on_vocabulary_or_chunk():
    """Backward keeps the hidden state, log-sum-exp, entropy and target per token: nothing of size V."""
    per_token = set()
    for n, v, chunk in ((64, 500, 16), (256, 500, 16), (64, 4000, 64), (256, 4000, 256)):
        hidden, weight, targets, _ = data(n=n, h=32, v=v)
        h = hidden.clone().requires_grad_(True)

        def run(h=h, weight=weight, targets=targets, chunk=chunk):
            return token_logprobs(h, weight, targets, chunk=chunk, with_entropy=True)

        _, saved = saved_bytes(run, storages([h, weight]))
        per_token.add(saved / n)
    assert per_token == {4 + 4 + 8}  # lse, entropy (float32), target (int64); h is the caller's


def test_transient_peak_grows_with_the_chunk_not_with_the_tokens():
    pytest.importorskip("torch.profiler._memory_profiler")
    v, h = 4000, 32

    def peak(n, chunk):
        hidden, weight, targets, _ = data(n=n, h=h, v=v)
        x = hidden.clone().requires_grad_(True)

        def step():
            lp, ent = token_logprobs(x, weight, targets, chunk=chunk, with_entropy=True)
            (lp.sum() + ent.sum()).backward()

        return peak_bytes(step)[1]

    small, long_, wide = peak(256, 64), peak(1024, 64), peak(256, 256)
    chunk_matrix = 64 * v * 4  # one float32 [chunk, V]
    assert long_ - small < 0.1 * chunk_matrix + 2 * (1024 - 256) * (h * 4 + 16)  # per-token vectors only
    assert 1.5 * 3 * chunk_matrix < wide - small < 2.5 * 3 * chunk_matrix  # two [chunk, V] buffers

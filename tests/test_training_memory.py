"""Memory of one training micro-batch of the HF backend, measured on CPU on small Qwen2 models.

What autograd keeps for backward is measured with saved-tensor hooks (``memory_probe.py``) and
compared with the plan's formulas (``populora/plan/memory.py``), which the 7B figures of
``populora plan`` extrapolate; the chunked log-prob pass is compared with the plain computation.
"""

from __future__ import annotations

import pytest
import torch
from memory_probe import peak_bytes, saved_bytes, storages

from populora.plan.memory import (
    PlanInputs,
    backward_working_bytes,
    layer_bytes_per_token,
    logits_transient_bytes,
    saved_activation_bytes,
    saved_logits_bytes,
)
from populora.plan.shapes import shape_from_config
from populora.policy import LoraSpec, PolicyConfig
from populora.policy.hf import HFBackend
from populora.rl.losses import policy_loss

SHAPES = {  # hidden, intermediate, layers, heads, kv heads, head_dim
    "a": (64, 176, 3, 4, 2, 16),
    "b": (96, 128, 2, 6, 1, 24),
}


@pytest.fixture(scope="module")
def tokenizer():
    from transformers import AutoTokenizer

    from populora.policy.models import resolve_model

    return AutoTokenizer.from_pretrained(resolve_model("tiny"))


def make_backend(tokenizer, shape="a", dtype=torch.float32, ckpt=False, rank=4):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    h, i, layers, heads, kv, hd = SHAPES[shape]
    cfg = Qwen2Config(hidden_size=h, intermediate_size=i, num_hidden_layers=layers, num_attention_heads=heads,
                      num_key_value_heads=kv, head_dim=hd, vocab_size=4096, tie_word_embeddings=False)
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(cfg).to(dtype).eval().requires_grad_(False)
    be = HFBackend(PolicyConfig(model="tiny", device="cpu", gradient_checkpointing=ckpt,
                                lora=LoraSpec(rank=rank, alpha=2 * rank, b_std=0.05)), model=model, tokenizer=tokenizer)
    be.add_adapter("m", be.new_adapter_weights(seed=0))
    return be


def batch(n=3, prompt=20, comp=12, seed=0):
    g = torch.Generator().manual_seed(seed)
    prompts = [torch.randint(10, 4000, (prompt + 3 * k,), generator=g).tolist() for k in range(n)]
    comps = [torch.randint(10, 4000, (comp - 2 * k,), generator=g).tolist() for k in range(n)]
    return prompts, comps


def plan_of(be, rows, prompt, comp, ckpt) -> PlanInputs:
    dtype = str(next(be.base.parameters()).dtype).removeprefix("torch.")
    policy = be.config.replace(engine="hf", adapter_dtype=dtype, train_micro_batch=rows, gradient_checkpointing=ckpt,
                               logits_chunk=be.logits_chunk)
    return PlanInputs(shape=shape_from_config(be.base.config.to_dict(), "test"), policy=policy, device="cpu",
                      dtype=dtype, adapters=1, prompt_tokens=prompt, new_tokens=comp)


def plain_logprobs(be, adapter, prompts, comps):
    """The unchunked reference: each sequence alone, full float32 logits, log_softmax, gather."""
    be._activate(adapter)
    lps, ents = [], []
    t_max = max(len(c) for c in comps)
    for p, c in zip(prompts, comps):
        ids = torch.tensor([list(p) + list(c)])
        logits = be._peft(input_ids=ids).logits[0, len(p) - 1 : -1].float()
        logp_all = torch.log_softmax(logits, dim=-1)
        lp = logp_all.gather(-1, torch.tensor(c)[:, None])[:, 0]
        ent = -(logp_all.exp() * logp_all).sum(-1)
        lps.append(torch.nn.functional.pad(lp, (0, t_max - len(c))))
        ents.append(torch.nn.functional.pad(ent, (0, t_max - len(c))))
    return torch.stack(lps), torch.stack(ents)


@pytest.mark.parametrize("ckpt", [False, True])
def test_chunked_loss_and_gradients_equal_the_unchunked_computation(tokenizer, ckpt):
    be = make_backend(tokenizer, ckpt=ckpt)
    be.logits_chunk = 7  # several chunks, the last one partial
    prompts, comps = batch()
    adv = torch.tensor([1.0, -0.5, 0.25])
    results = []
    for chunked in (True, False):
        if chunked:
            tl = be.completion_logprobs("m", prompts, comps, with_entropy=True)
            logp, ent, mask = tl.logprobs, tl.entropy, tl.mask
        else:
            logp, ent = plain_logprobs(be, "m", prompts, comps)
            mask = torch.arange(logp.shape[1])[None, :] < torch.tensor([len(c) for c in comps])[:, None]
        loss, _ = policy_loss(logp, None, adv, mask, entropy=ent, entropy_coef=0.1)
        loss.backward()
        results.append((loss.detach(), logp.detach() * mask, [p.grad.clone() for p in be.trainable_parameters("m")]))
        be.discard_gradients("m")
    (l1, lp1, g1), (l2, lp2, g2) = results
    assert torch.allclose(l1, l2, atol=1e-5) and torch.allclose(lp1, lp2, atol=1e-5)
    assert max(float((a - b).abs().max()) for a, b in zip(g1, g2)) < 1e-5


def measure_saved(be, prompts, comps):
    params = storages(be.base.parameters())
    _, total = saved_bytes(lambda: be.completion_logprobs("m", prompts, comps, with_entropy=True), params)
    return total


def test_logits_tail_saves_per_token_vectors_not_vocabulary_rows(tokenizer):
    """Backward keeps ~d*H + 40 bytes per completion token for the tail, whatever T and the chunk;
    the plain log_softmax computation keeps three float32 rows of V = 4096 per token."""
    be = make_backend(tokenizer)
    tails = []
    for comp, chunk in ((8, 4), (32, 4), (32, 64)):
        be.logits_chunk = chunk
        prompts, comps = [[5] * 20] * 2, [[7] * comp] * 2
        p = plan_of(be, 2, 20, comp, False)
        layers = saved_activation_bytes(p, 2, 20 + comp)
        tails.append((measure_saved(be, prompts, comps) - layers) / (2 * comp))
    hidden = be.base.config.hidden_size
    assert max(tails) - min(tails) < 2  # bytes per token: no growth with T or the chunk
    assert abs(tails[0] - (4 * hidden + 40)) < 0.15 * (4 * hidden + 40)
    assert max(tails) < 0.1 * 3 * 4096 * 4


@pytest.mark.parametrize("shape", ["a", "b"])
def test_gradient_checkpointing_cuts_layer_activations_by_the_planned_factor(tokenizer, shape):
    prompts, comps = batch(n=2, prompt=40, comp=16)
    measured = [measure_saved(make_backend(tokenizer, shape, ckpt=c), prompts, comps) for c in (False, True)]
    be = make_backend(tokenizer, shape)
    width = max(len(p) + len(c) for p, c in zip(prompts, comps))
    planned = []
    for ckpt in (False, True):
        p = plan_of(be, 2, width, 0, ckpt)
        planned.append(saved_activation_bytes(p, 2, width))
    ratio_measured = (measured[0] - measured[1]) / measured[1]
    ratio_planned = (planned[0] - planned[1]) / planned[1]
    assert ratio_measured > 5
    assert abs(ratio_measured - ratio_planned) < 0.15 * ratio_planned


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("shape", ["a", "b"])
@pytest.mark.parametrize("ckpt", [False, True])
def test_plan_matches_measured_saved_bytes(tokenizer, dtype, shape, ckpt):
    be = make_backend(tokenizer, shape, dtype=dtype, ckpt=ckpt)
    rows, prompt, comp = 3, 48, 24
    prompts, comps = [[9] * prompt] * rows, [[11] * comp] * rows
    measured = measure_saved(be, prompts, comps)
    p = plan_of(be, rows, prompt, comp, ckpt)
    planned = saved_activation_bytes(p, rows, prompt + comp) + saved_logits_bytes(p, rows * comp)
    assert abs(measured - planned) < 0.15 * measured, (measured, planned)
    if not ckpt:  # the per-layer formula itself, which the 7B figures scale up
        per_token_layer = (measured - saved_logits_bytes(p, rows * comp)) / (rows * (prompt + comp) * p.shape.layers)
        assert abs(per_token_layer - layer_bytes_per_token(p)) < 0.15 * layer_bytes_per_token(p)


@pytest.mark.parametrize("shape,chunk", [("a", 16), ("b", 16), ("a", 512)])  # layers' or tail's peak dominates
@pytest.mark.parametrize("ckpt", [False, True])
def test_plan_matches_measured_peak_of_a_training_micro_batch(tokenizer, shape, chunk, ckpt):
    """Peak of live allocations during forward + backward = saved bytes + the larger of a layer's
    backward working set and one chunk of the log-prob tail."""
    pytest.importorskip("torch.profiler._memory_profiler")
    be = make_backend(tokenizer, shape, ckpt=ckpt)
    be.logits_chunk = chunk
    rows, prompt, comp = 3, 96, 32
    prompts, comps = [[9] * prompt] * rows, [[11] * comp] * rows

    def step():
        tl = be.completion_logprobs("m", prompts, comps, with_entropy=True)
        (-(tl.logprobs * tl.mask).sum()).backward()

    _, measured = peak_bytes(step)
    be.discard_gradients("m")
    p = plan_of(be, rows, prompt, comp, ckpt)
    tokens = rows * (prompt + comp)
    planned = (saved_activation_bytes(p, rows, prompt + comp) + saved_logits_bytes(p, rows * comp)
               + max(backward_working_bytes(p, tokens), logits_transient_bytes(p)))
    assert abs(measured - planned) < 0.15 * measured, (measured, planned)


def test_bfloat16_lora_compute_keeps_float32_masters(tokenizer):
    be = make_backend(tokenizer, dtype=torch.bfloat16)
    live = be.trainable_parameters("m")
    assert all(p.dtype == torch.bfloat16 for p in live)
    w0 = be.get_weights("m")
    assert all(a.dtype == torch.float32 for pair in w0.tensors.values() for a in pair)
    be.set_learning_rate("m", 1e-6)  # updates far below bf16's resolution of the weights
    prompts, comps = batch()
    tl = be.completion_logprobs("m", prompts, comps)
    be.optimizer_step("m", -(tl.logprobs * tl.mask).sum())
    w1 = be.get_weights("m")
    assert not w1.equal(w0)  # the float32 masters moved...
    masters = [t for path in sorted(w1.tensors) for t in w1.tensors[path]]
    assert all(torch.equal(p.detach(), m.bfloat16()) for p, m in zip(live, masters))  # ...the live copy follows
    state = be.optimizer_state("m")
    assert all(v["exp_avg"].dtype == torch.float32 for v in state["state"].values())
    be.set_weights("m", w0)
    assert be.get_weights("m").equal(w0)
    assert all(torch.equal(p.detach(), m.bfloat16()) for p, m in
               zip(live, [t for path in sorted(w0.tensors) for t in w0.tensors[path]]))

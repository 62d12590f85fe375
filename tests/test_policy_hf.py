"""HFBackend on the embedded ``tiny`` model: adapter isolation, mixed batches, training, state."""

from __future__ import annotations

import pytest
import torch

from populora.policy import make_backend
from populora.policy.adapters import AdapterMismatchError, AdapterWeights
from populora.policy.base import GenerationRequest as Req
from populora.policy.base import SamplingParams
from populora.policy.hf import UnknownAdapter

GREEDY = SamplingParams(temperature=0, max_new_tokens=10)
PROMPTS = ["def f(x):", "import os\nclass Foo(object):", "x = [1, 2, 3]\nfor", "return"]


@pytest.fixture(scope="module")
def backend():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # small matrices: one thread beats contended OpenMP threads
    be = make_backend({"model": "tiny", "device": "cpu", "lora": {"rank": 8, "alpha": 16, "b_std": 0.05}})
    for i in range(3):
        be.add_adapter(f"m{i}", be.new_adapter_weights(seed=i))
    yield be
    torch.set_num_threads(threads)


def _base_params(be):
    return {n: p.detach().clone() for n, p in be.base.named_parameters() if "lora_" not in n}


def test_module_shapes_cover_all_seven_projections(backend):
    shapes = backend.module_shapes()
    assert len(shapes) == 4 * 7  # 4 layers
    assert shapes["model.layers.0.self_attn.q_proj"] == (128, 128)
    assert shapes["model.layers.0.self_attn.k_proj"] == (128, 64)  # 2 kv heads x 32
    assert shapes["model.layers.3.mlp.down_proj"] == (256, 128)


def test_weights_round_trip_and_errors(backend):
    w = backend.new_adapter_weights(seed=42)
    backend.set_weights("m2", w)
    assert backend.get_weights("m2").equal(w)
    with pytest.raises(UnknownAdapter, match="unknown adapter 'nope'"):
        backend.get_weights("nope")
    with pytest.raises(UnknownAdapter, match="nope"):
        backend.generate([Req("x", "nope")], GREEDY)
    wrong_rank = AdapterWeights.init(backend.module_shapes(), 4, 8.0)
    with pytest.raises(AdapterMismatchError, match="rank"):
        backend.set_weights("m2", wrong_rank)
    with pytest.raises(AdapterMismatchError, match="rank 4"):
        backend.add_adapter("other_rank", wrong_rank)
    assert "other_rank" not in backend.adapter_names()
    with pytest.raises(ValueError, match="already exists"):
        backend.add_adapter("m0", w)


def test_add_remove_re_add(backend):
    backend.add_adapter("tmp", backend.new_adapter_weights(seed=9))
    w = backend.get_weights("tmp")
    backend.remove_adapter("tmp")
    assert "tmp" not in backend.adapter_names()
    backend.add_adapter("tmp", w)
    assert backend.get_weights("tmp").equal(w)
    backend.remove_adapter("tmp")


def _assert_same_greedy(backend, result, adapter, expected_ids, what):
    """Token-for-token equality. A divergence is tolerated only at an exact near-tie (float32
    rounding differs with batch shape): the two candidate tokens' logprobs agree to 1e-5."""
    got = result.completions[0].token_ids
    if got == expected_ids:
        return
    k = next(i for i, (a, b) in enumerate(zip(got, expected_ids)) if a != b)
    assert adapter is not None, f"{what}: base-model greedy outputs diverge at token {k}"
    lp = backend.completion_logprobs(
        adapter, [result.prompt_token_ids] * 2, [got[: k + 1], expected_ids[: k + 1]], with_grad=False
    )
    gap = abs(float(lp.logprobs[0, k] - lp.logprobs[1, k]))
    assert gap < 1e-5, f"{what}: greedy outputs diverge at token {k} ({got[k]} vs {expected_ids[k]}, gap {gap})"


def test_mixed_greedy_batch_equals_single_adapter_runs(backend):
    reqs = [Req(p, a) for p in PROMPTS for a in ("m0", "m1", "m2", None)]
    mixed = backend.generate(reqs, GREEDY)
    alone = {}
    for a in ("m0", "m1", "m2", None):
        sub = [r for r in reqs if r.adapter == a]
        for r, res in zip(sub, backend.generate(sub, GREEDY)):
            alone[r] = res.completions[0].token_ids
    for r, res in zip(reqs, mixed):
        _assert_same_greedy(backend, res, r.adapter, alone[r], r)
    # adapters really differ from each other and from the base on these prompts
    per_adapter = {r.adapter: tuple(res.completions[0].token_ids) for r, res in zip(reqs[:4], mixed[:4])}
    assert len(set(per_adapter.values())) == 4


def test_mixed_rows_that_stop_at_different_steps_equal_single_adapter_runs(backend):
    """Rows leave the batch at different steps (stop strings), so the adapters' row counts differ and
    the LoRA product pads each adapter's rows (multi_lora.route_index); tokens stay those of each
    adapter alone."""
    s = SamplingParams(temperature=0, max_new_tokens=12, stop=("+", "]", "Str", "tty", " F"))
    reqs = [Req(p, a) for p in PROMPTS for a in ("m0", "m1", "m2", None)]
    mixed = backend.generate(reqs, s)
    lengths = {}
    for a in ("m0", "m1", "m2", None):
        sub = [i for i, r in enumerate(reqs) if r.adapter == a]
        for i, res in zip(sub, backend.generate([reqs[i] for i in sub], s)):
            assert mixed[i].completions[0].text == res.completions[0].text, reqs[i]
            _assert_same_greedy(backend, mixed[i], a, res.completions[0].token_ids, reqs[i])
            lengths.setdefault(a, []).append(len(res.completions[0].token_ids))
    assert len({tuple(v) for v in lengths.values()}) > 1 and min(map(min, lengths.values())) < 12  # rows left early


def test_preallocated_kv_cache_gives_the_dynamic_caches_logprobs(backend):
    """The preallocated cache (policy.kv_cache) against transformers' DynamicCache: sampled rows, n=2 samples
    copied after one prefill, rows leaving at stop strings: the same tokens and the same log-probabilities."""
    s = SamplingParams(temperature=0.8, top_p=0.95, max_new_tokens=16, n=2, seed=3, stop=("+", "]", "tty"))
    reqs = [Req(p, a) for p in PROMPTS for a in ("m0", "m1", None)]
    config = backend.trainer.config
    assert config.kv_cache == "preallocated"
    out = {}
    try:
        for kind in ("preallocated", "dynamic"):
            config.kv_cache = kind
            out[kind] = [(c.token_ids, c.logprobs) for r in backend.generate(reqs, s) for c in r.completions]
    finally:
        config.kv_cache = "preallocated"
    assert out["preallocated"] == out["dynamic"]
    assert len({len(t) for t, _ in out["dynamic"]}) > 1  # rows left the batch (and the cache) early


def test_base_rows_match_transformers_generate(backend):
    """Our decode loop against the library's: greedy tokens of the bare base are the same."""
    for prompt in PROMPTS[:2]:
        ours = backend.generate([Req(prompt, None)], GREEDY)[0].completions[0].token_ids
        ids = torch.tensor([backend.encode(prompt)])
        trainer = backend.trainer
        with trainer._peft.disable_adapter():
            ref = trainer._peft.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=10,
                                         do_sample=False, eos_token_id=sorted(trainer.eos_ids))
        assert ours == ref[0, ids.shape[1]:].tolist()


def test_zero_b_adapter_equals_base(backend):
    backend.add_adapter("zero", AdapterWeights.init(backend.module_shapes(), 8, 16.0, b_init="zeros"))
    try:
        out = backend.generate([Req(PROMPTS[0], "zero"), Req(PROMPTS[0], None)], GREEDY)
        assert out[0].completions[0].token_ids == out[1].completions[0].token_ids
    finally:
        backend.remove_adapter("zero")


def test_generate_logprobs_match_trainer_logprobs(backend):
    s = SamplingParams(temperature=0.8, top_p=0.95, max_new_tokens=12, n=2, seed=3)
    res = backend.generate([Req(PROMPTS[1], "m1"), Req(PROMPTS[0], "m1")], s)
    prompts = [r.prompt_token_ids for r in res for _ in r.completions]
    comps = [c.token_ids for r in res for c in r.completions]
    tl = backend.completion_logprobs("m1", prompts, comps, with_grad=False)
    for i, c in enumerate(c for r in res for c in r.completions):
        n = len(c.token_ids)
        assert tl.mask[i, :n].all() and not tl.mask[i, n:].any()
        assert torch.allclose(tl.logprobs[i, :n], torch.tensor(c.logprobs), atol=1e-4)


def test_seeded_sampling_is_reproducible_and_batch_independent(backend):
    s = SamplingParams(temperature=1.0, max_new_tokens=8, n=3, seed=11)
    reqs = [Req(PROMPTS[0], "m0"), Req(PROMPTS[2], "m1")]
    a = backend.generate(reqs, s)
    b = backend.generate(reqs, s)
    assert [[c.token_ids for c in r.completions] for r in a] == [[c.token_ids for c in r.completions] for r in b]
    assert len(a[0].completions) == 3
    assert len({tuple(c.token_ids) for c in a[0].completions}) > 1  # n samples differ
    c = backend.generate(reqs[:1], s)  # same request index 0, smaller batch
    assert [x.token_ids for x in c[0].completions] == [x.token_ids for x in a[0].completions]
    d = backend.generate(reqs, SamplingParams(temperature=1.0, max_new_tokens=8, n=3, seed=12))
    assert [x.token_ids for x in d[0].completions] != [x.token_ids for x in a[0].completions]
    # a request's own index seeds it: the second request alone, called with index=1, draws the same
    # tokens as in the full call (how a rank serves its share of a step's requests)
    e = backend.generate([Req(PROMPTS[2], "m1", index=1)], s)
    assert [x.token_ids for x in e[0].completions] == [x.token_ids for x in a[1].completions]
    f = backend.generate([Req(PROMPTS[2], "m1")], s)  # without it, its position (0) seeds it
    assert [x.token_ids for x in f[0].completions] != [x.token_ids for x in a[1].completions]


def test_stop_strings_and_length(backend):
    free = backend.generate([Req(PROMPTS[0], "m0")], SamplingParams(temperature=1.0, max_new_tokens=40, seed=1))
    text = free[0].completions[0].text
    assert free[0].completions[0].finish_reason == "length" and len(free[0].completions[0].token_ids) == 40
    stop = text[5:7]  # a string the model is known to produce here
    assert stop and stop in text
    out = backend.generate(
        [Req(PROMPTS[0], "m0")], SamplingParams(temperature=1.0, max_new_tokens=40, seed=1, stop=(stop,))
    )[0].completions[0]
    assert out.finish_reason == "stop"
    assert out.text == text[: text.index(stop)]
    assert stop not in out.text
    assert len(out.token_ids) < 40 and out.token_ids == free[0].completions[0].token_ids[: len(out.token_ids)]


class _ScriptedCache:
    """Stands in for the KV cache in a unit test of the decode loop: records row selection."""

    def __init__(self, rows):
        self.rows = rows

    def batch_select_indices(self, idx):
        self.rows = [self.rows[i] for i in idx.tolist()]


def test_decode_loop_stops_rows_at_eos_and_drops_them():
    """The loop itself, with a scripted forward: row r emits EOS (id 0) at step r + 1."""
    from populora.policy.decode import Row, decode_rows

    class Tok:
        def decode(self, ids, skip_special_tokens=True):
            return "".join(chr(96 + i) for i in ids if not (skip_special_tokens and i == 0))

    seen_batches = []

    def forward(input_ids, mask, positions, past, names):
        past = past or _ScriptedCache(list(range(input_ids.shape[0])))
        seen_batches.append(list(past.rows))
        assert mask.shape[1] == 3 + len(seen_batches) - 1 and positions.shape[0] == len(past.rows)
        step = len(seen_batches) - 1
        logits = torch.full((len(past.rows), 5), -5.0)
        for b, r in enumerate(past.rows):
            logits[b, 0 if step == r + 1 else 1 + r] = 5.0
        return logits, past

    rows = [Row(i, 0, [7, 8, 9], "a") for i in range(3)]
    decode_rows(forward, rows, SamplingParams(temperature=0, max_new_tokens=3), tokenizer=Tok(), pad_id=0,
                eos_ids={0}, device=torch.device("cpu"), base_seed=0)
    assert [r.token_ids for r in rows] == [[1, 0], [2, 2, 0], [3, 3, 3]]
    assert [r.finish_reason for r in rows] == ["stop", "stop", "length"]
    assert [r.text for r in rows] == ["a", "bb", "ccc"]  # EOS is in the ids, not in the text
    assert seen_batches == [[0, 1, 2], [0, 1, 2], [1, 2]]  # finished rows left the batch


@pytest.mark.gpu
def test_cuda_decoding_never_copies_vocabulary_rows_to_the_host(monkeypatch):
    """Per step only the chosen tokens and their log-probs ([B] each) leave the GPU, greedy or
    sampled (a sampled row brings one uniform number from its CPU generator to the GPU)."""
    be = make_backend({"model": "tiny", "device": "cuda", "lora": {"rank": 8, "alpha": 16, "b_std": 0.05}})
    be.add_adapter("g0", be.new_adapter_weights(seed=0))
    vocab = be.base.config.vocab_size
    copies = []
    real_cpu, real_to = torch.Tensor.cpu, torch.Tensor.to

    def spy_cpu(self, *a, **k):
        copies.append(tuple(self.shape))
        return real_cpu(self, *a, **k)

    def spy_to(self, *a, **k):
        target = a[0] if a else k.get("device")
        if self.is_cuda and (target == "cpu" or getattr(target, "type", None) == "cpu"):
            copies.append(tuple(self.shape))
        return real_to(self, *a, **k)

    monkeypatch.setattr(torch.Tensor, "cpu", spy_cpu)
    monkeypatch.setattr(torch.Tensor, "to", spy_to)
    be.generate([Req(PROMPTS[0], "g0"), Req(PROMPTS[1], None)], GREEDY)
    be.generate([Req(PROMPTS[0], "g0"), Req(PROMPTS[1], None)],
                SamplingParams(temperature=0.8, top_p=0.95, max_new_tokens=10, n=2, seed=1))
    monkeypatch.undo()
    assert not [s for s in copies if s and s[-1] == vocab], copies
    be.close()


def test_update_touches_only_its_adapter(backend):
    before_base = _base_params(backend)
    before = {n: backend.get_weights(n) for n in backend.adapter_names()}
    prompts = [backend.encode(p) for p in PROMPTS[:2]]
    comps = [backend.encode(" return x + 1"), backend.encode(" pass")]
    tl = backend.completion_logprobs("m1", prompts, comps, with_grad=True, with_entropy=True)
    assert tl.entropy is not None and (tl.entropy[tl.mask] > 0).all()
    loss = -(tl.logprobs * tl.mask).sum() / tl.mask.sum()
    norm = backend.optimizer_step("m1", loss, max_grad_norm=1.0)
    assert norm > 0
    for n, p in backend.base.named_parameters():
        if "lora_" not in n:
            assert p.grad is None and torch.equal(p, before_base[n]), n
    for name in backend.adapter_names():
        after = backend.get_weights(name)
        assert after.equal(before[name]) == (name != "m1"), name
        if name != "m1":
            assert all(p.grad is None for p in backend.trainable_parameters(name))
    # and the update made the trained completions more likely
    tl2 = backend.completion_logprobs("m1", prompts, comps, with_grad=False)
    assert (tl2.logprobs * tl2.mask).sum() > (tl.logprobs * tl.mask).sum()


def test_optimizer_state_round_trip(backend):
    prompts, comps = [backend.encode(PROMPTS[0])], [backend.encode(" return 1")]

    def step():
        tl = backend.completion_logprobs("m0", prompts, comps)
        backend.optimizer_step("m0", -(tl.logprobs * tl.mask).sum())

    backend.reset_optimizer("m0")
    step()
    saved_w, saved_opt = backend.get_weights("m0"), backend.optimizer_state("m0")
    assert saved_opt["state"]  # AdamW moments exist after one step
    step()
    expected = backend.get_weights("m0")
    backend.set_weights("m0", saved_w)
    backend.reset_optimizer("m0")
    backend.load_optimizer_state("m0", saved_opt)
    step()
    assert backend.get_weights("m0").equal(expected)
    backend.set_weights("m0", saved_w)
    backend.reset_optimizer("m0")
    step()  # a fresh optimizer gives a different second step
    assert not backend.get_weights("m0").equal(expected)


def test_completion_logprobs_without_grad_is_micro_batched_consistently(backend):
    prompts = [backend.encode(p) for p in PROMPTS] * 5  # 20 rows > train_micro_batch 16
    comps = [backend.encode(" x" * (i % 4 + 1)) for i in range(20)]
    a = backend.completion_logprobs("m2", prompts, comps, with_grad=False)
    b = backend.completion_logprobs("m2", prompts, comps, with_grad=True)
    assert a.logprobs.shape == b.logprobs.shape == (20, 4)
    assert torch.equal(a.mask, b.mask)
    assert torch.allclose(a.logprobs, b.logprobs.detach(), atol=1e-5)
    with pytest.raises(RuntimeError, match="no gradient"):
        backend.optimizer_step("m0", None)
    b.logprobs.sum().backward()
    assert all(p.grad is not None for p in backend.trainable_parameters("m2"))
    backend.discard_gradients("m2")
    assert all(p.grad is None for p in backend.trainable_parameters("m2"))


@pytest.mark.gpu
def test_cuda_bf16_backend_generates_and_trains_in_isolation():
    """The CUDA path: bf16 base and LoRA, float32 masters, mixed batch, update isolation, logprob parity."""
    be = make_backend({"model": "tiny", "device": "cuda", "lora": {"rank": 8, "alpha": 16, "b_std": 0.05}})
    assert be.device.type == "cuda" and next(be.base.parameters()).dtype == torch.bfloat16
    be.add_adapter("g0", be.new_adapter_weights(seed=0))
    be.add_adapter("g1", be.new_adapter_weights(seed=1))
    # LoRA computes in the base dtype; the optimizer steps float32 masters (get_weights returns them)
    assert all(p.dtype == torch.bfloat16 and p.is_cuda for p in be.trainable_parameters("g0"))
    assert all(t.dtype == torch.float32 for pair in be.get_weights("g0").tensors.values() for t in pair)
    s = SamplingParams(temperature=1.0, max_new_tokens=16, n=2, seed=0)
    res = be.generate([Req(PROMPTS[0], "g0"), Req(PROMPTS[1], "g1"), Req(PROMPTS[2], None)], s)
    assert all(len(c.token_ids) == 16 for r in res for c in r.completions)
    comps = res[0].completions
    tl = be.completion_logprobs("g0", [res[0].prompt_token_ids] * 2, [c.token_ids for c in comps], with_grad=False)
    for i, c in enumerate(comps):
        assert torch.allclose(tl.logprobs[i].cpu(), torch.tensor(c.logprobs), atol=0.1)
    before_base = _base_params(be)
    other = be.get_weights("g1")
    tl = be.completion_logprobs("g0", [res[0].prompt_token_ids] * 2, [c.token_ids for c in comps])
    be.optimizer_step("g0", -(tl.logprobs * tl.mask).sum() / tl.mask.sum())
    assert be.get_weights("g1").equal(other)
    for n, p in be.base.named_parameters():
        if "lora_" not in n:
            assert p.grad is None and torch.equal(p, before_base[n]), n
    be.close()


@pytest.mark.slow
def test_gradient_checkpointing_gives_the_same_gradients(backend):
    from populora.policy.hf import HFBackend

    ckpt = HFBackend(backend.config.replace(gradient_checkpointing=True))
    w = backend.get_weights("m0")
    ckpt.add_adapter("m0", w)
    prompts, comps = [backend.encode(PROMPTS[1])], [backend.encode(" return x + 1")]
    grads = []
    for be in (backend, ckpt):
        tl = be.completion_logprobs("m0", prompts, comps)
        (tl.logprobs * tl.mask).sum().backward()
        grads.append([p.grad.clone() for p in be.trainable_parameters("m0")])
        be.discard_gradients("m0")
    assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(*grads))
    assert not ckpt.base.training


def test_removing_every_adapter_then_adding_new_ones_works():
    """peft keeps a stale active-adapter name after all adapters are deleted; the backend re-points it."""
    from populora.policy import LoraSpec, PolicyConfig, make_backend
    from populora.policy.adapters import AdapterWeights as AW
    from populora.policy.base import GenerationRequest, SamplingParams

    b = make_backend(PolicyConfig(model="tiny", cpu_threads=1, lora=LoraSpec(rank=4, alpha=8)))
    shapes = b.module_shapes()
    for n in ("a", "s1"):
        b.add_adapter(n, AW.init(shapes, 4, 8, b_init="random", seed=1))
    b.completion_logprobs("s1", [[1, 2, 3]], [[4, 5]])
    for n in ("a", "s1"):
        b.remove_adapter(n)
    b.add_adapter("c", AW.init(shapes, 4, 8, b_init="random", seed=2))
    tl = b.completion_logprobs("c", [[1, 2, 3]], [[4, 5]])
    assert tl.logprobs.shape == (1, 2) and bool(tl.mask.all())
    out = b.generate([GenerationRequest("def f(x):", "c")], SamplingParams(temperature=0, max_new_tokens=3))
    assert len(out[0].completions[0].token_ids) >= 1

"""Decoding maths, backend config and factory: pure functions, no model."""

from __future__ import annotations

import pytest
import torch

from populora.policy import LoraSpec, PolicyConfig, PolicyConfigError
from populora.policy.sampling import draw, find_stop, row_seed, sample_step


def _nucleus_by_full_sort(logits: torch.Tensor, top_p: float) -> torch.Tensor:
    """The definition, over the whole sorted vocabulary: which tokens are in the nucleus (the
    smallest most-likely-first set whose probability reaches ``top_p``)."""
    sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
    probs = torch.softmax(sorted_logits.double(), dim=-1)
    drop = (torch.cumsum(probs, dim=-1) - probs) >= top_p
    return ~torch.zeros_like(drop).scatter(-1, order, drop)


def _drawn(logits: torch.Tensor, rows: int, *, temperature: float = 1.0, top_p: float = 1.0, seed: int = 0):
    """Tokens of ``rows`` rows of the same logits, each with its own seeded generator."""
    gens = [torch.Generator().manual_seed(row_seed(seed, i, 0)) for i in range(rows)]
    tokens, _ = sample_step(logits.expand(rows, -1), temperature=temperature, top_p=top_p, generators=gens)
    return tokens


def test_top_p_keeps_smallest_nucleus():
    logits = torch.tensor([[0.5, 0.3, 0.15, 0.05]]).log()
    assert set(_drawn(logits, 400, top_p=0.8).tolist()) == {0, 1}
    assert set(_drawn(logits, 400, top_p=0.81).tolist()) == {0, 1, 2}
    assert set(_drawn(logits, 50, top_p=0.01).tolist()) == {0}  # the most likely token survives any top_p
    assert set(_drawn(logits, 2000, top_p=1.0).tolist()) == {0, 1, 2, 3}


def test_top_p_respects_token_order_not_position():
    assert set(_drawn(torch.tensor([[0.0, 3.0, 1.0, 2.0]]), 400, top_p=0.9).tolist()) == {1, 2, 3}


def test_sample_step_greedy_returns_argmax_and_raw_logprob():
    logits = torch.tensor([[1.0, 5.0, 2.0], [3.0, 0.0, 0.0]])
    tokens, lps = sample_step(logits, temperature=0, top_p=1.0, generators=None)
    assert tokens.tolist() == [1, 0]
    assert torch.allclose(lps, torch.log_softmax(logits, -1)[[0, 1], [1, 0]])


def test_sample_step_rows_are_independent_of_batch():
    torch.manual_seed(0)
    logits = torch.randn(3, 50)
    gens = [torch.Generator().manual_seed(s) for s in (1, 2, 3)]
    full, _ = sample_step(logits, temperature=0.7, top_p=0.9, generators=gens)
    alone, lp = sample_step(logits[1:2], temperature=0.7, top_p=0.9, generators=[torch.Generator().manual_seed(2)])
    assert full[1] == alone[0]
    # returned logprob is the raw (temperature-1) one, not the temperature-scaled one
    assert torch.allclose(lp, torch.log_softmax(logits[1], -1)[alone])


def test_sample_step_never_samples_outside_nucleus():
    logits = torch.tensor([[10.0, 9.0, -10.0, -10.0]])
    for s in range(50):
        tok, _ = sample_step(logits, temperature=1.0, top_p=0.5, generators=[torch.Generator().manual_seed(s)])
        assert tok.item() == 0


@pytest.mark.parametrize("top_p", [0.01, 0.5, 0.9, 0.95, 1.0])
@pytest.mark.parametrize("scale", [0.05, 1.0, 6.0])  # near-flat rows: wide nuclei, many rejections
def test_sampled_tokens_are_in_the_nucleus_of_the_full_sort(top_p, scale):
    g = torch.Generator().manual_seed(int(1000 * top_p + scale))
    logits = torch.randn(64, 3000, generator=g) * scale
    gens = [torch.Generator().manual_seed(s) for s in range(64)]
    tokens, _ = sample_step(logits, temperature=1.0, top_p=top_p, generators=gens)
    assert _nucleus_by_full_sort(logits, top_p).gather(-1, tokens[:, None]).all()


def test_draw_is_inverse_cdf_and_never_picks_a_zero():
    weights = torch.tensor([[0.0, 2.0, 0.0, 2.0], [1.0, 0.0, 0.0, 0.0]])
    assert draw(weights, torch.tensor([0.0, 0.99])).tolist() == [1, 0]
    assert draw(weights, torch.tensor([0.4999, 0.5])).tolist() == [1, 0]
    assert draw(weights, torch.tensor([0.5, 0.0])).tolist() == [3, 0]
    assert draw(weights, torch.tensor([1.0 - 1e-12, 1.0 - 1e-12])).tolist() == [3, 0]


@pytest.mark.parametrize("temperature,top_p", [(0.7, 0.9), (1.0, 1.0), (0.6, 0.95)])
def test_sample_step_draws_from_the_processed_distribution(temperature, top_p):
    """20,000 rows, each with its own seeded generator: token frequencies match the temperature-
    scaled nucleus, renormalised, within 5 standard errors (and the tail outside it is never drawn)."""
    rows = 20_000
    logits = torch.log(torch.tensor([0.4, 0.25, 0.15, 0.1, 0.06, 0.04]))
    tokens = _drawn(logits[None], rows, temperature=temperature, top_p=top_p, seed=5)
    expected = torch.softmax(logits.double() / temperature, -1)
    expected = expected * _nucleus_by_full_sort(logits[None] / temperature, top_p)[0]
    expected = expected / expected.sum()
    seen = torch.bincount(tokens, minlength=6).double() / rows
    se = (expected * (1 - expected) / rows).sqrt()
    assert ((seen - expected).abs() <= 5 * se + 1e-12).all(), (seen, expected)
    assert seen[expected == 0].sum() == 0


def test_find_stop_earliest_occurrence():
    assert find_stop("abc</answer>def\n", ["\n", "</answer>"]) == 3
    assert find_stop("abc", ["x"]) == -1
    assert find_stop("aXbX", ["X"], start=2) == 3


def test_row_seed_depends_on_all_parts():
    seeds = {row_seed(1, 0, 0), row_seed(1, 0, 1), row_seed(1, 1, 0), row_seed(2, 0, 0)}
    assert len(seeds) == 4 and row_seed(1, 0, 0) == row_seed(1, 0, 0)


def test_policy_config_from_mapping_and_errors():
    cfg = PolicyConfig.from_mapping({"model": "smollm2-135m", "lora": {"rank": 8, "alpha": 16},
                                     "vllm": {"max_loras": 4}})
    assert cfg.lora == LoraSpec(rank=8, alpha=16) and cfg.vllm.max_loras == 4
    with pytest.raises(PolicyConfigError, match="unknown key.*'modle'"):
        PolicyConfig.from_mapping({"modle": "tiny"})
    with pytest.raises(PolicyConfigError, match=r"policy.lora: unknown key.*'rnk'"):
        PolicyConfig.from_mapping({"lora": {"rnk": 8}})
    with pytest.raises(PolicyConfigError, match=r"policy.vllm: unknown key.*'max_lora'"):
        PolicyConfig.from_mapping({"vllm": {"max_lora": 8}})
    with pytest.raises(PolicyConfigError, match="policy.engine"):
        PolicyConfig(engine="sglang")
    with pytest.raises(PolicyConfigError, match="policy.lora.init"):
        LoraSpec(init="gaussian")
    with pytest.raises(PolicyConfigError, match=r"policy.vllm.gpu_memory_utilization .*1.5"):
        PolicyConfig.from_mapping({"vllm": {"gpu_memory_utilization": 1.5}})
    with pytest.raises(PolicyConfigError, match="policy.lora.rank"):
        PolicyConfig(engine="vllm", lora=LoraSpec(rank=12))


def test_policy_config_accepts_omegaconf_and_replace_revalidates():
    from omegaconf import OmegaConf

    node = OmegaConf.create({"engine": "hf", "lora": {"rank": 4, "target_modules": ["q_proj", "v_proj"]}})
    cfg = PolicyConfig.from_mapping(node)
    assert cfg.lora.target_modules == ["q_proj", "v_proj"]
    assert cfg.replace(max_batch_size=3).max_batch_size == 3 and cfg.max_batch_size == 64
    with pytest.raises(PolicyConfigError, match="policy.train_micro_batch"):
        cfg.replace(train_micro_batch=0)


def test_the_samples_of_a_request_share_one_prefill():
    """n samples of a request: its prompt is prefilled once and the cache copied to every sample's row."""
    import torch

    from populora.policy.base import SamplingParams
    from populora.policy.decode import Row, decode_rows

    class Cache:
        def __init__(self, rows):
            self.rows = rows

        def batch_select_indices(self, idx):
            self.rows = [self.rows[i] for i in idx.tolist()]

    calls = []

    def forward(ids, mask, positions, past, names):
        calls.append((ids.shape[0], list(names)))
        if past is None:  # prefill: each row's logits favour token (its last prompt id + 1)
            past = Cache([int(ids[b, -1]) for b in range(ids.shape[0])])
        logits = torch.full((len(past.rows), 50), -9.0)
        for b, last in enumerate(past.rows):
            logits[b, (last + 1) % 50] = 9.0
        return logits, past

    rows = [Row(i, s, [1, 2, 10 * (i + 1)], f"a{i}") for i in range(2) for s in range(3)]
    class Tokenizer:
        decode = staticmethod(lambda ids, skip_special_tokens=True: " ".join(map(str, ids)))

    decode_rows(forward, rows, SamplingParams(temperature=1.0, max_new_tokens=1, n=3), tokenizer=Tokenizer(), pad_id=0,
                eos_ids={49}, device=torch.device("cpu"), base_seed=0)
    assert calls[0] == (2, ["a0", "a1"])  # two prompts prefilled, not six rows
    assert [r.token_ids for r in rows] == [[11]] * 3 + [[21]] * 3  # every sample continues its own prompt

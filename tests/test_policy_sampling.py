"""Decoding maths, backend config and factory: pure functions, no model."""

from __future__ import annotations

import pytest
import torch

from populora.policy import LoraSpec, PolicyConfig, PolicyConfigError
from populora.policy.sampling import find_stop, row_seed, sample_step, top_p_filter


def test_top_p_keeps_smallest_nucleus():
    probs = torch.tensor([[0.5, 0.3, 0.15, 0.05]])
    kept = torch.isfinite(top_p_filter(probs.log(), 0.8))
    assert kept.tolist() == [[True, True, False, False]]
    kept = torch.isfinite(top_p_filter(probs.log(), 0.81))
    assert kept.tolist() == [[True, True, True, False]]
    # the most likely token survives any top_p
    assert torch.isfinite(top_p_filter(probs.log(), 0.01)).tolist() == [[True, False, False, False]]


def test_top_p_respects_token_order_not_position():
    logits = torch.tensor([[0.0, 3.0, 1.0, 2.0]])
    kept = torch.isfinite(top_p_filter(logits, 0.9))
    assert kept[0, 1] and kept[0, 3] and not kept[0, 0]


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

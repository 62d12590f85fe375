"""Packed micro-batches: the pure grouping (milliseconds) and, on the tiny model, the same gradients
as unpacked micro-batches and as one pass over the whole batch."""

from __future__ import annotations

import random

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from populora.rl.config import RLConfig
from populora.rl.packing import TokenBudget, in_order, pack, padded_tokens
from populora.selfplay.stages import Seq
from populora.selfplay.update import MemberGroup, MicroBatching, accumulate_gradients, advantages_of


def test_budget_is_the_plans_bound():
    assert TokenBudget.of(4, 100, 50) == TokenBudget(600, 200)
    with pytest.raises(ValueError, match="micro_batch=0"):
        TokenBudget.of(0, 100, 50)


def test_short_rows_go_many_to_a_pass_and_long_rows_alone():
    budget = TokenBudget.of(2, 10, 10)  # 40 padded tokens, 20 completion tokens
    lengths = [(10, 10), (2, 3), (10, 10), (2, 2), (3, 3), (1, 1)]
    groups = pack(lengths, budget)
    assert groups == [[0, 2], [4, 1, 3, 5]]  # longest first; ties keep batch order
    assert padded_tokens(lengths, groups) == 2 * 20 + 4 * 6
    assert padded_tokens(lengths, in_order(len(lengths), 2)) == 2 * 20 + 2 * 20 + 2 * 6


def test_completion_budget_bounds_the_log_prob_tail():
    # narrow prompts, long completions: the padded budget would take 4 rows, the tail's only 2
    groups = pack([(1, 10)] * 4, TokenBudget(padded_tokens=44, completion_tokens=20))
    assert groups == [[0, 1], [2, 3]]


def test_a_row_over_the_budget_gets_a_pass_of_its_own():
    assert pack([(50, 50), (1, 1)], TokenBudget.of(1, 10, 10)) == [[0], [1]]
    assert pack([], TokenBudget.of(1, 10, 10)) == []


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 64), st.integers(1, 64)), max_size=40), st.integers(1, 8))
def test_every_sequence_once_every_pass_within_budget(lengths, micro_batch):
    budget = TokenBudget.of(micro_batch, 64, 64)
    groups = pack(lengths, budget)
    assert sorted(i for g in groups for i in g) == list(range(len(lengths)))
    for g in groups:
        assert len(g) * max(sum(lengths[i]) for i in g) <= budget.padded_tokens
        assert sum(lengths[i][1] for i in g) <= budget.completion_tokens
    # rows within the plan's lengths: at least micro_batch rows per pass, so never more passes than
    # the fixed count in batch order
    assert all(len(g) >= micro_batch for g in groups[:-1])
    assert len(groups) <= len(in_order(len(lengths), micro_batch))


# -- same gradients, on the tiny model ---------------------------------------------------------------
def _batch(be, n: int, seed: int) -> list[Seq]:
    rng = random.Random(seed)
    vocab = min(len(be.tokenizer), be.base.config.vocab_size)
    seqs = []
    for i in range(n):
        p, c = rng.randint(3, 24), rng.randint(1, 40)
        seqs.append(Seq(role="student", task_type="code_o", prompt_ids=[rng.randrange(10, vocab) for _ in range(p)],
                        completion_ids=[rng.randrange(10, vocab) for _ in range(c)],
                        logprobs=[-rng.random() for _ in range(c)], reward=float(i % 3 == 0), prompt_group=f"g{i // 4}"))
    return seqs


def _gradient(be, batch, rl, mb: MicroBatching) -> torch.Tensor:
    """The gradient an update would step with (the adapter's weights do not change)."""
    accumulate_gradients(be, "m", batch, advantages_of(batch, rl), rl, mb)
    grad = torch.cat([p.grad.reshape(-1).clone() for p in be.trainable_parameters("m")])
    be.discard_gradients("m")
    return grad


@pytest.fixture(scope="module")
def tiny():
    from populora.policy import make_backend

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    be = make_backend({"model": "tiny", "device": "cpu", "lora": {"rank": 8, "alpha": 16, "b_std": 0.05}})
    be.add_adapter("m", be.new_adapter_weights(seed=1))
    yield be
    torch.set_num_threads(threads)


@pytest.mark.parametrize("aggregation", ["token_mean", "seq_mean", "seq_sum_token_mean"])
def test_packed_unpacked_and_whole_batch_gradients_agree(tiny, aggregation):
    batch = _batch(tiny, 12, seed=3)
    rl = RLConfig(aggregation=aggregation)
    budget = TokenBudget.of(2, 24, 40)
    packed = _gradient(tiny, batch, rl, MicroBatching(budget, 2, packed=True))
    unpacked = _gradient(tiny, batch, rl, MicroBatching(budget, 2, packed=False))
    whole = _gradient(tiny, batch, rl, MicroBatching(budget, len(batch), packed=False))
    assert len(MicroBatching(budget, 2).split(batch)) < len(in_order(len(batch), 2))  # packing did regroup
    scale = whole.abs().max()
    assert scale > 0
    assert (packed - whole).abs().max() <= 1e-5 * scale
    assert (unpacked - whole).abs().max() <= 1e-5 * scale


class _OneRankComm:
    """A group of one rank whose sum records the dtype it was asked to sum in."""

    rank = 0

    def __init__(self):
        self.dtypes = []

    def sum_in(self, ranks, tensor):
        self.dtypes.append(tensor.dtype)


def test_group_gradients_are_summed_in_float32():
    comm = _OneRankComm()
    p = torch.nn.Parameter(torch.zeros(3, dtype=torch.bfloat16))
    p.grad = torch.tensor([1.0, 2.0, 3.0], dtype=torch.bfloat16)
    MemberGroup(comm, (0,)).sum_grads([p])
    assert comm.dtypes == [torch.float32] and p.grad.dtype == torch.bfloat16
    assert p.grad.tolist() == [1.0, 2.0, 3.0]


@pytest.mark.slow
def test_bench_train_ends_with_the_packing_line(capsys):
    import re

    from populora.cli import main

    assert main(["bench", "train", "--models", "", "--packing-batch", "12", "--packing-lengths", "tiny=32+128",
                 "--repeats", "1", "--fused-model", ""]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    m = re.fullmatch(r"packed/unpacked speed-up: (\d+\.\d\d)x, max gradient difference: (\S+)", last)
    assert m, last
    assert float(m.group(1)) > 0 and float(m.group(2)) < 1e-9

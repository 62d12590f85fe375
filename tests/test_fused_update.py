"""The fused update gives every adapter its sequential gradient: hand-made batches of unequal lengths and
member sizes (one member with no sequences), fused and sequential in float32 against a float64
reference; the multi-adapter LoRA product itself (milliseconds); and the update strategies' registry."""

from __future__ import annotations

import itertools
import random

import pytest
import torch

from populora.policy.hf import HFBackend
from populora.policy.multi_lora import (
    GROUPED,
    LOOP,
    SlotLayout,
    grouped_mm,
    lora_delta,
    route_index,
    stacked_delta,
)
from populora.rl.config import RLConfig
from populora.rl.fused import MemberPart, fused_gradients
from populora.rl.packing import MicroBatching, TokenBudget
from populora.rl.strategies import UPDATE_STRATEGIES, MemberBatch, strategy_for
from populora.rl.update import accumulate_gradients, advantages_of
from populora.selfplay.stages import Seq

MEMBERS = ("t0", "t1", "s0", "s1")
SIZES = (5, 2, 0, 3)  # unequal members, one with no sequences
# ours: |g - g64| / max|g64| per adapter. Float32 rounding of the tiny model's passes stays ~1e-7; the
# issue's bound for this check is 1e-5
REL_TOL = 1e-5


# -- the grouped LoRA product (pure) ------------------------------------------------------------------
def test_slot_layout_groups_consecutive_rows_and_refuses_scattered_ones():
    layout = SlotLayout.of(["a", "a", "b", "c", "c", "c"])
    assert layout == SlotLayout(("a", "b", "c"), (2, 1, 3))
    assert layout.token_ends(6 * 4) == [8, 12, 24]
    with pytest.raises(ValueError, match="'a' are not consecutive"):
        SlotLayout.of(["a", "b", "a"])
    with pytest.raises(ValueError, match="not 6 rows"):
        layout.token_ends(25)


def test_lora_delta_is_each_tokens_own_adapter_and_an_empty_slot_gets_nothing():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(7, 16, generator=g, dtype=torch.float64)
    a = [torch.randn(4, 16, generator=g, dtype=torch.float64) for _ in range(3)]
    b = [torch.randn(8, 4, generator=g, dtype=torch.float64) for _ in range(3)]
    ends = [3, 3, 7]  # slot 1 has no tokens
    out = lora_delta(x, a, b, ends, [2.0, 2.0, 0.5], kernel=LOOP)
    expect = torch.cat([x[:3] @ a[0].T @ b[0].T * 2.0, x[3:] @ a[2].T @ b[2].T * 0.5])
    torch.testing.assert_close(out, expect, rtol=1e-12, atol=1e-12)
    with pytest.raises(ValueError, match="do not cover"):
        lora_delta(x, a, b, [3, 3, 6], [1.0] * 3)


def test_the_generation_kernel_pads_unequal_slots_and_is_each_rows_own_adapter():
    """stacked_delta (one batched product over the stacked slots) against the loop, in float64: equal
    slots (a view), unequal and empty ones (padded by an index gather; empty ones last too), per-slot
    scales."""
    g = torch.Generator().manual_seed(2)
    a = torch.randn(3, 4, 16, generator=g, dtype=torch.float64)
    b = torch.randn(3, 8, 4, generator=g, dtype=torch.float64)
    # (3, 2, 0) and (4, 0, 0): empty slots last, whose block would start one past the last token
    for counts, width in (((2, 2, 2), 1), ((2, 0, 3), 2), ((1, 4, 1), 3), ((3, 2, 0), 2), ((4, 0, 0), 1)):
        x = torch.randn(sum(counts) * width, 16, generator=g, dtype=torch.float64)
        ends = list(itertools.accumulate(c * width for c in counts))
        want = lora_delta(x, list(a), list(b), ends, [2.0, 1.0, 0.5], kernel=LOOP)
        got = stacked_delta(x, a, b, counts, width, [2.0, 1.0, 0.5])
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
        index = route_index(counts, width, x.device, grouped=False)
        assert (index is None) == (len(set(counts)) == 1)
    with pytest.raises(ValueError, match="are not the 5 tokens"):
        stacked_delta(torch.zeros(5, 16, dtype=torch.float64), a, b, (2, 2, 2), 1, [1.0] * 3)


def test_serving_routes_rows_grouped_by_adapter_with_base_rows_last():
    from populora.policy.multi_lora import Serving

    serve = Serving(("a", "b", "c"), {}, base_name="__base__")
    serve.route(["a", "a", "c", "__base__", None])
    assert (serve.counts, serve.base_rows, serve.rows, serve.lora_rows) == ((2, 0, 1), 2, 5, 3)
    with pytest.raises(ValueError, match="grouped by adapter"):
        serve.route(["c", "a"])
    with pytest.raises(ValueError, match="grouped by adapter"):
        serve.route([None, "a"])
    with pytest.raises(ValueError, match="'z' is not served"):
        serve.route(["z"])


@pytest.mark.skipif(grouped_mm() is None, reason="this torch has no grouped_mm")
def test_grouped_kernel_matches_the_loop_where_this_torch_runs_it():
    """Where ``grouped_mm`` runs on this device (torch's CPU fallback here; CUDA bf16 in test_fused_gpu.py)."""
    g = torch.Generator().manual_seed(1)
    x = torch.randn(40, 32, generator=g, dtype=torch.bfloat16, requires_grad=True)
    a = [torch.randn(8, 32, generator=g, dtype=torch.bfloat16, requires_grad=True) for _ in range(3)]
    b = [torch.randn(16, 8, generator=g, dtype=torch.bfloat16, requires_grad=True) for _ in range(3)]
    try:
        fused = lora_delta(x, a, b, [10, 10, 40], [0.5] * 3, kernel=GROUPED)
    except (RuntimeError, NotImplementedError) as e:  # no CPU implementation in this torch: nothing to compare
        pytest.skip(f"grouped_mm does not run on CPU here: {e}")
    loop = lora_delta(x.detach().double(), [t.detach().double() for t in a], [t.detach().double() for t in b],
                      [10, 10, 40], [0.5] * 3, kernel=LOOP)
    torch.testing.assert_close(fused.double(), loop, rtol=2e-2, atol=2e-2)
    fused.float().square().sum().backward()
    assert a[1].grad is None or not a[1].grad.any()  # the empty slot's adapter gets no gradient
    assert a[0].grad.abs().sum() > 0 and b[2].grad.abs().sum() > 0


# -- gradients on the tiny model ----------------------------------------------------------------------
def _backend(dtype: torch.dtype) -> HFBackend:
    from populora.policy.config import PolicyConfig
    from populora.policy.models import load_base

    cfg = PolicyConfig(model="tiny", device="cpu", dtype="float32", lora={"rank": 4, "alpha": 8, "b_std": 0.05})
    model, tok = load_base("tiny", "cpu", "float32")
    be = HFBackend(cfg, model=model.to(dtype), tokenizer=tok)
    for i, name in enumerate(MEMBERS):
        be.add_adapter(name, be.new_adapter_weights(seed=i))
    return be


def _batches(vocab: int) -> dict[str, list[Seq]]:
    rng = random.Random(0)
    out = {}
    for name, n in zip(MEMBERS, SIZES):
        seqs = []
        for i in range(n):
            p, c = rng.randint(2, 30), rng.randint(1, 45)
            seqs.append(Seq(role="student" if name.startswith("s") else "teacher", task_type="code_o",
                            prompt_ids=[rng.randrange(10, vocab) for _ in range(p)],
                            completion_ids=[rng.randrange(10, vocab) for _ in range(c)],
                            logprobs=[-rng.random() for _ in range(c)], reward=rng.choice([-1.0, 0.0, 0.5, 1.0]),
                            prompt_group=f"{name}{i // 2}"))
        out[name] = seqs
    return out


@pytest.fixture(scope="module")
def backends():
    be32, be64 = _backend(torch.float32), _backend(torch.float64)
    yield be32, be64
    be32.close(), be64.close()


def _grads(be, name):
    ps = be.trainable_parameters(name)
    if all(p.grad is None for p in ps):
        return None
    return torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1).double() for p in ps])


def _take(be) -> dict:
    out = {n: _grads(be, n) for n in MEMBERS}
    for n in MEMBERS:
        be.discard_gradients(n)
    return out


def _sequential(be, batches, rl, mb):
    losses = {name: accumulate_gradients(be, name, batches[name], advantages_of(batches[name], rl), rl, mb)["loss/total"]
              for name in MEMBERS}
    return _take(be), losses


def _fused(be, batches, rl, mb):
    parts = [MemberPart(n, batches[n], advantages_of(batches[n], rl)) for n in MEMBERS]
    fused_gradients(be, parts, rl, mb)
    return _take(be), parts


def _flat(weights) -> torch.Tensor:
    return torch.cat([t.reshape(-1) for m in sorted(weights.tensors) for t in weights.tensors[m]])


@pytest.mark.parametrize("aggregation", ["token_mean", "seq_mean", "seq_sum_token_mean"])
def test_every_adapter_gets_its_sequential_gradient_fused(backends, aggregation):
    be32, be64 = backends
    batches = _batches(min(len(be32.tokenizer), be32.base.config.vocab_size))
    rl = RLConfig(aggregation=aggregation)
    # a small budget: several passes, each mixing members' rows of different lengths
    mb = MicroBatching(TokenBudget(padded_tokens=160, completion_tokens=90), micro_batch=2)
    ref, _ = _sequential(be64, batches, rl, mb)
    seq, losses = _sequential(be32, batches, rl, mb)
    fused, parts = _fused(be32, batches, rl, mb)
    assert len(mb.split([s for n in MEMBERS for s in batches[n]])) > 1
    for name, n in zip(MEMBERS, SIZES):
        if n == 0:
            assert ref[name] is None and seq[name] is None and fused[name] is None, name
            continue
        scale = ref[name].abs().max()
        assert scale > 0, name
        for got in (seq[name], fused[name]):
            assert (got - ref[name]).abs().max() / scale < REL_TOL, (name, float((got - ref[name]).abs().max() / scale))
    # each member's loss is its own (the sum of its passes' losses, over its own denominator)
    assert [p.totals["loss/total"] for p in parts] == pytest.approx([losses[n] for n in MEMBERS], rel=1e-5, abs=1e-7)


def test_the_strategies_take_the_same_steps(backends):
    """One whole update (optimizer step included) by each strategy from the same weights: the same new
    adapters; the member with no sequences takes no step."""
    be32, _ = backends
    batches = _batches(min(len(be32.tokenizer), be32.base.config.vocab_size))
    rl = RLConfig(lr=1e-2)
    mb = MicroBatching(TokenBudget(padded_tokens=160, completion_tokens=90), micro_batch=2)
    start = {n: be32.get_weights(n) for n in MEMBERS}
    results = {}
    for strategy in ("sequential", "fused"):
        for n in MEMBERS:
            be32.set_weights(n, start[n])
            be32.reset_optimizer(n)
        stats = strategy_for(strategy).update(be32, [MemberBatch(n, batches[n]) for n in MEMBERS], rl, mb)
        results[strategy] = ({n: _flat(be32.get_weights(n)) for n in MEMBERS}, stats)
    (w_seq, st_seq), (w_fused, st_fused) = results["sequential"], results["fused"]
    for n, size in zip(MEMBERS, SIZES):
        assert torch.allclose(w_seq[n], w_fused[n], rtol=0, atol=1e-6), n
        assert bool((w_fused[n] != _flat(start[n])).any()) == (size > 0), n
    assert [s["optimizer_steps"] for s in st_fused] == [int(n > 0) for n in SIZES]
    for a, b in zip(st_seq, st_fused):
        assert a.keys() == b.keys()
        # what does not depend on how sequences are grouped into passes (per-pass means like ratio/mean do)
        for k in ("loss/total", "grad_norm", "adv/std", "sequences", "optimizer_steps", "nan_restored"):
            assert (k in a) == (k in b) and (k not in a or a[k] == pytest.approx(b[k], rel=1e-4, abs=1e-6)), k
    for n in MEMBERS:
        be32.set_weights(n, start[n])


def test_the_strategy_registry_and_its_config_key():
    assert set(UPDATE_STRATEGIES) >= {"sequential", "fused"}
    assert RLConfig().update_strategy in UPDATE_STRATEGIES
    with pytest.raises(ValueError, match=r"rl.update_strategy must be one of \['fused', 'sequential'\], got 'merged'"):
        RLConfig(update_strategy="merged")
    with pytest.raises(ValueError, match="rl.update_strategy"):
        strategy_for("merged")


# -- a tiny run, fused vs sequential --------------------------------------------------------------------
# ours: the adapters of the two runs after two steps differ by float32 rounding of the gradients only (the
# passes group the sequences differently), but AdamW divides each entry by its own running scale, so an
# entry whose gradient is near zero can move by a visible fraction of the learning rate on rounding alone:
# measured 1.5e-6 after two steps at tiny.yaml's lr 1e-3. Bound: 1% of one step's largest move (lr)
RUN_TOL = 1e-5


@pytest.mark.slow
def test_a_tiny_run_with_fused_updates_matches_the_sequential_run(tmp_path, monkeypatch):
    """Two steps of configs/tiny.yaml, once per strategy, from the same seed. The random tiny model's own
    rewards are all equal (every proposal invalid, every answer badly formatted: zero advantages, nothing
    would train), so each trained sequence gets a reward drawn from its tokens: both runs train, on the
    same data, and must end with the same adapters."""
    from dataclasses import replace
    from pathlib import Path

    from populora.config import load_config
    from populora.selfplay import stages
    from populora.selfplay.loop import SelfPlay

    real = stages.training_batches

    def varied(*args, **kwargs):
        batches, usage = real(*args, **kwargs)
        return {mid: [replace(s, reward=float(sum(s.completion_ids) % 3 - 1)) for s in b]
                for mid, b in batches.items()}, usage

    monkeypatch.setattr(stages, "training_batches", varied)
    tiny = Path(__file__).resolve().parents[1] / "configs" / "tiny.yaml"
    runs = {}
    for strategy in ("sequential", "fused"):
        sp = SelfPlay(load_config(tiny, ["selfplay.steps=2", f"rl.update_strategy={strategy}"]), tmp_path / strategy)
        start = {mid: _flat(sp.backend.get_weights(m.adapter)) for mid, m in sp.members.items()}
        try:
            rows = [sp.step(1), sp.step(2)]
            runs[strategy] = (start, {mid: _flat(sp.backend.get_weights(m.adapter)) for mid, m in sp.members.items()},
                              rows)
        finally:
            sp.close()
    (start, seq, seq_rows), (_, fused, fused_rows) = runs["sequential"], runs["fused"]
    assert seq.keys() == fused.keys()
    for mid in seq:
        assert (seq[mid] != start[mid]).any(), f"{mid} did not train: the comparison would be empty"
        assert (seq[mid] - fused[mid]).abs().max() < RUN_TOL, (mid, float((seq[mid] - fused[mid]).abs().max()))
    for a, b in zip(seq_rows, fused_rows):  # the same tasks, rewards and steps
        assert {k: v for k, v in a.items() if "reward" in k or "optimizer_steps" in k} == \
            {k: v for k, v in b.items() if "reward" in k or "optimizer_steps" in k}


def test_bench_train_ends_with_the_fused_line(capsys):
    """A small run of the comparison (3 members, short sequences, no self-play step): the last line's form
    and the gradient bound of the issue (speed is measured by the full bench, not asserted here)."""
    import re

    from populora.cli import main

    assert main(["bench", "train", "--models", "", "--packing-models", "", "--fused-members", "3",
                 "--fused-sequences", "3", "--fused-lengths", "16+64", "--selfplay-config", "", "--repeats", "1"]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    m = re.fullmatch(r"fused/sequential speed-up: (\d+\.\d\d)x, max gradient difference: (\S+)", out[-1])
    assert m, out[-1]
    assert float(m.group(1)) > 0 and float(m.group(2)) <= 3e-5
    assert any(line.startswith("paper ") and " fused " in line for line in out)

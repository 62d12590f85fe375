"""Policy-gradient loss: hand-checked 2x3 examples, clipping, gradients, masks, KL, entropy."""

from __future__ import annotations

import math

import pytest
import torch

from populora.rl.losses import AGGREGATIONS, behaviour_logprobs, kl_penalty, policy_loss

# two sequences: 3 valid tokens, and 2 valid tokens + 1 padding slot
MASK = torch.tensor([[True, True, True], [True, True, False]])
ADV = torch.tensor([2.0, -1.0])


def logprobs_2x3(pad: float = 0.0) -> torch.Tensor:
    return torch.tensor([[-1.0, -2.0, -3.0], [-0.5, -1.5, pad]], requires_grad=True)


# REINFORCE per-token loss -A * logprob: row 0 [2, 4, 6] (sum 12), row 1 [-0.5, -1.5] (sum -2)
# token_mean: (12 - 2) / 5;  seq_mean: (12/3 + -2/2) / 2;  seq_sum_token_mean: (12 - 2) / (2 * 3)
# d loss / d logprob_it = -A_i * w_it with w the aggregation weight of token (i, t)
HAND = {
    "token_mean": (2.0, [[-2 / 5] * 3, [1 / 5, 1 / 5, 0.0]]),
    "seq_mean": (1.5, [[-2 / 6] * 3, [1 / 4, 1 / 4, 0.0]]),
    "seq_sum_token_mean": (10 / 6, [[-2 / 6] * 3, [1 / 6, 1 / 6, 0.0]]),
}


@pytest.mark.parametrize("aggregation", AGGREGATIONS)
def test_reinforce_2x3_by_hand(aggregation):
    lp = logprobs_2x3()
    loss, stats = policy_loss(lp, None, ADV, MASK, aggregation=aggregation)
    value, grad = HAND[aggregation]
    assert loss.item() == pytest.approx(value)
    assert stats["loss/pg"] == pytest.approx(value) and stats["loss/total"] == pytest.approx(value)
    loss.backward()
    assert lp.grad.tolist() == [pytest.approx(row) for row in grad]


@pytest.mark.parametrize("aggregation", AGGREGATIONS)
def test_clipped_loss_equals_reinforce_gradient_on_policy(aggregation):
    # old == current: ratio 1, nothing clipped, same gradient as REINFORCE (value -A instead of -A*lp)
    lp = logprobs_2x3()
    loss, stats = policy_loss(lp, lp.detach().clone(), ADV, MASK, clip_eps=0.2, aggregation=aggregation)
    loss.backward()
    assert lp.grad.tolist() == [pytest.approx(row) for row in HAND[aggregation][1]]
    assert stats["ratio/clip_frac"] == 0.0 and stats["ratio/mean"] == pytest.approx(1.0)


def test_clipping_kicks_in_exactly_where_expected():
    # ratios exp(lp - old) = [[1.5, 0.9, 1.1], [0.7, 1.3, pad]], clip range [0.8, 1.2], A = [+1, -1]
    ratios = torch.tensor([[1.5, 0.9, 1.1], [0.7, 1.3, 1.0]])
    old = torch.tensor([[-1.0, -2.0, -3.0], [-0.5, -1.5, 0.0]])
    lp = (old + ratios.log()).requires_grad_(True)
    loss, stats = policy_loss(lp, old, torch.tensor([1.0, -1.0]), MASK, clip_eps=0.2)
    # A > 0: -min(r, clip r): r=1.5 clipped (-1.2), 0.9 and 1.1 pass (-0.9, -1.1)
    # A < 0: max(r, clip r): r=0.7 clipped (0.8); r=1.3 is NOT clipped (pessimistic bound keeps 1.3)
    assert loss.item() == pytest.approx((-1.2 - 0.9 - 1.1 + 0.8 + 1.3) / 5)
    assert stats["ratio/clip_frac"] == pytest.approx(2 / 5)
    assert stats["ratio/max"] == pytest.approx(1.5) and stats["ratio/min"] == pytest.approx(0.7)
    assert stats["ratio/mean"] == pytest.approx((1.5 + 0.9 + 1.1 + 0.7 + 1.3) / 5)
    loss.backward()
    # d(-A r)/d lp = -A r; zero where clipped and on padding
    expected = [[0.0, -0.9 / 5, -1.1 / 5], [0.0, 1.3 / 5, 0.0]]
    assert lp.grad.tolist() == [pytest.approx(row) for row in expected]


@pytest.mark.parametrize("clip_eps", [None, 0.2])
def test_positive_advantage_raises_logprob(clip_eps):
    torch.manual_seed(0)
    logits = torch.randn(2, 4, 6, requires_grad=True)  # 2 sequences, 4 tokens, vocab 6
    tokens = torch.randint(0, 6, (2, 4))
    mask = torch.ones(2, 4, dtype=torch.bool)

    def token_logprobs():
        return torch.log_softmax(logits, -1).gather(-1, tokens[..., None])[..., 0]

    before = token_logprobs().detach()
    loss, _ = policy_loss(token_logprobs(), before, torch.tensor([1.0, -1.0]), mask, clip_eps=clip_eps)
    loss.backward()
    with torch.no_grad():
        logits -= 0.1 * logits.grad
    after = token_logprobs().detach()
    assert (after[0] > before[0]).all()  # positive advantage: every sampled token more likely
    assert (after[1] < before[1]).all()  # negative advantage: less likely


@pytest.mark.parametrize("pad", [0.0, -math.inf, math.nan])
@pytest.mark.parametrize("aggregation", AGGREGATIONS)
def test_padding_contributes_nothing(pad, aggregation):
    lp = logprobs_2x3(pad)
    old = torch.tensor([[-1.1, -2.0, -2.9], [-0.5, -1.4, pad]])
    ref = torch.tensor([[-1.0, -2.5, -3.0], [-0.7, -1.5, pad]])
    ent = torch.tensor([[0.5, 0.4, 0.3], [0.2, 0.1, pad]])
    loss, stats = policy_loss(
        lp,
        old,
        ADV,
        MASK,
        clip_eps=0.2,
        aggregation=aggregation,
        entropy=ent,
        entropy_coef=0.01,
        ref_logprobs=ref,
        kl_coef=0.1,
    )
    assert math.isfinite(loss.item()) and all(math.isfinite(v) for v in stats.values())
    loss.backward()
    assert torch.isfinite(lp.grad).all() and lp.grad[1, 2] == 0.0
    # the loss does not depend on what sits in the padding slot
    ref_loss, _ = policy_loss(
        logprobs_2x3(0.0),
        old.nan_to_num(0.0, 0.0, 0.0),
        ADV,
        MASK,
        clip_eps=0.2,
        aggregation=aggregation,
        entropy=ent.nan_to_num(0.0, 0.0, 0.0),
        entropy_coef=0.01,
        ref_logprobs=ref.nan_to_num(0.0, 0.0, 0.0),
        kl_coef=0.1,
    )
    assert loss.item() == pytest.approx(ref_loss.item())
    assert stats["tokens"] == 5.0 and stats["sequences"] == 2.0


def test_kl_estimators_by_hand():
    lp, ref = torch.tensor([-1.0]), torch.tensor([-2.0])  # d = ref - lp = -1
    assert kl_penalty(lp, ref, "k1").item() == pytest.approx(1.0)
    assert kl_penalty(lp, ref, "k2").item() == pytest.approx(0.5)
    assert kl_penalty(lp, ref, "k3").item() == pytest.approx(math.exp(-1))  # e^-1 - 1 + 1
    with pytest.raises(ValueError, match="kl_estimator"):
        kl_penalty(lp, ref, "k4")


def test_k1_and_k3_are_unbiased_for_kl():
    # E_{x~p}[k(x)] over the full support equals KL(p || q) exactly for k1 and k3
    p = torch.tensor([0.5, 0.3, 0.2]).double()
    q = torch.tensor([0.2, 0.2, 0.6]).double()
    kl = float((p * (p / q).log()).sum())
    for est in ("k1", "k3"):
        assert float((p * kl_penalty(p.log(), q.log(), est)).sum()) == pytest.approx(kl)
    assert (kl_penalty(p.log(), q.log(), "k3") >= 0).all()


def test_kl_term_value_and_gradient():
    lp = torch.tensor([[-1.0, -1.0]], requires_grad=True)
    ref = torch.tensor([[-2.0, -1.0]])  # KL k3 per token: [e^-1, 0]
    adv, mask = torch.zeros(1), torch.ones(1, 2, dtype=torch.bool)
    loss, stats = policy_loss(lp, None, adv, mask, ref_logprobs=ref, kl_coef=0.1)
    assert stats["kl/mean"] == pytest.approx(math.exp(-1) / 2)
    assert stats["loss/kl"] == pytest.approx(0.1 * math.exp(-1) / 2)
    assert loss.item() == pytest.approx(0.1 * math.exp(-1) / 2)
    loss.backward()
    # d k3 / d lp = 1 - exp(ref - lp): pulls lp towards ref
    assert lp.grad.tolist() == [pytest.approx([0.1 * (1 - math.exp(-1)) / 2, 0.0])]
    # reported but not optimised with kl_coef = 0
    loss0, stats0 = policy_loss(lp, None, adv, mask, ref_logprobs=ref)
    assert stats0["kl/mean"] == pytest.approx(math.exp(-1) / 2) and stats0["loss/kl"] == 0.0
    assert loss0.item() == 0.0


def test_entropy_bonus():
    lp = logprobs_2x3()
    ent = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 99.0]], requires_grad=True)
    loss, stats = policy_loss(lp, None, ADV, MASK, entropy=ent, entropy_coef=0.1)
    # token-mean entropy (1 + 2 + 3 + 4 + 5) / 5 = 3; the bonus lowers the loss by 0.1 * 3
    assert stats["entropy/mean"] == pytest.approx(3.0)
    assert stats["loss/entropy"] == pytest.approx(-0.3)
    assert loss.item() == pytest.approx(2.0 - 0.3)
    loss.backward()
    assert ent.grad.tolist() == [pytest.approx([-0.02] * 3), pytest.approx([-0.02, -0.02, 0.0])]


@pytest.mark.parametrize("aggregation", AGGREGATIONS)
def test_micro_batches_sum_to_full_batch(aggregation):
    torch.manual_seed(1)
    lp = torch.randn(4, 5) - 2
    old = lp + 0.05 * torch.randn(4, 5)
    adv = torch.tensor([1.0, -0.5, 0.3, -2.0])
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 0, 0, 0], [1, 0, 0, 0, 0], [1, 1, 1, 0, 0]]).bool()
    full, _ = policy_loss(lp, old, adv, mask, clip_eps=0.2, aggregation=aggregation)
    denom = {"token_mean": float(mask.sum()), "seq_mean": 4.0, "seq_sum_token_mean": 4.0 * 5}[aggregation]
    parts = [
        policy_loss(lp[s], old[s], adv[s], mask[s], clip_eps=0.2, aggregation=aggregation, denominator=denom)[
            0
        ]
        for s in (slice(0, 1), slice(1, 4))
    ]
    assert sum(parts).item() == pytest.approx(full.item())


def test_empty_batch_and_all_padding_give_zero_loss_with_graph():
    for lp, adv, mask in (
        (torch.zeros(0, 3, requires_grad=True), torch.zeros(0), torch.zeros(0, 3, dtype=torch.bool)),
        (torch.zeros(2, 3, requires_grad=True), torch.ones(2), torch.zeros(2, 3, dtype=torch.bool)),
    ):
        loss, stats = policy_loss(lp, lp.detach(), adv, mask, clip_eps=0.2)
        assert loss.item() == 0.0 and stats["tokens"] == 0.0
        loss.backward()
        assert (lp.grad == 0).all()


def test_stat_names_are_stable():
    _, stats = policy_loss(logprobs_2x3(), None, ADV, MASK)
    assert set(stats) == {
        "loss/total",
        "loss/pg",
        "loss/kl",
        "loss/entropy",
        "ratio/mean",
        "ratio/min",
        "ratio/max",
        "ratio/clip_frac",
        "adv/mean",
        "tokens",
        "sequences",
    }


def test_errors_name_the_argument():
    lp = logprobs_2x3()
    with pytest.raises(ValueError, match="old_logprobs"):
        policy_loss(lp, None, ADV, MASK, clip_eps=0.2)
    with pytest.raises(ValueError, match="clip_eps"):
        policy_loss(lp, lp.detach(), ADV, MASK, clip_eps=0.0)
    with pytest.raises(ValueError, match="ref_logprobs"):
        policy_loss(lp, None, ADV, MASK, kl_coef=0.1)
    with pytest.raises(ValueError, match="entropy"):
        policy_loss(lp, None, ADV, MASK, entropy_coef=0.1)
    with pytest.raises(ValueError, match="aggregation"):
        policy_loss(lp, None, ADV, MASK, aggregation="mean")
    with pytest.raises(ValueError, match="mask must have shape"):
        policy_loss(lp, None, ADV, MASK[:, :2])
    with pytest.raises(ValueError, match="advantages must have shape"):
        policy_loss(lp, None, ADV[:1], MASK)
    with pytest.raises(ValueError, match="NaN"):
        policy_loss(lp, None, torch.tensor([1.0, math.nan]), MASK)
    with pytest.raises(ValueError, match="denominator"):
        policy_loss(lp, None, ADV, MASK, denominator=0)


@pytest.mark.gpu
def test_cuda_bf16_logprobs_with_cpu_mask_and_advantages():
    # the trainer's path on GPU: bf16 log-probs on CUDA, masks/advantages/behaviour log-probs built on CPU
    torch.manual_seed(2)
    lp_cpu = (torch.randn(3, 7) - 2).to(torch.bfloat16)
    old = lp_cpu.float() + 0.1 * torch.randn(3, 7)
    ref = lp_cpu.float() - 0.2
    mask = torch.rand(3, 7) > 0.3
    adv = torch.tensor([1.0, -1.0, 0.5])
    kwargs = {"clip_eps": 0.2, "ref_logprobs": ref, "kl_coef": 0.1}
    expected, expected_stats = policy_loss(lp_cpu.float(), old, adv, mask, **kwargs)
    lp = lp_cpu.cuda().requires_grad_(True)
    loss, stats = policy_loss(lp, old, adv, mask, **kwargs)
    assert loss.device.type == "cuda"
    assert loss.item() == pytest.approx(expected.item(), rel=1e-5)
    assert stats == pytest.approx(expected_stats, rel=1e-5)
    loss.backward()
    assert lp.grad.dtype == torch.bfloat16 and torch.isfinite(lp.grad.float()).all()
    assert (lp.grad.float().cpu()[~mask] == 0).all()


def test_behaviour_logprobs_follow_the_mask_layout():
    old = behaviour_logprobs([[-0.1, -0.2, -0.3], [-0.4, -0.5]], MASK)
    assert old.tolist() == [pytest.approx([-0.1, -0.2, -0.3]), pytest.approx([-0.4, -0.5, 0.0])]
    left_padded = torch.tensor([[True, True, True], [False, True, True]])
    assert behaviour_logprobs([[-0.1, -0.2, -0.3], [-0.4, -0.5]], left_padded)[1].tolist() == pytest.approx(
        [0.0, -0.4, -0.5]
    )
    with pytest.raises(ValueError, match="row 1 has 3 tokens but the mask has 2"):
        behaviour_logprobs([[-0.1, -0.2, -0.3], [-0.4, -0.5, -0.6]], MASK)
    with pytest.raises(ValueError, match="1 rows for a mask of 2"):
        behaviour_logprobs([[-0.1]], MASK)

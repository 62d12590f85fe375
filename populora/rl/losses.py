"""Token-level policy-gradient loss (REINFORCE / PPO-clip), with optional KL and entropy terms.

One function, :func:`policy_loss`, on padded ``[B, T]`` tensors of completion tokens. Its pieces:

- **policy-gradient term.** With ``clip_eps=None`` it is plain REINFORCE, ``-A_i * logprob_it``
  (gradient ``-A_i * grad logprob_it``). With ``clip_eps = e`` it is PPO's clipped surrogate
  against the behaviour log-probabilities returned by the generator::

      ratio_it = exp(logprob_it - old_logprob_it)
      pg_it    = max(-A_i * ratio_it, -A_i * clip(ratio_it, 1 - e, 1 + e))

  With one optimizer step per batch the ratio is 1 up to the numerical mismatch between the
  generator (e.g. vLLM) and the trainer, so clipping mostly bounds the damage of that mismatch.
- **KL to the reference** (the frozen base), optional: ``kl_coef * KL`` with Schulman's per-token
  estimators of KL(pi || ref), ``d = ref_logprob - logprob``: ``k1 = -d``, ``k2 = d^2 / 2``,
  ``k3 = exp(d) - 1 - d`` (unbiased and always >= 0).
- **entropy bonus**, optional: ``- entropy_coef * H`` with the per-token entropies from the backend.

Aggregation of per-token values ``x_it`` into one number (the same for every term):

- ``token_mean``: ``sum_it m_it x_it / sum_it m_it``; every valid token weighs the same, so longer
  sequences weigh more (DAPO; verl's and AZR's default);
- ``seq_mean``: ``(1/B) sum_i (sum_t m_it x_it / sum_t m_it)``; every sequence weighs the same
  (original GRPO);
- ``seq_sum_token_mean``: ``sum_it m_it x_it / (B * T)``: each sequence's token sum, averaged over
  sequences and divided by a length ``T`` that does not depend on the sequences (Dr. GRPO's constant
  normaliser): no per-sequence length normalisation, and the scale does not depend on how many
  tokens the batch happens to have. ``T`` is the padded width of the tensors unless
  ``denominator`` is given; pass ``denominator = B * max_new_tokens`` for a truly constant one.

``denominator`` replaces the divisor (``sum m``, ``B`` or ``B * T``), e.g. with that of the whole
optimizer batch when one call sees only a micro-batch, so that the micro-batch losses sum to the
full-batch loss. Padding (``mask == False``) contributes nothing, not even NaN: padded log-probs
may hold any value, including ``-inf`` or NaN.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

AGGREGATIONS = ("token_mean", "seq_mean", "seq_sum_token_mean")
KL_ESTIMATORS = ("k1", "k2", "k3")


def kl_penalty(logprobs: torch.Tensor, ref_logprobs: torch.Tensor, estimator: str = "k3") -> torch.Tensor:
    """Per-token estimate of KL(pi || ref) from samples of pi, ``d = ref_logprobs - logprobs``."""
    d = ref_logprobs - logprobs
    if estimator == "k1":
        return -d
    if estimator == "k2":
        return 0.5 * d**2
    if estimator == "k3":
        # exp(d) - 1 - d >= 0; clamp d so a far-off reference cannot overflow exp (verl does the same)
        d = d.clamp(-20.0, 20.0)
        return torch.expm1(d) - d
    raise ValueError(f"kl_estimator must be one of {KL_ESTIMATORS}, got {estimator!r}")


def token_weights(mask: torch.Tensor, aggregation: str, denominator: float | None = None) -> torch.Tensor:
    """Weights ``w [B, T]`` such that the aggregated value of per-token ``x`` is ``sum(w * x)``."""
    m = mask.to(torch.float32)
    batch, length = m.shape
    if aggregation == "token_mean":
        w, default = m, float(m.sum())
    elif aggregation == "seq_mean":
        w, default = m / m.sum(dim=1, keepdim=True).clamp(min=1.0), float(batch)
    elif aggregation == "seq_sum_token_mean":
        w, default = m, float(batch * length)
    else:
        raise ValueError(f"aggregation must be one of {AGGREGATIONS}, got {aggregation!r}")
    if denominator is not None and not denominator > 0:
        raise ValueError(f"denominator must be > 0, got {denominator}")
    denom = default if denominator is None else float(denominator)
    return w / denom if denom > 0 else torch.zeros_like(w)  # no valid token at all: loss 0


def behaviour_logprobs(rows: Sequence[Sequence[float]], mask: torch.Tensor) -> torch.Tensor:
    """The generator's per-token log-probs (one list per completion) as a ``[B, T]`` tensor laid out
    like ``mask`` (the trainer's mask of the same completions), 0 on padding.

    Raises if a row's length differs from its number of valid mask positions: the behaviour and
    trainer log-probs would then be compared token against the wrong token.
    """
    mask = mask.bool()
    if len(rows) != mask.shape[0]:
        raise ValueError(f"behaviour log-probs: {len(rows)} rows for a mask of {mask.shape[0]} sequences")
    out = torch.zeros(mask.shape, dtype=torch.float32, device=mask.device)
    for i, row in enumerate(rows):
        n_valid = int(mask[i].sum())
        if len(row) != n_valid:
            raise ValueError(f"behaviour log-probs row {i} has {len(row)} tokens but the mask has {n_valid}")
        out[i, mask[i]] = torch.as_tensor(row, dtype=torch.float32, device=mask.device)
    return out


def _check_shape(name: str, x: torch.Tensor | None, shape: torch.Size) -> None:
    if x is not None and x.shape != shape:
        raise ValueError(f"{name} must have shape {tuple(shape)} like logprobs, got {tuple(x.shape)}")


def policy_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor | None,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    clip_eps: float | None = None,
    aggregation: str = "token_mean",
    entropy: torch.Tensor | None = None,
    entropy_coef: float = 0.0,
    ref_logprobs: torch.Tensor | None = None,
    kl_coef: float = 0.0,
    kl_estimator: str = "k3",
    denominator: float | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Policy-gradient loss of one batch of completions; see the module docstring for the maths.

    Args:
        logprobs: ``[B, T]`` log-probabilities of the sampled tokens under the current adapter
            (differentiable).
        old_logprobs: ``[B, T]`` behaviour log-probabilities from the generator; required when
            ``clip_eps`` is set, otherwise only used for the ``ratio/*`` diagnostics (may be None).
        advantages: ``[B]`` one advantage per sequence (broadcast over its tokens).
        mask: ``[B, T]`` True on completion tokens, False on padding.
        clip_eps: PPO clip range ``e`` (ratio clipped to ``[1 - e, 1 + e]``); None = REINFORCE.
        aggregation: ``token_mean`` | ``seq_mean`` | ``seq_sum_token_mean``.
        entropy: ``[B, T]`` per-token entropies (needed when ``entropy_coef > 0``).
        ref_logprobs: ``[B, T]`` log-probabilities under the reference (needed when ``kl_coef > 0``;
            when given with ``kl_coef == 0`` the KL is only reported).
        denominator: divisor of the whole optimizer batch when this call sees a micro-batch.

    Returns:
        ``(loss, stats)``: the scalar loss to minimise and float diagnostics under stable names
        ``loss/total``, ``loss/pg``, ``loss/kl``, ``loss/entropy`` (each term's signed contribution
        to ``loss/total``), ``kl/mean``, ``entropy/mean`` (token means, for monitoring),
        ``ratio/mean``, ``ratio/min``, ``ratio/max``, ``ratio/clip_frac`` (over valid tokens),
        ``adv/mean``, ``tokens``, ``sequences``.
    """
    if logprobs.ndim != 2:
        raise ValueError(f"logprobs must be [B, T], got shape {tuple(logprobs.shape)}")
    shape = logprobs.shape
    for name, x in (
        ("old_logprobs", old_logprobs),
        ("mask", mask),
        ("entropy", entropy),
        ("ref_logprobs", ref_logprobs),
    ):
        _check_shape(name, x, shape)
    if advantages.shape != shape[:1]:
        raise ValueError(
            f"advantages must have shape ({shape[0]},), one per sequence, got {tuple(advantages.shape)}"
        )
    if not torch.isfinite(advantages).all():
        raise ValueError("advantages contain NaN or inf")
    if clip_eps is not None and not clip_eps > 0:
        raise ValueError(f"clip_eps must be > 0 or None, got {clip_eps}")
    if clip_eps is not None and old_logprobs is None:
        raise ValueError("clip_eps is set but old_logprobs (the generator's behaviour log-probs) is None")
    if entropy_coef != 0 and entropy is None:
        raise ValueError(f"entropy_coef={entropy_coef} but no per-token entropy was given")
    if kl_coef != 0 and ref_logprobs is None:
        raise ValueError(f"kl_coef={kl_coef} but no ref_logprobs were given")

    mask = mask.to(logprobs.device).bool()
    w = token_weights(mask, aggregation, denominator)

    def valid(x: torch.Tensor) -> torch.Tensor:
        # replace padding before any arithmetic: where() routes zero gradient to padded slots and
        # keeps -inf/NaN there out of exp() and products (0 * inf would be NaN); float32 maths
        # on the device of ``logprobs`` whatever the inputs' dtype and device
        return torch.where(
            mask, x.to(device=mask.device, dtype=torch.float32), torch.zeros((), device=mask.device)
        )

    lp = valid(logprobs)
    adv = advantages.float().to(lp.device)[:, None]

    stats: dict[str, float] = {}
    n_tokens = int(mask.sum())
    if old_logprobs is not None:
        log_ratio = lp - valid(old_logprobs).detach()
        ratio = torch.exp(log_ratio.clamp(max=20.0))  # bounded: one bad token cannot overflow
    if clip_eps is None:
        pg = -adv * lp
        clipped = torch.zeros_like(mask)
    else:
        surrogate = -adv * ratio
        surrogate_clipped = -adv * ratio.clamp(1.0 - clip_eps, 1.0 + clip_eps)
        pg = torch.maximum(surrogate, surrogate_clipped)
        clipped = (surrogate_clipped > surrogate) & mask
    loss_pg = (w * pg).sum()
    total = loss_pg

    loss_kl = torch.zeros((), device=lp.device)
    if ref_logprobs is not None:
        kl = valid(kl_penalty(lp, valid(ref_logprobs).detach(), kl_estimator))
        stats["kl/mean"] = _token_mean(kl, mask)
        if kl_coef != 0:
            loss_kl = kl_coef * (w * kl).sum()
            total = total + loss_kl

    loss_ent = torch.zeros((), device=lp.device)
    if entropy is not None:
        ent = valid(entropy)
        stats["entropy/mean"] = _token_mean(ent, mask)
        if entropy_coef != 0:
            loss_ent = -entropy_coef * (w * ent).sum()
            total = total + loss_ent

    stats.update(
        {
            "loss/total": float(total.detach()),
            "loss/pg": float(loss_pg.detach()),
            "loss/kl": float(loss_kl.detach()),
            "loss/entropy": float(loss_ent.detach()),
            "ratio/clip_frac": float(clipped.sum()) / max(n_tokens, 1),
            "adv/mean": float(advantages.float().mean()) if len(advantages) else 0.0,
            "tokens": float(n_tokens),
            "sequences": float(shape[0]),
        }
    )
    if old_logprobs is not None and n_tokens:
        r = ratio.detach()[mask]
        stats.update(
            {"ratio/mean": float(r.mean()), "ratio/min": float(r.min()), "ratio/max": float(r.max())}
        )
    else:
        stats.update({"ratio/mean": 1.0, "ratio/min": 1.0, "ratio/max": 1.0})
    return total, stats


def _token_mean(x: torch.Tensor, mask: torch.Tensor) -> float:
    n = int(mask.sum())
    return float(x.detach().sum()) / n if n else 0.0

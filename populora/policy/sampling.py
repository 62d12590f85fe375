"""Decoding maths shared by the backends: nucleus sampling, one sampling step, stop strings.

Pure functions on tensors and strings, so that they are tested without a model.

Which log-probability is returned: ``sample_step`` returns log p(token) under the model's RAW
distribution, ``log_softmax(logits)`` at temperature 1 and before top-p truncation. That is the
quantity ``completion_logprobs`` computes in training, so the RL loss can compare rollout and
trainer log-probabilities directly, and it is vLLM's ``raw_logprobs`` mode. Tokens are SAMPLED
from the processed distribution (temperature, then top-p). With AZR's rollout settings
(temperature 1, top-p 1) the two distributions are the same.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import torch


def row_seed(seed: int, request_index: int, sample_index: int) -> int:
    """The seed of one sampled completion: independent of batch size and batch composition."""
    digest = hashlib.sha256(f"{seed}:{request_index}:{sample_index}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)


def row_uniforms(generators: Sequence[torch.Generator], device: torch.device | str) -> torch.Tensor:
    """One uniform number in [0, 1) per row, each from its row's own generator, on ``device``."""
    u = torch.stack([torch.rand((), generator=g, dtype=torch.float64) for g in generators])
    return u.to(device)


def draw(weights: torch.Tensor, uniforms: torch.Tensor) -> torch.Tensor:
    """Inverse-CDF sampling: for each row of ``weights [B, V]`` (unnormalised, >= 0, not all zero)
    the first index whose cumulative weight exceeds ``uniforms [B]`` times the row's total. A zero
    entry is never chosen.

    One vectorised pass instead of a ``torch.multinomial`` call per row (multinomial takes one
    generator, and a shared generator would make a row's sample depend on the rest of the batch).
    """
    cdf = torch.cumsum(weights, dim=-1)
    total = cdf[:, -1:]
    target = (uniforms.to(cdf.dtype)[:, None] * total).minimum(torch.nextafter(total, torch.zeros_like(total)))
    return torch.searchsorted(cdf, target, right=True)[:, 0]


def sample_nucleus(probs: torch.Tensor, top_p: float, generators: Sequence[torch.Generator]) -> torch.Tensor:
    """One token per row of ``probs [B, V]`` from the nucleus (top-p) distribution, without sorting.

    The nucleus is the set of tokens whose strictly more likely tokens hold less than ``top_p`` of
    the mass (the smallest most-likely-first set reaching ``top_p``, tied tokens kept together; the
    most likely token is always in it). Sorting the vocabulary of every row at every step to find it
    was a fifth of a sampled evaluation's generation on the CPU (docs/benchmarks/eval.md), so this
    samples by rejection, as FlashInfer's sorting-free sampler does: draw from the tokens above
    a floor; a drawn token outside the nucleus shows that it and every less likely token are
    outside too, so the floor rises to its probability and the row draws again. The first draw is
    accepted with probability at least ``top_p``, so a step is a round or two of passes over
    ``[B, V]``; the accepted token has exactly the renormalised nucleus distribution. Each round
    takes one number from the row's own generator, so rows stay independent of the batch.
    """
    rows = torch.arange(probs.shape[0], device=probs.device)
    tokens = torch.empty_like(rows)
    floor = torch.zeros((probs.shape[0], 1), dtype=probs.dtype, device=probs.device)
    pending = list(range(probs.shape[0]))  # rows still drawing, in the order of ``rows``
    while pending:
        p = probs[rows]
        token = draw(p * (p > floor), row_uniforms([generators[i] for i in pending], probs.device))
        if top_p >= 1.0:
            tokens[rows] = token
            break
        chosen = p.gather(-1, token[:, None])
        inside = (p * (p > chosen)).sum(-1) < top_p
        tokens[rows[inside]] = token[inside]
        outside = ~inside
        rows, floor = rows[outside], chosen[outside]
        pending = [i for i, out in zip(pending, outside.tolist()) if out]
    return tokens


def sample_step(
    logits: torch.Tensor,
    *,
    temperature: float,
    top_p: float,
    generators: Sequence[torch.Generator] | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Choose one token per row of ``logits [B, V]``; return ``(tokens [B], raw logprobs [B])``.

    ``temperature == 0`` is greedy (argmax). Otherwise row ``i`` draws one uniform number from
    ``generators[i]`` (a CPU generator; the logits stay on their device), so a row's sample does
    not depend on the other rows of the batch.
    """
    logits = logits.float()
    raw_logprobs = torch.log_softmax(logits, dim=-1)
    if temperature == 0:
        tokens = torch.argmax(logits, dim=-1)
    else:
        if generators is None or len(generators) != logits.shape[0]:
            raise ValueError("sampling needs one generator per row")
        tokens = sample_nucleus(torch.softmax(logits / temperature, dim=-1), top_p, generators)
    return tokens, raw_logprobs.gather(-1, tokens[:, None])[:, 0]


def find_stop(text: str, stops: Sequence[str], start: int = 0) -> int:
    """Index of the earliest occurrence of any stop string at or after ``start``, or -1."""
    best = -1
    for s in stops:
        if not s:
            continue
        i = text.find(s, start)
        if i != -1 and (best == -1 or i < best):
            best = i
    return best

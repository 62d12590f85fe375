"""Decoding maths shared by the backends: nucleus filtering, one sampling step, stop strings.

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


def top_p_filter(logits: torch.Tensor, top_p: float) -> torch.Tensor:
    """Logits with every token outside the nucleus set to -inf.

    The nucleus is the smallest set of most likely tokens whose probability sums to at least
    ``top_p`` (the most likely token is always kept).
    """
    if top_p >= 1.0:
        return logits
    sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
    probs = torch.softmax(sorted_logits, dim=-1)
    # mass strictly before each token; a token is kept if that mass is still below top_p
    before = torch.cumsum(probs, dim=-1) - probs
    drop_sorted = before >= top_p
    drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
    return logits.masked_fill(drop, float("-inf"))


def sample_step(
    logits: torch.Tensor,
    *,
    temperature: float,
    top_p: float,
    generators: Sequence[torch.Generator] | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Choose one token per row of ``logits [B, V]``; return ``(tokens [B], raw logprobs [B])``.

    ``temperature == 0`` is greedy (argmax). Otherwise row ``i`` draws with ``generators[i]``,
    so a row's sample does not depend on the other rows of the batch.
    """
    logits = logits.float()
    raw_logprobs = torch.log_softmax(logits, dim=-1)
    if temperature == 0:
        tokens = torch.argmax(logits, dim=-1)
    else:
        if generators is None or len(generators) != logits.shape[0]:
            raise ValueError("sampling needs one generator per row")
        probs = torch.softmax(top_p_filter(logits / temperature, top_p), dim=-1)
        tokens = torch.stack(
            [torch.multinomial(probs[i], 1, generator=generators[i])[0] for i in range(probs.shape[0])]
        )
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

"""Micro-batches of one member's update: which sequences share a training forward/backward pass.

Each micro-batch is one right-padded forward (``HFBackend._logprobs_pass``): its cost in memory and
in compute is ``rows x widest row`` tokens, whatever the rows' own lengths. Self-play completions run
from a few hundred tokens to the longest allowed, so taking a fixed number of sequences in batch
order (``in_order``) spends most of a micro-batch on padding. ``pack`` sorts by length and fills
each micro-batch up to a :class:`TokenBudget` instead: rows of similar width share a pass, and short
rows go many to a pass.

The budget is the bound the memory plan sizes (``plan/memory.py``): ``train_micro_batch`` sequences
of the longest prompt plus the longest completion, for the decoder's activations, and
``train_micro_batch`` longest completions, for the chunked log-prob tail. A packed micro-batch never
exceeds either, so the plan's figures hold for every pass.

The grouping does not change the gradients: every micro-batch's loss is divided by the whole
batch's denominator (``selfplay/update.py``) and gradients add up over passes, so packed and
unpacked updates agree within float rounding (``tests/test_packing.py`` checks it; ``populora bench
train`` prints the largest difference beside the speed-up).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class TokenBudget:
    """What one micro-batch may hold: ``padded_tokens`` bounds ``rows x widest row`` (prompt +
    completion), ``completion_tokens`` bounds the sum of the rows' completion tokens."""

    padded_tokens: int
    completion_tokens: int

    @classmethod
    def of(cls, micro_batch: int, prompt_tokens: int, new_tokens: int) -> TokenBudget:
        """The plan's bound: ``micro_batch`` rows of ``prompt_tokens + new_tokens``."""
        if min(micro_batch, prompt_tokens, new_tokens) < 1:
            raise ValueError(f"a token budget needs positive sizes, got micro_batch={micro_batch}, "
                             f"prompt_tokens={prompt_tokens}, new_tokens={new_tokens}")
        return cls(micro_batch * (prompt_tokens + new_tokens), micro_batch * new_tokens)


@dataclass(frozen=True)
class MicroBatching:
    """How an update's sequences are split into forward/backward passes: packed up to ``budget``
    (longest first), or ``micro_batch`` at a time in batch order when ``packed`` is off."""

    budget: TokenBudget
    micro_batch: int
    packed: bool = True

    def split(self, seqs) -> list[list[int]]:
        """Positions in ``seqs`` (records with ``prompt_ids`` and ``completion_ids``), one list per pass."""
        if not self.packed:
            return in_order(len(seqs), self.micro_batch)
        return pack([(len(s.prompt_ids), len(s.completion_ids)) for s in seqs], self.budget)


def pack(lengths: Sequence[tuple[int, int]], budget: TokenBudget) -> list[list[int]]:
    """Indices of ``lengths`` (``(prompt_tokens, completion_tokens)`` per sequence) grouped into
    micro-batches: longest first, each filled while ``rows x widest`` and the completion sum stay
    within ``budget``. A sequence over the budget on its own gets a micro-batch to itself (the
    caller's limits keep that from happening: a prompt over ``max_prompt_tokens`` is refused).
    Every index appears exactly once; ties keep batch order, so the grouping is deterministic."""
    order = sorted(range(len(lengths)), key=lambda i: (-(lengths[i][0] + lengths[i][1]), i))
    groups: list[list[int]] = []
    widest = completions = 0
    for i in order:
        width, completion = lengths[i][0] + lengths[i][1], lengths[i][1]
        if groups and (len(groups[-1]) + 1) * widest <= budget.padded_tokens \
                and completions + completion <= budget.completion_tokens:
            groups[-1].append(i)
            completions += completion
            continue
        groups.append([i])  # rows come longest first: the first row of a micro-batch is its widest
        widest, completions = width, completion
    return groups


def in_order(n: int, micro_batch: int) -> list[list[int]]:
    """The unpacked alternative: ``micro_batch`` sequences at a time in batch order."""
    step = max(1, micro_batch)
    return [list(range(s, min(n, s + step))) for s in range(0, n, step)]


def padded_tokens(lengths: Sequence[tuple[int, int]], groups: Sequence[Sequence[int]]) -> int:
    """Tokens the forward passes of ``groups`` compute, padding included: ``sum(rows x widest)``."""
    return sum(len(g) * max(lengths[i][0] + lengths[i][1] for i in g) for g in groups if g)

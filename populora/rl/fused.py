"""The fused update's backward half: every member of a rank in shared micro-batches.

The sequences of all the members that train on this rank are pooled and split into passes exactly
as one member's are (``MicroBatching``: packed up to the plan's token budget, longest first, or in
batch order): one pass may hold rows of several members. The backend's ``fused_logprobs`` runs each
row under its own member's adapter in one forward (``policy/multi_lora.py``). In each pass, each
member's rows get that member's loss, divided by that member's whole-batch denominator (as its
sequential update divides them); the members' losses are summed and ONE backward runs. A member's
adapter only touches its own rows, so the gradient that reaches it is exactly the gradient of its own
loss: the same as its sequential update, up to float rounding (``tests/test_fused_update.py`` checks
it against a float64 reference).

On CPU the gain is the padding saved: several members' sequences of similar lengths fill a pass where
one member's would be padded to its longest, and fewer passes run; on a GPU each pass also reads the
base weights once for every member (``populora bench train`` measures it).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch

from populora.rl import update
from populora.rl.packing import MicroBatching
from populora.rl.update import MemberGroup, add_stats, denominator


@dataclass
class MemberPart:
    """One member in a fused update: its adapter, whole batch, advantages, and (filled by the passes)
    its summed loss and statistics. ``group``: the ranks that share it (this rank takes its share)."""

    adapter: str
    batch: list
    adv: torch.Tensor
    group: MemberGroup | None = None
    totals: dict[str, float] = field(default_factory=lambda: {"loss/total": 0.0})

    @property
    def broken(self) -> bool:
        """Its loss is not finite: it takes no further backward (its update is dropped by the caller)."""
        return not math.isfinite(self.totals["loss/total"])


def fused_gradients(backend: Any, parts: list[MemberPart], rl, micro_batches: MicroBatching) -> None:
    """Accumulate every member's gradient on its adapter's parameters, and its totals in ``parts``."""
    pool = []  # (member position, sequence index in its batch)
    for k, part in enumerate(parts):
        mine = part.group.share(len(part.batch)) if part.group is not None else range(len(part.batch))
        pool += [(k, i) for i in mine]
    if not pool:
        return
    denoms = [denominator(p.batch, rl.aggregation) for p in parts]
    for passed in micro_batches.split([parts[k].batch[i] for k, i in pool]):
        rows = [pool[j] for j in passed]
        seqs = [parts[k].batch[i] for k, i in rows]
        tl = backend.fused_logprobs([parts[k].adapter for k, _ in rows], [s.prompt_ids for s in seqs],
                                    [s.completion_ids for s in seqs], with_entropy=True)
        total = None
        for k in sorted({k for k, _ in rows}):
            part = parts[k]
            if part.broken:
                continue
            at = [r for r, (kk, _) in enumerate(rows) if kk == k]
            sel = torch.tensor(at, device=tl.logprobs.device)
            idx = [rows[r][1] for r in at]
            loss, stats = update.member_loss(tl.logprobs[sel], tl.mask[sel], None if tl.entropy is None else tl.entropy[sel],
                                      [seqs[r] for r in at], part.adv[idx], denoms[k], rl)
            add_stats(part.totals, loss, stats, len(at))
            if part.broken:
                continue  # no backward through a non-finite loss; the caller restores this member
            total = loss if total is None else total + loss
        if total is not None:
            total.backward()

"""One policy update of one member on its own sequences (only its adapter changes): the sequential pieces.

Advantages are computed per role with the role's estimator (``rl.teacher_estimator`` /
``rl.student_estimator``; the baseline agent has sequences of both roles and each role keeps its
own estimator). The loss is summed over micro-batches whose losses add up to the full-batch loss
(``denominator``), then ONE optimizer step is taken. Micro-batches are length-sorted and packed
up to the memory plan's token budget (``rl/packing.py``; ``policy.train_packing: false`` takes
``policy.train_micro_batch`` sequences in batch order instead). If the loss or the updated weights
are not finite, the adapter is put back to its weights before the update, its optimizer state is reset,
and the step is flagged in the metrics (``train/<id>/nan_restored``).

``backend`` is any policy backend (``populora.policy.base.PolicyBackend``: ``completion_logprobs``,
``optimizer_step``, weights and gradients by adapter name); this module does not import it (the RL
floor is below the policy's). How a rank turns several members' batches into updates, one member at a
time or all in one fused pass, is an update strategy (``strategies.py``); both end in
:func:`finish_update`.
"""

from __future__ import annotations

import logging
import math
from typing import Any

import torch

from populora.rl.advantages import role_advantages
from populora.rl.losses import behaviour_logprobs, policy_loss
from populora.rl.packing import MicroBatching

log = logging.getLogger(__name__)


def advantages_of(batch, rl) -> torch.Tensor:
    """One advantage per sequence, estimator chosen by each sequence's role."""
    adv = torch.zeros(len(batch), dtype=torch.float32)
    for role in ("teacher", "student"):
        idx = [i for i, s in enumerate(batch) if s.role == role]
        if not idx:
            continue
        a = role_advantages(
            rl.estimator_for(role), role,
            [batch[i].reward for i in idx], [batch[i].prompt_group for i in idx], [batch[i].task_type for i in idx],
        )
        adv[idx] = a.to(torch.float32)
    return adv


def denominator(batch, aggregation: str) -> float:
    """The divisor of one member's whole batch loss (every micro-batch's loss is divided by it)."""
    if aggregation == "token_mean":
        return float(max(1, sum(len(s.completion_ids) for s in batch)))
    if aggregation == "seq_mean":
        return float(max(1, len(batch)))
    # seq_sum_token_mean: B * T with T the longest completion of the whole batch
    return float(max(1, len(batch)) * max([1, *(len(s.completion_ids) for s in batch)]))


class MemberGroup:
    """The ranks that train one member together (a member whose group spans several ranks).

    ``position`` is this rank's place in the group; ``comm`` the run's communicator. The group's
    ranks each take every ``size``-th sequence of the member's batch, sum their LoRA gradients and
    statistics over the group, and take the same optimizer step.
    """

    def __init__(self, comm, ranks: tuple[int, ...]):
        self.comm, self.ranks = comm, tuple(ranks)
        self.position = self.ranks.index(comm.rank)

    def share(self, n: int) -> list[int]:
        return list(range(self.position, n, len(self.ranks)))

    def sum_stats(self, stats: dict[str, float]) -> dict[str, float]:
        out: dict[str, float] = {}
        for part in self.comm.gather_in(self.ranks, stats):
            for k, v in part.items():
                out[k] = out.get(k, 0.0) + v
        return out

    def sum_grads(self, params: list[torch.nn.Parameter]) -> None:
        """Sum the group's gradients in float32 (a bf16 sum over 8 ranks would round at every add);
        each parameter's gradient is rounded to its own dtype once, after the sum."""
        for p in params:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        flat = torch.cat([p.grad.reshape(-1).float() for p in params])
        self.comm.sum_in(self.ranks, flat)
        at = 0
        for p in params:
            n = p.grad.numel()
            p.grad.copy_(flat[at:at + n].view_as(p.grad))
            at += n


def member_loss(tl_logprobs, tl_mask, tl_entropy, seqs, adv: torch.Tensor, denom: float, rl):
    """``policy_loss`` of some of one member's sequences (rows of a log-prob pass), divided by the
    member's whole-batch ``denom``; returns ``(loss, stats)``."""
    old = behaviour_logprobs([s.logprobs for s in seqs], tl_mask)
    return policy_loss(tl_logprobs, old, adv.to(tl_logprobs.device), tl_mask, entropy=tl_entropy,
                       denominator=denom, **rl.loss_kwargs())


def add_stats(totals: dict[str, float], loss: torch.Tensor, stats: dict[str, float], rows: int) -> None:
    """Accumulate one pass's loss (the passes' losses add up to the member's loss) and its other
    statistics, weighted by the pass's rows, into a member's totals."""
    totals["loss/total"] += float(loss.detach())
    for name, v in stats.items():
        if name != "loss/total":  # the pass's loss is counted once, above, not once more per row
            totals[name] = totals.get(name, 0.0) + float(v) * rows


def accumulate_gradients(backend: Any, adapter: str, batch, adv: torch.Tensor, rl,
                         micro_batches: MicroBatching, group: MemberGroup | None = None) -> dict[str, float]:
    """The backward half of an update: the loss of this rank's share of ``batch`` (all of it without
    a ``group``), pass by pass, each pass divided by the WHOLE batch's denominator, so the gradients
    left on ``adapter``'s parameters are the same whatever the grouping. Returns the summed loss
    (``loss/total``) and per-sequence-weighted statistics of this rank; stops before a backward
    once the loss is not finite."""
    denom = denominator(batch, rl.aggregation)
    mine = group.share(len(batch)) if group is not None else list(range(len(batch)))
    totals: dict[str, float] = {"loss/total": 0.0}
    for part in micro_batches.split([batch[i] for i in mine]):
        idx = [mine[k] for k in part]
        seqs = [batch[i] for i in idx]
        tl = backend.completion_logprobs(
            adapter, [s.prompt_ids for s in seqs], [s.completion_ids for s in seqs],
            with_grad=True, with_entropy=True,  # entropy is always logged (a diagnostic of collapse)
        )
        loss, stats = member_loss(tl.logprobs, tl.mask, tl.entropy, seqs, adv[idx], denom, rl)
        add_stats(totals, loss, stats, len(idx))
        if not math.isfinite(totals["loss/total"]):
            break  # the update is dropped by the caller; no backward through a broken graph
        loss.backward()  # gradients accumulate over micro-batches
    return totals


def finish_update(backend: Any, adapter: str, batch, adv: torch.Tensor, totals: dict[str, float], rl,
                  before, group: MemberGroup | None = None) -> dict:
    """The member's optimizer step once its gradients are accumulated: statistics (summed over a
    ``group``), gradients summed over the group, clipping and one AdamW step; the adapter goes back
    to ``before`` (its weights before the update) when the loss or the new weights are not finite."""
    if group is not None:
        totals = group.sum_stats(totals)
    if not batch:  # nothing to learn from: no step (an optimizer step without a gradient is an error)
        return {"loss/total": 0.0, "adv/std": 0.0, "sequences": 0, "optimizer_steps": 0, "nan_restored": 0}
    total_loss = totals.pop("loss/total")
    out = {f"{k}": v / max(1, len(batch)) for k, v in totals.items() if k not in ("tokens", "sequences")}
    out["loss/total"] = total_loss
    out["adv/std"] = float(adv.std()) if len(adv) > 1 else 0.0
    out["sequences"] = len(batch)
    if not math.isfinite(total_loss):
        backend.discard_gradients(adapter)
        _restore(backend, adapter, before, "non-finite loss")
        out.update({"nan_restored": 1, "optimizer_steps": 0})
        return out
    if group is not None:
        group.sum_grads(backend.trainable_parameters(adapter))
    out["grad_norm"] = backend.optimizer_step(adapter, None, max_grad_norm=rl.max_grad_norm)
    out["optimizer_steps"] = 1
    if not math.isfinite(out["grad_norm"]) or not backend.get_weights(adapter).is_finite():
        _restore(backend, adapter, before, "non-finite weights after the update")
        out["nan_restored"] = 1
    else:
        out["nan_restored"] = 0
    return out


def train_member(backend: Any, adapter: str, batch, rl, micro_batches: MicroBatching,
                 group: MemberGroup | None = None) -> dict:
    """Advantages, loss over the micro-batches ``micro_batches`` makes, one optimizer step.

    With a ``group`` (several ranks train this member) this rank computes the loss of its share of
    the batch only; advantages and the loss denominator are those of the whole batch, so the summed
    gradients are the whole batch's. Returns stats (stable names), the same on every rank of a group.
    """
    adv = advantages_of(batch, rl)
    before = backend.get_weights(adapter)
    totals = accumulate_gradients(backend, adapter, batch, adv, rl, micro_batches, group)
    return finish_update(backend, adapter, batch, adv, totals, rl, before, group)


def _restore(backend: Any, adapter: str, weights, why: str) -> None:
    log.warning("adapter %s: %s; restored its last good weights and reset its optimizer", adapter, why)
    backend.set_weights(adapter, weights)
    backend.reset_optimizer(adapter)

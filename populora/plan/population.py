"""How many members fit one GPU: the plan's figures split into what each member adds and what is shared.

A member adds its adapter (float32 master weights, the compute-dtype copy and, on the rank that trains
it, AdamW's two moments), its gradients in a fused pass with its stacked weights, and its LoRA slot in
the engine; everything else (the base, the engine's own share, activations of a pass, the log-prob tail,
CUDA contexts) is shared. Every rank holds every member's weights, and trains ``ceil(P / W)`` of them
(``plan.inputs.trained_per_rank``). The plan is linear in the population, so :func:`population_costs`
reads the per-member cost as the difference of the plans of two population sizes, and
:func:`largest_population` is the largest size whose plan fits with the wanted headroom on each of the
run's ranks, everything else as the config sets it. These are the plan's figures, before anything runs;
the doctor measures the per-member cost after a warm-up update.
"""

from __future__ import annotations

from dataclasses import dataclass

from populora.plan.inputs import trained_per_rank
from populora.plan.memory import DEFAULT_MIN_HEADROOM, PlanInputs, plan

SEARCH_LIMIT = 4096  # ours: no GPU holds more members of any base the presets name


@dataclass(frozen=True)
class PopulationFit:
    """The largest population on the run's ranks and the costs it comes from (GiB, the peak phase's,
    of one rank)."""

    largest: int  # 0: not even one member fits
    per_member_gib: float
    shared_gib: float
    gpu_gib: float
    ranks: int = 1

    def line(self) -> str:
        where = f"one {self.gpu_gib:g} GiB GPU" if self.ranks == 1 else f"{self.ranks} GPUs of {self.gpu_gib:g} GiB"
        if self.largest == 0:
            return (f"largest population on {where}: none fits (shared cost "
                    f"{self.shared_gib:.1f} GiB, {self.per_member_gib:.2f} GiB per member)")
        more = "" if self.largest < SEARCH_LIMIT else " or more"
        per_rank = (f", {trained_per_rank(self.largest, self.ranks)} trained per rank" if self.ranks > 1 else "")
        return (f"largest population on {where}: {self.largest}{more} members{per_rank} "
                f"({self.per_member_gib:.2f} GiB per member on one rank, {self.shared_gib:.1f} GiB shared)")


def _sized(p: PlanInputs, members: int) -> PlanInputs:
    """``p`` with ``members`` members on the run's ranks (each rank trains its share; a fused pass holds
    the rank's trained members)."""
    trained = trained_per_rank(members, p.ranks)
    return p.with_(adapters=members, trained=trained if p.ranks > 1 else 0,
                   fused_members=trained if p.fused_members > 1 else 1)


def population_costs(p: PlanInputs, gpu_gib: float) -> tuple[float, float]:
    """``(per member, shared)`` GiB of the peak phase of one rank: the plans of ``2W`` and ``3W`` members
    (one more trained member per rank; with one rank, 2 and 3: a fused pass of one member is a
    sequential one, so the line is drawn where both hold)."""
    lo, hi = 2 * p.ranks, 3 * p.ranks
    two = plan(_sized(p, lo), gpu_gib, with_fixes=False).peak_gib
    three = plan(_sized(p, hi), gpu_gib, with_fixes=False).peak_gib
    per = (three - two) / (hi - lo)
    return per, two - lo * per


def largest_population(p: PlanInputs, gpu_gib: float, min_headroom: float = DEFAULT_MIN_HEADROOM) -> PopulationFit:
    """The largest number of members whose plan fits ``gpu_gib`` with ``min_headroom`` left free on each
    of ``p.ranks`` ranks."""
    per, shared = population_costs(p, gpu_gib)

    def fits(n: int) -> bool:
        return plan(_sized(p, n), gpu_gib, min_headroom, with_fixes=False).fits

    if not fits(1):
        return PopulationFit(0, per, shared, gpu_gib, p.ranks)
    lo, hi = 1, 2
    while hi <= SEARCH_LIMIT and fits(hi):
        lo, hi = hi, hi * 2
    hi = min(hi, SEARCH_LIMIT + 1)
    while hi - lo > 1:  # fits(lo), not fits(hi) (or hi past the limit)
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return PopulationFit(min(lo, SEARCH_LIMIT), per, shared, gpu_gib, p.ranks)

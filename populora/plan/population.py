"""How many members fit one GPU: the plan's figures split into what each member adds and what is shared.

A member adds its adapter (float32 master weights, AdamW's two moments, the compute-dtype copy), its
gradients in a fused pass with its stacked weights, and its LoRA slot in the engine; everything else (the
base, the engine's own share, activations of a pass, the log-prob tail, CUDA contexts) is shared. The
plan is linear in the population, so :func:`population_costs` reads the per-member cost as the
difference of the plans of two population sizes, and :func:`largest_population` is the largest size
whose plan fits with the wanted headroom, everything else as the config sets it. These are the plan's
figures, before anything runs; the doctor measures the per-member cost after a warm-up update.
"""

from __future__ import annotations

from dataclasses import dataclass

from populora.plan.memory import DEFAULT_MIN_HEADROOM, PlanInputs, plan

SEARCH_LIMIT = 4096  # ours: no GPU holds more members of any base the presets name


@dataclass(frozen=True)
class PopulationFit:
    """The largest population on one GPU and the costs it comes from (GiB, the peak phase's)."""

    largest: int  # 0: not even one member fits
    per_member_gib: float
    shared_gib: float
    gpu_gib: float

    def line(self) -> str:
        if self.largest == 0:
            return (f"largest population on one {self.gpu_gib:g} GiB GPU: none fits (shared cost "
                    f"{self.shared_gib:.1f} GiB, {self.per_member_gib:.2f} GiB per member)")
        more = "" if self.largest < SEARCH_LIMIT else " or more"
        return (f"largest population on one {self.gpu_gib:g} GiB GPU: {self.largest}{more} members "
                f"({self.per_member_gib:.2f} GiB per member, {self.shared_gib:.1f} GiB shared)")


def _sized(p: PlanInputs, members: int) -> PlanInputs:
    """``p`` with ``members`` members on the GPU (all trained there: a fused pass holds them all)."""
    return p.with_(adapters=members, fused_members=members if p.fused_members > 1 else 1)


def population_costs(p: PlanInputs, gpu_gib: float) -> tuple[float, float]:
    """``(per member, shared)`` GiB of the peak phase: the plans of 2 and 3 members (a fused pass of
    one member is a sequential one, so the line is drawn where both hold)."""
    two = plan(_sized(p, 2), gpu_gib, with_fixes=False).peak_gib
    three = plan(_sized(p, 3), gpu_gib, with_fixes=False).peak_gib
    per = three - two
    return per, two - 2 * per


def largest_population(p: PlanInputs, gpu_gib: float, min_headroom: float = DEFAULT_MIN_HEADROOM) -> PopulationFit:
    """The largest number of members whose plan fits ``gpu_gib`` with ``min_headroom`` left free."""
    per, shared = population_costs(p, gpu_gib)

    def fits(n: int) -> bool:
        return plan(_sized(p, n), gpu_gib, min_headroom, with_fixes=False).fits

    if not fits(1):
        return PopulationFit(0, per, shared, gpu_gib)
    lo, hi = 1, 2
    while hi <= SEARCH_LIMIT and fits(hi):
        lo, hi = hi, hi * 2
    hi = min(hi, SEARCH_LIMIT + 1)
    while hi - lo > 1:  # fits(lo), not fits(hi) (or hi past the limit)
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return PopulationFit(min(lo, SEARCH_LIMIT), per, shared, gpu_gib)

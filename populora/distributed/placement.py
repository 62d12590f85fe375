"""Where members train and which rank does which piece of a step's work. Pure functions.

A run has W ranks (one per GPU, or per CPU process). Every rank holds every member's adapter weights
(for generation); a member's *training* (its optimizer state, its update) lives on the ranks of its
placement. Its P members (teachers and students; the single-agent baseline has one) are placed by
*slot*, the member's position in the population: an evolved child takes the slot, and so the ranks,
of the member it replaces.

- P >= W: slot k trains on rank ``k mod W`` (members are listed teachers first, so both roles are
  spread as evenly as they can be).
- P < W: slot k owns a *group* of consecutive ranks (sizes differ by at most one); the member's
  training sequences are split over its group, and its LoRA gradients are summed over the group
  before every rank of the group takes the same optimizer step.

Generation requests, validations and answer checks are dealt round robin over all ranks. Every rank
computes the same placement from the same member list, so no rank needs to be told.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence


def place(slots: Sequence[str], world: int) -> dict[str, tuple[int, ...]]:
    """``{member id: its ranks}`` for members in slot order on ``world`` ranks."""
    if world < 1:
        raise ValueError(f"world size must be >= 1, got {world}")
    n = len(slots)
    if n == 0:
        return {}
    if n >= world:
        return {mid: (k % world,) for k, mid in enumerate(slots)}
    base, extra = divmod(world, n)
    out, start = {}, 0
    for k, mid in enumerate(slots):
        size = base + (1 if k < extra else 0)
        out[mid] = tuple(range(start, start + size))
        start += size
    return out


def hosted(placement: Mapping[str, tuple[int, ...]], rank: int) -> list[str]:
    """The members whose adapter lives on ``rank`` (in placement order)."""
    return [mid for mid, ranks in placement.items() if rank in ranks]


def leader(placement: Mapping[str, tuple[int, ...]], member: str) -> int:
    """The rank that speaks for a member: writes its checkpoint files and sends its weights."""
    return placement[member][0]


def round_robin(n: int, world: int) -> list[int]:
    """The rank of each of ``n`` items dealt round robin."""
    return [i % world for i in range(n)]


def mine(assignment: Sequence[int], rank: int) -> list[int]:
    """Indices of the items assigned to ``rank``."""
    return [i for i, r in enumerate(assignment) if r == rank]

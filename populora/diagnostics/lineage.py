"""The family tree and the evolution events of a run, from ``lineage.jsonl`` records.

Every member lives in one slot of its role from its birth step until the step a child replaced
it (or the end of the run). The tree is drawn with x = step and y = slot within its role band;
an edge goes from each parent, at the child's birth step, to the child.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from populora.population.members import family_edges


@dataclass
class Life:
    id: str
    role: str
    slot: int
    born: int
    died: int | None  # step at which it was replaced; None if alive at the end
    operator: str | None
    parents: tuple[str, ...] = field(default_factory=tuple)
    generation: int = 0


def lives(records: Sequence[dict]) -> dict[str, Life]:
    """Every member that ever lived, by id."""
    out: dict[str, Life] = {}
    for r in records:
        m = r.get("member")
        if not m:
            continue
        born = int(m.get("born_step", r.get("step", 0)))
        out[m["id"]] = Life(m["id"], m["role"], int(m.get("slot", 0)), born, None, m.get("operator"),
                            tuple(m.get("parents", ())), int(m.get("generation", 0)))
    for r in records:
        if r.get("event") == "replacement" and r.get("replaced") in out:
            out[r["replaced"]].died = int(r["step"])
    return out


def edges(records: Sequence[dict]) -> list[tuple[str, str, str]]:
    """``(parent, child, operator)`` links (``populora.population.members.family_edges``)."""
    return family_edges([r for r in records if r.get("member")])


def events_table(records: Sequence[dict]) -> list[dict]:
    """One row per replacement: when, which slot, who replaced whom, how the child was made."""
    rows = []
    for r in records:
        if r.get("event") != "replacement":
            continue
        m = r["member"]
        score = r.get("replaced_score")
        rows.append({
            "step": r["step"],
            "role": m["role"],
            "slot": m.get("slot"),
            "child": m["id"],
            "replaced": r.get("replaced"),
            "replaced_score": None if score is None else round(float(score), 3),
            "operator": m.get("operator"),
            "kind": r.get("kind", ""),
            "parents": ", ".join(m.get("parents", ())),
            "params": ", ".join(f"{k}={v}" for k, v in sorted((m.get("params") or {}).items())),
            "generation": m.get("generation", 0),
        })
    return rows

"""Population members and their lineage.

A ``Member`` is one adapter playing one role (teacher or student) in one slot of the population.
When PBT replaces a member, the child gets the same role and slot but a fresh id and adapter
name, so ids are unique over a whole run and the lineage log (JSON lines, one record per birth:
``RunDir.append_lineage`` / ``read_lineage``) is enough to draw the family tree.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from populora.population.ratings import Rating

TEACHER = "teacher"
STUDENT = "student"
AGENT = "agent"  # the single-agent baseline: one adapter that both proposes and solves
ROLES = (TEACHER, STUDENT, AGENT)


@dataclass
class Member:
    """One adapter in the population (role ``teacher`` or ``student``; ``agent`` for the baseline).

    ``parents`` are member ids (empty for founders; fitter parent first for crossovers);
    ``operator``/``params``/``seed`` say exactly how the adapter was made, so a child can be
    re-made from its parents' weights.
    """

    id: str
    role: str
    adapter: str
    rating: Rating
    slot: int = 0
    parents: tuple[str, ...] = ()
    operator: str | None = None
    params: dict[str, Any] = field(default_factory=dict)
    seed: int | None = None
    born_step: int = 0
    generation: int = 0

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise ValueError(f"member {self.id!r}: role must be one of {ROLES}, got {self.role!r}")
        self.rating = Rating(float(self.rating[0]), float(self.rating[1]))
        self.parents = tuple(self.parents)

    def age(self, step: int) -> int:
        """Steps lived since birth."""
        return step - self.born_step

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["rating"] = {"mu": self.rating.mu, "sigma": self.rating.sigma}
        d["parents"] = list(self.parents)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Member:
        d = dict(d)
        known = {f for f in cls.__dataclass_fields__}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ValueError(f"member record: unknown key {unknown[0]!r}")
        r = d.get("rating")
        if isinstance(r, dict):
            d["rating"] = Rating(r["mu"], r["sigma"])
        return cls(**d)


def member_id(role: str, slot: int, born_step: int | None = None) -> str:
    """``t0``/``s3`` for founders, ``t0-40`` for the child born in slot 0 at step 40."""
    base = f"{role[0]}{slot}"
    return base if born_step is None else f"{base}-{born_step}"


def founders(n_teachers: int, n_students: int, rating: Rating) -> list[Member]:
    """The initial population: teachers ``t0..``, students ``s0..``; adapter name = member id."""
    out = []
    for role, n in ((TEACHER, n_teachers), (STUDENT, n_students)):
        for slot in range(n):
            mid = member_id(role, slot)
            out.append(Member(mid, role, mid, rating, slot=slot))
    return out


def members_to_json(members: Sequence[Member]) -> str:
    return json.dumps([m.to_dict() for m in members], indent=2, sort_keys=True) + "\n"


def members_from_json(text: str) -> list[Member]:
    return [Member.from_dict(d) for d in json.loads(text)]


# -- lineage -----------------------------------------------------------------------------------
def founder_record(m: Member, step: int = 0) -> dict[str, Any]:
    return {"event": "founder", "step": step, "member": m.to_dict(), "replaced": None}


def family_edges(records: Iterable[dict[str, Any]]) -> list[tuple[str, str, str]]:
    """``(parent_id, child_id, operator)`` for every parent link: the edges of the family tree."""
    edges = []
    for r in records:
        m = r["member"]
        for p in m.get("parents", ()):
            edges.append((p, m["id"], m.get("operator") or ""))
    return edges

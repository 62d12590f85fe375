"""Population-based training (PBT): every k steps, replace the weakest members of each role.

``pbt_step`` is the whole algorithm at one step, and the only entry point the loop calls:

1. If evolution is not due (``EvolutionConfig.due``: a positive multiple of ``interval`` from which
   a child still trains at least ``max(1, min_age)`` steps before the run ends), do nothing.
2. Per role (teachers, then students; ``replace_weakest``): rank the role's members by conservative
   score ``mu - k sigma`` (best first). The bottom ``fraction`` of the ranking (at least one if
   ``fraction > 0``, never the whole role) is the replacement zone; the members in it that are at
   least ``min_age`` steps old are replaced. A zone member too young to be judged is spared this
   time, and nobody above the zone is taken in its place.
3. For each: with probability ``crossover_prob`` a two-parent operator, else a one-parent one,
   drawn with the configured ``operator_weights``; parents are drawn from the top
   ``top_fraction`` of the survivors (fitter parent first).
4. The child takes the replaced member's slot and role with a fresh id and adapter name, a rating
   reset to the prior (or the parent's mu with an inflated sigma), and a lineage record.

It never touches a backend: parent weights come from the ``get_weights(adapter_name)`` callback
and the child weights are returned. The caller installs each child adapter under its new name,
gives it a fresh optimizer state, drops the replaced adapter and logs the records.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from populora.policy.adapters import AdapterWeights
from populora.population.members import STUDENT, TEACHER, Member, member_id
from populora.population.operators import OPERATORS, get_operator, make_child, resolve_params
from populora.population.ratings import Rating, RatingConfig, conservative_score, prior
from populora.population.validation import ConfigError, check_in

CHILD_RATINGS = ("prior", "inherit")


def _default_weights() -> dict[str, float]:
    # The paper's operator set: four mutations and four crossovers, equally likely within a kind.
    # Controls and the beyond-the-paper delta_merge are available at weight 0 (set them to use them).
    weights = {name: 1.0 for name, spec in OPERATORS.items() if spec.kind in ("mutation", "crossover")}
    weights.update({"copy_parent": 0.0, "linear_0_5": 0.0, "delta_merge": 0.0})
    return weights


@dataclass(frozen=True)
class EvolutionConfig:
    """PBT settings; ``operator_params[name]`` overrides an operator's default parameters.

    ``child_rating="prior"`` resets a child to (mu0, sigma0); ``"inherit"`` gives it the (fitter)
    parent's mu and ``min(sigma0, sigma_parent * inherit_sigma_scale)``. ``min_age`` is both the
    age below which a member is not replaced and the number of steps a child must be able to
    train before the run ends for evolution to run at all (see ``due``).

    Every value here is ours (the paper's text as we have it gives none): a replacement every 10
    steps of the bottom quarter, parents from the top half, an even split of crossovers and
    mutations, the paper's eight operators equally likely within a kind.
    """

    interval: int = 10
    fraction: float = 0.25
    top_fraction: float = 0.5
    crossover_prob: float = 0.5
    min_age: int = 10
    operator_weights: dict[str, float] = field(default_factory=_default_weights)
    operator_params: dict[str, dict[str, Any]] = field(default_factory=dict)
    child_rating: str = "prior"
    inherit_sigma_scale: float = 2.0

    def __post_init__(self) -> None:
        w = "evolution"
        for key in ("interval", "min_age"):
            v = getattr(self, key)
            if not isinstance(v, int) or isinstance(v, bool):
                raise ConfigError(f"{w}: {key} must be an integer, got {v!r}")
        check_in(w, "interval", self.interval, "[1, inf)")
        check_in(w, "min_age", self.min_age, "[0, inf)")
        check_in(w, "fraction", self.fraction, "[0, 1)")
        check_in(w, "top_fraction", self.top_fraction, "(0, 1]")
        check_in(w, "crossover_prob", self.crossover_prob, "[0, 1]")
        check_in(w, "inherit_sigma_scale", self.inherit_sigma_scale, "(0, inf)")
        if self.child_rating not in CHILD_RATINGS:
            raise ConfigError(f"{w}: child_rating must be one of {CHILD_RATINGS}, got {self.child_rating!r}")
        for name, weight in self.operator_weights.items():
            if name not in OPERATORS:
                raise ConfigError(f"{w}: operator_weights.{name}: unknown operator (known: {', '.join(OPERATORS)})")
            check_in(w, f"operator_weights.{name}", weight, "[0, inf)")
        for name, params in self.operator_params.items():
            if name not in OPERATORS:
                raise ConfigError(f"{w}: operator_params.{name}: unknown operator (known: {', '.join(OPERATORS)})")
            resolve_params(name, params)
        if self.fraction > 0 and not self.candidates(1):
            raise ConfigError(f"{w}: operator_weights gives no one-parent operator a positive weight")
        if self.fraction > 0 and self.crossover_prob > 0 and not self.candidates(2):
            raise ConfigError(f"{w}: crossover_prob > 0 but no two-parent operator has a positive weight")

    def candidates(self, n_parents: int) -> dict[str, float]:
        """Operators taking ``n_parents`` parents with a positive weight."""
        return {n: x for n, x in self.operator_weights.items() if x > 0 and get_operator(n).parents == n_parents}

    def params(self, name: str) -> dict[str, int | float]:
        return resolve_params(name, self.operator_params.get(name))

    def due(self, step: int, total_steps: int) -> bool:
        """Whether evolution runs after ``step`` of a run of ``total_steps`` steps.

        At positive multiples of ``interval`` only, and only where a child born now trains at
        least ``max(1, min_age)`` steps before the run ends (``total_steps - step``): every member
        of the exported population has then trained at least that long, and none is a newborn that
        replaced a trained member at the last step.
        """
        if step <= 0 or step % self.interval != 0:
            return False
        return total_steps - step >= max(1, self.min_age)


@dataclass
class Birth:
    """A child replacing a member: install ``weights`` under ``child.adapter`` with a fresh optimizer."""

    child: Member
    replaced: Member
    weights: AdapterWeights
    record: dict[str, Any]


def _child_rating(parent: Member, cfg: EvolutionConfig, rating_cfg: RatingConfig) -> Rating:
    if cfg.child_rating == "prior":
        return prior(rating_cfg)
    return Rating(parent.rating.mu, min(rating_cfg.sigma, parent.rating.sigma * cfg.inherit_sigma_scale))


def replace_weakest(
    members: Sequence[Member],
    role: str,
    step: int,
    cfg: EvolutionConfig,
    rating_cfg: RatingConfig,
    rng: random.Random,
    get_weights: Callable[[str], AdapterWeights],
) -> list[Birth]:
    """Children for the weakest members of ``role`` at ``step`` (the caller decides that it is due).

    Only members in the bottom ``fraction`` of the role's ranking are candidates, and of those
    only the ones at least ``min_age`` steps old: when the weakest are too young, fewer (or no)
    members are replaced, never a stronger one in their place.
    """
    pool = [m for m in members if m.role == role]
    if cfg.fraction <= 0 or len(pool) < 2:
        return []

    def score(m: Member) -> float:
        return conservative_score(m.rating, rating_cfg)

    ranked = sorted(pool, key=lambda m: (-score(m), m.id))  # best first; ties broken by id
    n_replace = min(max(1, math.floor(cfg.fraction * len(pool))), len(pool) - 1)
    zone = ranked[len(ranked) - n_replace:]  # the bottom of the ranking
    victims = [m for m in reversed(zone) if m.age(step) >= cfg.min_age]  # weakest first
    culled = {m.id for m in victims}
    survivors = [m for m in ranked if m.id not in culled]
    top = survivors[: max(1, math.ceil(cfg.top_fraction * len(pool)))]

    births = []
    for victim in victims:
        crossover = rng.random() < cfg.crossover_prob and len(survivors) >= 2
        ops = cfg.candidates(2 if crossover else 1)
        name = rng.choices(list(ops), weights=list(ops.values()), k=1)[0]
        if crossover:
            parent_pool = top if len(top) >= 2 else survivors[:2]
            parents = sorted(rng.sample(parent_pool, 2), key=lambda m: (-score(m), m.id))
        else:
            parents = [rng.choice(top)]
        seed = rng.getrandbits(63)
        params = cfg.params(name)
        weights = make_child(name, [get_weights(p.adapter) for p in parents], seed=seed, **params)
        cid = member_id(role, victim.slot, step)
        child = Member(
            id=cid,
            role=role,
            adapter=cid,
            rating=_child_rating(parents[0], cfg, rating_cfg),
            slot=victim.slot,
            parents=tuple(p.id for p in parents),
            operator=name,
            params=params,
            seed=seed,
            born_step=step,
            generation=1 + max(p.generation for p in parents),
        )
        record = {
            "event": "replacement",
            "step": step,
            "member": child.to_dict(),
            "replaced": victim.id,
            "replaced_rating": {"mu": victim.rating.mu, "sigma": victim.rating.sigma},
            "replaced_score": score(victim),
            "parent_scores": [score(p) for p in parents],
            "kind": get_operator(name).kind,
        }
        births.append(Birth(child, victim, weights, record))
    return births


def pbt_step(
    members: Sequence[Member],
    step: int,
    total_steps: int,
    cfg: EvolutionConfig,
    rating_cfg: RatingConfig,
    rng: random.Random,
    get_weights: Callable[[str], AdapterWeights] | Mapping[str, AdapterWeights],
) -> list[Birth]:
    """One PBT step after training step ``step`` of ``total_steps``: the births, teachers first.

    Empty when evolution is not due (``cfg.due(step, total_steps)``). ``members`` carry their
    ratings; ``get_weights(adapter)`` (or a mapping) gives a parent's weights. Each ``Birth`` holds
    the child member, its weights, the member it replaces and the lineage record; installing the
    children is the caller's job.
    """
    if not cfg.due(step, total_steps):
        return []
    getter = get_weights.__getitem__ if isinstance(get_weights, Mapping) else get_weights
    births: list[Birth] = []
    for role in (TEACHER, STUDENT):
        births += replace_weakest(members, role, step, cfg, rating_cfg, rng, getter)
    return births

"""Members, lineage log, evolution config and PBT replacement of the weakest members."""

from __future__ import annotations

import json
import random

import pytest

from populora.policy.adapters import AdapterWeights
from populora.population.evolution import EvolutionConfig, pbt_step, replace_weakest
from populora.population.members import (
    Member,
    family_edges,
    founder_record,
    founders,
    members_from_json,
    members_to_json,
)
from populora.population.ratings import Rating, RatingConfig, prior
from populora.population.validation import ConfigError, from_mapping
from populora.run_dir import RunDir

RCFG = RatingConfig()
SHAPES = {"model.layers.0.self_attn.q_proj": (8, 8), "model.layers.0.mlp.down_proj": (12, 8)}


def _population(scores_t, scores_s):
    """Founders whose ratings give the listed conservative scores (sigma 1, k 3)."""
    members = founders(len(scores_t), len(scores_s), prior(RCFG))
    for m, score in zip(members, [*scores_t, *scores_s]):
        m.rating = Rating(score + 3.0, 1.0)
    weights = {
        m.adapter: AdapterWeights.init(SHAPES, 2, 4, b_init="random", b_std=0.1, seed=i) for i, m in enumerate(members)
    }
    return members, weights


def test_member_json_round_trip_and_lineage_log(tmp_path):
    members = founders(2, 3, prior(RCFG))
    assert [m.id for m in members] == ["t0", "t1", "s0", "s1", "s2"]
    child = Member("t1-20", "teacher", "t1-20", Rating(24.0, 5.0), slot=1, parents=("t0", "t1"),
                   operator="dare", params={"drop": 0.5, "weight": 0.5}, seed=9, born_step=20, generation=1)
    back = members_from_json(members_to_json([*members, child]))
    assert back == [*members, child]
    assert back[-1].rating == Rating(24.0, 5.0) and back[-1].parents == ("t0", "t1")
    log = RunDir(tmp_path / "run")
    log.append_lineage(founder_record(m) for m in members)
    log.append_lineage([{"event": "replacement", "step": 20, "member": child.to_dict(), "replaced": "t1"}])
    records = log.read_lineage()
    assert len(records) == 6 and records[-1]["replaced"] == "t1"
    assert family_edges(records) == [("t0", "t1-20", "dare"), ("t1", "t1-20", "dare")]
    with pytest.raises(ValueError, match="role must be one of"):
        Member("x", "judge", "x", prior(RCFG))
    assert Member("a0", "agent", "a0", prior(RCFG)).role == "agent"  # the single-agent baseline
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "lineage.jsonl").write_text('{"event": "founder"}\nnot json\n')
    with pytest.raises(ValueError, match="lineage.jsonl:2: invalid lineage record"):
        RunDir(tmp_path / "bad").read_lineage()


def test_config_validation_names_key_and_value():
    with pytest.raises(ConfigError, match=r"evolution: fraction must be in \[0, 1\), got 1.0"):
        EvolutionConfig(fraction=1.0)
    with pytest.raises(ConfigError, match="evolution: interval must be an integer"):
        EvolutionConfig(interval=2.5)
    with pytest.raises(ConfigError, match="operator_weights.mutate: unknown operator"):
        EvolutionConfig(operator_weights={"mutate": 1.0})
    with pytest.raises(ConfigError, match="operator 'dare': parameter drop must be in"):
        EvolutionConfig(operator_params={"dare": {"drop": 2}})
    with pytest.raises(ConfigError, match="operator 'extrapolate': eta_min=0.5 is above eta_max=0.1"):
        EvolutionConfig(operator_params={"extrapolate": {"eta_min": 0.5, "eta_max": 0.1}})
    with pytest.raises(ConfigError, match="no two-parent operator"):
        EvolutionConfig(operator_weights={"svd_perturb": 1.0})
    assert EvolutionConfig(operator_weights={"svd_perturb": 1.0}, crossover_prob=0.0).candidates(1) == {"svd_perturb": 1.0}
    with pytest.raises(ConfigError, match="evolution: unknown key 'gamma'"):
        from_mapping(EvolutionConfig, "evolution", {"gamma": 0.25})
    assert from_mapping(EvolutionConfig, "evolution", {"interval": 5}).interval == 5


def test_due_only_on_the_interval_and_where_children_can_still_train():
    cfg = EvolutionConfig(interval=20, min_age=10)  # the *-7b presets, 200 steps
    assert [s for s in range(0, 201) if cfg.due(s, 200)] == [20, 40, 60, 80, 100, 120, 140, 160, 180]
    assert not cfg.due(200, 200)  # the final step: children would be exported untrained
    assert cfg.due(190, 200) is False  # off the interval
    assert EvolutionConfig(interval=20, min_age=25).due(180, 200) is False  # 20 steps left < min_age
    tiny = EvolutionConfig(interval=3, min_age=2)  # the tiny preset, 6 steps
    assert [s for s in range(7) if tiny.due(s, 6)] == [3]
    # min_age 0 still needs one step of training after the birth
    assert [s for s in range(7) if EvolutionConfig(interval=3, min_age=0).due(s, 6)] == [3]
    assert [s for s in range(7) if EvolutionConfig(interval=3, min_age=0).due(s, 7)] == [3, 6]
    with pytest.raises(TypeError):
        cfg.due(200)  # the run's length is required: no open-ended default


def test_nothing_happens_when_not_due():
    members, weights = _population([1, 2, 3, 4], [1, 2, 3, 4])
    cfg = EvolutionConfig(interval=10, min_age=0)
    for step in (0, 5, 11, 30):
        assert pbt_step(members, step, 30, cfg, RCFG, random.Random(0), weights) == []
    assert len(pbt_step(members, 10, 30, cfg, RCFG, random.Random(0), weights)) == 2  # one per role


def test_weakest_are_replaced_by_children_of_the_top():
    members, weights = _population([10, 1, 7, 4], [5, 6, 7, 8])
    cfg = EvolutionConfig(interval=10, fraction=0.25, top_fraction=0.5, min_age=0)
    births = replace_weakest(members, "teacher", 10, cfg, RCFG, random.Random(0), weights.__getitem__)
    assert len(births) == 1
    b = births[0]
    assert b.replaced.id == "t1"  # lowest conservative score
    assert b.child.id == "t1-10" and b.child.adapter == "t1-10" and b.child.slot == 1
    assert b.child.role == "teacher" and b.child.born_step == 10 and b.child.generation == 1
    assert set(b.child.parents) <= {"t0", "t2"}  # top half of the survivors
    assert b.child.rating == prior(RCFG)
    assert b.weights.shapes() == weights["t0"].shapes()
    json.dumps(b.record)  # loggable
    assert b.record["replaced"] == "t1" and b.record["member"]["operator"] == b.child.operator


def test_child_can_be_remade_from_its_lineage_record():
    from populora.population.operators import make_child

    members, weights = _population([10, 1, 7, 4], [5, 6, 7, 8])
    cfg = EvolutionConfig(min_age=0, crossover_prob=1.0)
    (b,) = replace_weakest(members, "teacher", 10, cfg, RCFG, random.Random(3), weights.__getitem__)
    m = b.record["member"]
    again = make_child(m["operator"], [weights[p] for p in m["parents"]], seed=m["seed"], **m["params"])
    assert again.equal(b.weights)
    assert len(m["parents"]) == 2 and b.record["parent_scores"][0] >= b.record["parent_scores"][1]


def test_fraction_bounds_min_age_and_never_the_whole_role():
    members, weights = _population([1, 2], [1, 2, 3, 4, 5, 6, 7, 8])
    get = weights.__getitem__
    big = EvolutionConfig(fraction=0.9, min_age=0)
    assert len(replace_weakest(members, "teacher", 10, big, RCFG, random.Random(0), get)) == 1  # never both
    assert len(replace_weakest(members, "student", 10, big, RCFG, random.Random(0), get)) == 7
    tiny = EvolutionConfig(fraction=0.01, min_age=0)
    assert len(replace_weakest(members, "student", 10, tiny, RCFG, random.Random(0), get)) == 1  # at least one
    assert replace_weakest(members, "student", 10, EvolutionConfig(fraction=0.0, min_age=0), RCFG, random.Random(0), get) == []
    # a member younger than min_age is spared, and nobody stronger is replaced in its place
    members[2].born_step = 8  # s0, the weakest student, born at step 8
    young = EvolutionConfig(fraction=0.125, min_age=5)
    assert replace_weakest(members, "student", 10, young, RCFG, random.Random(0), get) == []
    two = EvolutionConfig(fraction=0.25, min_age=5)  # zone: s0 (young) and s1 (old enough)
    assert [b.replaced.id for b in replace_weakest(members, "student", 10, two, RCFG, random.Random(0), get)] == ["s1"]


def test_min_age_above_interval_never_culls_the_strongest():
    """min_age 30 > interval 10: the two newborn weakest are too young; the old strong ones stay."""
    members, weights = _population([10, 9, 1, 2], [5, 6])
    members[2].born_step = members[3].born_step = 10  # t2, t3: children born at step 10
    cfg = EvolutionConfig(interval=10, min_age=30, fraction=0.5)
    for step in (20, 30):
        assert replace_weakest(members, "teacher", step, cfg, RCFG, random.Random(0), weights.__getitem__) == []
    (b, c) = replace_weakest(members, "teacher", 40, cfg, RCFG, random.Random(0), weights.__getitem__)
    assert {b.replaced.id, c.replaced.id} == {"t2", "t3"}  # old enough now, still the weakest


@pytest.mark.parametrize("steps,interval,min_age,fraction", [(6, 3, 2, 0.5), (200, 20, 10, 0.25), (9, 3, 0, 0.5),
                                                              (50, 5, 12, 0.5)])
def test_every_member_of_the_final_population_trained_long_enough(steps, interval, min_age, fraction):
    """Run PBT over a whole run on hand-made members (ratings drift at random) and apply the births."""
    members, weights = _population([1, 2, 3, 4], [1, 2, 3, 4])
    cfg = EvolutionConfig(interval=interval, min_age=min_age, fraction=fraction)
    rng, drift = random.Random(0), random.Random(1)
    events = 0
    for step in range(1, steps + 1):
        for m in members:  # training and games move the ratings
            m.rating = Rating(m.rating.mu + drift.gauss(0, 1), max(0.5, m.rating.sigma * 0.97))
        for b in pbt_step(members, step, steps, cfg, RCFG, rng, weights):
            assert b.replaced.age(step) >= min_age
            members = [b.child if m.id == b.replaced.id else m for m in members]
            weights[b.child.adapter] = b.weights
            events += 1
    assert events > 0
    assert min(m.age(steps) for m in members) >= max(1, min_age)


def test_inherited_rating_and_operator_weights():
    members, weights = _population([10, 1, 7, 4], [5, 6, 7, 8])
    cfg = EvolutionConfig(min_age=0, crossover_prob=0.0, operator_weights={"full_gaussian": 1.0},
                          child_rating="inherit", inherit_sigma_scale=3.0, operator_params={"full_gaussian": {"scale": 0.2}})
    (b,) = replace_weakest(members, "teacher", 10, cfg, RCFG, random.Random(0), weights.__getitem__)
    parent = next(m for m in members if m.id == b.child.parents[0])
    assert b.child.operator == "full_gaussian" and b.child.params == {"scale": 0.2}
    assert b.child.rating == Rating(parent.rating.mu, min(RCFG.sigma, 3.0 * parent.rating.sigma))


def test_operator_choice_follows_weights_and_crossover_probability():
    members, weights = _population([10, 1, 7, 4, 8, 9, 2, 3], [5, 6])
    cfg = EvolutionConfig(min_age=0, fraction=0.25, crossover_prob=0.3,
                          operator_weights={"copy_parent": 3.0, "layer_gaussian": 1.0, "layer_swap": 1.0})
    rng = random.Random(0)
    ops = []
    for _ in range(100):
        ops += [b.child.operator for b in replace_weakest(members, "teacher", 10, cfg, RCFG, rng, weights.__getitem__)]
    n = len(ops)
    assert n == 200
    assert abs(ops.count("layer_swap") / n - 0.3) < 0.1
    assert ops.count("copy_parent") > 2 * ops.count("layer_gaussian")


def test_pbt_step_handles_both_roles_and_is_reproducible():
    members, weights = _population([10, 1, 7, 4], [5, 6, 7, 8])
    cfg = EvolutionConfig(min_age=0)
    births1 = pbt_step(members, 10, 100, cfg, RCFG, random.Random(5), weights)
    births2 = pbt_step(members, 10, 100, cfg, RCFG, random.Random(5), weights.__getitem__)
    assert [b.replaced.id for b in births1] == ["t1", "s0"]
    assert [b.child.id for b in births1] == [b.child.id for b in births2] == ["t1-10", "s0-10"]
    assert all(b1.weights.equal(b2.weights) for b1, b2 in zip(births1, births2))
    assert [b.record["replaced"] for b in births1] == ["t1", "s0"]

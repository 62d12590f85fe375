"""Weight-space operators: registry, parameter validation and property tests (hypothesis)."""

from __future__ import annotations

import math
from collections import Counter

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from populora.policy.adapters import AdapterMismatchError, AdapterWeights
from populora.population.operators import OPERATORS, OperatorError, make_child, resolve_params
from populora.population.svd import lowrank_svd, recompose, thin_qr

FAST = settings(max_examples=25, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
DTYPES = [torch.float32, torch.bfloat16, torch.float16]

# Parameters that make each mutation a no-op on the delta.
ZERO_STRENGTH = {
    "svd_perturb": {"sigma": 0.0, "rotation": 0.0},
    "layer_gaussian": {"scale": 0.0},
    "component_mask": {"fraction": 0.0},
    "full_gaussian": {"scale": 0.0},
}


@st.composite
def adapter_pair(draw, b_zero: bool | None = None):
    """Two compatible random adapters with small shapes (rank <= min(in, out))."""
    rank = draw(st.integers(1, 4))
    n_mod = draw(st.integers(1, 3))
    shapes = {
        f"model.layers.{i}.mlp.{name}": (draw(st.integers(rank, 12)), draw(st.integers(rank, 12)))
        for i, name in zip(range(n_mod), ("up_proj", "down_proj", "gate_proj"))
    }
    seed = draw(st.integers(0, 2**16))
    scale = draw(st.sampled_from([1.0, 1e-3, 1e-20]))  # near-zero adapters too
    zero = draw(st.booleans()) if b_zero is None else b_zero
    dtype = draw(st.sampled_from(DTYPES))

    def one(s):
        w = AdapterWeights.init(shapes, rank, 2.0 * rank, b_init="zeros" if zero else "random", b_std=scale, seed=s)
        return w.to(dtype)

    return one(seed), one(seed + 1)


def _parents(name, pair):
    return list(pair[: OPERATORS[name].parents])


def _delta_err(child: AdapterWeights, ref: AdapterWeights) -> float:
    num = sum(float((child.delta(m) - ref.delta(m)).double().norm()) ** 2 for m in ref.modules)
    den = sum(float(ref.delta(m).double().norm()) ** 2 for m in ref.modules)
    return (num / den) ** 0.5 if den > 0 else num**0.5


@pytest.mark.parametrize("name", list(OPERATORS))
@FAST
@given(pair=adapter_pair())
def test_child_keeps_rank_shapes_dtype_and_is_finite(name, pair):
    child = make_child(name, _parents(name, pair), seed=1)
    first = pair[0]
    assert child.rank == first.rank and child.alpha == first.alpha
    assert child.shapes() == first.shapes()
    assert all(a.dtype == first.dtype and b.dtype == first.dtype for a, b in child.tensors.values())
    assert child.is_finite()


@pytest.mark.parametrize("name", list(OPERATORS))
@FAST
@given(pair=adapter_pair())
def test_same_seed_same_child(name, pair):
    parents = _parents(name, pair)
    assert make_child(name, parents, seed=7).equal(make_child(name, parents, seed=7))


@pytest.mark.parametrize("name", [n for n, s in OPERATORS.items() if s.stochastic])
def test_different_seeds_different_children(name):
    # 8 modules of rank 8 so that discrete choices (which modules, which components) rarely collide.
    shapes = {f"model.layers.{i}.self_attn.q_proj": (16, 16) for i in range(8)}
    pair = [AdapterWeights.init(shapes, 8, 8, b_init="random", b_std=0.1, seed=s) for s in (0, 1)]
    params = {"component_mask": {"fraction": 0.5}}.get(name, {})
    children = [make_child(name, pair[: OPERATORS[name].parents], seed=s, **params) for s in range(4)]
    assert not any(children[i].equal(children[j]) for i in range(4) for j in range(i + 1, 4))


@pytest.mark.parametrize("name", [n for n, s in OPERATORS.items() if not s.stochastic])
def test_deterministic_operators_ignore_the_seed(name):
    w1 = AdapterWeights.init({"m.q_proj": (16, 16)}, 4, 8, b_init="random", b_std=0.1, seed=0)
    w2 = AdapterWeights.init({"m.q_proj": (16, 16)}, 4, 8, b_init="random", b_std=0.1, seed=1)
    pair = [w1, w2][: OPERATORS[name].parents]
    assert make_child(name, pair, seed=1).equal(make_child(name, pair, seed=2))


@pytest.mark.parametrize("name", list(ZERO_STRENGTH))
@FAST
@given(pair=adapter_pair())
def test_zero_strength_mutation_keeps_the_delta(name, pair):
    p = pair[0].to(torch.float32)
    child = make_child(name, [p], seed=3, **ZERO_STRENGTH[name])
    assert _delta_err(child, p) < 1e-5


@FAST
@given(pair=adapter_pair())
def test_copy_parent_is_exact_and_independent(pair):
    child = make_child("copy_parent", [pair[0]], seed=0)
    assert child.equal(pair[0])
    m = child.modules[0]
    child.tensors[m][0].add_(1)
    assert not child.equal(pair[0])


@FAST
@given(pair=adapter_pair(b_zero=False))
def test_linear_0_5_is_the_mean_of_a_and_of_b(pair):
    p1, p2 = (w.to(torch.float32) for w in pair)
    child = make_child("linear_0_5", [p1, p2], seed=0)
    for m in p1.modules:
        assert torch.allclose(child.tensors[m][0], (p1.tensors[m][0] + p2.tensors[m][0]) / 2)
        assert torch.allclose(child.tensors[m][1], (p1.tensors[m][1] + p2.tensors[m][1]) / 2)


@FAST
@given(
    rank=st.integers(1, 6), d_in=st.integers(6, 24), d_out=st.integers(6, 24), seed=st.integers(0, 2**16),
    deficient=st.integers(0, 3),
)
def test_cheap_svd_matches_dense_svd(rank, d_in, d_out, seed, deficient):
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(rank, d_in, generator=g, dtype=torch.float64).float()
    b = torch.randn(d_out, rank, generator=g).float()
    b[:, : min(deficient, rank)] = 0.0  # rank-deficient deltas too
    dense = b @ a
    cheap = lowrank_svd(a, b)
    scale = float(torch.linalg.matrix_norm(dense)) or 1.0
    assert float(torch.linalg.matrix_norm(cheap.dense() - dense)) / scale < 1e-5
    s_dense = torch.linalg.svdvals(dense)[: cheap.s.shape[0]]
    assert float((cheap.s - s_dense).abs().max()) / scale < 1e-5
    eye = torch.eye(cheap.s.shape[0])
    assert torch.allclose(cheap.u.T @ cheap.u, eye, atol=1e-5)
    assert torch.allclose(cheap.vh @ cheap.vh.T, eye, atol=1e-5)
    # recomposition reproduces the delta, with or without the floor on A's rows
    for floor in (0.0, 1.0):
        a2, b2 = recompose(*cheap, a_floor=floor)
        assert float(torch.linalg.matrix_norm(b2 @ a2 - dense)) / scale < 1e-5


@pytest.mark.parametrize("kappa", [1e1, 1e3, 1e5, 1e7])
def test_cheap_svd_is_accurate_for_ill_conditioned_factors(kappa):
    # Cholesky QR covers the well-conditioned factors, Householder QR the rest: both must be exact.
    g = torch.Generator().manual_seed(0)
    n, r = 2000, 8
    u = torch.linalg.qr(torch.randn(n, r, generator=g, dtype=torch.float64))[0]
    v = torch.linalg.qr(torch.randn(r, r, generator=g, dtype=torch.float64))[0]
    s = torch.logspace(0, -math.log10(kappa), r, dtype=torch.float64)
    b = ((u * s) @ v.T).float()
    a = torch.randn(r, 300, generator=g) / 300**0.5
    dense = b.double() @ a.double()
    cheap = lowrank_svd(a, b)
    assert float((cheap.dense().double() - dense).norm() / dense.norm()) < 1e-5
    y, m, rr = thin_qr(b)
    q = y @ m
    assert torch.allclose(q.T @ q, torch.eye(r), atol=1e-5)
    assert float((q @ rr - b).norm() / b.norm()) < 1e-5


def test_recompose_keeps_null_components_trainable():
    a = torch.randn(3, 10)
    u, s, vh = lowrank_svd(a, torch.zeros(8, 3))
    assert torch.equal(s, torch.zeros(3))
    a2, b2 = recompose(u, s, vh, a_floor=0.5)
    assert torch.count_nonzero(b2) == 0
    assert torch.allclose(a2.norm(dim=1), torch.full((3,), 0.5))


def test_delta_merge_is_exact_when_the_merge_fits_in_rank_r():
    # Same delta in two gauges (B G, G^-1 A): the mean delta is the delta itself, rank r.
    w = AdapterWeights.init({"m.q_proj": (20, 24)}, 4, 8, b_init="random", b_std=0.1, seed=0)
    g = torch.randn(4, 4, generator=torch.Generator().manual_seed(1)) + 3 * torch.eye(4)
    other = w.map(lambda m, a, b: (torch.linalg.solve(g, a), b @ g))
    merged = make_child("delta_merge", [w, other], seed=0)
    assert _delta_err(merged, w) < 1e-5
    assert _delta_err(make_child("linear_0_5", [w, other], seed=0), w) > 0.05


def test_delta_merge_is_the_best_rank_r_approximation_of_the_weighted_sum():
    w1 = AdapterWeights.init({"m.q_proj": (20, 24)}, 3, 6, b_init="random", b_std=0.1, seed=0)
    w2 = AdapterWeights.init({"m.q_proj": (20, 24)}, 3, 6, b_init="random", b_std=0.1, seed=1)
    child = make_child("delta_merge", [w1, w2], seed=0, weight=0.3)
    exact = 0.3 * w1.delta("m.q_proj") + 0.7 * w2.delta("m.q_proj")
    u, s, vh = torch.linalg.svd(exact)
    best = (u[:, :3] * s[:3]) @ vh[:3]
    assert torch.allclose(child.delta("m.q_proj"), best, atol=1e-5)


def _svd_mix_expected(w1, w2, k):
    """Delta of the top k components of w1 plus the top r - k of w2 (one module, m.q_proj)."""
    a1, b1 = w1.tensors["m.q_proj"]
    a2, b2 = w2.tensors["m.q_proj"]
    return w1.scaling * (lowrank_svd(a1, b1).truncate(k).dense() + lowrank_svd(a2, b2).truncate(w1.rank - k).dense())


def test_svd_mix_takes_top_components_from_each_parent():
    w1 = AdapterWeights.init({"m.q_proj": (20, 24)}, 4, 8, b_init="random", b_std=0.1, seed=0)
    w2 = AdapterWeights.init({"m.q_proj": (20, 24)}, 4, 8, b_init="random", b_std=0.1, seed=1)
    whole = {"fraction_min": 1.0, "fraction_max": 1.0}
    assert _delta_err(make_child("svd_mix", [w1, w2], seed=0, **whole), w1) < 1e-5
    assert _delta_err(make_child("svd_mix", [w1, w2], seed=0, fraction_min=0.0, fraction_max=0.0), w2) < 1e-5
    # a fixed split at r/2 takes the TOP half of each parent (not the other's components k+1..r)
    half = make_child("svd_mix", [w1, w2], seed=0, fraction_min=0.5, fraction_max=0.5)
    assert torch.allclose(half.delta("m.q_proj"), _svd_mix_expected(w1, w2, 2), atol=1e-6)


def test_svd_mix_default_split_is_uniform_over_one_to_r_minus_one():
    """As in the reference implementation: k ~ U{1, ..., r-1} per module, so both parents contribute."""
    w1 = AdapterWeights.init({"m.q_proj": (20, 24)}, 4, 8, b_init="random", b_std=0.1, seed=0)
    w2 = AdapterWeights.init({"m.q_proj": (20, 24)}, 4, 8, b_init="random", b_std=0.1, seed=1)
    expected = {k: _svd_mix_expected(w1, w2, k) for k in range(5)}
    counts = Counter()
    for seed in range(300):
        delta = make_child("svd_mix", [w1, w2], seed=seed).delta("m.q_proj")
        (k,) = [k for k, e in expected.items() if torch.allclose(delta, e, atol=1e-6)]
        counts[k] += 1
    assert set(counts) == {1, 2, 3}  # never a whole parent
    assert all(abs(c / 300 - 1 / 3) < 0.1 for c in counts.values())
    w1r1 = AdapterWeights.init({"m.q_proj": (6, 6)}, 1, 2, b_init="random", b_std=0.1, seed=0)
    w2r1 = AdapterWeights.init({"m.q_proj": (6, 6)}, 1, 2, b_init="random", b_std=0.1, seed=1)
    kids = [make_child("svd_mix", [w1r1, w2r1], seed=s) for s in range(20)]  # rank 1: one parent's component
    assert {min(range(2), key=lambda i: _delta_err(c, (w1r1, w2r1)[i])) for c in kids} == {0, 1}
    assert all(min(_delta_err(c, w1r1), _delta_err(c, w2r1)) < 1e-5 for c in kids)


def test_extrapolate_draws_eta_once_per_child_from_its_range():
    shapes = {"m.q_proj": (8, 8), "m.v_proj": (8, 4)}
    w1 = AdapterWeights.init(shapes, 2, 4, b_init="random", b_std=0.1, seed=0)
    w2 = AdapterWeights.init(shapes, 2, 4, b_init="random", b_std=0.1, seed=1)
    etas = []
    for seed in range(50):
        child = make_child("extrapolate", [w1, w2], seed=seed)
        per_module = []
        for m in shapes:
            (a1, b1), (a2, b2), (a, b) = w1.tensors[m], w2.tensors[m], child.tensors[m]
            eta = float(((a - a1) * (a1 - a2)).sum() / ((a1 - a2) ** 2).sum())
            assert torch.allclose(a, a1 + eta * (a1 - a2), atol=1e-6)
            assert torch.allclose(b, b1 + eta * (b1 - b2), atol=1e-6)
            per_module.append(eta)
        assert max(per_module) - min(per_module) < 1e-5  # one eta for the whole child
        etas.append(per_module[0])
    assert min(etas) >= -1e-6 and max(etas) <= 0.5 + 1e-6  # the reference's lerp range [1, 1.5]
    assert max(etas) - min(etas) > 0.3  # drawn, not fixed


def test_crossover_extremes():
    w1 = AdapterWeights.init({"m.q_proj": (8, 8), "m.v_proj": (8, 4)}, 2, 4, b_init="random", b_std=0.1, seed=0)
    w2 = AdapterWeights.init({"m.q_proj": (8, 8), "m.v_proj": (8, 4)}, 2, 4, b_init="random", b_std=0.1, seed=1)
    assert make_child("layer_swap", [w1, w2], seed=0, p_fitter=1.0).equal(w1)
    assert make_child("layer_swap", [w1, w2], seed=0, p_fitter=0.0).equal(w2)
    assert make_child("dare", [w1, w2], seed=0, drop=0.0, weight=1.0).equal(w1)
    assert make_child("extrapolate", [w1, w2], seed=0, eta_min=0.0, eta_max=0.0).equal(w1)
    ext = make_child("extrapolate", [w1, w2], seed=0, eta_min=0.5, eta_max=0.5)
    a1, a2 = w1.tensors["m.q_proj"][0], w2.tensors["m.q_proj"][0]
    assert torch.allclose(ext.tensors["m.q_proj"][0], 1.5 * a1 - 0.5 * a2)
    swapped = make_child("layer_swap", [w1, w2], seed=0)
    for m in w1.modules:  # every module is taken whole from one parent
        assert any(torch.equal(swapped.tensors[m][0], p.tensors[m][0]) and torch.equal(swapped.tensors[m][1], p.tensors[m][1])
                   for p in (w1, w2))


def test_dare_keeps_the_expected_value():
    w1 = AdapterWeights.init({"m.q_proj": (64, 64)}, 8, 8, b_init="random", b_std=0.1, seed=0)
    children = [make_child("dare", [w1, w1], seed=s, drop=0.5) for s in range(200)]
    mean_a = torch.stack([c.tensors["m.q_proj"][0] for c in children]).mean(0)
    a = w1.tensors["m.q_proj"][0]
    assert float((mean_a - a).norm() / a.norm()) < 0.1


def test_component_mask_zeroes_the_requested_count():
    w = AdapterWeights.init({"m.q_proj": (16, 16)}, 8, 8, b_init="random", b_std=0.1, seed=0)
    child = make_child("component_mask", [w], seed=0, fraction=0.25)
    s = torch.linalg.svdvals(child.delta("m.q_proj"))[:8]
    assert int((s < 1e-6 * s.max()).sum()) == 2


def test_layer_gaussian_touches_the_requested_fraction_of_modules():
    shapes = {f"model.layers.{i}.self_attn.q_proj": (8, 8) for i in range(8)}
    w = AdapterWeights.init(shapes, 2, 4, b_init="random", b_std=0.1, seed=0)
    child = make_child("layer_gaussian", [w], seed=0, fraction=0.25, scale=0.5)
    changed = [m for m in w.modules if not torch.equal(child.tensors[m][1], w.tensors[m][1])]
    assert len(changed) == 2


def test_mismatched_parents_give_a_clear_error():
    w = AdapterWeights.init({"m.q_proj": (8, 8)}, 2, 4, seed=0)
    with pytest.raises(AdapterMismatchError, match="ranks differ"):
        make_child("dare", [w, AdapterWeights.init({"m.q_proj": (8, 8)}, 3, 4, seed=0)], seed=0)
    with pytest.raises(AdapterMismatchError, match="target modules differ"):
        make_child("layer_swap", [w, AdapterWeights.init({"m.k_proj": (8, 8)}, 2, 4, seed=0)], seed=0)
    with pytest.raises(AdapterMismatchError, match="shapes"):
        make_child("svd_mix", [w, AdapterWeights.init({"m.q_proj": (8, 6)}, 2, 4, seed=0)], seed=0)
    with pytest.raises(AdapterMismatchError, match="lora_alpha differs"):
        make_child("delta_merge", [w, AdapterWeights.init({"m.q_proj": (8, 8)}, 2, 8, seed=0)], seed=0)


def test_parameters_are_validated_with_the_operator_and_key_named():
    w = AdapterWeights.init({"m.q_proj": (8, 8)}, 2, 4, seed=0)
    with pytest.raises(OperatorError, match=r"operator 'dare': parameter drop must be in \[0, 1\)"):
        make_child("dare", [w, w], seed=0, drop=1.0)
    with pytest.raises(OperatorError, match=r"operator 'extrapolate': parameter eta_max must be in \[0, 1\]"):
        make_child("extrapolate", [w, w], seed=0, eta_max=1.5)
    with pytest.raises(OperatorError, match="operator 'svd_mix': fraction_min=0.8 is above fraction_max=0.2"):
        resolve_params("svd_mix", {"fraction_min": 0.8, "fraction_max": 0.2})
    with pytest.raises(OperatorError, match="operator 'svd_perturb': unknown parameter 'sgima'"):
        make_child("svd_perturb", [w], seed=0, sgima=0.1)
    with pytest.raises(OperatorError, match="operator 'full_gaussian': parameter scale must be a number"):
        resolve_params("full_gaussian", {"scale": "lots"})
    with pytest.raises(OperatorError, match="unknown operator 'mutate'"):
        make_child("mutate", [w], seed=0)
    with pytest.raises(OperatorError, match="takes 2 parent"):
        make_child("dare", [w], seed=0)
    with pytest.raises(OperatorError, match="rank 2 > min"):
        make_child("svd_perturb", [AdapterWeights.init({"m.q_proj": (8, 1)}, 2, 4, seed=0)], seed=0)
    assert resolve_params("dare", {"drop": "0.3"}) == {"drop": 0.3, "weight": 0.5}


def test_registry_is_complete_and_documented():
    kinds = {n: s.kind for n, s in OPERATORS.items()}
    assert [n for n, k in kinds.items() if k == "mutation"] == ["svd_perturb", "layer_gaussian", "component_mask", "full_gaussian"]
    assert sorted(n for n, k in kinds.items() if k == "crossover") == ["dare", "delta_merge", "extrapolate", "layer_swap", "svd_mix"]
    assert sorted(n for n, k in kinds.items() if k == "control") == ["copy_parent", "linear_0_5"]
    for spec in OPERATORS.values():
        assert spec.summary and spec.cost
        for key, value in spec.defaults.items():
            assert value in spec.bounds[key], (spec.name, key)


def test_docs_table_lists_every_operator_with_its_defaults():
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "docs" / "operators.md").read_text()
    rows = {line.split("|")[1].strip(" `"): line for line in text.splitlines() if line.startswith("| `")}
    assert set(rows) == set(OPERATORS)
    for name, spec in OPERATORS.items():
        assert f"| {spec.kind}" in rows[name] and f"| {spec.parents} |" in rows[name]
        for key, value in spec.defaults.items():
            assert f"`{key}={value}` {spec.bounds[key].text}" in rows[name], (name, key)

"""LoRA weight-space evolution operators: same-rank children from one or two parent adapters.

Each operator is one small pure function registered with ``@operator(...)`` (like mergekit's
merge-method registry). It receives the parents as ``AdapterWeights`` (fitter parent first for
crossovers), a seeded ``torch.Generator`` and its parameters, computes in float32 and returns a
child with the same rank, modules, shapes, alpha and dtype as the first parent. No operator forms
a dense ``out x in`` matrix: the SVD-based ones use ``svd.lowrank_svd`` (QR of ``A^T`` and ``B``
plus an ``r x r`` SVD), and the others work entry-wise on ``A`` and ``B``.

Use ``make_child(name, parents, seed=..., **params)``: it checks the parents, validates and
completes the parameters from the registry's defaults, runs the operator and checks the child.

Defaults: the paper gives no parameter values we know of; each default is the public reference
implementation's (lucidrains/populora) unless docs/operators.md gives a reason to differ (ours:
``svd_perturb``'s out-of-span rotation, ``svd_mix`` taking the other parent's top components, no
fallback noise on a constant tensor).

Averaging factors is not averaging deltas. ``linear_0_5`` (and ``dare``, ``extrapolate``)
combine ``A`` and ``B`` separately, as the paper does: ``(B1 + B2)/2 @ (A1 + A2)/2`` has cross
terms ``B1 A2 + B2 A1`` that belong to neither parent, and a factorisation is only defined up to
``B A = (B G)(G^-1 A)`` for any invertible ``G``, so two parents with the same delta in different
gauges average to a different delta. ``delta_merge`` combines the deltas themselves.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from populora.policy.adapters import AdapterMismatchError, AdapterWeights
from populora.population.svd import a_row_scale, lowrank_svd, recompose
from populora.population.validation import ConfigError, Interval, coerce_number, interval

KINDS = ("mutation", "crossover", "control")

Factors = tuple[torch.Tensor, torch.Tensor]


class OperatorError(ConfigError):
    """An operator was asked for with a bad name, parent count or parameter."""


@dataclass(frozen=True)
class OperatorSpec:
    name: str
    kind: str
    parents: int
    defaults: Mapping[str, int | float]
    bounds: Mapping[str, Interval]
    stochastic: bool
    cost: str
    summary: str
    fn: Callable[..., AdapterWeights]
    ordered: tuple[tuple[str, str], ...] = ()  # (low, high) parameter pairs that must satisfy low <= high


OPERATORS: dict[str, OperatorSpec] = {}


def operator(
    name: str,
    *,
    kind: str,
    parents: int,
    defaults: Mapping[str, int | float] | None = None,
    bounds: Mapping[str, str] | None = None,
    stochastic: bool = True,
    cost: str = "",
    ordered: Sequence[tuple[str, str]] = (),
):
    """Register ``fn(parents, generator, **params) -> AdapterWeights`` under ``name``.

    ``ordered`` lists ``(low, high)`` parameter pairs (a range to draw from) that must satisfy
    ``low <= high``; ``resolve_params`` checks them, so a bad range fails when the config is read.
    """
    defaults, bounds = dict(defaults or {}), dict(bounds or {})
    keys_ok = set(defaults) == set(bounds) and all(k in defaults for pair in ordered for k in pair)
    if kind not in KINDS or parents not in (1, 2) or not keys_ok:
        raise ValueError(f"operator {name!r}: bad registration (kind {kind!r}, parents {parents}, keys)")

    def deco(fn):
        if name in OPERATORS:
            raise ValueError(f"operator {name!r} registered twice")
        summary = (fn.__doc__ or "").strip().splitlines()[0] if fn.__doc__ else ""
        OPERATORS[name] = OperatorSpec(
            name, kind, parents, defaults, {k: interval(v) for k, v in bounds.items()}, stochastic, cost, summary, fn,
            tuple(tuple(pair) for pair in ordered),
        )
        return fn

    return deco


def get_operator(name: str) -> OperatorSpec:
    if name not in OPERATORS:
        raise OperatorError(f"unknown operator {name!r} (known: {', '.join(OPERATORS)})")
    return OPERATORS[name]


def resolve_params(name: str, overrides: Mapping[str, Any] | None = None) -> dict[str, int | float]:
    """The operator's defaults updated with ``overrides``, each coerced and range-checked."""
    spec = get_operator(name)
    params = dict(spec.defaults)
    for key, value in (overrides or {}).items():
        if key not in spec.defaults:
            known = ", ".join(spec.defaults) or "none"
            raise OperatorError(f"operator {name!r}: unknown parameter {key!r} (known: {known})")
        try:
            v = coerce_number(f"operator {name!r}", f"parameter {key}", value, spec.defaults[key])
        except ConfigError as e:
            raise OperatorError(str(e)) from None
        if v not in spec.bounds[key]:
            raise OperatorError(f"operator {name!r}: parameter {key} must be in {spec.bounds[key].text}, got {value!r}")
        params[key] = v
    for low, high in spec.ordered:
        if params[low] > params[high]:
            raise OperatorError(f"operator {name!r}: {low}={params[low]!r} is above {high}={params[high]!r}")
    return params


def make_child(
    name: str,
    parents: Sequence[AdapterWeights],
    *,
    seed: int | None = None,
    generator: torch.Generator | None = None,
    **params: Any,
) -> AdapterWeights:
    """Apply operator ``name`` to ``parents`` (fitter first) with a generator seeded by ``seed``."""
    spec = get_operator(name)
    if len(parents) != spec.parents:
        raise OperatorError(f"operator {name!r} takes {spec.parents} parent(s), got {len(parents)}")
    first = parents[0]
    for p in parents:
        if any(a.device.type != "cpu" for a, _ in p.tensors.values()):
            raise OperatorError(f"operator {name!r}: parents must be CPU tensors (use AdapterWeights.to(device='cpu'))")
    for other in parents[1:]:
        first.check_compatible(other, what=f"operator {name!r}")
        if first.alpha != other.alpha:
            raise AdapterMismatchError(f"operator {name!r}: lora_alpha differs ({first.alpha} vs {other.alpha})")
    if generator is None:
        if seed is None:
            raise OperatorError(f"operator {name!r}: give a seed or a torch.Generator")
        generator = torch.Generator().manual_seed(int(seed))
    child = spec.fn(tuple(parents), generator, **resolve_params(name, params))
    same_dtypes = all(
        child.tensors[m][0].dtype == a.dtype and child.tensors[m][1].dtype == b.dtype for m, (a, b) in first.tensors.items()
    )
    if child.rank != first.rank or child.shapes() != first.shapes() or child.alpha != first.alpha or not same_dtypes:
        raise RuntimeError(f"operator {name!r} changed the rank, shapes, alpha or dtype of the adapter")
    return child


# -- helpers ----------------------------------------------------------------------------------
def _modules(w: AdapterWeights) -> list[str]:
    return sorted(w.tensors)  # a fixed order, so the generator's stream is reproducible


def _build(first: AdapterWeights, fn: Callable[[str], Factors]) -> AdapterWeights:
    """Child of ``first``'s layout with ``(A, B) = fn(module)`` (float32) cast to each module's dtype."""
    tensors = {}
    for m in _modules(first):
        a0, b0 = first.tensors[m]
        a, b = fn(m)
        tensors[m] = (a.to(a0.dtype).contiguous(), b.to(b0.dtype).contiguous())
    return AdapterWeights(first.rank, first.alpha, first.target_modules, tensors)


def _f32(w: AdapterWeights, m: str) -> Factors:
    a, b = w.tensors[m]
    return a.float(), b.float()


def _svd_ready(w: AdapterWeights, m: str, op: str) -> None:
    a, b = w.tensors[m]
    if w.rank > min(a.shape[1], b.shape[0]):
        raise OperatorError(
            f"operator {op!r}: module {m} has rank {w.rank} > min(in={a.shape[1]}, out={b.shape[0]}); "
            "SVD-based operators need r <= min(in, out)"
        )


def _noisy(t: torch.Tensor, scale: float, gen: torch.Generator) -> torch.Tensor:
    """``t + scale * std(t) * z``: noise proportional to the tensor's own spread (0 if t is constant)."""
    z = torch.randn(t.shape, generator=gen)
    return t + (scale * t.std(correction=0)) * z


def _count(fraction: float, n: int) -> int:
    """``round(fraction * n)``, at least one when ``fraction > 0``."""
    return 0 if fraction <= 0 else min(n, max(1, round(fraction * n)))


def _split(rank: int, lo: float, hi: float, gen: torch.Generator) -> int:
    """How many components come from the fitter: uniform over the integers k in [lo r, hi r].

    Splits strictly inside (1 <= k <= r - 1) are preferred when the range holds one, so the child
    takes from both parents; at rank 1 the child is one parent's only component (k in {0, 1}).
    """
    ks = list(range(math.ceil(lo * rank - 1e-9), math.floor(hi * rank + 1e-9) + 1))
    inner = [k for k in ks if 0 < k < rank]
    pool = inner or ks or [round((lo + hi) / 2 * rank)]
    return pool[int(torch.randint(len(pool), (1,), generator=gen))]


def _tilt(q: torch.Tensor, eps: float, gen: torch.Generator) -> torch.Tensor:
    """Rotate the subspace spanned by the orthonormal columns of ``q [n, k]`` by about ``eps`` radians.

    A random direction orthogonal to the subspace, ``Z = (G - q C) / sqrt(n)`` with ``G`` standard
    Gaussian and ``C = q^T G``, is added and the result mapped back to orthonormal columns by the
    polar retraction ``(q + eps Z)(I + eps^2 Z^T Z)^(-1/2)``. Since ``q^T Z = 0`` that Gram matrix is
    exact, and ``Z^T Z = (G^T G - C^T C) / n`` needs no projected copy of ``G``: the result is
    ``q ((I - e C) M) + G (e M)`` with ``e = eps / sqrt(n)``, ``M = (I + eps^2 Z^T Z)^(-1/2)``.
    ``eps = 0`` returns ``q``.
    """
    n, k = q.shape
    g = torch.randn(q.shape, generator=gen)
    c = q.T @ g
    e = eps / math.sqrt(n)
    evals, evecs = torch.linalg.eigh(torch.eye(k) + e**2 * (g.T @ g - c.T @ c))
    m = (evecs * evals.clamp_min(1.0).rsqrt()) @ evecs.T  # eigenvalues are >= 1 up to rounding
    return torch.addmm(q @ ((torch.eye(k) - e * c) @ m), g, e * m)


# -- mutations --------------------------------------------------------------------------------
@operator(
    "svd_perturb", kind="mutation", parents=1,
    defaults={"sigma": 0.1, "rotation": 0.05}, bounds={"sigma": "[0, inf)", "rotation": "[0, 1]"},
    cost="QR of A^T and B, r x r SVD, two QR retractions per module: O((in + out) r^2)",
)
def svd_perturb(parents, gen, *, sigma, rotation):
    """Log-normal jitter of the singular values (S exp(sigma z)) and a small rotation of both singular subspaces."""
    (p,) = parents

    def child(m):
        _svd_ready(p, m, "svd_perturb")
        a, b = _f32(p, m)
        u, s, vh = lowrank_svd(a, b)
        s = s * torch.exp(sigma * torch.randn(s.shape, generator=gen))
        u = _tilt(u, rotation, gen)
        vh = _tilt(vh.T.contiguous(), rotation, gen).T
        return recompose(u, s, vh, a_row_scale(a))

    return _build(p, child)


@operator(
    "layer_gaussian", kind="mutation", parents=1,
    defaults={"fraction": 0.33, "scale": 0.1}, bounds={"fraction": "[0, 1]", "scale": "[0, inf)"},
    cost="one Gaussian draw per entry of the chosen modules",
)
def layer_gaussian(parents, gen, *, fraction, scale):
    """Gaussian noise scaled by each tensor's std on A and B of a random fraction of the modules."""
    (p,) = parents
    names = _modules(p)
    picked = {names[i] for i in torch.randperm(len(names), generator=gen)[: _count(fraction, len(names))].tolist()}

    def child(m):
        a, b = _f32(p, m)
        return (_noisy(a, scale, gen), _noisy(b, scale, gen)) if m in picked else (a.clone(), b.clone())

    return _build(p, child)


@operator(
    "component_mask", kind="mutation", parents=1,
    defaults={"fraction": 0.3}, bounds={"fraction": "[0, 1]"},
    cost="QR of A^T and B, r x r SVD per module: O((in + out) r^2)",
)
def component_mask(parents, gen, *, fraction):
    """Zero a random fraction of the singular components of every module (they stay trainable)."""
    (p,) = parents

    def child(m):
        _svd_ready(p, m, "component_mask")
        a, b = _f32(p, m)
        u, s, vh = lowrank_svd(a, b)
        drop = torch.randperm(s.shape[0], generator=gen)[: _count(fraction, s.shape[0])]
        s = s.clone()
        s[drop] = 0.0
        return recompose(u, s, vh, a_row_scale(a))

    return _build(p, child)


@operator(
    "full_gaussian", kind="mutation", parents=1,
    defaults={"scale": 0.15}, bounds={"scale": "[0, inf)"},
    cost="one Gaussian draw per adapter entry",
)
def full_gaussian(parents, gen, *, scale):
    """Gaussian noise scaled by each tensor's std on every A and B."""
    (p,) = parents

    def child(m):
        a, b = _f32(p, m)
        return _noisy(a, scale, gen), _noisy(b, scale, gen)

    return _build(p, child)


# -- crossovers -------------------------------------------------------------------------------
@operator(
    "dare", kind="crossover", parents=2,
    defaults={"drop": 0.7, "weight": 0.5}, bounds={"drop": "[0, 1)", "weight": "[0, 1]"},
    cost="one uniform draw per entry of each parent",
)
def dare(parents, gen, *, drop, weight):
    """DARE: drop each parent's entries with probability drop, rescale by 1/(1-drop), then mix (weight on the fitter)."""
    p1, p2 = parents
    c1, c2 = weight / (1.0 - drop), (1.0 - weight) / (1.0 - drop)

    def mix(t1, t2):  # weight * dare(t1) + (1 - weight) * dare(t2), in two passes
        out = torch.where(torch.rand(t1.shape, generator=gen) >= drop, t1 * c1, 0.0)
        return out.add_(torch.where(torch.rand(t2.shape, generator=gen) >= drop, t2, 0.0), alpha=c2)

    def child(m):
        (a1, b1), (a2, b2) = _f32(p1, m), _f32(p2, m)
        return mix(a1, a2), mix(b1, b2)

    return _build(p1, child)


@operator(
    "layer_swap", kind="crossover", parents=2,
    defaults={"p_fitter": 0.5}, bounds={"p_fitter": "[0, 1]"},
    cost="a copy; one coin per module",
)
def layer_swap(parents, gen, *, p_fitter):
    """Each module's (A, B) pair taken whole from the fitter parent with probability p_fitter, else from the other."""
    p1, p2 = parents
    coins = torch.rand(len(_modules(p1)), generator=gen).tolist()
    source = {m: p1 if c < p_fitter else p2 for m, c in zip(_modules(p1), coins)}

    def child(m):
        a, b = _f32(source[m], m)
        return a.clone(), b.clone()

    return _build(p1, child)


@operator(
    "svd_mix", kind="crossover", parents=2,
    defaults={"fraction_min": 0.0, "fraction_max": 1.0},
    bounds={"fraction_min": "[0, 1]", "fraction_max": "[0, 1]"},
    ordered=[("fraction_min", "fraction_max")],
    cost="two cheap SVDs per module: O((in + out) r^2)",
)
def svd_mix(parents, gen, *, fraction_min, fraction_max):
    """Top-k singular components of the fitter plus the top r - k of the other, k drawn per module."""
    p1, p2 = parents

    def child(m):
        _svd_ready(p1, m, "svd_mix")
        k = _split(p1.rank, fraction_min, fraction_max, gen)
        (a1, b1), (a2, b2) = _f32(p1, m), _f32(p2, m)
        a_top, b_top = recompose(*lowrank_svd(a1, b1, rank=k), a_row_scale(a1))
        a_rest, b_rest = recompose(*lowrank_svd(a2, b2, rank=p1.rank - k), a_row_scale(a2))
        return torch.cat([a_top, a_rest], 0), torch.cat([b_top, b_rest], 1)

    return _build(p1, child)


@operator(
    "extrapolate", kind="crossover", parents=2,
    defaults={"eta_min": 0.0, "eta_max": 0.5}, bounds={"eta_min": "[0, 1]", "eta_max": "[0, 1]"},
    ordered=[("eta_min", "eta_max")],
    cost="one fused multiply-add per entry",
)
def extrapolate(parents, gen, *, eta_min, eta_max):
    """Child = fitter + eta (fitter - other) on A and B, eta ~ U[eta_min, eta_max] once per child."""
    p1, p2 = parents
    eta = eta_min + (eta_max - eta_min) * float(torch.rand((), generator=gen))

    def child(m):
        (a1, b1), (a2, b2) = _f32(p1, m), _f32(p2, m)
        return a1 + eta * (a1 - a2), b1 + eta * (b1 - b2)

    return _build(p1, child)


@operator(
    "delta_merge", kind="crossover", parents=2,
    defaults={"weight": 0.5}, bounds={"weight": "[0, 1]"}, stochastic=False,
    cost="QR of [A1; A2]^T and [B1 B2], 2r x 2r SVD per module: O((in + out) r^2)",
)
def delta_merge(parents, gen, *, weight):
    """Exact weighted sum of the deltas, w B1 A1 + (1-w) B2 A2 = [w B1, (1-w) B2] [A1; A2], truncated to rank r."""
    p1, p2 = parents

    def child(m):
        _svd_ready(p1, m, "delta_merge")
        (a1, b1), (a2, b2) = _f32(p1, m), _f32(p2, m)
        merged = lowrank_svd(torch.cat([a1, a2], 0), torch.cat([weight * b1, (1 - weight) * b2], 1), rank=p1.rank)
        return recompose(*merged, a_row_scale(a1))

    return _build(p1, child)


# -- controls ---------------------------------------------------------------------------------
@operator("copy_parent", kind="control", parents=1, stochastic=False, cost="a copy")
def copy_parent(parents, gen):
    """Exact clone of the parent (control: PBT with no variation)."""
    (p,) = parents
    return p.clone()


@operator("linear_0_5", kind="control", parents=2, stochastic=False, cost="one add per entry")
def linear_0_5(parents, gen):
    """Mean of the parents' A and of their B (control: naive factor averaging, not the mean delta)."""
    p1, p2 = parents

    def child(m):
        (a1, b1), (a2, b2) = _f32(p1, m), _f32(p2, m)
        return (a1 + a2) / 2, (b1 + b2) / 2

    return _build(p1, child)

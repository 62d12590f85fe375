"""Cheap singular value decomposition of a LoRA delta, and recomposition into LoRA factors.

A LoRA module holds ``A [r, in]`` and ``B [out, r]``; its delta ``B @ A`` is ``out x in`` (up to
18944 x 3584 in a 7B model) but has rank at most ``r``. Its SVD never needs the dense matrix:

    A^T = Qa Ra   (QR, Qa [in, r])        B = Qb Rb   (QR, Qb [out, r])
    B A = Qb (Rb Ra^T) Qa^T,   Rb Ra^T = Uc diag(S) Vc^T   (SVD of an r x r core)
    U = Qb Uc,   V^T = Vc^T Qa^T

which costs O((in + out) r^2 + r^3) instead of O(in * out * r). The same holds for any inner
dimension, so the exact sum of two deltas ``B1 A1 + B2 A2 = [B1 B2] [A1; A2]`` (inner dimension 2r)
is decomposed the same way and truncated back to rank ``r`` (the ``delta_merge`` operator).

Everything here computes in float32 whatever the input dtype; callers cast the result back.
"""

from __future__ import annotations

from typing import NamedTuple

import torch


class LowRankSVD(NamedTuple):
    """``delta = U @ diag(S) @ Vh`` with ``U [out, k]``, ``S [k]`` (descending, >= 0), ``Vh [k, in]``."""

    u: torch.Tensor
    s: torch.Tensor
    vh: torch.Tensor

    def dense(self) -> torch.Tensor:
        """The dense delta ``U diag(S) Vh``. For tests and small shapes only."""
        return (self.u * self.s) @ self.vh

    def truncate(self, k: int) -> LowRankSVD:
        """The best rank-``k`` approximation (Eckart-Young): the ``k`` largest components."""
        return LowRankSVD(self.u[:, :k], self.s[:k], self.vh[:k])


def thin_qr(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Thin QR of a float32 matrix ``x [m, k]``: ``(Y, M, R)`` with ``Q = Y @ M`` orthonormal and ``x = Q R``.

    ``Q`` is returned as ``Y @ M`` (``M`` is ``k x k``) so that callers needing ``Q @ C`` for a
    small ``C`` pay one tall matrix product, ``Y @ (M @ C)``, instead of two.

    Fast path: Cholesky QR applied twice (CholQR2: ``R1 = chol(x^T x)^T``, ``Y = x R1^-1``, then
    the same on ``Y``). It costs a few matrix products, which on a CPU is several times faster
    than Householder QR for the tall, skinny factors of a LoRA (e.g. 18944 x 32). It is accurate to
    float32 precision when ``x`` is reasonably conditioned; that is checked (the Gram matrix of
    ``Y`` must be near the identity), and rank-deficient or ill-conditioned inputs (``B = 0``
    included) fall back to Householder QR (``torch.linalg.qr``, then ``M = I``).
    """
    m, k = x.shape
    eye = torch.eye(k, dtype=x.dtype)
    if m >= k:
        l1, info = torch.linalg.cholesky_ex(x.T @ x)
        if not info and bool(torch.isfinite(l1).all()):
            y = x @ torch.linalg.solve_triangular(l1.T, eye, upper=True)
            g2 = y.T @ y
            if bool((g2 - eye).abs().max() < 0.1):
                l2, info2 = torch.linalg.cholesky_ex(g2)
                if not info2:
                    return y, torch.linalg.solve_triangular(l2.T, eye, upper=True), l2.T @ l1.T
    q, r = torch.linalg.qr(x)
    return q, torch.eye(q.shape[1], dtype=x.dtype), r


def lowrank_svd(a: torch.Tensor, b: torch.Tensor, rank: int | None = None) -> LowRankSVD:
    """SVD of ``B @ A`` for ``A [k, in]``, ``B [out, k]`` without forming the ``out x in`` product.

    Returns ``min(k, in, out)`` components, or only the ``rank`` largest (the truncation happens
    before the tall products, so it is cheaper than ``.truncate(rank)`` afterwards). Rank-deficient inputs (``B = 0``, repeated rows) are
    fine: the missing directions get singular value 0 and orthonormal (arbitrary but
    deterministic) singular vectors from the QR factors.
    """
    if a.ndim != 2 or b.ndim != 2 or a.shape[0] != b.shape[1]:
        raise ValueError(f"lowrank_svd: expected A [k, in] and B [out, k], got {tuple(a.shape)} and {tuple(b.shape)}")
    ya, ma, ra = thin_qr(a.float().T)  # Qa = ya ma [in, min(in, k)], ra [min(in, k), k]
    yb, mb, rb = thin_qr(b.float())  # Qb = yb mb [out, min(out, k)], rb [min(out, k), k]
    uc, s, vch = torch.linalg.svd(rb @ ra.T, full_matrices=False)
    if rank is not None:
        uc, s, vch = uc[:, :rank], s[:rank], vch[:rank]
    return LowRankSVD(yb @ (mb @ uc), s, (vch @ ma.T) @ ya.T)


def recompose(
    u: torch.Tensor, s: torch.Tensor, vh: torch.Tensor, a_floor: float = 0.0
) -> tuple[torch.Tensor, torch.Tensor]:
    """LoRA factors ``(A, B)`` with ``B @ A = U diag(S) Vh``, balanced as ``B = U sqrt(S)``, ``A = sqrt(S) Vh``.

    ``a_floor`` keeps every row of ``A`` at norm at least ``a_floor`` (``B`` absorbs the
    difference: ``A_i = max(sqrt(S_i), a_floor) Vh_i``, ``B_i = U_i S_i / max(sqrt(S_i), a_floor)``),
    so the product is unchanged. Why: a component with ``S_i = 0`` would otherwise get ``A_i = 0``
    and ``B_i = 0``, a saddle point where LoRA gradients vanish and the component can never train
    again; with the floor it looks like a freshly initialised LoRA component (``A`` row non-zero,
    ``B`` column zero). Callers pass the parent's mean row norm of ``A`` (see ``a_row_scale``).
    """
    s = s.clamp_min(0.0)
    root = s.sqrt()
    if a_floor > 0.0:
        root = root.clamp_min(a_floor)
    # s / root is 0 where s == 0 (root > 0 then) and sqrt(s) where no floor applies; root == 0 only
    # when s == 0 and a_floor == 0, where the component is simply zero.
    b_scale = torch.where(root > 0, s / torch.where(root > 0, root, torch.ones_like(root)), torch.zeros_like(s))
    return root[:, None] * vh, u * b_scale


def a_row_scale(a: torch.Tensor) -> float:
    """Mean row norm of ``A`` (root mean square over rows): the natural floor for ``recompose``."""
    k = a.shape[0]
    return float(torch.linalg.vector_norm(a.float()) / (k**0.5)) if k else 0.0

"""Per-token log-probabilities and entropies of completion tokens, a chunk of tokens at a time.

The vocabulary projection of ``N`` completion tokens is an ``[N, V]`` matrix (``V = 152,064`` for
Qwen2.5). Computed whole, in float32, with ``log_softmax`` + ``gather`` + an entropy, autograd keeps
about three such matrices for backward: at paper scale (8 sequences x 4096 tokens) ~56 GiB.
:func:`token_logprobs` instead projects, normalises and differentiates ``chunk`` tokens at a time,
in the forward AND in the backward pass. What it keeps for backward is the hidden states of the
completion tokens ``[N, H]`` plus one log-sum-exp and one entropy per token; each chunk's logits
are recomputed in backward from those. So the memory of the tail is a few ``[chunk, V]`` float32
matrices at a time, whatever ``N`` (see ``populora/plan/memory.py`` for the figures).

Hand-written, not a library: the fused linear + cross-entropy kernels (Liger-Kernel, Apple's
cut-cross-entropy) need Triton and a GPU, return a summed loss rather than per-token
log-probabilities, and have no entropy. This is plain torch, so the CPU demo runs it too.

Maths, per token with logits ``z = W h (+ b)`` (float32) and target ``y``::

    lse = log sum_v exp(z_v)      logp = z_y - lse      p = exp(z - lse)
    H   = -sum_v p_v log p_v = lse - sum_v p_v z_v
    d logp / d z = onehot(y) - p                d H / d z = -p * (log p + H)

The entropy is differentiable too (an entropy bonus, ``rl.entropy_coef > 0``, needs its
gradient); when the loss does not use it, backward skips that term.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

# Tokens per chunk (ours): 512 x 152,064 x 4 B = 0.29 GiB per float32 [chunk, V] matrix at the
# Qwen2.5 vocabulary; the tail's transient peak is a few of those. 512 rows still make one large
# GEMM per chunk (512 x 3584 x 152k), so smaller chunks would cost launches, larger ones memory.
DEFAULT_CHUNK = 512


def _logits(hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    # the projection in the base dtype, then float32: the same numbers as ``lm_head(h).float()``
    return F.linear(hidden, weight, bias).float()


class _ChunkedLogprobs(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden, weight, bias, targets, chunk: int, with_entropy: bool):
        n = hidden.shape[0]
        logp = torch.empty(n, dtype=torch.float32, device=hidden.device)
        lse = torch.empty_like(logp)
        ent = torch.empty_like(logp) if with_entropy else None
        for s in range(0, n, chunk):
            z = _logits(hidden[s : s + chunk], weight, bias)
            lse[s : s + chunk] = torch.logsumexp(z, dim=-1)
            logp[s : s + chunk] = z.gather(1, targets[s : s + chunk, None])[:, 0] - lse[s : s + chunk]
            if with_entropy:
                # sum_v p_v z_v, reusing the softmax buffer for the product
                ent[s : s + chunk] = lse[s : s + chunk] - torch.softmax(z, dim=-1).mul_(z).sum(-1)
            del z
        ctx.chunk = chunk
        ctx.has_bias = bias is not None
        ctx.save_for_backward(hidden, weight, bias, targets, lse, ent)
        ctx.set_materialize_grads(False)
        if ent is None:
            return logp, torch.empty(0, device=hidden.device)
        return logp, ent

    @staticmethod
    def backward(ctx, g_logp, g_ent):
        hidden, weight, bias, targets, lse, ent = ctx.saved_tensors
        need_h, need_w, need_b = ctx.needs_input_grad[:3]
        if g_ent is not None and ent is None:
            g_ent = None
        if g_logp is None and g_ent is None:
            return None, None, None, None, None, None
        grad_h = torch.empty_like(hidden) if need_h else None
        grad_w = torch.zeros(weight.shape, dtype=torch.float32, device=weight.device) if need_w else None
        grad_b = torch.zeros(bias.shape, dtype=torch.float32, device=bias.device) if need_b else None
        chunk = ctx.chunk
        for s in range(0, hidden.shape[0], chunk):
            h = hidden[s : s + chunk]
            logp_all = _logits(h, weight, bias).sub_(lse[s : s + chunk, None])  # log p, in place
            p = logp_all.exp()
            if g_ent is not None:
                # dH/dz = -p (log p + H), scaled by the entropy's incoming gradient
                dz = logp_all.add_(ent[s : s + chunk, None]).mul_(p).mul_(-g_ent[s : s + chunk, None])
                if g_logp is not None:
                    dz.sub_(p.mul_(g_logp[s : s + chunk, None]))
            else:
                dz = p.mul_(-g_logp[s : s + chunk, None])
            del p, logp_all
            if g_logp is not None:
                rows = torch.arange(h.shape[0], device=dz.device)
                dz[rows, targets[s : s + chunk]] += g_logp[s : s + chunk]
            if need_h:
                grad_h[s : s + chunk] = dz.to(weight.dtype) @ weight
            if need_w:
                grad_w += dz.t() @ h.float()
            if need_b:
                grad_b += dz.sum(0)
            del dz
        return (
            grad_h,
            None if grad_w is None else grad_w.to(weight.dtype),
            None if grad_b is None else grad_b.to(bias.dtype),
            None,
            None,
            None,
        )


def token_logprobs(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    targets: torch.Tensor,
    *,
    bias: torch.Tensor | None = None,
    chunk: int = DEFAULT_CHUNK,
    with_entropy: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``(logp [N], entropy [N] or None)`` of ``targets [N]`` under ``softmax(hidden @ weight.T + bias)``.

    ``hidden``: ``[N, H]`` final hidden states of the positions that predict each target;
    ``weight``: ``[V, H]`` output projection (``lm_head.weight``). Both outputs are float32 and
    differentiable (with respect to ``hidden``, and ``weight``/``bias`` if they require grad).
    """
    if hidden.ndim != 2 or targets.shape != hidden.shape[:1]:
        raise ValueError(f"need hidden [N, H] and targets [N], got {tuple(hidden.shape)} and {tuple(targets.shape)}")
    if weight.ndim != 2 or weight.shape[1] != hidden.shape[1]:
        raise ValueError(f"weight must be [V, {hidden.shape[1]}], got {tuple(weight.shape)}")
    if chunk < 1:
        raise ValueError(f"chunk must be >= 1 token, got {chunk}")
    logp, ent = _ChunkedLogprobs.apply(hidden, weight, bias, targets, int(chunk), bool(with_entropy))
    return logp, (ent if with_entropy else None)

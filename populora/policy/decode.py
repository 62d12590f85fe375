"""The batched decode loop of the HF backend: many adapters, one pass, per-row stopping.

Why not ``model.generate``: peft does accept per-row ``adapter_names`` there, but we also need,
per row, the log-probability of each sampled token under the raw distribution, sampling that
does not depend on the rest of the batch (one seeded generator per row, so a mixed batch and
per-adapter runs draw the same tokens), stop strings whose text and finish reason we control,
and rows that leave the batch (and the KV cache) as soon as they finish. A direct loop over the
model's forward with ``past_key_values`` does all of that in a few lines.

Conventions (the same in the vLLM backend): the completion's token ids include the EOS token or
the token that completed a stop string; the text excludes special tokens, the stop string and
everything after it; ``finish_reason`` is ``"stop"`` (EOS or stop string) or ``"length"``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

from populora.policy.base import Completion, SamplingParams
from populora.policy.sampling import find_stop, row_seed, sample_step

# forward(input_ids [B, L], attention_mask [B, P+L], position_ids [B, L], past, adapter_names)
#   -> (logits of the last position [B, V], past)
ForwardFn = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, object, list[str]], tuple[torch.Tensor, object]]


@dataclass
class Row:
    """One completion to produce: a prompt, its adapter, and where the result goes."""

    request_index: int
    sample_index: int
    prompt_ids: list[int]
    adapter: str
    seed_index: int | None = None  # the request's index for seeding (default: request_index)
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    finish_reason: str | None = None
    text: str = ""


def _finish(row: Row, tokenizer, stops: Sequence[str], eos_ids: set[int], max_new: int) -> bool:
    """Update ``row`` after its newest token; True when it is finished."""
    if row.token_ids[-1] in eos_ids:
        row.finish_reason = "stop"
    elif stops:
        text = tokenizer.decode(row.token_ids, skip_special_tokens=True)
        # a stop string can only newly appear at the end of the text
        cut = find_stop(text, stops, max(0, len(row.text) - max(len(s) for s in stops)))
        row.text = text
        if cut != -1:
            row.text = text[:cut]
            row.finish_reason = "stop"
            return True
    if row.finish_reason is None and len(row.token_ids) >= max_new:
        row.finish_reason = "length"
    if row.finish_reason is not None:
        row.text = tokenizer.decode(row.token_ids, skip_special_tokens=True)
        cut = find_stop(row.text, stops) if stops else -1
        if cut != -1:
            row.text = row.text[:cut]
        return True
    return False


def decode_rows(
    forward: ForwardFn,
    rows: list[Row],
    sampling: SamplingParams,
    *,
    tokenizer,
    pad_id: int,
    eos_ids: set[int],
    device: torch.device,
    base_seed: int,
    new_cache: Callable[[int], object] | None = None,
) -> None:
    """Generate for ``rows`` (one micro-batch) in place: left padding, KV cache, per-row stop.

    ``new_cache(capacity)``: the KV cache the prefill starts (``kv_cache.py``: preallocated for the
    longest prompt plus ``max_new_tokens``); None: the model makes its own. The attention mask is
    preallocated likewise: each step writes one column of ones instead of concatenating one.
    """
    gens = None
    if not sampling.greedy:
        # CPU generators: a row draws one number per step (sampling.sample_step), the logits stay put
        gens = [
            torch.Generator().manual_seed(row_seed(base_seed, r.request_index if r.seed_index is None else r.seed_index, r.sample_index))
            for r in rows
        ]
    # the samples of one request share its prompt and adapter: each prompt is prefilled once, then its
    # logits and KV cache are copied to every sample's row (n samples cost one prefill, not n)
    first: dict[tuple[int, str], int] = {}  # (request, adapter) -> its prompt's row in the prefill
    unique: list[Row] = []
    owner: list[int] = []  # each row's prefill row
    for r in rows:
        key = (r.request_index, r.adapter)
        if key not in first:
            first[key] = len(unique)
            unique.append(r)
        owner.append(first[key])
    width = max(len(r.prompt_ids) for r in unique)
    input_ids = torch.full((len(unique), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(unique), width), dtype=torch.long)
    for i, r in enumerate(unique):
        input_ids[i, width - len(r.prompt_ids) :] = torch.tensor(r.prompt_ids, dtype=torch.long)
        mask[i, width - len(r.prompt_ids) :] = 1
    input_ids, mask = input_ids.to(device), mask.to(device)
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    active = list(range(len(rows)))  # indices into rows, aligned with the batch dimension
    names = [r.adapter for r in rows]
    past = new_cache(width + sampling.max_new_tokens) if new_cache is not None else None
    logits, past = forward(input_ids, mask, positions, past, [r.adapter for r in unique])
    if len(unique) < len(rows):
        idx = torch.tensor(owner, device=device)
        past.batch_select_indices(idx)
        logits, mask, positions = logits[idx], mask[idx], positions[idx]
    next_pos = positions[:, -1:] + 1
    full = torch.ones((len(rows), width + sampling.max_new_tokens), dtype=mask.dtype, device=device)
    full[:, :width] = mask  # the mask of every step is a prefix of this one (its columns are ones)
    length = width
    while True:
        step_gens = [gens[i] for i in active] if gens is not None else None
        tokens, lps = sample_step(
            logits, temperature=sampling.temperature, top_p=sampling.top_p,
            generators=step_gens,
        )
        tokens_list, lps_list = tokens.tolist(), lps.tolist()  # [B] each: the only copy to the host
        keep = []
        for b, i in enumerate(active):
            row = rows[i]
            row.token_ids.append(tokens_list[b])
            row.logprobs.append(lps_list[b])
            if not _finish(row, tokenizer, sampling.stop, eos_ids, sampling.max_new_tokens):
                keep.append(b)
        if not keep:
            return
        if len(keep) < len(active):  # finished rows leave the batch and the KV cache
            idx = torch.tensor(keep, device=device)
            past.batch_select_indices(idx)
            full, next_pos, tokens = full[idx], next_pos[idx], tokens.to(device)[idx]
            active = [active[b] for b in keep]
            names = [names[b] for b in keep]
        length += 1
        logits, past = forward(tokens.to(device)[:, None], full[:, :length], next_pos, past, names)
        next_pos = next_pos + 1


def to_completion(row: Row) -> Completion:
    return Completion(
        token_ids=list(row.token_ids), text=row.text, logprobs=list(row.logprobs), finish_reason=row.finish_reason
    )

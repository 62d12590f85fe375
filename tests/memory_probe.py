"""Measuring the memory of one training micro-batch on CPU (helpers of the memory tests).

- ``saved_bytes``: the bytes autograd keeps for backward while ``fn`` runs, from
  ``torch.autograd.graph.saved_tensors_hooks`` (each storage counted once; ``exclude`` storages,
  e.g. the model's parameters, are not counted);
- ``peak_bytes``: the peak of live CPU allocations while ``fn`` runs, above the level at its start,
  from ``torch.profiler``'s memory timeline.
"""

from __future__ import annotations

import torch


def storages(tensors) -> set[int]:
    return {t.untyped_storage().data_ptr() for t in tensors}


def saved_bytes(fn, exclude: set[int] = frozenset()):
    """``(fn(), bytes saved for backward during fn)``."""
    seen: dict[int, int] = {}

    def pack(t):
        s = t.untyped_storage()
        if s.data_ptr() not in exclude:
            seen[s.data_ptr()] = s.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = fn()
    return out, sum(seen.values())


def peak_bytes(fn):
    """``(fn(), peak live CPU bytes allocated during fn above the start level)``.

    From the memory timeline of ``torch.profiler`` (allocation and free of every tensor storage);
    that timeline is a private torch API, so callers skip when it is missing.
    """
    from torch.profiler import ProfilerActivity, profile
    from torch.profiler._memory_profiler import Action, MemoryProfileTimeline

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True, record_shapes=True, with_stack=True) as prof:
        out = fn()
    level = peak = 0
    for _, action, _, size in MemoryProfileTimeline(prof._memory_profile()).timeline:
        if action == Action.CREATE:
            level += size
        elif action == Action.DESTROY:
            level -= size
        peak = max(peak, level)
    return out, peak

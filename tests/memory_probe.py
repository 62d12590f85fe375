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
    """``(fn(), peak live CPU bytes allocated during fn above the start level)``: the measurement
    ``populora doctor`` makes (the memory timeline of ``torch.profiler``, a private torch API);
    ImportError when this torch lacks it, so callers skip."""
    from populora.doctor.training import cpu_peak_bytes

    out, peak = cpu_peak_bytes(fn)
    if peak is None:
        raise ImportError("torch.profiler has no memory timeline in this torch")
    return out, peak

"""A preallocated KV cache for the HF decode loop: every layer's keys and values written in place.

transformers' default ``DynamicCache`` grows each layer's keys and values by ``torch.cat`` at every
decode step: step ``t`` copies the whole cache so far, so a completion of ``T`` tokens copies
``O(T^2)`` cache entries (2.2-3 s of ``torch.cat`` in the profile of a sampled evaluation,
docs/benchmarks/eval.md). Here each layer allocates ``[rows, kv_heads, capacity, head_dim]`` once, at
the prefill (``capacity`` = the longest prompt of the micro-batch + ``max_new_tokens``: the decode
loop knows both), writes each step's keys and values into the next column, and hands attention views
of the filled part: the same values, so the same logits (``tests/test_policy_hf.py`` compares them
with the dynamic cache's).

Why not transformers' ``StaticCache``: it attends over its whole capacity at every step (a mask hides
the unfilled part), and its layers cannot drop rows, which the decode loop does as soon as a row
finishes (``batch_select_indices``). This layer drops them by moving the kept rows' filled part to
the front of the same buffers (no new allocation), and grows its buffers (doubling) if asked for more
than its capacity.

``policy.kv_cache``: ``preallocated`` (this) or ``dynamic`` (transformers' ``DynamicCache``, kept for
the side-by-side measurement of ``populora bench generate``).
"""

from __future__ import annotations

import torch
from transformers.cache_utils import Cache, DynamicLayer

from populora.policy.config import KV_CACHES


class PreallocatedLayer(DynamicLayer):
    """One decoder layer's keys and values in buffers of ``capacity`` positions (see the module docstring).

    ``keys``/``values`` are views ``[rows, heads, length, head_dim]`` of the filled part, as
    ``DynamicLayer`` keeps them, so everything that reads a dynamic layer reads this one.
    """

    def __init__(self, capacity: int) -> None:
        super().__init__()
        self.capacity = int(capacity)
        self.length = 0
        self.rows = 0
        self.key_buf: torch.Tensor | None = None
        self.value_buf: torch.Tensor | None = None

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        self.dtype, self.device = key_states.dtype, key_states.device
        self.rows = key_states.shape[0]
        size = max(self.capacity, key_states.shape[-2])
        self.key_buf = key_states.new_empty(self.rows, key_states.shape[1], size, key_states.shape[-1])
        self.value_buf = value_states.new_empty(self.rows, value_states.shape[1], size, value_states.shape[-1])
        self.is_initialized = True

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        if key_states.shape[0] != self.rows:
            raise ValueError(f"the cache holds {self.rows} rows, the step gives {key_states.shape[0]}")
        end = self.length + key_states.shape[-2]
        if end > self.key_buf.shape[-2]:
            self._grow(end)
        self.key_buf[: self.rows, :, self.length : end] = key_states
        self.value_buf[: self.rows, :, self.length : end] = value_states
        self.length = end
        self._views()
        return self.keys, self.values

    def _grow(self, needed: int) -> None:
        size = max(needed, 2 * self.key_buf.shape[-2])
        for name in ("key_buf", "value_buf"):
            old = getattr(self, name)
            new = old.new_empty(old.shape[0], old.shape[1], size, old.shape[-1])
            new[:, :, : self.length] = old[:, :, : self.length]
            setattr(self, name, new)

    def _views(self) -> None:
        self.keys = self.key_buf[: self.rows, :, : self.length]
        self.values = self.value_buf[: self.rows, :, : self.length]

    def get_seq_length(self) -> int:
        return self.length if self.is_initialized else 0

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        """Keep the rows ``indices`` (in that order; repeats copy a row: the samples of one prompt after
        its prefill). Fewer rows move to the front of the same buffers; more rows take new buffers."""
        if not self.is_initialized:
            return
        n = len(indices)
        for name in ("key_buf", "value_buf"):
            buf = getattr(self, name)
            kept = buf[indices, :, : self.length]  # a copy: the moves below cannot overwrite their source
            if n > buf.shape[0]:
                buf = buf.new_empty(n, *buf.shape[1:])
                setattr(self, name, buf)
            buf[:n, :, : self.length] = kept
        self.rows = n
        self._views()

    def reset(self) -> None:
        self.length = self.rows = 0
        self.key_buf = self.value_buf = None
        super().reset()

    def crop(self, tokens_to_remove: int) -> None:
        raise NotImplementedError("the preallocated KV cache is not croppable")


def full_attention_layers(config) -> int | None:
    """The decoder's layer count when every layer attends to the whole sequence (what this cache
    holds), else None (sliding-window or other layers: those keep transformers' own cache)."""
    text = config.get_text_config(decoder=True) if hasattr(config, "get_text_config") else config
    kinds = getattr(text, "layer_types", None) or ["full_attention"]
    if any(k != "full_attention" for k in kinds) or getattr(text, "sliding_window", None) and getattr(
            text, "use_sliding_window", True):
        return None
    return int(text.num_hidden_layers)


def preallocated_cache(layers: int, capacity: int) -> Cache:
    """A cache of ``layers`` ``PreallocatedLayer``s, each for ``capacity`` positions."""
    return Cache(layers=[PreallocatedLayer(capacity) for _ in range(layers)])


def new_cache(kind: str, config):
    """``capacity -> cache`` for the decode loop, or None: transformers makes its ``DynamicCache``
    (``kind == "dynamic"``, or a model with layers that are not full attention)."""
    if kind not in KV_CACHES:
        raise ValueError(f"policy.kv_cache must be one of {KV_CACHES}, got {kind!r}")
    layers = full_attention_layers(config)
    if kind == "dynamic" or layers is None:
        return None
    return lambda capacity: preallocated_cache(layers, capacity)

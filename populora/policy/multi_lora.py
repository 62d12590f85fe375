"""Multi-adapter LoRA layers: one forward pass in which every row uses its own member's adapter, for
training (the fused update) and for generation (the HF engine's mixed-adapter batches) alike.

Each LoRA layer computes ``base(x) + scale_s * (x A_s^T) B_s^T`` where ``s`` is the *slot* (member
adapter) of the row the token belongs to. Rows come grouped by slot (:class:`SlotLayout`: the adapter
of each slot and how many rows it has, in order), so the tokens of a slot are one contiguous block of
the flattened ``[rows x width, in]`` input and the LoRA term is a *grouped* matrix product over those
blocks:

- on CUDA in bf16 (or fp16), with every dimension a multiple of 8 (16-byte rows), it is
  ``torch.nn.functional.grouped_mm`` (``torch._grouped_mm`` in the releases that only have that name):
  one kernel for all slots, the stacked ``A^T [S, in, r]`` and ``B^T [S, r, out]`` read once;
- training elsewhere (CPU, float32, odd ranks): a loop over the slots' blocks with two plain matmuls
  each, in exactly the order peft computes one adapter (``lora_B(lora_A(x)) * scaling``);
- generation elsewhere: ONE batched product over the slots (``torch.bmm`` of ``[S, m, in]`` by the
  stacked ``A^T``, then by ``B^T``), each slot's block padded to the longest (``m`` tokens) by an index
  gather when the slots' row counts differ. Per slot it is the same two products as the loop, so the
  result is the loop's (on the CPU bit for bit: ``tests/test_policy_hf.py`` compares greedy tokens of
  mixed and per-adapter batches), at the cost of 2 kernels instead of 2 per slot. On a decode step of a
  small model the per-slot kernels, not the arithmetic, are the cost: the loop made a mixed batch of 8
  adapters 0.40x as fast as a one-adapter batch on ``tiny`` (docs/benchmarks/generate.md).

Gradients (training) flow into each slot's own ``lora_A``/``lora_B`` parameters (the live peft
parameters: the optimizer, the float32 masters and the engine's publishing see nothing new). A row's
output depends on its own slot's weights only, so each adapter's gradient is the gradient of its own
rows' loss.

Why not peft's own mixed batch (``adapter_names=...``): peft raises ``ValueError("Cannot pass
`adapter_names` when the model is in training mode.")`` (peft 0.18-0.21, ``LoraModel._enable_peft_forward_hooks``),
and its inference path gathers each adapter's rows with boolean masks and scatters them back, one
small matmul pair per adapter, with no grouped kernel. The same design as SkyRL's ``MultiLoRALinear``
(per-token adapter indices, one grouped product), applied to the layers peft already owns.

:class:`MultiLoRA` installs itself once on a peft model's LoRA layers and owns the slots of both uses:

- training: ``set(layout)`` makes the next forwards fused; the layout of the last fused pass stays set
  until :meth:`MultiLoRA.clear`, so that layers recomputed by gradient checkpointing during backward
  see the same rows as in the forward;
- generation: ``serving(adapters)`` stacks each layer's weights of those adapters once per ``generate``
  call (they do not change within it), and ``route(row_adapters)`` before each forward says which slot
  each row takes (rows grouped by adapter; rows of the bare base, ``None``, come last and get no LoRA
  term at all).

Without either, the layers are peft's own.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import torch

GROUPED, LOOP, AUTO = "grouped_mm", "loop", "auto"
KERNELS = (AUTO, GROUPED, LOOP)


@dataclass(frozen=True)
class SlotLayout:
    """The rows of one fused pass: ``slots[s]`` is the adapter of the ``rows[s]`` consecutive rows
    that come ``s``-th (rows are sorted by slot; a slot with no rows may be listed: it gets nothing)."""

    slots: tuple[str, ...]
    rows: tuple[int, ...]

    @classmethod
    def of(cls, row_adapters: Sequence[str]) -> SlotLayout:
        """The layout of rows already grouped by adapter (each adapter's rows consecutive)."""
        slots: list[str] = []
        rows: list[int] = []
        for name in row_adapters:
            if slots and slots[-1] == name:
                rows[-1] += 1
                continue
            if name in slots:
                raise ValueError(f"rows of adapter {name!r} are not consecutive: sort the rows by adapter first")
            slots.append(name)
            rows.append(1)
        return cls(tuple(slots), tuple(rows))

    @property
    def n_rows(self) -> int:
        return sum(self.rows)

    def token_ends(self, n_tokens: int) -> list[int]:
        """Cumulative token ends of the slots in a flattened ``[rows x width]`` input of ``n_tokens``."""
        if self.n_rows == 0 or n_tokens % self.n_rows:
            raise ValueError(f"{n_tokens} tokens are not {self.n_rows} rows of equal width")
        width = n_tokens // self.n_rows
        ends, at = [], 0
        for r in self.rows:
            at += r * width
            ends.append(at)
        return ends


@functools.cache
def grouped_mm() -> Callable | None:
    """torch's grouped matrix product (``F.grouped_mm``, else ``torch._grouped_mm``), or None."""
    return getattr(torch.nn.functional, "grouped_mm", None) or getattr(torch, "_grouped_mm", None)


def grouped_kernel_fits(x: torch.Tensor, r: int, out: int) -> bool:
    """Whether the grouped kernel takes these operands: CUDA, half precision, 16-byte aligned rows."""
    return (grouped_mm() is not None and x.is_cuda and x.dtype in (torch.bfloat16, torch.float16)
            and x.shape[-1] % 8 == 0 and r % 8 == 0 and out % 8 == 0)


def grouped_delta(x: torch.Tensor, a: torch.Tensor, b: torch.Tensor, offs: torch.Tensor,
                  scales: Sequence[float]) -> torch.Tensor:
    """The grouped kernel: ``x [N, in]`` in slot blocks ending at ``offs`` (int32, on ``x``'s device),
    stacked ``a [S, r, in]`` and ``b [S, out, r]``."""
    if grouped_mm() is None:
        raise RuntimeError("this torch has no grouped_mm (torch.nn.functional.grouped_mm or torch._grouped_mm)")
    # A^T and B^T as column-major [S, K, M] views of the stacked row-major weights: the layout the
    # grouped kernels read without a copy
    h = grouped_mm()(x, a.transpose(-2, -1), offs=offs)
    d = grouped_mm()(h, b.transpose(-2, -1), offs=offs)
    if len(set(scales)) == 1:
        return d * scales[0]
    per_token = torch.repeat_interleave(torch.tensor(list(scales), dtype=d.dtype, device=d.device),
                                        torch.diff(offs, prepend=offs.new_zeros(1)).long())
    return d * per_token[:, None]


def lora_delta(x: torch.Tensor, a: Sequence[torch.Tensor], b: Sequence[torch.Tensor], ends: Sequence[int],
               scales: Sequence[float], kernel: str = AUTO) -> torch.Tensor:
    """``[N, out]``: token ``i`` of slot ``s``'s block gets ``scales[s] * (x_i A_s^T) B_s^T``.

    ``x``: ``[N, in]`` tokens grouped by slot, ``ends[s]`` the end of slot ``s``'s block (cumulative,
    ``ends[-1] == N``); ``a[s]``: ``[r, in]``, ``b[s]``: ``[out, r]`` (peft's ``lora_A/B.weight``).
    ``kernel``: ``auto`` (grouped where :func:`grouped_kernel_fits`, else the loop), ``grouped_mm`` or ``loop``.
    """
    if len(a) != len(ends) or len(b) != len(ends) or len(scales) != len(ends):
        raise ValueError(f"need one A, B and scale per slot: {len(a)}, {len(b)}, {len(scales)} for {len(ends)} slots")
    if not ends or ends[-1] != x.shape[0]:
        raise ValueError(f"slot ends {list(ends)} do not cover the {x.shape[0]} tokens")
    r, out = a[0].shape[0], b[0].shape[0]
    if kernel not in KERNELS:
        raise ValueError(f"kernel must be one of {KERNELS}, got {kernel!r}")
    use_grouped = kernel == GROUPED or (kernel == AUTO and grouped_kernel_fits(x, r, out))
    if use_grouped:
        if grouped_mm() is None:
            raise RuntimeError("this torch has no grouped_mm (torch.nn.functional.grouped_mm or torch._grouped_mm)")
        offs = torch.tensor(list(ends), dtype=torch.int32, device=x.device)
        return grouped_delta(x, torch.stack(list(a)), torch.stack(list(b)), offs, scales)
    parts, lo = [], 0
    for a_s, b_s, hi, scale in zip(a, b, ends, scales):
        if hi > lo:  # peft's order: lora_B(lora_A(x)) * scaling
            parts.append(torch.nn.functional.linear(torch.nn.functional.linear(x[lo:hi], a_s), b_s) * scale)
        lo = hi
    if not parts:
        return x.new_zeros(x.shape[0], out)
    return torch.cat(parts) if len(parts) > 1 else parts[0]


def route_index(counts: Sequence[int], width: int, device, grouped: bool):
    """What :func:`stacked_delta` needs besides the operands, the same for every layer of a forward:
    the grouped kernel's slot ends (int32 on ``device``); else, where the slots' row counts differ, the
    ``(gather [S*m], scatter [N], m)`` that pad each slot's block of ``counts[s] * width`` tokens to
    ``m`` (padding repeats a real token; its products are computed and dropped) and back; else None."""
    sizes = torch.tensor([c * width for c in counts], dtype=torch.long)
    if grouped:
        return torch.cumsum(sizes, 0).to(device=device, dtype=torch.int32)
    if bool((sizes == sizes[0]).all()):
        return None
    m = int(sizes.max())
    j = torch.arange(m)
    starts = torch.cumsum(sizes, 0) - sizes
    gather = (starts[:, None] + torch.minimum(j[None, :], (sizes - 1).clamp(min=0)[:, None])).reshape(-1)
    # a slot with no rows in this forward (a micro-batch need not hold every served adapter) pads with a
    # real token too: the last one, when the empty slots come last (their start is one past the end)
    gather.clamp_(max=max(int(sizes.sum()) - 1, 0))
    scatter = (torch.arange(len(sizes))[:, None] * m + j[None, :])[j[None, :] < sizes[:, None]]
    return gather.to(device), scatter.to(device), m


def stacked_delta(x: torch.Tensor, a: torch.Tensor, b: torch.Tensor, counts: Sequence[int], width: int,
                  scales: Sequence[float], kernel: str = AUTO, index=False) -> torch.Tensor:
    """``[N, out]``: the generation kernel on stacked weights (module docstring).

    ``x``: ``[N, in]``, the tokens of ``counts[s]`` rows of ``width`` tokens each for slot ``s``, in slot
    order (``N = sum(counts) * width``); ``a``: ``[S, r, in]``, ``b``: ``[S, out, r]``; ``scales[s]`` per
    slot. ``index``: :func:`route_index` of these counts when the caller keeps it (the same for every
    layer of a forward). Each slot's block is ``linear(linear(x_s, A_s), B_s) * scale_s``.
    """
    n_slots, out = a.shape[0], b.shape[1]
    if len(counts) != n_slots or len(scales) != n_slots or b.shape[0] != n_slots:
        raise ValueError(f"need one row count and scale per stacked slot: {len(counts)} and {len(scales)} for {n_slots}")
    if sum(counts) * width != x.shape[0]:
        raise ValueError(f"{sum(counts)} rows of {width} tokens are not the {x.shape[0]} tokens given")
    if kernel not in KERNELS:
        raise ValueError(f"kernel must be one of {KERNELS}, got {kernel!r}")
    grouped = kernel == GROUPED or (kernel == AUTO and grouped_kernel_fits(x, a.shape[1], out))
    if kernel == LOOP:
        ends = list(itertools.accumulate(c * width for c in counts))
        return lora_delta(x, list(a), list(b), ends, scales, LOOP)
    if index is False:
        index = route_index(counts, width, x.device, grouped)
    return _stacked(x, a, b, tuple(scales), index, grouped)


def _stacked(x, a, b, scales: tuple[float, ...], index, grouped: bool) -> torch.Tensor:
    """:func:`stacked_delta` after its checks (the hot path of every LoRA layer of a decode step)."""
    if grouped:
        return grouped_delta(x, a, b, index, scales)
    n_slots = a.shape[0]
    m = x.shape[0] // n_slots if index is None else index[2]
    h = torch.bmm((x if index is None else x.index_select(0, index[0])).view(n_slots, m, x.shape[1]),
                  a.transpose(1, 2))
    d = torch.bmm(h, b.transpose(1, 2))  # the loop's order: (x A^T) B^T, then the scale
    if len(set(scales)) == 1:
        d.mul_(scales[0])
    else:
        d.mul_(torch.tensor(scales, dtype=d.dtype, device=d.device)[:, None, None])
    d = d.view(-1, d.shape[-1])
    return d if index is None else d.index_select(0, index[1])


@dataclass
class Serving:
    """The slots of one ``generate`` call: the adapters served (stack order) and, per layer, their
    stacked weights ``(A [S, r, in], B [S, out, r], scales)``; the route of the current forward."""

    adapters: tuple[str, ...]
    stacks: dict[int, tuple[torch.Tensor, torch.Tensor, tuple[float, ...]]]
    counts: tuple[int, ...] = ()  # rows of each served slot in the current forward (grouped, in slot order)
    base_rows: int = 0  # rows of the bare base, after every adapter's rows
    base_name: str | None = None  # a row name that means the bare base, besides None (peft's "__base__")
    row_names: tuple = ()  # the rows the route was computed from
    rows: int = 0  # every row of the current forward
    lora_rows: int = 0  # the rows of served adapters (the first ones)
    indices: dict = None  # tokens per row -> (grouped kernel?, route_index): for every layer of a forward

    def route(self, row_adapters: Sequence[str | None]) -> None:
        key = tuple(row_adapters)
        if key == self.row_names:
            return
        slot = {name: s for s, name in enumerate(self.adapters)}
        counts = [0] * len(self.adapters)
        last, base = -1, 0
        for name in key:
            if name is None or name == self.base_name:
                base += 1
                continue
            if name not in slot:
                raise ValueError(f"adapter {name!r} is not served in this generate call (served: {list(self.adapters)})")
            s = slot[name]
            if s < last or base:
                raise ValueError("rows must be grouped by adapter in the served order, base rows last")
            last = s
            counts[s] += 1
        self.counts, self.base_rows, self.row_names = tuple(counts), base, key
        self.rows, self.lora_rows, self.indices = len(key), sum(counts), {}


class MultiLoRA:
    """The multi-adapter forward on every LoRA layer of a peft model (see the module docstring).

    ``install(model)`` wraps each ``peft.tuners.lora.Linear``'s forward once. Training: ``set(layout)``
    makes the next forwards fused (rows grouped as ``layout`` says), ``clear()`` gives the layers back to
    peft. Generation: ``with serving(adapters):`` and ``route(row_adapters)`` before each forward.
    ``kernel``: ``auto`` | ``grouped_mm`` | ``loop`` (tests force one to compare them; ``loop`` makes
    generation loop over the slots too).
    """

    def __init__(self, kernel: str = AUTO) -> None:
        if kernel not in KERNELS:
            raise ValueError(f"kernel must be one of {KERNELS}, got {kernel!r}")
        self.kernel = kernel
        self.layout: SlotLayout | None = None
        self.serve: Serving | None = None
        self._kept = None  # ((adapters, weight versions), stacks) of the last serving
        self._buffers: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}  # per layer: where stacks are written
        self.layers: list[torch.nn.Module] = []

    def install(self, model: torch.nn.Module) -> None:
        from peft.tuners.lora import Linear as LoraLinear

        seen = {id(m) for m in self.layers}
        for module in model.modules():
            if isinstance(module, LoraLinear) and id(module) not in seen:
                module.forward = self._forward_of(module, module.forward)
                self.layers.append(module)

    def set(self, layout: SlotLayout) -> None:
        self.layout = layout

    def clear(self) -> None:
        self.layout = None

    @contextmanager
    def serving(self, adapters: Sequence[str], base_name: str | None = None):
        """Generation with ``adapters``: each LoRA layer's weights of them stacked once (kept for the next
        call with the same adapters while none of their weights changed: ``forget()`` drops them);
        fused training layouts are cleared first. ``base_name``: a row name meaning the bare base."""
        self.layout = None
        adapters = tuple(adapters)
        weights = self._weight_versions(adapters)
        if self._kept is None or self._kept[0] != (adapters, weights):
            self._kept = None
            with torch.no_grad():
                stacks = {id(layer): self._stack(layer, adapters) for layer in self.layers} if adapters else {}
            self._kept = ((adapters, weights), stacks)
        self.serve = Serving(adapters, self._kept[1], base_name=base_name)
        try:
            yield self.serve
        finally:
            self.serve = None

    def forget(self) -> None:
        """Drop the stacked weights kept from the last ``serving`` and their buffers (a training pass
        calls this: they would hold memory beside its activations)."""
        self._kept = None
        self._buffers = {}

    def _stack(self, layer, adapters: Sequence[str]) -> tuple[torch.Tensor, torch.Tensor, tuple[float, ...]]:
        """One layer's ``(A [S, r, in], B [S, out, r], scales)`` of ``adapters``: copies (the live weights
        do not change within a ``generate`` call) into buffers kept until ``forget()``, so that a call
        with other adapters writes into memory already mapped (fresh allocations of this size cost page
        faults: 0.9 s a call for 8 adapters of SmolLM2-135M on a loaded CPU, measured). An adapter
        without this module gets zeros (no LoRA term)."""
        if layer.merged or layer.disable_adapters:
            raise RuntimeError("mixed-adapter generation needs unmerged, enabled LoRA layers")
        ref = next(iter(layer.lora_A.values())).weight
        out = layer.base_layer.out_features
        a = [layer.lora_A[n].weight if n in layer.lora_A else ref.new_zeros(ref.shape) for n in adapters]
        b = [layer.lora_B[n].weight if n in layer.lora_B else ref.new_zeros(out, ref.shape[0]) for n in adapters]
        n = len(adapters)
        bufs = self._buffers.get(id(layer))
        if bufs is None or bufs[0].shape[0] < n or bufs[0].shape[1:] != ref.shape or bufs[0].dtype != ref.dtype \
                or bufs[0].device != ref.device:
            bufs = self._buffers[id(layer)] = (ref.new_empty(n, *ref.shape), ref.new_empty(n, out, ref.shape[0]))
        a_st, b_st = bufs[0][:n], bufs[1][:n]
        torch.stack(a, out=a_st)
        torch.stack(b, out=b_st)
        return a_st, b_st, tuple(float(layer.scaling.get(name, 0.0)) for name in adapters)

    def _weight_versions(self, adapters: tuple[str, ...]) -> tuple:
        """Where every served weight lives and how often it was written in place (torch's version
        counter: an optimizer step, ``copy_``): equal tuples mean the kept stacks are current."""
        out = []
        for layer in self.layers:
            for n in adapters:
                for w in (layer.lora_A[n].weight, layer.lora_B[n].weight) if n in layer.lora_A else ():
                    out.append((w.data_ptr(), w._version))
        return tuple(out)

    def route(self, row_adapters: Sequence[str | None]) -> None:
        """The slot of every row of the next forward: rows grouped by adapter in the served order, rows
        of the bare base (``None``) last. The same rows again cost one comparison."""
        if self.serve is None:
            raise RuntimeError("route() outside serving()")
        self.serve.route(row_adapters)

    def _served(self, layer, x: torch.Tensor, *args, **kwargs) -> torch.Tensor:
        serve = self.serve
        result = layer.base_layer(x, *args, **kwargs)
        if not serve.lora_rows:
            return result
        a, b, scales = serve.stacks[id(layer)]
        flat = x.reshape(-1, x.shape[-1])
        if flat.dtype != a.dtype:
            flat = flat.to(a.dtype)
        width = flat.shape[0] // serve.rows
        n = serve.lora_rows * width
        how = serve.indices.get(width)
        if how is None:  # once per forward (every layer of it has the same rows)
            grouped = self.kernel == GROUPED or (self.kernel == AUTO and grouped_kernel_fits(flat, a.shape[1], b.shape[1]))
            index = None if self.kernel == LOOP else route_index(serve.counts, width, flat.device, grouped)
            how = serve.indices[width] = (grouped, index)
        grouped, index = how
        if self.kernel == LOOP:
            delta = stacked_delta(flat[:n], a, b, serve.counts, width, scales, LOOP)
        else:
            delta = _stacked(flat[:n] if n < flat.shape[0] else flat, a, b, scales, index, grouped)
        out = result.view(-1, result.shape[-1])
        if n < out.shape[0]:
            out = out[:n]
        out.add_(delta if delta.dtype == out.dtype else delta.to(out.dtype))
        return result

    def _forward_of(self, layer, peft_forward):
        def forward(x: torch.Tensor, *args, **kwargs):
            if self.serve is not None:
                return self._served(layer, x, *args, **kwargs)
            layout = self.layout
            if layout is None:
                return peft_forward(x, *args, **kwargs)
            if layer.merged or layer.disable_adapters:
                raise RuntimeError("a fused pass needs unmerged, enabled LoRA layers")
            result = layer.base_layer(x, *args, **kwargs)
            a = [layer.lora_A[s].weight for s in layout.slots]
            b = [layer.lora_B[s].weight for s in layout.slots]
            flat = x.reshape(-1, x.shape[-1]).to(a[0].dtype)
            delta = lora_delta(flat, a, b, layout.token_ends(flat.shape[0]),
                               [float(layer.scaling[s]) for s in layout.slots], self.kernel)
            return (result + delta.view(*result.shape[:-1], delta.shape[-1])).to(result.dtype)

        return forward


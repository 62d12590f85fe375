"""Multi-adapter LoRA layers: one forward pass in which every row uses its own member's adapter.

A fused training pass (``rl.update_strategy: fused``) sends the sequences of all the members a rank
trains through shared micro-batches. Each LoRA layer then computes ``base(x) + scale_s * (x A_s^T) B_s^T``
where ``s`` is the *slot* (member adapter) of the row the token belongs to. Rows come grouped by slot
(:class:`SlotLayout`: the adapter of each slot and how many rows it has, in order), so the tokens of a
slot are one contiguous block of the flattened ``[rows x width, in]`` input and the LoRA term is a
*grouped* matrix product over those blocks:

- on CUDA in bf16 (or fp16), with every dimension a multiple of 8 (16-byte rows), it is
  ``torch.nn.functional.grouped_mm`` (``torch._grouped_mm`` in the releases that only have that name):
  one kernel for all slots, the stacked ``A^T [S, in, r]`` and ``B^T [S, r, out]`` read once;
- everywhere else (CPU, float32, odd ranks) a loop over the slots' blocks with two plain matmuls each,
  in exactly the order peft computes one adapter (``lora_B(lora_A(x)) * scaling``).

Gradients flow into each slot's own ``lora_A``/``lora_B`` parameters (the live peft parameters: the
optimizer, the float32 masters and the engine's publishing see nothing new). A row's output depends on
its own slot's weights only, so each adapter's gradient is the gradient of its own rows' loss.

Why not peft's own mixed batch (``adapter_names=...``): peft raises ``ValueError("Cannot pass
`adapter_names` when the model is in training mode.")`` (peft 0.18-0.21, ``LoraModel._enable_peft_forward_hooks``),
and its inference path gathers each adapter's rows with boolean masks and scatters them back, one
small matmul pair per adapter, with no grouped kernel. The same design as SkyRL's ``MultiLoRALinear``
(per-token adapter indices, one grouped product), applied to the layers peft already owns.

:class:`MultiLoRA` installs itself once on a peft model's LoRA layers: while a layout is set, the
layers run the grouped forward; without one they are peft's own. The layout of the last fused pass
stays set until :meth:`MultiLoRA.clear`, so that layers recomputed by gradient checkpointing during
backward see the same rows as in the forward.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
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
        # A^T and B^T as column-major [S, K, M] views of the stacked row-major weights: the layout
        # the grouped kernels read without a copy
        a_t = torch.stack(list(a)).transpose(-2, -1)
        b_t = torch.stack(list(b)).transpose(-2, -1)
        h = grouped_mm()(x, a_t, offs=offs)
        d = grouped_mm()(h, b_t, offs=offs)
        if len(set(scales)) == 1:
            return d * scales[0]
        per_token = torch.repeat_interleave(torch.tensor(list(scales), dtype=d.dtype, device=d.device),
                                            torch.diff(offs, prepend=offs.new_zeros(1)).long())
        return d * per_token[:, None]
    parts, lo = [], 0
    for a_s, b_s, hi, scale in zip(a, b, ends, scales):
        if hi > lo:  # peft's order: lora_B(lora_A(x)) * scaling
            parts.append(torch.nn.functional.linear(torch.nn.functional.linear(x[lo:hi], a_s), b_s) * scale)
        lo = hi
    if not parts:
        return x.new_zeros(x.shape[0], out)
    return torch.cat(parts) if len(parts) > 1 else parts[0]


class MultiLoRA:
    """The fused forward on every LoRA layer of a peft model (see the module docstring).

    ``install(model)`` wraps each ``peft.tuners.lora.Linear``'s forward once; ``set(layout)`` makes the
    next forwards fused (rows grouped as ``layout`` says), ``clear()`` gives the layers back to peft.
    ``kernel``: ``auto`` | ``grouped_mm`` | ``loop`` (tests force one to compare them).
    """

    def __init__(self, kernel: str = AUTO) -> None:
        if kernel not in KERNELS:
            raise ValueError(f"kernel must be one of {KERNELS}, got {kernel!r}")
        self.kernel = kernel
        self.layout: SlotLayout | None = None
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

    def _forward_of(self, layer, peft_forward):
        def forward(x: torch.Tensor, *args, **kwargs):
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

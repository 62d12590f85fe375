"""Model FLOPs of one LoRA training step, and its MFU (model FLOPs utilization) on a known GPU.

The count, per sequence of ``P`` prompt and ``C`` completion tokens (``T = P + C``) on a decoder of
``L`` layers, hidden size ``d``, query width ``q = heads x head_dim``, vocabulary ``V``, with LoRA of
rank ``r`` on projections ``j`` of shape ``in_j -> out_j`` (``N_lin = sum_j in_j out_j`` per layer):

- forward:  ``2 T L N_lin`` (the frozen projections) + ``2 T L sum_j r (in_j + out_j)`` (LoRA)
  + ``2 L q T^2`` (causal attention: ``Q K^T`` and ``softmax(.) V``, each ``2 q`` FLOPs per query-key
  pair, over the ``T^2 / 2`` pairs of a causal mask) + ``2 C d V`` (the vocabulary projection, which the
  trainer runs on the completion tokens only);
- backward: the base is frozen, so its projections and the vocabulary projection need only the
  gradient of their input (``2 T L N_lin`` and ``2 C d V``: one product each, not two), attention
  twice its forward (``4 L q T^2``: gradients of Q, K and V), LoRA both its input and weight gradients
  (``4 T L sum_j r (in_j + out_j)``).

Total: ``4 T L N_lin + 6 T L sum_j r (in_j + out_j) + 6 L q T^2 + 4 C d V``. Gradient checkpointing's
second forward is not counted (MFU counts the model's FLOPs, not the hardware's); nor are norms,
rotary embeddings, softmax and the optimizer (elementwise, under 1%). ``MFU = FLOPs / (seconds x
peak)``, with the peak of the card's dense bf16 tensor cores (NVIDIA's datasheets); on a card not in
the table, or on a CPU, the MFU is not given (the FLOPs and FLOP/s are).
"""

from __future__ import annotations

from collections.abc import Sequence

# dense bf16 tensor-core peak, FLOP/s (NVIDIA datasheets; the SXM parts; "with sparsity" figures halved)
PEAK_BF16 = {
    "H200": 989.4e12,
    "H100 SXM": 989.4e12,
    "H100 80GB HBM3": 989.4e12,
    "H100 PCIe": 756.5e12,
    "H100 NVL": 835.5e12,
    "A100": 312e12,
    "L40S": 362.05e12,
}


def lora_training_flops(shape, rank: int, targets: Sequence[str], sequences: Sequence[tuple[int, int]]) -> float:
    """Model FLOPs of one update over ``sequences`` (``(prompt, completion)`` tokens each) on a base of
    ``shape`` (``plan.shapes.ModelShape``) with LoRA of ``rank`` on ``targets`` (module docstring)."""
    dims = shape.projection_dims()
    n_lin = sum(i * o for i, o in dims.values())
    n_lora = sum(rank * (i + o) for name, (i, o) in dims.items() if name in targets)
    total = 0.0
    for prompt, completion in sequences:
        t = prompt + completion
        total += (4 * t * shape.layers * n_lin + 6 * t * shape.layers * n_lora
                  + 6 * shape.layers * shape.q_dim * t * t + 4 * completion * shape.hidden * shape.vocab)
    return float(total)


def peak_flops(gpu_name: str | None, dtype: str) -> float | None:
    """The dense bf16/fp16 peak of a GPU named like ``NVIDIA H200`` (None: not in the table, or float32)."""
    if not gpu_name or dtype not in ("bfloat16", "float16"):
        return None
    name = gpu_name.replace("NVIDIA", "").strip()
    for key in sorted(PEAK_BF16, key=len, reverse=True):  # the most specific name first
        if key in name or name in key:
            return PEAK_BF16[key]
    return None


def mfu(flops: float, seconds: float, peak: float | None) -> float | None:
    return flops / seconds / peak if peak and seconds > 0 else None

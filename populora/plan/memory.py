"""The per-GPU memory plan of a run: pure arithmetic over a :class:`PlanInputs` record.

Two phases share the device, and the plan is their maximum:

- **generation**: the trainer's frozen base + every adapter with its AdamW state, and the
  generation engine awake (vLLM: its whole ``gpu_memory_utilization`` share, holding its own copy
  of the base, the LoRA slots and the KV cache; HF: the KV cache of one decode micro-batch);
- **training** (one member's update, one micro-batch at a time): the same resident state, the
  engine's share (only a residue when it sleeps between phases), the gradients of the member
  being trained, the layer activations of one micro-batch and the log-prob tail.

Where each number comes from:

- weights, adapters, AdamW, KV cache: exact sizes from the model's shape (``shapes.py``);
- activations and the log-prob tail: formulas fitted to the bytes autograd saves for backward,
  measured with ``torch.autograd.graph.saved_tensors_hooks`` on small Qwen2 shapes on CPU in
  float32 and bfloat16 (``tests/test_memory_plan.py`` re-measures them, within 15%), so the 7B
  figures extrapolate a tested formula; the backward working set on top is an estimate (ours);
- CUDA contexts, vLLM's non-KV overhead and its sleep residue: estimates (ours, not measured
  here: no GPU on the development machines), named as such below.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from populora.plan.shapes import PROJECTIONS, ModelShape

GIB = float(1 << 30)
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}

# -- estimates (ours), not measured here ----------------------------------------------------------
CUDA_CONTEXT_GIB = 0.5  # one CUDA context + cuBLAS workspaces per process (typical on H100, CUDA 12)
VLLM_SLEEP_RESIDUE_GIB = 1.0  # what a level-1 sleeping engine keeps: CUDA graph pools, buffers
VLLM_CUDA_GRAPHS_GIB = 0.5  # captured CUDA graphs (none with enforce_eager)
VLLM_BATCHED_TOKENS = 16384  # tokens of vLLM's profiling forward (its max_num_batched_tokens)
VLLM_MAX_SEQS = 1024  # sequences whose sampler logits vLLM sizes for (its max_num_seqs)
DEFAULT_MIN_HEADROOM = 0.10  # fraction of the GPU left free: allocator fragmentation, unmodelled buffers


@dataclass(frozen=True)
class PlanInputs:
    """Everything the plan depends on; built from a run config by ``plan.inputs.plan_inputs``."""

    shape: ModelShape
    engine: str = "vllm"  # hf | vllm
    device: str = "cuda"
    dtype: str = "bfloat16"  # base weights and activations
    adapter_dtype: str = "bfloat16"  # LoRA compute dtype (float32 masters are always kept)
    adapters: int = 8  # resident adapters (population members)
    lora_rank: int = 32
    lora_targets: tuple[str, ...] = PROJECTIONS
    # the trainer's token budget per pass, in sequences of prompt_tokens + new_tokens: passes are
    # packed up to micro_batch x (prompt + completion) padded tokens and micro_batch x new_tokens
    # completion tokens (rl/packing.py), so these figures bound every pass
    micro_batch: int = 8
    # a typical teacher prompt (compact templates, K=6 seed references: 992-994 tokens measured with
    # the SmolLM2 tokenizer); plan_inputs plans run configs at policy.max_prompt_tokens instead
    prompt_tokens: int = 1024
    new_tokens: int = 4096  # the longest completion
    gradient_checkpointing: bool = False
    logits_chunk: int = 512  # tokens per chunk of the log-prob tail
    gen_batch: int = 256  # HF engine: rows decoded together
    vllm_memory_share: float = 0.45
    vllm_max_loras: int = 0  # 0 = one slot per adapter
    vllm_sleep: bool = False
    vllm_max_model_len: int = 0  # 0 = prompt_tokens + new_tokens
    vllm_enforce_eager: bool = False

    def with_(self, **changes) -> PlanInputs:
        return dataclasses.replace(self, **changes)

    @property
    def d(self) -> int:
        return DTYPE_BYTES[self.dtype]

    @property
    def ad(self) -> int:
        return DTYPE_BYTES[self.adapter_dtype]

    @property
    def max_model_len(self) -> int:
        return self.vllm_max_model_len or self.prompt_tokens + self.new_tokens


@dataclass
class Plan:
    """The result: items in GiB, the two phases, the verdict and what would change it."""

    inputs: PlanInputs
    gpu_gib: float
    min_headroom: float
    items: dict[str, float]  # name -> GiB (the keys of ITEMS)
    phases: dict[str, float]  # generation / training -> GiB
    details: dict[str, float]  # sub-figures: kv tokens, engine parts, per-token bytes
    problems: list[str] = field(default_factory=list)
    fixes: list[dict] = field(default_factory=list)  # PlanInputs changes, see suggest_fixes

    @property
    def peak_gib(self) -> float:
        return max(self.phases.values())

    @property
    def headroom_gib(self) -> float:
        return self.gpu_gib - self.peak_gib

    @property
    def fits(self) -> bool:
        return not self.problems

    def to_json(self) -> dict:
        return {
            "fits": self.fits, "gpu_gib": self.gpu_gib, "headroom_gib": round(self.headroom_gib, 3),
            "min_headroom_gib": round(self.min_headroom * self.gpu_gib, 3), "peak_gib": round(self.peak_gib, 3),
            "items": {k: round(v, 3) for k, v in self.items.items()},
            "phases": {k: round(v, 3) for k, v in self.phases.items()},
            "details": {k: round(v, 3) for k, v in self.details.items()},
            "problems": list(self.problems), "fixes": list(self.fixes),
            "inputs": {k: v for k, v in dataclasses.asdict(self.inputs).items() if k != "shape"},
            "model": dataclasses.asdict(self.inputs.shape),
        }


# -- sizes ---------------------------------------------------------------------------------------
def base_weight_bytes(p: PlanInputs) -> float:
    return p.shape.n_params() * p.d


def adapter_params(shape: ModelShape, rank: int, targets) -> int:
    """LoRA parameters of one adapter: ``rank * (in + out)`` per targeted projection and layer."""
    dims = shape.projection_dims()
    return rank * shape.layers * sum(a + b for name, (a, b) in dims.items() if name in set(targets))


def adapters_optimizer_bytes(p: PlanInputs) -> float:
    """Every resident adapter: float32 weights (the masters) + AdamW's two float32 moments, and the
    live copy in the compute dtype when that is not float32."""
    per_param = 4 + 8 + (p.ad if p.ad != 4 else 0)
    return p.adapters * adapter_params(p.shape, p.lora_rank, p.lora_targets) * per_param


def trainer_bytes(p: PlanInputs) -> float:
    """The member being updated: its gradients (compute dtype, plus float32 for the masters) and
    AdamW's temporaries (ours: the foreach implementation holds about two float32 copies)."""
    n = adapter_params(p.shape, p.lora_rank, p.lora_targets)
    return n * (p.ad + (4 if p.ad != 4 else 0) + 8)


def kv_bytes_per_token(p: PlanInputs) -> float:
    return 2 * p.shape.layers * p.shape.kv_dim * p.d


# -- activations (fitted to saved-tensor bytes; see the module docstring) -------------------------
def layer_bytes_per_token(p: PlanInputs) -> float:
    """Bytes one decoder layer saves for backward per token, without checkpointing.

    Terms (``d`` the base dtype, ``h``/``q``/``kv``/``i`` hidden, query, key-value and MLP widths):
    projection inputs, attention q/k/v and output, MLP gate/up/activation/product in ``d``:
    ``d (2h + 2q + 2kv + 4i)``; the two RMSNorms' float32 inputs and inverse RMS, and the
    attention's log-sum-exp per head: ``4 (2h + heads + 2)``; each LoRA layer's rank-r
    intermediate: ``ad * r`` per targeted projection. With the LoRA compute dtype wider than the
    base, each LoRA layer also keeps a float32 copy of its input (upper bound: measured 10-15%
    lower for the seven projections).
    """
    s = p.shape
    targeted = [n for n in PROJECTIONS if n in set(p.lora_targets)]
    b = p.d * (2 * s.hidden + 2 * s.q_dim + 2 * s.kv_dim + 4 * s.intermediate)
    b += 4 * (2 * s.hidden + s.heads + 2)
    b += p.ad * p.lora_rank * len(targeted)
    if p.ad > p.d:
        dims = s.projection_dims()
        b += p.ad * sum(dims[n][0] for n in targeted)
    return b


def checkpointed_layer_bytes_per_token(p: PlanInputs) -> float:
    """With gradient checkpointing a layer keeps only its input (the residual stream)."""
    return p.d * p.shape.hidden


def saved_activation_bytes(p: PlanInputs, rows: int, width: int) -> float:
    """Bytes the decoder saves for backward on ``rows`` sequences padded to ``width`` tokens.

    Without checkpointing: every layer's activations and the rotary tables (cos and sin per
    position). With it: every layer's input, and the final RMSNorm's float32 input and inverse
    RMS (without checkpointing the last layer's saved tensors already hold those).
    """
    tokens = rows * width
    if p.gradient_checkpointing:
        return tokens * (p.shape.layers * checkpointed_layer_bytes_per_token(p) + 4 * (p.shape.hidden + 1))
    return tokens * p.shape.layers * layer_bytes_per_token(p) + width * 2 * p.shape.head_dim * p.d


def backward_working_bytes(p: PlanInputs, tokens: int) -> float:
    """What a decoder layer's backward adds on top of the saved bytes: the gradients alive inside it
    (a quarter of a layer's activations) and, with checkpointing, the recomputed activations of
    that layer. Fitted to the peak of live CPU allocations (``tests/test_memory_plan.py``)."""
    return tokens * layer_bytes_per_token(p) * (1.25 if p.gradient_checkpointing else 0.25)


def activation_bytes(p: PlanInputs) -> float:
    """Layer activations of one training micro-batch at their peak (saved + backward working set)."""
    width = p.prompt_tokens + p.new_tokens
    return saved_activation_bytes(p, p.micro_batch, width) + backward_working_bytes(p, p.micro_batch * width)


def saved_logits_bytes(p: PlanInputs, completion_tokens: int) -> float:
    """Bytes the chunked log-prob tail saves for backward: per completion token the final hidden
    state (``d h``), its log-sum-exp and entropy (float32), its target and the three indices that
    place it (int64)."""
    return completion_tokens * (p.d * p.shape.hidden + 4 + 4 + 8 + 3 * 8)


def logits_transient_bytes(p: PlanInputs) -> float:
    """One chunk's ``[chunk, V]`` buffers alive at once: two float32 ones (logits and softmax in the
    forward; logits and gradient in the backward), plus the projection's output in a 16-bit base
    dtype before it is cast to float32."""
    chunk = min(p.logits_chunk, p.micro_batch * p.new_tokens)
    return chunk * p.shape.vocab * (8 + (p.d if p.d < 4 else 0))


def logits_bytes(p: PlanInputs) -> float:
    """The log-prob tail of one micro-batch: saved bytes + one chunk's transient."""
    return saved_logits_bytes(p, p.micro_batch * p.new_tokens) + logits_transient_bytes(p)


def unchunked_logits_bytes(p: PlanInputs) -> float:
    """For comparison: ``log_softmax`` over the whole ``[B, T, V]`` float32 logits keeps ~3 copies."""
    return 3 * p.micro_batch * p.new_tokens * p.shape.vocab * 4


# -- engines -------------------------------------------------------------------------------------
def vllm_parts(p: PlanInputs, gpu_gib: float) -> dict[str, float]:
    """vLLM's share split into weights, LoRA slots, non-KV overhead and KV cache (bytes)."""
    share = p.vllm_memory_share * gpu_gib * GIB
    slots = (p.vllm_max_loras or p.adapters) * adapter_params(p.shape, p.lora_rank, p.lora_targets) * p.d
    s = p.shape
    overhead = VLLM_BATCHED_TOKENS * (2 * s.intermediate + 4 * s.hidden) * p.d + VLLM_MAX_SEQS * s.vocab * 4 * 2
    overhead += 0 if p.vllm_enforce_eager else VLLM_CUDA_GRAPHS_GIB * GIB
    weights = base_weight_bytes(p)
    return {"share": share, "weights": weights, "lora_slots": slots, "overhead": overhead,
            "kv_cache": share - weights - slots - overhead}


def hf_generation_bytes(p: PlanInputs) -> float:
    """HF engine: KV cache of one decode micro-batch at full length + its prefill working set."""
    rows, s = p.gen_batch, p.shape
    kv = rows * (p.prompt_tokens + p.new_tokens) * kv_bytes_per_token(p)
    prefill = rows * p.prompt_tokens * (2 * s.intermediate + 4 * s.hidden) * p.d + rows * s.vocab * 4 * 3
    return kv + prefill


# -- the plan ------------------------------------------------------------------------------------
ITEMS = ("base_weights", "engine", "trainer", "adapters_optimizer", "activations", "logits", "cuda_context")


def plan(p: PlanInputs, gpu_gib: float = 80.0, min_headroom: float = DEFAULT_MIN_HEADROOM, *, with_fixes: bool = True) -> Plan:
    """The memory plan of ``p`` on a device of ``gpu_gib`` GiB (for CPU runs: the RAM budget)."""
    on_gpu = p.device.startswith("cuda")
    vllm = p.engine == "vllm"
    details: dict[str, float] = {}
    if vllm:
        parts = vllm_parts(p, gpu_gib)
        engine_awake = parts["share"]
        engine_training = VLLM_SLEEP_RESIDUE_GIB * GIB if p.vllm_sleep else engine_awake
        kv_tokens = max(0.0, parts["kv_cache"]) / kv_bytes_per_token(p)
        details.update({f"engine_{k}_gib": v / GIB for k, v in parts.items()})
        details["kv_cache_tokens"] = kv_tokens
        details["kv_cache_sequences"] = kv_tokens / (p.prompt_tokens + p.new_tokens)
    else:
        engine_awake, engine_training = hf_generation_bytes(p), 0.0
        details["kv_cache_tokens"] = p.gen_batch * (p.prompt_tokens + p.new_tokens)
    tokens = p.micro_batch * (p.prompt_tokens + p.new_tokens)
    details["train_tokens_per_micro_batch"] = tokens
    details["layer_kib_per_token"] = layer_bytes_per_token(p) / 1024
    details["activations_without_checkpointing_gib"] = activation_bytes(p.with_(gradient_checkpointing=False)) / GIB
    details["activations_with_checkpointing_gib"] = activation_bytes(p.with_(gradient_checkpointing=True)) / GIB
    details["logits_unchunked_gib"] = unchunked_logits_bytes(p) / GIB
    contexts = (2 if vllm else 1) * CUDA_CONTEXT_GIB * GIB if on_gpu else 0.0
    items = {
        "base_weights": base_weight_bytes(p), "engine": engine_awake, "trainer": trainer_bytes(p),
        "adapters_optimizer": adapters_optimizer_bytes(p), "activations": activation_bytes(p),
        "logits": logits_bytes(p), "cuda_context": contexts,
    }
    resident = items["base_weights"] + items["adapters_optimizer"] + contexts
    # the tail's backward (its chunk transient) runs before the layers' backward (their working
    # set): only the larger of the two is ever alive
    overlap = min(logits_transient_bytes(p), backward_working_bytes(p, tokens))
    phases = {
        "generation": resident + engine_awake,
        "training": resident + engine_training + items["trainer"] + items["activations"] + items["logits"] - overlap,
    }
    result = Plan(p, gpu_gib, min_headroom, {k: v / GIB for k, v in items.items()},
                  {k: v / GIB for k, v in phases.items()}, details)
    if result.headroom_gib < min_headroom * gpu_gib:
        worst = max(phases, key=phases.get)
        result.problems.append(
            f"{worst} phase needs {result.peak_gib:.1f} GiB of {gpu_gib:g}: headroom {result.headroom_gib:.1f} GiB "
            f"< {min_headroom:.0%} ({min_headroom * gpu_gib:.1f} GiB)"
        )
    if vllm and details["kv_cache_tokens"] < p.max_model_len:
        result.problems.append(
            f"vLLM's KV cache holds {details['kv_cache_tokens']:.0f} tokens < max_model_len {p.max_model_len}: "
            "the engine cannot start"
        )
    if with_fixes and result.problems:
        result.fixes = suggest_fixes(p, gpu_gib, min_headroom)
    return result


# -- what would make it fit -----------------------------------------------------------------------
KNOBS = ("gradient_checkpointing", "vllm_sleep", "adapter_dtype", "micro_batch", "vllm_memory_share", "logits_chunk")


def knob_values(p: PlanInputs, knob: str) -> list:
    """Values of ``knob`` other than ``p``'s, least change first."""
    if knob == "gradient_checkpointing":
        return [] if p.gradient_checkpointing else [True]
    if knob == "vllm_sleep":
        return [True] if p.engine == "vllm" and not p.vllm_sleep else []
    if knob == "adapter_dtype":
        return [p.dtype] if p.ad > p.d else []
    if knob == "micro_batch":
        return list(range(p.micro_batch - 1, 0, -1))
    if knob == "vllm_memory_share":
        if p.engine != "vllm":
            return []
        shares = [round(0.05 * k, 2) for k in range(1, 20)]
        return sorted((s for s in shares if abs(s - p.vllm_memory_share) > 1e-9), key=lambda s: abs(s - p.vllm_memory_share))
    if knob == "logits_chunk":
        return [c for c in (256, 128, 64) if c < p.logits_chunk]
    raise ValueError(f"unknown knob {knob!r}")


def suggest_fixes(p: PlanInputs, gpu_gib: float, min_headroom: float = DEFAULT_MIN_HEADROOM) -> list[dict]:
    """Changes of ``p`` (``{field: value}``) that make the plan fit, least change first.

    Every knob that fits on its own, with its least invasive value (largest micro-batch, nearest
    vLLM share); if none does alone, every pair of one switch (checkpointing, sleep mode, LoRA
    compute dtype) with the least change of another knob; failing that, all switches together
    with the least change of the micro-batch and the vLLM share. Empty when nothing within these
    knobs fits (a smaller population per GPU or shorter completions would be needed).
    """

    def fits(q: PlanInputs) -> bool:
        return plan(q, gpu_gib, min_headroom, with_fixes=False).fits

    def least(q: PlanInputs, knob: str, base: dict) -> list[dict]:
        for value in knob_values(q, knob):
            if fits(q.with_(**{knob: value})):
                return [{**base, knob: value}]
        return []

    single = [fix for knob in KNOBS for fix in least(p, knob, {})]
    if single:
        return single
    switches = ("gradient_checkpointing", "vllm_sleep", "adapter_dtype")
    pairs: list[dict] = []
    for first in switches:
        for value in knob_values(p, first):
            q = p.with_(**{first: value})
            for knob in KNOBS[KNOBS.index(first) + 1 :]:
                pairs += least(q, knob, {first: value})
    if pairs:
        return pairs
    combo: dict = {}
    q = p
    for knob in switches:
        values = knob_values(q, knob)
        if values:
            combo[knob], q = values[0], q.with_(**{knob: values[0]})
    if fits(q):
        return [combo]
    for knob in ("micro_batch", "vllm_memory_share", "logits_chunk"):
        if found := least(q, knob, combo):
            return found
    for mb in knob_values(q, "micro_batch"):
        if found := least(q.with_(micro_batch=mb), "vllm_memory_share", {**combo, "micro_batch": mb}):
            return found
    return []

"""The per-GPU memory plan of a run: pure arithmetic over a :class:`PlanInputs` record.

Two phases share the device, and the plan is their maximum:

- **generation**: the trainer's frozen base + every adapter with its AdamW state, and the
  generation engine awake (vLLM: its whole ``gpu_memory_utilization`` share, holding its own copy
  of the base, the LoRA slots and the KV cache; HF: the KV cache of one decode micro-batch);
- **training** (one member's update, one micro-batch at a time): the same resident state, what the
  engine keeps meanwhile (vLLM: its share, or only a residue when it sleeps between phases; HF:
  nothing), the gradients of the member being trained, the layer activations of one micro-batch and
  the log-prob tail.

The engine's figures, sub-figures, problems, table line and knobs come from its class
(``GenerationEngine.plan_memory`` / ``plan_knobs``, ``populora/policy/engine_memory.py``): the
vLLM engine's in ``policy/vllm_memory.py``, the HF engine's in ``policy/hf_engine.py``; an engine that
declares nothing holds no memory of its own ("not modelled" in the table). The fix search turns
run-config keys (``Knob``): the trainer's here, the engine's from its class.

Where each number comes from:

- weights, adapters, AdamW, KV cache: exact sizes from the model's shape (``shapes.py``);
- activations and the log-prob tail: formulas fitted to the bytes autograd saves for backward,
  measured with ``torch.autograd.graph.saved_tensors_hooks`` on small Qwen2 shapes on CPU in
  float32 and bfloat16 (``tests/test_memory_plan.py`` re-measures them, within 15%), so the 7B
  figures extrapolate a tested formula; the backward working set on top is an estimate (ours);
- CUDA contexts (one per process: the trainer's and the engine's own, ``cuda_processes``), vLLM's
  non-KV overhead and its sleep residue: estimates (ours, not measured here: no GPU on the
  development machines), named as such where they are set.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from populora.plan.shapes import PROJECTIONS, ModelShape
from populora.policy.config import PolicyConfig
from populora.policy.engine import GenerationEngine, engine_class
from populora.policy.engine_memory import EngineMemory, Knob

GIB = float(1 << 30)
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}

# -- estimates (ours), not measured here ----------------------------------------------------------
# one CUDA context with the kernels a training step loads, and the library workspaces held outside
# torch's allocator, per process: measured 0.753 and 0.766 GiB by `populora doctor` on an H200 (torch
# 2.11 + CUDA 13.0, driver 580; docs/benchmarks/gpu.md), against the 0.5 assumed before (1.5x)
CUDA_CONTEXT_GIB = 0.77
DEFAULT_MIN_HEADROOM = 0.10  # fraction of the GPU left free: allocator fragmentation, unmodelled buffers


@dataclass(frozen=True)
class PlanInputs:
    """Everything the plan depends on; built from a run config by ``plan.inputs.plan_inputs``.

    ``policy``: the run's ``policy:`` section itself: the engine and its own section, the trainer's
    micro-batch (``train_micro_batch``: passes are packed up to that many sequences of
    ``prompt_tokens + new_tokens`` padded tokens and that many completions, ``rl/packing.py``, so
    these figures bound every pass), checkpointing, the log-prob chunk, the LoRA shape. The other
    fields are what the run derives: the base's shape, the device and dtype ``auto`` resolves to,
    the resident adapters, the prompt and completion tokens of every sequence.
    """

    shape: ModelShape
    policy: PolicyConfig = field(default_factory=PolicyConfig)
    device: str = "cuda"
    dtype: str = "bfloat16"  # base weights and activations
    adapters: int = 8  # resident adapters (population members): every rank holds every member's weights
    # members whose AdamW state this rank holds (the ones it trains, populora.distributed.placement);
    # 0 = all of them (one rank)
    trained: int = 0
    ranks: int = 1  # ranks (GPUs) of the run; the plan is one rank's
    # a typical teacher prompt (compact templates, K=6 seed references: 992-994 tokens measured with
    # the SmolLM2 tokenizer); plan_inputs plans run configs at policy.max_prompt_tokens instead
    prompt_tokens: int = 1024
    new_tokens: int = 4096  # the longest completion
    # members whose gradients one training pass holds at once: 1 updating one member at a time
    # (rl.update_strategy: sequential), the rank's members in a fused pass (rl/fused.py)
    fused_members: int = 1

    def with_(self, **changes) -> PlanInputs:
        """A copy with fields of its own changed (``prompt_tokens=...``)."""
        return dataclasses.replace(self, **changes)

    def with_settings(self, settings: Mapping[str, Any]) -> PlanInputs:
        """A copy with run-config keys of the policy changed (``{"policy.train_micro_batch": 4}``).

        Not validated again: the fix search tries values in range, and a fix it prints is checked
        when a run loads it (a ``PolicyConfig`` check may depend on the machine, e.g. vLLM's sleep
        mode on a CPU-only one, while the plan is for the run's GPU)."""
        policy = self.policy
        for key, value in settings.items():
            head, _, rest = key.partition(".")
            if head != "policy" or not rest:
                raise ValueError(f"{key}: the plan turns policy.* keys only")
            policy = _with_field(policy, rest.split("."), value, key)
        return dataclasses.replace(self, policy=policy)

    @property
    def trained_here(self) -> int:
        """Members whose optimizer state and training this rank holds."""
        return self.trained or self.adapters

    @property
    def engine_class(self) -> type[GenerationEngine]:
        return engine_class(self.policy.engine)

    @property
    def adapter_dtype(self) -> str:
        """The LoRA compute dtype (``policy.adapter_dtype``, ``auto`` = the base's); float32 masters
        are always kept."""
        return self.dtype if self.policy.adapter_dtype == "auto" else self.policy.adapter_dtype

    @property
    def d(self) -> int:
        return DTYPE_BYTES[self.dtype]

    @property
    def ad(self) -> int:
        return DTYPE_BYTES[self.adapter_dtype]

    @property
    def adapter_params(self) -> int:
        """LoRA parameters of one adapter (``adapter_params`` of the policy's LoRA shape)."""
        return adapter_params(self.shape, self.policy.lora.rank, self.policy.lora.target_modules)

    @property
    def base_weight_bytes(self) -> float:
        return base_weight_bytes(self)

    @property
    def kv_bytes_per_token(self) -> float:
        return kv_bytes_per_token(self)


def _with_field(obj, path: list[str], value, key: str):
    """A shallow copy of dataclass ``obj`` with the field at ``path`` set to ``value``."""
    if not dataclasses.is_dataclass(obj) or path[0] not in {f.name for f in dataclasses.fields(obj)}:
        raise ValueError(f"{key}: no such key in the policy section")
    new = copy.copy(obj)
    setattr(new, path[0], value if len(path) == 1 else _with_field(getattr(obj, path[0]), path[1:], value, key))
    return new


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
    fixes: list[dict] = field(default_factory=list)  # {run-config key: value}, see suggest_fixes
    engine: EngineMemory = field(default_factory=EngineMemory)  # the engine's own part, bytes

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
        p = self.inputs
        return {
            "fits": self.fits, "gpu_gib": self.gpu_gib, "headroom_gib": round(self.headroom_gib, 3),
            "min_headroom_gib": round(self.min_headroom * self.gpu_gib, 3), "peak_gib": round(self.peak_gib, 3),
            "items": {k: round(v, 3) for k, v in self.items.items()},
            "phases": {k: round(v, 3) for k, v in self.phases.items()},
            "details": {k: round(v, 3) for k, v in self.details.items()},
            "problems": list(self.problems), "fixes": list(self.fixes),
            "inputs": {"device": p.device, "dtype": p.dtype, "adapter_dtype": p.adapter_dtype, "adapters": p.adapters,
                       "ranks": p.ranks, "trained_per_rank": p.trained_here, "prompt_tokens": p.prompt_tokens,
                       "new_tokens": p.new_tokens, "policy": p.policy.to_dict()},
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
    """Every resident adapter's live weights in the compute dtype; for the members this rank trains, their
    float32 master weights (when the compute dtype is not float32) and AdamW's two float32 moments. The
    masters of the members other ranks train stay in host memory (``HFBackend.keep_masters_on_host``):
    they are read for publishing, evolution and checkpoints, never stepped here."""
    masters = 4 if p.ad != 4 else 0
    return p.adapter_params * (p.adapters * p.ad + p.trained_here * (masters + 8))


def host_masters_bytes(p: PlanInputs) -> float:
    """Host memory of the float32 masters of the members other ranks train (none with float32 LoRA)."""
    return p.adapter_params * 4 * (p.adapters - p.trained_here) if p.ad != 4 else 0.0


def trainer_bytes(p: PlanInputs) -> float:
    """The members being updated: the gradients of every member in the pass (compute dtype; one in a
    sequential update, the rank's members in a fused one), float32 gradients of the masters and AdamW's
    temporaries of the one member stepping (ours: the foreach implementation holds about two float32
    copies). A fused pass also saves each LoRA layer's stacked ``A^T``/``B^T`` of its members for the
    grouped product's backward: every layer's without checkpointing, one layer's at a time with it."""
    n, k = p.adapter_params, max(1, p.fused_members)
    stacks = 0.0
    if k > 1:
        stacks = k * n * p.ad / (p.shape.layers if p.policy.gradient_checkpointing else 1)
    return n * (k * p.ad + (4 if p.ad != 4 else 0) + 8) + stacks


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
    targeted = [n for n in PROJECTIONS if n in set(p.policy.lora.target_modules)]
    b = p.d * (2 * s.hidden + 2 * s.q_dim + 2 * s.kv_dim + 4 * s.intermediate)
    b += 4 * (2 * s.hidden + s.heads + 2)
    b += p.ad * p.policy.lora.rank * len(targeted)
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
    if p.policy.gradient_checkpointing:
        return tokens * (p.shape.layers * checkpointed_layer_bytes_per_token(p) + 4 * (p.shape.hidden + 1))
    return tokens * p.shape.layers * layer_bytes_per_token(p) + width * 2 * p.shape.head_dim * p.d


def backward_working_bytes(p: PlanInputs, tokens: int) -> float:
    """What a decoder layer's backward adds on top of the saved bytes: the gradients alive inside it
    (a quarter of a layer's activations) and, with checkpointing, the recomputed activations of
    that layer. Fitted to the peak of live CPU allocations (``tests/test_memory_plan.py``)."""
    return tokens * layer_bytes_per_token(p) * (1.25 if p.policy.gradient_checkpointing else 0.25)


def activation_bytes(p: PlanInputs) -> float:
    """Layer activations of one training micro-batch at their peak (saved + backward working set)."""
    width, rows = p.prompt_tokens + p.new_tokens, p.policy.train_micro_batch
    return saved_activation_bytes(p, rows, width) + backward_working_bytes(p, rows * width)


def saved_logits_bytes(p: PlanInputs, completion_tokens: int) -> float:
    """Bytes the chunked log-prob tail saves for backward: per completion token the final hidden
    state (``d h``), its log-sum-exp and entropy (float32), its target and the three indices that
    place it (int64)."""
    return completion_tokens * (p.d * p.shape.hidden + 4 + 4 + 8 + 3 * 8)


def logits_transient_bytes(p: PlanInputs) -> float:
    """One chunk's ``[chunk, V]`` buffers alive at once: two float32 ones (logits and softmax in the
    forward; logits and gradient in the backward), plus the projection's output in a 16-bit base
    dtype before it is cast to float32."""
    chunk = min(p.policy.logits_chunk, p.policy.train_micro_batch * p.new_tokens)
    return chunk * p.shape.vocab * (8 + (p.d if p.d < 4 else 0))


def logits_bytes(p: PlanInputs) -> float:
    """The log-prob tail of one micro-batch: saved bytes + one chunk's transient."""
    return saved_logits_bytes(p, p.policy.train_micro_batch * p.new_tokens) + logits_transient_bytes(p)


def unchunked_logits_bytes(p: PlanInputs) -> float:
    """For comparison: ``log_softmax`` over the whole ``[B, T, V]`` float32 logits keeps ~3 copies."""
    return 3 * p.policy.train_micro_batch * p.new_tokens * p.shape.vocab * 4


# -- the plan ------------------------------------------------------------------------------------
ITEMS = ("base_weights", "engine", "trainer", "adapters_optimizer", "activations", "logits", "cuda_context")
CHECKPOINTING = "policy.gradient_checkpointing"


def cuda_contexts(engine) -> int:
    """CUDA contexts on a rank's GPU: the trainer's, and one per process of the engine's own
    (``GenerationEngine.cuda_processes``)."""
    return 1 + engine.cuda_processes


def plan(p: PlanInputs, gpu_gib: float = 80.0, min_headroom: float = DEFAULT_MIN_HEADROOM, *, with_fixes: bool = True) -> Plan:
    """The memory plan of ``p`` on a device of ``gpu_gib`` GiB (for CPU runs: the RAM budget)."""
    on_gpu = p.device.startswith("cuda")
    engine = p.engine_class
    own = engine.plan_memory(p, gpu_gib)
    details: dict[str, float] = dict(own.details)
    tokens = p.policy.train_micro_batch * (p.prompt_tokens + p.new_tokens)
    details["train_tokens_per_micro_batch"] = tokens
    details["layer_kib_per_token"] = layer_bytes_per_token(p) / 1024
    details["activations_without_checkpointing_gib"] = activation_bytes(p.with_settings({CHECKPOINTING: False})) / GIB
    details["activations_with_checkpointing_gib"] = activation_bytes(p.with_settings({CHECKPOINTING: True})) / GIB
    details["logits_unchunked_gib"] = unchunked_logits_bytes(p) / GIB
    contexts = cuda_contexts(engine) * CUDA_CONTEXT_GIB * GIB if on_gpu else 0.0
    items = {
        "base_weights": base_weight_bytes(p), "engine": own.awake, "trainer": trainer_bytes(p),
        "adapters_optimizer": adapters_optimizer_bytes(p), "activations": activation_bytes(p),
        "logits": logits_bytes(p), "cuda_context": contexts,
    }
    resident = items["base_weights"] + items["adapters_optimizer"] + contexts
    # the tail's backward (its chunk transient) runs before the layers' backward (their working
    # set): only the larger of the two is ever alive
    overlap = min(logits_transient_bytes(p), backward_working_bytes(p, tokens))
    phases = {
        "generation": resident + own.awake,
        "training": resident + own.training + items["trainer"] + items["activations"] + items["logits"] - overlap,
    }
    result = Plan(p, gpu_gib, min_headroom, {k: v / GIB for k, v in items.items()},
                  {k: v / GIB for k, v in phases.items()}, details, engine=own)
    if result.headroom_gib < min_headroom * gpu_gib:
        worst = max(phases, key=phases.get)
        result.problems.append(
            f"{worst} phase needs {result.peak_gib:.1f} GiB of {gpu_gib:g}: headroom {result.headroom_gib:.1f} GiB "
            f"< {min_headroom:.0%} ({min_headroom * gpu_gib:.1f} GiB)"
        )
    result.problems.extend(own.problems)
    if with_fixes and result.problems:
        result.fixes = suggest_fixes(p, gpu_gib, min_headroom)
    return result


# -- what would make it fit -----------------------------------------------------------------------
MICRO_BATCH = Knob("policy.train_micro_batch", lambda p: list(range(p.policy.train_micro_batch - 1, 0, -1)))
TRAINER_SWITCHES = (
    Knob(CHECKPOINTING, lambda p: [] if p.policy.gradient_checkpointing else [True], switch=True),
    Knob("policy.adapter_dtype", lambda p: [p.dtype] if p.ad > p.d else [], switch=True),  # the base's dtype
)
LOGITS_CHUNK = Knob("policy.logits_chunk", lambda p: [c for c in (256, 128, 64) if c < p.policy.logits_chunk])


def knobs(p: PlanInputs) -> list[Knob]:
    """What the fix search may turn, in its order: the switches (checkpointing, the engine's, the LoRA
    compute dtype), then the graded knobs (micro-batch, the engine's, the log-prob chunk)."""
    own = p.engine_class.plan_knobs(p)
    checkpointing, adapter_dtype = TRAINER_SWITCHES
    return [checkpointing, *(k for k in own if k.switch), adapter_dtype,
            MICRO_BATCH, *(k for k in own if not k.switch), LOGITS_CHUNK]


def suggest_fixes(p: PlanInputs, gpu_gib: float, min_headroom: float = DEFAULT_MIN_HEADROOM) -> list[dict]:
    """Changes of ``p``'s run config (``{key: value}``) that make the plan fit, least change first.

    Every knob that fits on its own, with its least invasive value (largest micro-batch, nearest
    vLLM share); if none does alone, every pair of one switch (checkpointing, sleep mode, LoRA
    compute dtype) with the least change of a later knob; failing that, all switches together
    with the least change of one graded knob, then of the micro-batch and one of the engine's
    graded knobs (the vLLM share). Empty when nothing within these knobs fits (a smaller
    population per GPU or shorter completions would be needed).
    """

    def fits(q: PlanInputs) -> bool:
        return plan(q, gpu_gib, min_headroom, with_fixes=False).fits

    def least(q: PlanInputs, knob: Knob, base: dict) -> list[dict]:
        for value in knob.values(q):
            if fits(q.with_settings({knob.key: value})):
                return [{**base, knob.key: value}]
        return []

    order = knobs(p)
    single = [fix for knob in order for fix in least(p, knob, {})]
    if single:
        return single
    pairs: list[dict] = []
    for i, first in enumerate(order):
        if not first.switch:
            continue
        for value in first.values(p):
            q = p.with_settings({first.key: value})
            for knob in order[i + 1 :]:
                pairs += least(q, knob, {first.key: value})
    if pairs:
        return pairs
    combo: dict = {}
    q = p
    for knob in (k for k in order if k.switch):
        values = knob.values(q)
        if values:
            combo[knob.key], q = values[0], q.with_settings({knob.key: values[0]})
    if fits(q):
        return [combo]
    graded = [k for k in order if not k.switch]
    for knob in graded:
        if found := least(q, knob, combo):
            return found
    engine_graded = [k for k in graded if k not in (MICRO_BATCH, LOGITS_CHUNK)]
    for mb in MICRO_BATCH.values(q):
        for knob in engine_graded:
            if found := least(q.with_settings({MICRO_BATCH.key: mb}), knob, {**combo, MICRO_BATCH.key: mb}):
                return found
    return []

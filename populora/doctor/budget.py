"""How long each stage of the doctor will take, before it starts: the estimates ``--budget-s`` uses.

Pure functions of the preset's shapes and of rates. The rates start from conservative figures of
ours (below) and are replaced by what the run measured as soon as it has measured them (the training
stage's FLOP/s, the generation stage's seconds per decode step), so later stages are judged by this
node's own speed. Estimates err long on purpose: a stage that is skipped costs a line in the report,
a stage that overruns the allocation costs every report after it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# ours: effective training FLOP/s (``training_flops``' count) of HF training in bf16 on an H100-class GPU
# (one H200 measured 8.6e14 on 4t4s-7b's fused step, docs/benchmarks/gpu.md; 70% of that, to err long)
# and in float32 on two CPU cores; decode-step seconds floor (Python and kernel launch per step of the
# HF decode); effective memory bandwidth for a decode step
START_RATES = {
    "cuda": {"train_flops": 6.0e14, "step_overhead_s": 0.04, "bandwidth": 1.0e12, "model_params_per_s": 1.0e9},
    "cpu": {"train_flops": 6.0e10, "step_overhead_s": 0.03, "bandwidth": 5.0e9, "model_params_per_s": 5.0e7},
}
FIXED_S = {  # ours: stages whose cost does not scale with the model, measured on the development machines
    "cuda": {"versions": 1, "devices": 5, "plan": 2, "verdict": 1, "allreduce": 60, "vllm": 300,
             "tests_collect": 20, "per_gpu_test": 6},
    "cpu": {"versions": 1, "devices": 2, "plan": 2, "verdict": 1, "allreduce": 20, "vllm": 150,
            "tests_collect": 25, "per_gpu_test": 0},
}
STEP_PROMPT_TOKENS = 1024  # ours: prompt tokens of a self-play sequence for the step estimate (references included)


@dataclass
class Rates:
    """The rates estimates use on ``device``; ``measured`` names those the run has replaced."""

    device: str
    values: dict[str, float] = field(default_factory=dict)
    measured: set[str] = field(default_factory=set)

    def __post_init__(self):
        self.values = {**START_RATES[self.device], **self.values}

    def __getitem__(self, key: str) -> float:
        return self.values[key]

    def measure(self, key: str, value: float) -> None:
        if value > 0:
            self.values[key] = value
            self.measured.add(key)

    def fixed(self, key: str) -> float:
        return float(FIXED_S[self.device][key])


def training_flops(params: int, layers: int, hidden: int, seq_tokens: int, sequences: int,
                   checkpointing: bool) -> float:
    """FLOPs of one update of ``sequences`` sequences of ``seq_tokens`` tokens: 2 per parameter and
    token forward, 4 backward (input gradients through the frozen base; the LoRA weight gradients are
    small), 2 more with checkpointing (the forward again); attention adds 4 T^2 d per layer and
    sequence forward, times the same 3 (4 with checkpointing)."""
    passes = 4 if checkpointing else 3
    dense = 2 * passes * params * seq_tokens * sequences
    attention = 4 * layers * hidden * seq_tokens**2 * sequences * passes
    return float(dense + attention)


def model_s(params: int, rates: Rates) -> float:
    return 5.0 + params / rates["model_params_per_s"]


def training_s(step_flops: float, warmup_flops: float, members: int, rates: Rates, profiled_flops: float = 0.0) -> float:
    """The training stage: a warm-up step, the timed step, and (CPU) a profiled update (about 3x slower)."""
    return 2.0 + members * 0.5 + (step_flops + warmup_flops + 3 * profiled_flops) / rates["train_flops"]


def decode_step_s(weight_bytes: float, rates: Rates) -> float:
    """One decode step: reading the weights once, at least the per-step overhead."""
    return max(rates["step_overhead_s"], weight_bytes / rates["bandwidth"] + rates["step_overhead_s"] / 2)


MIXED_STEP_FACTOR = 1.5  # ours: a mixed-adapter decode step over a plain one, erring long (multi_lora.py's
# product over stacked slots measured 0.9-1.0x of one adapter's on CPU, docs/benchmarks/generate.md; peft's
# loop over adapters measured 4.7x on one H200 for 8 members)


def generation_s(new_tokens: int, weight_bytes: float, rates: Rates) -> float:
    """The HF arms: a 2-token warm-up call and three arms of ``new_tokens`` decode steps each, a step
    costing up to ``MIXED_STEP_FACTOR`` a plain one."""
    return 2.0 + (2 + 3 * new_tokens) * decode_step_s(weight_bytes, rates) * MIXED_STEP_FACTOR


def selfplay_step_s(params: int, layers: int, hidden: int, weight_bytes: float, members: int, sequences: int,
                    new_tokens: int, checkpointing: bool, rates: Rates) -> float:
    """One arm of the self-play step stage: model build, then two steps (warm-up and timed), each two
    generate calls of ``new_tokens`` decode steps (proposals, then attempts), a sandbox round, and one
    update of every member on ``sequences`` sequences."""
    per_step = (2 * (new_tokens + 1) * decode_step_s(weight_bytes, rates) * MIXED_STEP_FACTOR + 5.0
                + training_flops(params, layers, hidden, STEP_PROMPT_TOKENS + new_tokens, sequences * members,
                                 checkpointing) / rates["train_flops"])
    return model_s(params, rates) + 2 * per_step + members * 1.0


def tests_s(gpu_tests: int, rates: Rates) -> float:
    return rates.fixed("tests_collect") + gpu_tests * rates.fixed("per_gpu_test")

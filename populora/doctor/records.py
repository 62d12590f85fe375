"""The records the doctor's stages hand on (frozen dataclasses of plain values, JSON-ready).

Memory is in bytes in the records and in GiB (2**30) in the reports; every measured figure carries
``method``, the words for how it was measured, and a figure that was not measured is ``None`` with
the reason in ``method``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field


def to_json(record) -> dict:
    """A record (and the records inside it) as plain JSON values."""
    return dataclasses.asdict(record)


@dataclass(frozen=True)
class GPU:
    index: int
    name: str
    total_gib: float
    capability: str  # "9.0"


@dataclass(frozen=True)
class DeviceReport:
    """What the node has. ``kind``: cuda or cpu. Versions are None where there is nothing to report."""

    kind: str
    host: str
    torch: str
    cpu_cores: int  # len(os.sched_getaffinity(0)): the cores this process may use
    cpu_model: str
    memory_gib: float  # GPU 0's memory on CUDA, host RAM (MemTotal) on CPU: the plan's budget
    gpus: tuple[GPU, ...] = ()
    driver: str | None = None
    cuda: str | None = None
    nccl: str | None = None
    vllm: str | None = None  # the installed vLLM's version, None when not importable
    visible_devices: str | None = None  # CUDA_VISIBLE_DEVICES as this process sees it


@dataclass(frozen=True)
class AllReduceSize:
    size_bytes: int
    seconds: float  # per all-reduce, the slowest rank's mean
    algbw_gbs: float  # GB/s, 1e9 bytes
    busbw_gbs: float
    correct: bool  # the sum was right on every element (checked on rank 0)


@dataclass(frozen=True)
class AllReduceResult:
    backend: str  # nccl | gloo
    ranks: int
    version: str  # NCCL's version; empty for gloo
    sizes: tuple[AllReduceSize, ...]
    wall_s: float = 0.0  # start of the ranks included
    error: str | None = None


@dataclass(frozen=True)
class Measure:
    """One memory figure: ``bytes`` measured (None: not measured) and how, or why not."""

    item: str
    bytes: float | None
    method: str


@dataclass(frozen=True)
class MemberUpdate:
    """One member's update: one training micro-batch through ``train_member``."""

    member: str
    role: str
    sequences: int
    tokens: int  # prompt + completion tokens of the micro-batch
    seconds: float  # wall time of train_member (forward, backward, optimizer step)
    loss: float
    grad_norm: float

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.seconds


@dataclass(frozen=True)
class TrainingResult:
    """The training stage of one preset: the model, every member's update and the memory measured."""

    model: str  # where the architecture came from
    params: int
    dtype: str
    device: str
    prompt_tokens: int
    completion_tokens: int
    micro_batch: int
    gradient_checkpointing: bool
    updates: tuple[MemberUpdate, ...]
    memory: tuple[Measure, ...]  # base_weights, adapters_optimizer, training_step, cuda_context
    peak_bytes: float | None = None  # the process's peak during the stage (CUDA: max_memory_allocated)
    peak_method: str = ""
    error: str | None = None

    @property
    def tokens_per_s(self) -> float | None:
        seconds = sum(u.seconds for u in self.updates)
        return sum(u.tokens for u in self.updates) / seconds if seconds > 0 else None


@dataclass(frozen=True)
class ArmTiming:
    arm: str  # mixed | one_adapter | base
    seconds: float
    tokens: int

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.seconds


@dataclass(frozen=True)
class GenerationResult:
    """One engine's arms (the same prompts in each), and on CUDA the vLLM engine's memory and sleep/wake."""

    engine: str  # hf | vllm
    device: str
    adapters: int
    requests: int
    new_tokens: int
    arms: tuple[ArmTiming, ...] = ()
    start_s: float | None = None  # engine start + first (warm-up) call
    sleep_s: float | None = None
    wake_s: float | None = None
    memory: tuple[Measure, ...] = ()  # engine (awake), engine_asleep
    notes: tuple[str, ...] = ()  # what differs from the preset, why a figure is missing
    error: str | None = None  # the engine could not run: why (the doctor goes on)

    @classmethod
    def from_json(cls, d: dict) -> GenerationResult:
        return cls(**{**d, "arms": tuple(ArmTiming(**a) for a in d.get("arms", ())),
                      "memory": tuple(Measure(**m) for m in d.get("memory", ())), "notes": tuple(d.get("notes", ()))})

    def arm(self, name: str) -> ArmTiming | None:
        return next((a for a in self.arms if a.arm == name), None)


@dataclass(frozen=True)
class ItemComparison:
    """A plan item beside its measurement: ``ratio`` = measured / planned (None when not measured)."""

    item: str
    planned_gib: float
    measured_gib: float | None
    ratio: float | None
    method: str


@dataclass(frozen=True)
class FitVerdict:
    """Whether the preset fits the device, from the measured phases (unmeasured items from the plan)."""

    preset: str
    fits: bool
    device_gib: float
    min_headroom: float
    phases_gib: dict[str, float]  # generation / training, measured where measured
    planned_phases_gib: dict[str, float]
    from_plan: tuple[str, ...]  # items not measured, whose planned figures the phases use
    plan_fits: bool

    @property
    def basis(self) -> str:
        if not self.from_plan:
            return "measured"
        return "measured, with " + ", ".join(self.from_plan) + " from the plan"


@dataclass(frozen=True)
class PresetReport:
    preset: str  # the config's name
    config_path: str
    training: TrainingResult
    generation: tuple[GenerationResult, ...]
    items: tuple[ItemComparison, ...]
    verdict: FitVerdict
    plan: dict = field(default_factory=dict)  # populora plan's JSON for this device


@dataclass(frozen=True)
class DoctorReport:
    device: DeviceReport
    allreduce: AllReduceResult
    presets: tuple[PresetReport, ...]
    tests: dict | None = None  # pytest -m gpu: exit status and summary line
    wall_s: float = 0.0
    command: str = ""

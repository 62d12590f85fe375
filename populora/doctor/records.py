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
    not_measured: str | None = None  # why nothing was measured (one GPU: nothing crosses a link)


@dataclass(frozen=True)
class Measure:
    """One memory figure: ``bytes`` measured (None: not measured) and how, or why not."""

    item: str
    bytes: float | None
    method: str


@dataclass(frozen=True)
class MemberUpdate:
    """One member's update: one training micro-batch through the trainer's update."""

    member: str
    role: str
    sequences: int
    tokens: int  # prompt + completion tokens of the micro-batch
    seconds: float | None  # wall time of its update; None when members share passes (the step's time)
    loss: float | None  # None for the warm-up (one short sequence per member: no loss worth reading)
    grad_norm: float | None

    @property
    def tokens_per_s(self) -> float | None:
        return self.tokens / self.seconds if self.seconds else None


@dataclass(frozen=True)
class StrategyTiming:
    """One timed update of every member on the training stage's batches through one update strategy."""

    strategy: str  # rl.update_strategy: fused | sequential
    seconds: float
    tokens: int

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else 0.0


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
    updates: tuple[MemberUpdate, ...]  # the timed full-size updates (warm-up excluded)
    memory: tuple[Measure, ...]  # base_weights, adapters_optimizer, training_step, cuda_context
    peak_bytes: float | None = None  # the process's peak during the stage (CUDA: max_memory_allocated)
    peak_method: str = ""
    error: str | None = None
    warmup: MemberUpdate | None = None  # the first update (CUDA/allocator warm-up): reported apart
    state_updates: int = 0  # members stepped once on a short batch so that their AdamW state exists
    peak_reserved_bytes: float | None = None  # CUDA: max_memory_reserved (what actually runs out)
    behaviour_logprob: float | None = None  # the log-probability every sampled token is given: -ln(vocab)
    strategy: str = "sequential"  # rl.update_strategy of the timed step
    step_seconds: float | None = None  # the timed step: every member's update (forward, backward, AdamW)
    flops: float | None = None  # model FLOPs of the timed step (doctor/mfu.py: the count written out)
    peak_flops: float | None = None  # the device's dense peak in the training dtype (None: not known)
    strategies: tuple[StrategyTiming, ...] = ()  # with --strategies: the same batches through each strategy

    @property
    def tokens_per_s(self) -> float | None:
        if not self.step_seconds:
            return None
        return sum(u.tokens for u in self.updates) / self.step_seconds

    @property
    def flops_per_s(self) -> float | None:
        return self.flops / self.step_seconds if self.flops and self.step_seconds else None

    @property
    def mfu(self) -> float | None:
        """Model FLOPs utilization of the timed step: FLOPs / seconds / the device's peak."""
        f = self.flops_per_s
        return f / self.peak_flops if f and self.peak_flops else None

    @property
    def per_member_bytes(self) -> float | None:
        """Measured adapters_optimizer over the members (after the warm-up: every AdamW state exists)."""
        m = next((m for m in self.memory if m.item == "adapters_optimizer"), None)
        return m.bytes / len(self.updates) if m is not None and m.bytes and self.updates else None


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
    publish_s: float | None = None  # one publish of every member's weights to the engine (time_publish)
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
    reserved_slack_gib: float = 0.0  # counted in the training phase: allocator reserved peak - allocated peak

    @property
    def basis(self) -> str:
        if not self.from_plan:
            return "measured"
        return "measured, with " + ", ".join(self.from_plan) + " from the plan"


@dataclass(frozen=True)
class PresetReport:
    """One preset's results so far: a stage that has not run (or did not finish) leaves its field empty."""

    preset: str  # the config's name
    config_path: str
    training: TrainingResult | None = None
    generation: tuple[GenerationResult, ...] = ()
    items: tuple[ItemComparison, ...] = ()
    verdict: FitVerdict | None = None
    plan: dict = field(default_factory=dict)  # populora plan's JSON for the judged device size


@dataclass(frozen=True)
class StepArm:
    """One arm of the self-play step stage: the warm-up step apart, then one timed step, per phase."""

    label: str  # "4T+4S" | "baseline"
    members: int
    warmup_s: float
    step_s: float
    phases: dict[str, float]  # seconds of the timed step per phase (the loop's Stopwatch)


@dataclass(frozen=True)
class StepComparison:
    """One self-play step of a population and of its compute-matched baseline at a preset's shapes."""

    preset: str
    model: str  # the base the step ran on
    engine: str
    overrides: tuple[str, ...]  # what the step changed from the preset, so that it fits a time budget
    arms: tuple[StepArm, ...] = ()
    notes: tuple[str, ...] = ()

    @property
    def ratio(self) -> float | None:
        """Population step seconds over baseline step seconds (the paper's 1.31x is this ratio)."""
        if len(self.arms) != 2 or self.arms[1].step_s <= 0:
            return None
        return self.arms[0].step_s / self.arms[1].step_s


STATUSES = ("pending", "running", "done", "failed", "blocked", "skipped", "unavailable", "interrupted")


@dataclass(frozen=True)
class StageRecord:
    """One stage of the doctor's run and what became of it.

    ``status``: pending (not reached yet), running (the report was written while it ran: a report
    left in this state was cut short), done, failed (``detail`` says why), blocked (a stage it needs
    did not complete), skipped (``--budget-s``: its estimate would overrun), unavailable (it cannot
    run on this node: no vLLM, one GPU), interrupted (a signal stopped it).
    """

    name: str
    status: str = "pending"
    estimate_s: float | None = None
    seconds: float | None = None
    detail: str = ""


@dataclass(frozen=True)
class DoctorReport:
    device: DeviceReport | None
    allreduce: AllReduceResult | None
    presets: tuple[PresetReport, ...]
    tests: dict | None = None  # pytest -m gpu: exit status and summary line
    wall_s: float = 0.0
    command: str = ""
    stages: tuple[StageRecord, ...] = ()
    status: str = "complete"  # complete | incomplete | failed (see run.exit_status)
    budget_s: float | None = None
    gpu_gib: float | None = None  # the device size the verdicts judge (--gpu-gib, else the device's own)
    gpu_gib_source: str = ""
    versions: dict | None = None  # VersionReport as JSON
    step: StepComparison | None = None

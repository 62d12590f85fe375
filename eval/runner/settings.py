"""The one settings record of an evaluation: engine, prompts, data, and the scorers' limits.

``populora eval``, ``populora score`` and the benchmark families (``eval.benchmarks.families``) all read this type;
nothing copies its fields into a second record. The engine is the policy layer's own configuration
(``policy``: a ``populora.policy.PolicyConfig``, the same type as a run config's ``policy:`` section),
turned into an engine in ``eval.runner.engine.make_engine`` only.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from eval.benchmarks import BENCHMARKS
from eval.benchmarks.evalplus import evalplus_default_parallel
from eval.runner.decoding import Decoding
from populora.policy.config import PolicyConfig


@dataclass
class EvalSettings:
    # -- engine (see eval.runner.engine.make_engine) -----------------------------------------------------
    policy: PolicyConfig = field(default_factory=PolicyConfig)
    # requests per generate call: None = the engine's own (its ``eval_chunk_size``; vLLM: every
    # pending request of a benchmark at once, so no call waits for the slowest sequence of a small
    # chunk; HF: one decode batch, so that an interrupted evaluation loses at most one batch)
    chunk_size: int | None = None
    # -- what is evaluated -------------------------------------------------------------------------
    template: str = "base"
    decoding: Decoding = field(default_factory=Decoding)  # greedy (the paper's), or N seeded samples per item
    benchmarks: list[str] = field(default_factory=lambda: list(BENCHMARKS))
    max_new_tokens: dict[str, int] = field(default_factory=dict)  # overrides of the registry defaults
    limit: int | None = None  # first N items of every benchmark
    slice_size: int = 64
    shard: tuple[int, int] = (0, 1)
    include_base: bool = True
    check_base: bool = True  # refuse adapters recorded as trained on another base model than ``model``
    # -- data ----------------------------------------------------------------------------------------
    data_dir: str | None = None
    data_paths: dict[str, str] = field(default_factory=dict)  # benchmark -> file (LCB: directory)
    lcb_release: str = "release_v5"
    lcb_start: str | None = "2024-08-01"  # inclusive (LCB)
    lcb_end: str | None = "2025-02-01"  # inclusive (LCB)
    # -- scorers ---------------------------------------------------------------------------------
    lcb_timeout_s: int = 6  # LCB's per-test alarm (whole seconds; LCB default 6)
    evalplus_parallel: int | None = None  # None: EvalPlus's own default (cpu_count // 2)
    evalplus_max_memory_gb: float | None = None  # None: EvalPlus's default (4 GiB per test process)
    evalplus_min_time_limit: float = 1.0  # EvalPlus default (seconds per test)
    evalplus_gt_time_limit_factor: float = 4.0  # EvalPlus default (x the canonical solution's time)
    cache_dir: str | None = None

    def __post_init__(self) -> None:
        if self.limit is not None and (isinstance(self.limit, bool) or not isinstance(self.limit, int) or self.limit < 1):
            raise ValueError(f"limit must be a whole number >= 1 (None: every item), got {self.limit!r}")
        if isinstance(self.decoding, dict):
            self.decoding = Decoding(**self.decoding)

    def budgets(self) -> dict[str, int]:
        return {b: int(self.max_new_tokens.get(b, BENCHMARKS[b].max_new_tokens)) for b in self.benchmarks}

    def parallel(self) -> int:
        return self.evalplus_parallel or evalplus_default_parallel()

    def lcb_options(self) -> dict:
        return {"release": self.lcb_release, "start": self.lcb_start, "end": self.lcb_end}

    def to_dict(self) -> dict:
        return asdict(self)

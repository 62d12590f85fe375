"""How the evaluation decodes: greedy (one sample per item, the paper's setting) or sampled (``N``
samples per item at temperature ``T`` and top-p ``P``, for pass@k and avg@N).

Sampling is seeded and reproducible: every sample's random stream is fixed by the evaluation's
``seed``, the benchmark, the item and the sample's number (``request_index`` gives the engine a
stable index per (benchmark, item); the engines derive each sample's seed from it and the sample
number: ``populora.policy.sampling.row_seed`` in the HF engine, a per-request seed plus the sample
number in vLLM). So a re-run, a resumed run, another shard split or another chunk size draws the same
samples, and every adapter draws with the same random numbers on an item (common random numbers: the
adapters' differences are not blurred by different draws).

Defaults of a sampled evaluation (``--samples N`` without ``--temperature`` / ``--top-p``): temperature
0.6 and top-p 0.95 (ours: the setting of the pass@k study of RLVR models by Yue et al. 2025, "Does
reinforcement learning really incentivize reasoning capacity in LLMs beyond the base model?").
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass

SAMPLED_TEMPERATURE = 0.6  # ours (Yue et al. 2025's pass@k setting), used when --temperature is not given
SAMPLED_TOP_P = 0.95  # ours (same source)
GREEDY_LABEL = "greedy (temperature 0), pass@1"


@dataclass(frozen=True)
class Decoding:
    """``samples`` per item at ``temperature`` / ``top_p``, seeded by ``seed`` (greedy: 1 sample, T = 0)."""

    samples: int = 1
    temperature: float = 0.0
    top_p: float = 1.0
    seed: int = 0

    def __post_init__(self) -> None:
        if isinstance(self.samples, bool) or not isinstance(self.samples, int) or self.samples < 1:
            raise ValueError(f"--samples must be a whole number >= 1, got {self.samples!r}")
        if not (isinstance(self.temperature, (int, float)) and math.isfinite(self.temperature) and self.temperature >= 0):
            raise ValueError(f"--temperature must be a number >= 0, got {self.temperature!r}")
        if not (isinstance(self.top_p, (int, float)) and 0 < self.top_p <= 1):
            raise ValueError(f"--top-p must be in (0, 1], got {self.top_p!r}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise ValueError(f"--seed must be a whole number >= 0, got {self.seed!r}")
        if self.samples > 1 and self.temperature == 0:
            raise ValueError(f"--samples {self.samples} with --temperature 0: greedy samples are all the same; give a "
                             f"temperature > 0 (leave it out for {SAMPLED_TEMPERATURE}) or drop --samples")
        if self.temperature == 0 and self.top_p != 1:
            raise ValueError(f"--top-p {self.top_p} with greedy decoding (temperature 0) has no effect; drop it")

    @classmethod
    def resolve(cls, samples: int = 1, temperature: float | None = None, top_p: float | None = None,
                seed: int = 0) -> Decoding:
        """The decoding of the command line: without ``temperature``, greedy for one sample and
        :data:`SAMPLED_TEMPERATURE` for several; without ``top_p``, 1 when greedy, else :data:`SAMPLED_TOP_P`."""
        if temperature is None:
            temperature = 0.0 if samples == 1 else SAMPLED_TEMPERATURE
        if top_p is None:
            top_p = 1.0 if temperature == 0 else SAMPLED_TOP_P
        return cls(samples, float(temperature), float(top_p), seed)

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    def label(self) -> str:
        """What every table says about the decoding."""
        if self.greedy:
            return GREEDY_LABEL
        return (f"sampled (temperature {self.temperature:g}, top-p {self.top_p:g}, {self.samples} sample"
                f"{'s' if self.samples > 1 else ''} per item, seed {self.seed}), pass@1 = avg@{self.samples}")

    def short(self) -> str:
        """A table caption's form: ``greedy`` or ``T=0.6, top-p 0.95, N=8``."""
        return "greedy" if self.greedy else f"T={self.temperature:g}, top-p {self.top_p:g}, N={self.samples}"

    def to_json(self) -> dict:
        return {**dataclasses.asdict(self), "greedy": self.greedy, "label": self.label()}

    def plan_value(self) -> str | dict:
        """What ``plan.json`` pins (``"greedy"``, as plans written before sampling existed)."""
        return "greedy" if self.greedy else {k: v for k, v in dataclasses.asdict(self).items()}

    @classmethod
    def from_json(cls, data) -> Decoding:
        """From a plan's or a score file's value (``"greedy"``, a dict, or None for greedy)."""
        if data in (None, "greedy"):
            return cls()
        if isinstance(data, dict):
            return cls(int(data.get("samples", 1)), float(data.get("temperature", 0.0)), float(data.get("top_p", 1.0)),
                       int(data.get("seed", 0)))
        if isinstance(data, str) and data.startswith("greedy"):
            return cls()
        raise ValueError(f"unknown decoding {data!r}")

    def sampling_params(self, cls, max_new_tokens: int, stop: Sequence[str], stop_ids: Sequence[int] = ()):
        """The engine's params for one benchmark; stop token ids only where ``cls`` has the field."""
        extra = {}
        if stop_ids and "stop_token_ids" in {f.name for f in dataclasses.fields(cls)}:
            extra["stop_token_ids"] = tuple(stop_ids)
        if self.greedy:
            return cls(temperature=0.0, max_new_tokens=max_new_tokens, stop=tuple(stop), **extra)
        return cls(temperature=self.temperature, top_p=self.top_p, max_new_tokens=max_new_tokens, stop=tuple(stop),
                   n=self.samples, seed=self.seed, **extra)


def request_index(benchmark: str, item_id: str) -> int:
    """The seeding index of an item's request: stable across runs, shards, chunks and adapters."""
    digest = hashlib.sha256(f"{benchmark}\0{item_id}".encode()).digest()
    return int.from_bytes(digest[:6], "little")

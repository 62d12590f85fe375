"""Benchmark families: one interface for everything a family of benchmarks owns.

A family (``evalplus``, ``livecodebench``, ``math``) owns, for its benchmarks: the prompt under each
template, the stop strings, the extraction of the scored answer from a generation record (or from a
sample written by another system), and the scorer. Every ``BenchmarkSpec`` in
``eval.benchmarks.BENCHMARKS`` names its family; the pipeline, ``populora score``, the prompts and the
leaderboard loop over specs and call the family, never test a benchmark's name. Adding a benchmark of
an existing family is one spec plus its data loader; a new family is one class registered here.

The generation record that ``answer`` reads is the one ``eval.runner.generate`` stores: ``prompt``,
``completion`` (stop string excluded), ``finish_reason`` (``stop``: EOS or a stop string;
``length``: budget exhausted) and ``template``.
"""

from __future__ import annotations

import importlib
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from eval.benchmarks import BenchmarkSpec, Item


@dataclass(frozen=True)
class ScoredAnswer:
    """One scored answer: ``metrics[name]`` is True when it passes that metric (``plus``, ``acc``...)."""

    metrics: Mapping[str, bool]
    reason: str = "ok"  # the first failure, machine-readable, or "ok"
    answer: str = ""  # what was scored (the program as run, or the answer text)
    notes: tuple[str, ...] = field(default_factory=tuple)  # e.g. "sanitized"

    def to_json(self) -> dict:
        return {"metrics": dict(self.metrics), "reason": self.reason, "answer": self.answer, "notes": list(self.notes)}


class BenchmarkFamily(ABC):
    """What a family of benchmarks owns (see the module docstring)."""

    name: str

    @abstractmethod
    def prompt(self, item: Item, template: str, tokenizer=None) -> str:
        """The prompt text of ``item`` under ``template`` (``base``, ``chat`` or ``r1``)."""

    @abstractmethod
    def stop(self, spec: BenchmarkSpec, template: str, tokenizer=None) -> tuple[str, ...]:
        """Stop strings for every prompt of ``spec`` under ``template`` (the first answer is scored)."""

    @abstractmethod
    def answer(self, item: Item, record: Mapping) -> str:
        """The answer to score from a generation record (program or answer text, before scoring)."""

    @abstractmethod
    def answer_from_sample(self, item: Item, sample: Mapping) -> str:
        """The answer to score from a sample made elsewhere (``populora score``); KeyError names the field."""

    @abstractmethod
    def score(self, spec: BenchmarkSpec, items: Sequence[Item], answers: Mapping[str, Mapping[str, str]],
              settings) -> dict[str, dict[str, ScoredAnswer]]:
        """``answers[who][item_id]`` -> ``verdicts[who][item_id]`` (``who``: an adapter or a sample)."""

    def sample_id_field(self) -> tuple[str, ...]:
        """Fields that name the item in a sample (the first present one is used)."""
        return ("task_id",)

    def warnings(self, items: Sequence[Item]) -> list[str]:
        """Things about the loaded items that the user must see (printed before generation)."""
        return []


# family name -> "module:Class"; imported when first used (scorers pull in heavy libraries)
FAMILIES: dict[str, str] = {
    "evalplus": "eval.benchmarks.evalplus:EvalPlusFamily",
    "livecodebench": "eval.benchmarks.livecodebench:LiveCodeBenchFamily",
    "math": "eval.benchmarks.math_answers:MathFamily",
}
_LOADED: dict[str, BenchmarkFamily] = {}


def family_of(spec: BenchmarkSpec | str) -> BenchmarkFamily:
    """The family object of a spec (or of a family name)."""
    name = spec if isinstance(spec, str) else spec.family
    if name not in _LOADED:
        if name not in FAMILIES:
            raise ValueError(f"unknown benchmark family {name!r} (known: {', '.join(FAMILIES)})")
        module, cls = FAMILIES[name].split(":")
        _LOADED[name] = getattr(importlib.import_module(module), cls)()
    return _LOADED[name]

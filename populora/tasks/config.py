"""The task environment's configuration: ONE frozen record, ``TaskEnv``, which is the ``tasks:`` section
of a run config and what every stage of the task environment receives (prompts, parsing, validation,
checking, buffers, seeding).

Per-kind settings live under the kind's name: a kind that declares ``Knobs`` (a frozen dataclass,
``populora.tasks.kinds.base.TaskKind``) gets a ``tasks.<kind>:`` section of that type, for example
``tasks.code_f.inputs``. The ``TaskEnv`` type is therefore built from the kinds' registry when this
module is imported (``dataclasses.make_dataclass`` over ``TaskEnvFields``); it is an ordinary frozen
dataclass, usable directly (``TaskEnv(templates="compact")``) and as an omegaconf structured config
(``populora.config.Config`` embeds it). Every error names the key (``tasks.<field>``) and the value.

The AST check's rules (``safety.SafetyConfig``: the packaged allowlists) are not a config section:
``TaskEnv.safety`` gives them.
"""

from __future__ import annotations

import dataclasses
import keyword
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache

from populora.errors import ConfigError
from populora.tasks.kinds.registry import all_kinds, default_kind_names
from populora.tasks.safety import SafetyConfig

SEED_SOURCES = ("generate", "handwritten")
REPLICA_SEEDS = ("step", "fixed")  # tasks.replica_seeds (tasks/determinism.py)
CALLS = ("alone", "first_alone", "together")  # tasks.calls (tasks/determinism.py)
PROMPT_STYLES = ("chat", "r1")
TEACHER_REWARDS = ("populora", "azr")


@dataclass(frozen=True)
class SeedConfig:
    """How the buffers are seeded at the start of a run (``seeds.py``; the ``tasks.seeds:`` section).

    ``source``: ``generate`` (AZR: the base model writes the seeds, with the hand-written set as
    the fallback) or ``handwritten`` (the 14 hand-written programs only). ``target`` (AZR: 256 =
    ``data_len`` 64 x ``seed_batch_factor`` 4) seed triplets and as many induction tasks; ``batch``
    (AZR: 64, ``data.train_batch_size``) prompts per task type per round. ``max_rounds`` (ours: AZR
    loops until the target is met, forever for a model that never writes a valid program) bounds
    each of the two phases. ``min_valid`` (ours): fewer generated valid seed triplets than this and
    the hand-written set is used as well. ``templates``: the template set of the seeding prompts
    (AZR seeds with its own prompts, whatever the run's ``tasks.templates``).
    """

    source: str = "generate"
    target: int = 256
    batch: int = 64
    max_rounds: int = 16
    min_valid: int = 6
    templates: str = "azr"

    def __post_init__(self) -> None:
        if self.source not in SEED_SOURCES:
            raise ConfigError(f"key 'tasks.seeds.source': must be one of {SEED_SOURCES}, got {self.source!r}")
        for key in ("target", "batch", "max_rounds", "min_valid"):
            value = getattr(self, key)
            low = 0 if key == "min_valid" else 1
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                raise ConfigError(f"key 'tasks.seeds.{key}': must be an integer >= {low}, got {value!r}")


@lru_cache(maxsize=1)
def default_safety() -> SafetyConfig:
    """The AST check's packaged rules (built once: the allowlist is read from a JSON file)."""
    return SafetyConfig()


def _need(cond: bool, key: str, msg: str) -> None:
    if not cond:
        raise ConfigError(f"key 'tasks.{key}': {msg}")


@dataclass(frozen=True)
class TaskEnvFields:
    """The settings every kind shares (``TaskEnv`` adds one section per kind with ``Knobs``)."""

    types: tuple[str, ...] = field(default_factory=default_kind_names)  # AZR's three: code_o, code_i, code_f
    references: int = 6  # K buffer tasks shown in each teacher prompt (AZR: io_n = 6)
    # per task type; ours: AZR's buffers grow without bound (the oldest non-seed task leaves first)
    buffer_capacity: int = 512
    # ours: an output repr over this makes no task (AZR silently truncated outputs over 400 characters,
    # which made tasks unsolvable); also what the sandbox returns at most per value
    max_output_chars: int = 1000
    # chat: the tokenizer's chat template (ours) | r1: AZR's plain R1 wrapper (<think> ... <answer> ...)
    prompt_style: str = "chat"
    # a template set of every kind: azr (AZR's own templates, verbatim; the default) | compact (ours,
    # short, for small models)
    templates: str = "azr"
    # the buffers' first tasks: written by the base model as AZR does, or the hand-written set
    seeds: SeedConfig = field(default_factory=SeedConfig)
    teacher_reward: str = "populora"  # populora (paper: 0 for rho in {0,1}) | azr (-0.5 for valid but unlearnable)
    # False (ours): completions without <answer> tags are read whole (fenced blocks still required).
    # For small models that write code blocks but ignore the tags (SmolLM2-135M in the CPU demo).
    require_answer_tag: bool = True
    # AZR's format check: the completion closes its reasoning (</think>) and then answers (<answer>)
    require_think: bool = True
    # ours: True makes prompts end with an opened answer block (the kinds' ``teacher_prefill`` /
    # ``student_prefill``) so that a small model only continues the code or the value
    answer_prefill: bool = False
    # ours: True refuses a student's bare <answer> payload that holds no fenced block
    require_fence: bool = False
    entry: str = "f"  # AZR: every program defines ``f``, the function a task calls
    # the determinism check (tasks/determinism.py; docs/sandbox.md, "Determinism") compares one
    # execution per replica number; ours: four, so that natural hash-order dependence (a set of three
    # strings) is caught at least 99% of the time (each independent seed divides the miss rate by ~6)
    replicas: tuple[int, ...] = (0, 1, 2, 3)
    # each replica's executions start after the previous replica's have all finished, so no two
    # executions that are compared ever run at the same time; False only to measure what that
    # costs (populora bench executor)
    replicas_in_turn: bool = True
    # step (ours): each execution's hash seed is drawn from (run seed, step, replica) on fresh fork
    # servers | fixed: the replicas' fixed seeds, the same every step (the layout before issue 32,
    # kept to measure the cost)
    replica_seeds: str = "step"
    # how a program runs on several inputs (code_f), in validation, the check's re-run and the checker
    # of students' answers alike. alone (ours, issue 37): each input in a fresh child, everywhere, so an
    # output is what f gives for that input alone, with the whole of every limit, as the prompt tells the
    # student | first_alone: issue 32's layout (the first execution alone, the others and the re-run in
    # one child in a drawn order, the checker in one child) | together: before issue 32 (one child,
    # reversed in odd executions). The last two only to measure what "alone" costs (populora bench
    # executor); the earlier key `tasks.isolated_calls` reads as `alone` (true) or `together` (false)
    calls: str = "alone"
    # ours: a proposal that failed or disagreed in a turn leaves the next turns (its verdict is made)
    early_stop: bool = True

    def __post_init__(self) -> None:
        object.__setattr__(self, "types", tuple(self.types))
        object.__setattr__(self, "replicas", tuple(self.replicas))
        if isinstance(self.seeds, Mapping):
            object.__setattr__(self, "seeds", SeedConfig(**self.seeds))
        kinds = all_kinds()
        for name, kind in kinds.items():  # a kind's section given as a mapping: its Knobs
            if kind.Knobs is not None and isinstance(getattr(self, name, None), Mapping):
                object.__setattr__(self, name, kind.Knobs(**getattr(self, name)))
        known = list(kinds)
        bad = [t for t in self.types if t not in known]
        _need(not bad and len(self.types) > 0, "types", f"unknown task types {bad}; known: {list(known)}")
        _need(len(set(self.types)) == len(self.types), "types", f"duplicate task types in {list(self.types)}")
        _need(self.references >= 0, "references", f"must be >= 0, got {self.references}")
        _need(self.buffer_capacity >= 1, "buffer_capacity", f"must be >= 1, got {self.buffer_capacity}")
        _need(self.references <= self.buffer_capacity, "references",
              f"K={self.references} is larger than tasks.buffer_capacity={self.buffer_capacity}")
        _need(self.max_output_chars >= 1, "max_output_chars", f"must be >= 1, got {self.max_output_chars}")
        _need(self.prompt_style in PROMPT_STYLES, "prompt_style",
              f"must be 'chat' or 'r1', got {self.prompt_style!r}")
        for name, where in ((self.templates, "templates"), (self.seeds.templates, "seeds.templates")):
            lacking = [t for t in self.types if name not in kinds[t].templates]
            sets = sorted(set.intersection(*(set(kinds[t].templates) for t in self.types)))
            _need(not lacking, where, f"{name!r} is not a template set of {lacking}; choose one of {sets}")
        _need(self.teacher_reward in TEACHER_REWARDS, "teacher_reward",
              f"must be one of {TEACHER_REWARDS}, got {self.teacher_reward!r}")
        _need(isinstance(self.entry, str) and self.entry.isidentifier() and not keyword.iskeyword(self.entry),
              "entry", f"must be a Python function name, got {self.entry!r}")
        _need(len(self.replicas) >= 2 and len(set(self.replicas)) == len(self.replicas)
              and all(isinstance(r, int) and r >= 0 for r in self.replicas),
              "replicas", f"must be at least two distinct replica numbers >= 0, got {list(self.replicas)}")
        _need(self.replica_seeds in REPLICA_SEEDS, "replica_seeds",
              f"must be one of {REPLICA_SEEDS}, got {self.replica_seeds!r}")
        _need(self.calls in CALLS, "calls", f"must be one of {CALLS}, got {self.calls!r}")
        for key in ("replicas_in_turn", "early_stop"):
            _need(isinstance(getattr(self, key), bool), key, f"must be true or false, got {getattr(self, key)!r}")

    @property
    def safety(self) -> SafetyConfig:
        """The AST check's rules (the packaged allowlists; see ``safety.py``)."""
        return default_safety()

    def replace(self, **changes) -> TaskEnvFields:
        """A copy with fields changed (validated again)."""
        return dataclasses.replace(self, **changes)


def _kind_sections() -> list[tuple[str, type, object]]:
    """One ``(name, Knobs, default)`` field per kind that has settings of its own."""
    return [(name, kind.Knobs, field(default_factory=kind.Knobs))
            for name, kind in all_kinds().items() if kind.Knobs is not None]


TaskEnv = dataclasses.make_dataclass(
    "TaskEnv", _kind_sections(), bases=(TaskEnvFields,), frozen=True,
    namespace={"__module__": __name__, "__doc__": (
        "The task environment of a run (the ``tasks:`` section): the settings every kind shares "
        "(``TaskEnvFields``) and one ``tasks.<kind>:`` section per kind with ``Knobs``.")})

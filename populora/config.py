"""Structured configuration of a run: dataclasses + omegaconf, validated at start.

A preset (``configs/*.yaml``) is merged onto the dataclass defaults, then ``key=value`` overrides
from the command line. omegaconf rejects unknown keys and wrong types with the full key in the
message; ``validate`` adds the cross-field checks (T=0, ranks vLLM cannot serve, budgets that do
not divide, ...). Every error names the key.

Sections owned by other modules (policy, tasks, sandbox, RL, ratings, matchmaking, evolution) use those
modules' own dataclasses, so a module's defaults live next to the code that uses them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from populora.errors import ConfigError
from populora.policy.config import PolicyConfig
from populora.population.evolution import EvolutionConfig
from populora.population.matchmaking import MatchmakingConfig
from populora.population.ratings import RatingConfig
from populora.renamed_keys import migrate_mapping, migrate_overrides
from populora.rl.config import RLConfig
from populora.sandbox.api import SandboxLimits
from populora.tasks.config import TaskEnv

__all__ = ["Config", "ConfigError", "load_config"]


@dataclass
class PopulationConfig:
    teachers: int = 2
    students: int = 2
    # The compute-matched single-agent baseline: ONE adapter that both proposes and solves.
    # Requires teachers == students == 1.
    baseline: bool = False


@dataclass
class SamplingConfig:
    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 256


@dataclass
class SelfPlayConfig:
    steps: int = 6
    # Compute matching: every adapter (each member, and the baseline agent) trains on exactly this
    # many sequences per step. A teacher: this many proposals (split evenly over task types). A
    # student: this many attempts = (sequences / rollouts) tasks x rollouts. The baseline agent:
    # `baseline_proposer_fraction` of them as proposals and the rest as attempts.
    sequences_per_adapter: int = 12
    rollouts: int = 2  # n sampled attempts per task (temperature > 0, never greedy)
    baseline_proposer_fraction: float = 0.5
    teacher_sampling: SamplingConfig = field(default_factory=SamplingConfig)
    student_sampling: SamplingConfig = field(default_factory=SamplingConfig)
    # A generate call whose every request was refused (each for a reason of its own, e.g. a prompt
    # over policy.max_prompt_tokens) trains nothing; this many such calls in a row stop the run.
    # Ours: 3 (a step makes 2 calls), so one bad phase is tolerated and a run that can only refuse is not.
    max_refused_calls: int = 3


@dataclass
class RunConfig:
    dir: str = ""  # default: runs/<name>
    # The ranks (GPUs) the run is made for: `populora plan` plans one rank of a run of this many when
    # --nproc is not given (a preset whose members do not fit one GPU says how many it needs). The
    # launcher (--nproc, torchrun, srun) sets the ranks a run has; `populora train` plans those.
    ranks: int = 1
    checkpoint_every: int = 1  # steps
    keep_checkpoints: int = 2
    tensorboard: bool = True  # write event files when tensorboard is installed
    # A collective that waits longer than this fails the run (a dead or stuck rank). Ours: longer than
    # the slowest phase imbalance between ranks of a 7B step (one rank still generating while another
    # waits), short enough that a lost rank does not hold a node for hours.
    collective_timeout_s: float = 1800.0
    # Weights & Biases beside TensorBoard (the optional `wandb` extra): off | offline | online. The run id
    # is kept in RUN_DIR/wandb_id, so a resumed or requeued run writes to the same W&B run; W&B's own
    # files go to RUN_DIR/wandb/. Project / group / name: a sweep sets group = the sweep's name and
    # name = the run's name; empty: project "populora", no group, name = the config's `name`.
    wandb: str = "off"
    wandb_project: str = ""
    wandb_group: str = ""
    wandb_name: str = ""


@dataclass
class Config:
    name: str = "run"
    seed: int = 0
    policy: PolicyConfig = field(default_factory=PolicyConfig)
    population: PopulationConfig = field(default_factory=PopulationConfig)
    tasks: TaskEnv = field(default_factory=TaskEnv)  # the task environment's own type
    selfplay: SelfPlayConfig = field(default_factory=SelfPlayConfig)
    sandbox: SandboxLimits = field(default_factory=SandboxLimits)  # the sandbox package's own type
    rl: RLConfig = field(default_factory=RLConfig)
    ratings: RatingConfig = field(default_factory=RatingConfig)
    matchmaking: MatchmakingConfig = field(default_factory=MatchmakingConfig)
    evolution: EvolutionConfig = field(default_factory=EvolutionConfig)
    run: RunConfig = field(default_factory=RunConfig)


def load_config(path: str | os.PathLike | None = None, overrides: list[str] | tuple[str, ...] = ()) -> Config:
    """Defaults <- preset file <- ``key=value`` overrides, validated. Returns a ``Config`` object."""
    schema = OmegaConf.structured(Config)
    layers: list[Any] = [schema]
    where = "defaults"
    try:
        if path is not None:
            where = str(path)
            if Path(path).is_dir():
                raise ConfigError(f"{path}: a directory, not a config file; give a YAML preset (configs/*.yaml)")
            if not Path(path).is_file():
                raise ConfigError(f"{path}: config file not found")
            try:
                preset = OmegaConf.load(path)
            except yaml.YAMLError as e:  # one line: where and what, not the parser's traceback
                raise _yaml_error(e, str(path)) from None
            except UnicodeDecodeError as e:
                raise ConfigError(f"{path}: not a text file (byte {e.start} is not UTF-8); give a YAML preset") from None
            except OSError as e:  # unreadable: permissions, a directory, an I/O error
                raise ConfigError(f"{path}: cannot read the config file ({e.strerror or e}); check its permissions") from None
            if not isinstance(preset, DictConfig):
                raise ConfigError(f"{path}: a config file must be a YAML mapping of sections, not a list")
            if len(preset) == 0:
                raise ConfigError(f"{path}: empty config file (no keys); a run needs its preset's settings")
            layers.append(_renamed(preset, str(path)))
        if overrides:
            where = "command-line overrides"
            bad = [o for o in overrides if "=" not in o]
            if bad:
                raise ConfigError(f"override {bad[0]!r} is not of the form key=value")
            layers.append(OmegaConf.from_dotlist(migrate_overrides(list(overrides))))
    except OmegaConfBaseException as e:
        raise _named(e, where) from None
    except ValueError as e:  # a moved key set twice (renamed_keys names both and where)
        if isinstance(e, ConfigError):
            raise
        raise ConfigError(str(e)) from None
    try:
        merged = OmegaConf.merge(*layers)
        cfg: Config = OmegaConf.to_object(merged)  # type: ignore[assignment]
    except OmegaConfBaseException as e:
        raise _named(e, where) from None
    except ValueError as e:  # a section's own __post_init__ validation (its message names the key)
        raise ConfigError(f"{where}: {e}") from None
    validate(cfg)
    return cfg


def _named(e: OmegaConfBaseException, where: str | None) -> ConfigError:
    """omegaconf's error as one line naming where (if given) and the key."""
    key = getattr(e, "full_key", None)
    msg = str(e).splitlines()[0]
    text = f"key {key!r}: {msg}" if key else msg
    return ConfigError(f"{where}: {text}" if where else text)


def _yaml_error(e: yaml.YAMLError, where: str | None) -> ConfigError:
    """A YAML parser's error as one line: where (if given), the line and column, and the problem."""
    mark = getattr(e, "problem_mark", None)
    at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
    text = f"YAML syntax error{at}: {getattr(e, 'problem', None) or e}"
    return ConfigError(f"{where}: {text}" if where else text)


def _renamed(node: DictConfig, where: str) -> DictConfig:
    """A loaded preset or saved config with moved keys renamed (``populora.renamed_keys``)."""
    return OmegaConf.create(migrate_mapping(OmegaConf.to_container(node), where))


def to_yaml(cfg: Config) -> str:
    return OmegaConf.to_yaml(OmegaConf.structured(cfg))


def config_from_yaml_text(text: str, overrides: list[str] | tuple[str, ...] = ()) -> Config:
    """Rebuild a Config from the resolved YAML saved in a run directory, with ``key=value``
    ``overrides`` on top (ConfigError on bad text or a bad override, naming the key).

    Run directories written before keys moved read with the new names (``populora.renamed_keys``)."""
    try:
        saved = OmegaConf.create(text)
        if not isinstance(saved, DictConfig) or len(saved) == 0:
            raise ConfigError("a saved config must be a non-empty YAML mapping of sections")
        layers = [OmegaConf.structured(Config), _renamed(saved, "saved run config")]
        if overrides:
            layers.append(OmegaConf.from_dotlist(migrate_overrides(list(overrides))))
        merged = OmegaConf.merge(*layers)
        cfg: Config = OmegaConf.to_object(merged)  # type: ignore[assignment]
    except yaml.YAMLError as e:
        raise _yaml_error(e, None) from None
    except OmegaConfBaseException as e:
        raise _named(e, None) from None
    except ValueError as e:
        if isinstance(e, ConfigError):
            raise
        raise ConfigError(str(e)) from None
    validate(cfg)
    return cfg


WANDB_MODES = ("off", "offline", "online")


def wandb_mode(value: object) -> str | None:
    """``run.wandb`` as one of WANDB_MODES (YAML reads a bare ``off`` as false); None when invalid."""
    text = str(value).strip().lower()
    text = {"false": "off", "no": "off", "none": "off", "": "off"}.get(text, text)
    return text if text in WANDB_MODES else None


def _need(cond: bool, key: str, msg: str) -> None:
    if not cond:
        raise ConfigError(f"key {key!r}: {msg}")


def validate(cfg: Config) -> None:
    """Cross-field checks that the types alone cannot express. Raises ConfigError naming the key."""
    p, t, s = cfg.population, cfg.tasks, cfg.selfplay
    _need(p.teachers >= 1, "population.teachers", f"must be >= 1, got {p.teachers}")
    _need(p.students >= 1, "population.students", f"must be >= 1, got {p.students}")
    if p.baseline:
        _need(
            p.teachers == 1 and p.students == 1,
            "population.baseline",
            "the single-agent baseline has exactly one adapter: set population.teachers=1 population.students=1",
        )
    _need(s.steps >= 0, "selfplay.steps", "must be >= 0")
    _need(s.rollouts >= 1, "selfplay.rollouts", "must be >= 1")
    _need(s.max_refused_calls >= 1, "selfplay.max_refused_calls", f"must be >= 1, got {s.max_refused_calls}")
    for role in ("teacher_sampling", "student_sampling"):
        sp: SamplingConfig = getattr(s, role)
        _need(sp.temperature > 0, f"selfplay.{role}.temperature", "must be > 0: self-play rollouts are sampled, never greedy")
        _need(0 < sp.top_p <= 1, f"selfplay.{role}.top_p", "must be in (0, 1]")
        _need(sp.max_new_tokens >= 1, f"selfplay.{role}.max_new_tokens", "must be >= 1")
    n_types, n = len(t.types), s.rollouts
    budget = s.sequences_per_adapter
    _need(budget >= 1, "selfplay.sequences_per_adapter", "must be >= 1")
    _need(
        budget % n_types == 0 and budget % n == 0,
        "selfplay.sequences_per_adapter",
        f"{budget} must be divisible by the number of task types ({n_types}: a teacher's proposals split evenly "
        f"over types) and by selfplay.rollouts ({n}: a student trains on whole groups of rollouts)",
    )
    if p.baseline:
        props, atts = baseline_split(cfg)
        _need(
            props > 0 and atts > 0 and props % n_types == 0 and atts % n == 0,
            "selfplay.baseline_proposer_fraction",
            f"splits {budget} sequences into {props} proposals and {atts} attempts; both must be positive, the "
            f"proposals divisible by {n_types} task types and the attempts by {n} rollouts",
        )
    from populora.rl.advantages import ADVANTAGE_ESTIMATORS

    # Per-prompt estimators centre each prompt's samples: a teacher's proposals each have their own
    # prompt, and students with one rollout per task have one sample per prompt: every advantage
    # would be 0 and the adapter would silently never learn.
    if ADVANTAGE_ESTIMATORS[cfg.rl.teacher_estimator].groups_by == "prompt_ids":
        raise ConfigError(
            f"key 'rl.teacher_estimator': {cfg.rl.teacher_estimator!r} centres per prompt, but every teacher "
            "proposal has its own prompt, so all advantages would be 0; use 'trr++'"
        )
    if ADVANTAGE_ESTIMATORS[cfg.rl.student_estimator].groups_by == "prompt_ids" and s.rollouts < 2:
        raise ConfigError(
            f"key 'selfplay.rollouts': rl.student_estimator={cfg.rl.student_estimator!r} centres per task and needs "
            "at least 2 rollouts per task (or use 'trr++')"
        )
    _need(cfg.run.checkpoint_every >= 1, "run.checkpoint_every", "must be >= 1")
    _need(cfg.run.keep_checkpoints >= 1, "run.keep_checkpoints", "must be >= 1")
    _need(cfg.run.ranks >= 1, "run.ranks", f"must be >= 1, got {cfg.run.ranks}")
    _need(cfg.run.collective_timeout_s > 0, "run.collective_timeout_s", "must be > 0")
    _need(wandb_mode(cfg.run.wandb) is not None, "run.wandb", f"must be off, offline or online, got {cfg.run.wandb!r}")
    # two limits, two owners: the task environment decides which outputs make a task (its kinds reject
    # longer ones as output_too_large); the sandbox bounds what any program may hand back. The sandbox
    # must return every output a task may have.
    _need(cfg.sandbox.max_output_chars >= t.max_output_chars, "sandbox.max_output_chars",
          f"{cfg.sandbox.max_output_chars} is below tasks.max_output_chars={t.max_output_chars}: the sandbox must "
          "return every output a task may have (raise sandbox.max_output_chars, or lower tasks.max_output_chars)")


def baseline_split(cfg: Config) -> tuple[int, int]:
    """(proposals, attempts) per step of the single-agent baseline, summing to the per-adapter budget."""
    budget = cfg.selfplay.sequences_per_adapter
    props = round(budget * cfg.selfplay.baseline_proposer_fraction)
    return props, budget - props


def run_dir_of(cfg: Config) -> Path:
    return Path(cfg.run.dir or os.path.join("runs", cfg.name))


def as_dictconfig(cfg: Config) -> DictConfig:
    return OmegaConf.structured(cfg)
